// .dtm round trip; corrupt, truncated and foreign files are refused with clear errors.
#include <catch2/catch.hpp>
#include <dirent.h>

#include <fstream>
#include <sstream>

#include "core/io/model_file.h"
#include "core/io/saved_model.h"
#include "core/model/model.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

const char* kSpec =
    "name: tiny\nmodel:\n  input: [4]\n  layers:\n    - dense: {units: 3}\n    - batch_norm: {}\n"
    "    - output: {units: 2}\ndata:\n  train: {format: csv, path: none.csv}\n";

core::ModelFile sample() {
  core::ModelFile f;
  f.spec_yaml = kSpec;
  core::SpecParseOptions o;
  o.check_files = false;
  core::Model m(core::parse_job_spec_text(kSpec, "t", o).model);
  m.init(1);
  f.params.assign(m.params(), m.params() + m.num_params());
  f.state.assign(m.state(), m.state() + m.num_state());
  f.has_updater = true;
  f.updater_type = "adam";
  f.updater_state = {1.0f, -2.5f, 3.25f};
  f.normalizer = core::Normalizer::restore(core::Normalizer::Kind::kScale, {0.0f, 255.0f});
  f.iteration = 77;
  f.epoch = 3;
  return f;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("model file round trip") {
  const std::string dir = testing::temp_dir();
  const std::string path = dir + "/m.dtm";
  core::ModelFile f = sample();
  f.has_sharing = true;
  f.tau = 0.25f;
  f.residual = {0.5f, -0.5f};
  f.other_workers = {{5, {1.f, 2.f}, {3.f}}, {6, {}, {4.f, 5.f}}};  // workers 1 and 2
  f.has_local_steps = true;
  f.global_params = {7.f, 8.f};
  f.outer_momentum = {-0.125f, 0.5f};
  core::write_model_file(path, f);
  core::ModelFile g = core::read_model_file(path);
  CHECK(g.has_local_steps);
  CHECK(g.global_params == f.global_params);
  CHECK(g.outer_momentum == f.outer_momentum);
  REQUIRE(g.other_workers.size() == 2);
  CHECK(g.other_workers[0].encoder_steps == 5);
  CHECK(g.other_workers[0].residual == f.other_workers[0].residual);
  CHECK(g.other_workers[1].residual.empty());
  CHECK(g.other_workers[1].updater_state == f.other_workers[1].updater_state);
  CHECK(g.residual == f.residual);
  CHECK(g.spec_yaml == f.spec_yaml);
  CHECK(g.params == f.params);
  CHECK(g.state == f.state);
  CHECK(g.has_updater);
  CHECK(g.updater_type == "adam");
  CHECK(g.updater_state == f.updater_state);
  CHECK(g.normalizer.kind() == core::Normalizer::Kind::kScale);
  CHECK(g.normalizer.values() == f.normalizer.values());
  CHECK(g.iteration == 77);
  CHECK(g.epoch == 3);
  // The saved model rebuilds with identical parameters.
  core::SavedModel s = core::load_saved_model(path);
  REQUIRE(s.model->num_params() == static_cast<int64_t>(f.params.size()));
  CHECK(std::equal(f.params.begin(), f.params.end(), s.model->params()));
  // Atomic write leaves no temporary file behind.
  int entries = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) entries += e->d_name[0] != '.';
  closedir(d);
  CHECK(entries == 1);
}

TEST_CASE("corrupt, truncated and foreign model files are refused") {
  const std::string dir = testing::temp_dir();
  const std::string path = dir + "/m.dtm";
  core::write_model_file(path, sample());
  const std::string good = read_all(path);

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x40;
  std::ofstream(dir + "/flip.dtm", std::ios::binary) << flipped;
  CHECK_THROWS_WITH(core::read_model_file(dir + "/flip.dtm"),
                    Catch::Contains("corrupt") && Catch::Contains("checksum"));

  std::ofstream(dir + "/short.dtm", std::ios::binary) << good.substr(0, good.size() - 100);
  CHECK_THROWS_WITH(core::read_model_file(dir + "/short.dtm"), Catch::Contains("truncated"));

  std::ofstream(dir + "/tiny.dtm", std::ios::binary) << good.substr(0, 10);
  CHECK_THROWS_WITH(core::read_model_file(dir + "/tiny.dtm"),
                    Catch::Contains("not a dtrain model file"));

  testing::write_text(dir + "/text.dtm", "name: not a model\n");
  CHECK_THROWS_WITH(core::read_model_file(dir + "/text.dtm"),
                    Catch::Contains("not a dtrain model file"));

  CHECK_THROWS_WITH(core::read_model_file(dir + "/absent.dtm"), Catch::Contains("cannot open"));

  std::string newer = good;
  newer[8] = 9;  // version field
  std::ofstream(dir + "/newer.dtm", std::ios::binary) << newer;
  CHECK_THROWS_WITH(core::read_model_file(dir + "/newer.dtm"), Catch::Contains("upgrade dtrain"));
}

TEST_CASE("a model file whose parameters do not match its spec is refused before a model is "
          "built") {
  // A well-formed file (its checksum holds) whose spec asks for a larger network than its
  // parameters fill: load_saved_model counts the spec's parameters first and refuses, naming
  // both counts, instead of building a model and reading past the file's values.
  const std::string dir = testing::temp_dir();
  core::ModelFile f = sample();
  const size_t fits = f.params.size();
  f.spec_yaml = std::string(kSpec).replace(std::string(kSpec).find("units: 3"), 8, "units: 300");
  core::write_model_file(dir + "/wider.dtm", f);
  CHECK_THROWS_WITH(core::load_saved_model(dir + "/wider.dtm"),
                    Catch::Contains("holds " + std::to_string(fits) + " parameters") &&
                        Catch::Contains("its spec needs") && Catch::Contains("retrain"));
  f = sample();
  f.params.pop_back();  // one value short of the same spec
  core::write_model_file(dir + "/short.dtm", f);
  CHECK_THROWS_WITH(core::load_saved_model(dir + "/short.dtm"),
                    Catch::Contains("holds " + std::to_string(fits - 1) + " parameters"));
}

}  // namespace dtrain
