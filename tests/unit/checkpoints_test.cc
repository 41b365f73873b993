// Checkpoints (core/train/checkpoints.h): named by iteration beside the model, the newest
// output.keep_checkpoints kept, the gradient-sharing state carried, and a resume that skips a
// checkpoint cut short by a crash for the one before it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/io/model_file.h"
#include "core/train/checkpoints.h"
#include "core/util/error.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

core::ModelFile at(int64_t iteration) {
  core::ModelFile f;
  f.spec_yaml = "name: t\n";
  f.params = {1.f, 2.f, float(iteration)};
  f.iteration = iteration;
  f.epoch = iteration / 10;
  f.has_sharing = true;
  f.tau = 0.25f;
  f.residual = {0.5f, -0.5f, 0.125f};
  f.encoder_steps = iteration;
  return f;
}

void cut_in_half(const std::string& path) {
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
}

}  // namespace

TEST_CASE("checkpoints are named by iteration and only the newest are kept") {
  const std::string model = testing::temp_dir() + "/m.dtm";
  const std::string dir = std::filesystem::path(model).parent_path().string();
  CHECK(core::checkpoint_path(model, 40) == dir + "/m.ckpt-40.dtm");
  CHECK(core::model_of_checkpoint(core::checkpoint_path(model, 40)) == model);
  CHECK(core::model_of_checkpoint(model).empty());
  CHECK(core::model_of_checkpoint("m.ckpt-x.dtm").empty());
  for (int64_t it : {10, 20, 30, 40}) core::write_checkpoint(model, at(it), /*keep=*/2);
  const auto kept = core::list_checkpoints(model);
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].iteration == 40);  // newest first
  CHECK(kept[1].iteration == 30);
  // 100 sorts after 40 by number, not by name.
  core::write_checkpoint(model, at(100), 2);
  CHECK(core::list_checkpoints(model).front().iteration == 100);
  // Another model's checkpoints beside them are not this model's.
  core::write_checkpoint(std::filesystem::path(model).parent_path().string() + "/mm.dtm", at(7), 2);
  CHECK(core::list_checkpoints(model).size() == 2);
  // What a resume needs comes back: position and gradient-sharing state.
  const core::ModelFile back = core::read_model_file(core::checkpoint_path(model, 100));
  CHECK(back.iteration == 100);
  CHECK(back.epoch == 10);
  CHECK(back.has_sharing);
  CHECK(back.tau == 0.25f);
  CHECK(back.residual == std::vector<float>{0.5f, -0.5f, 0.125f});
  CHECK(back.encoder_steps == 100);
  // A fresh run of the model starts a new series.
  core::remove_checkpoints(model);
  CHECK(core::list_checkpoints(model).empty());
  CHECK(core::list_checkpoints(dir + "/mm.dtm").size() == 1);
}

TEST_CASE("a resume skips a checkpoint cut short by a crash and takes the previous one") {
  const std::string model = testing::temp_dir() + "/m.dtm";
  for (int64_t it : {10, 20, 30}) core::write_checkpoint(model, at(it), 3);
  SECTION("from the model: its newest whole checkpoint") {
    CHECK(core::find_resume_point(model).model.iteration == 30);
    cut_in_half(core::checkpoint_path(model, 30));
    const core::ResumePoint p = core::find_resume_point(model);
    CHECK(p.model.iteration == 20);
    CHECK(p.path == core::checkpoint_path(model, 20));
    REQUIRE(p.skipped.size() == 1);
    CHECK(p.skipped[0].find("m.ckpt-30.dtm") != std::string::npos);
    CHECK(p.skipped[0].find("truncated") != std::string::npos);
  }
  SECTION("from a named checkpoint: it, else the ones before it, never a newer one") {
    CHECK(core::find_resume_point(core::checkpoint_path(model, 20)).model.iteration == 20);
    cut_in_half(core::checkpoint_path(model, 20));
    CHECK(core::find_resume_point(core::checkpoint_path(model, 20)).model.iteration == 10);
  }
  SECTION("nothing whole: refused with what was tried and the fix") {
    for (int64_t it : {10, 20, 30}) cut_in_half(core::checkpoint_path(model, it));
    REQUIRE_THROWS_WITH(core::find_resume_point(model),
                        Catch::Contains("no checkpoint of") && Catch::Contains("skipped") &&
                            Catch::Contains("checkpoint_every"));
  }
  SECTION("no checkpoint at all") {
    REQUIRE_THROWS_WITH(core::find_resume_point(testing::temp_dir() + "/other.dtm"),
                        Catch::Contains("none on disk"));
  }
}

}  // namespace dtrain
