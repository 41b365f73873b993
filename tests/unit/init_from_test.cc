// Fine-tuning (core/train/init_from.h): a job starts from a saved model's parameters, batch-norm
// statistics and, when asked, updater state; a saved model of another shape is refused with the
// layer and the fix.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/io/model_file.h"
#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/init_from.h"
#include "core/updaters/updater.h"
#include "core/util/error.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

std::vector<float> params_of(const core::Model& m) {
  return std::vector<float>(m.host_params(), m.host_params() + m.num_params());
}

std::string spec_text(int units, const std::string& updater, const std::string& extra = "") {
  return "name: t\nmodel:\n  input: [2]\n  layers:\n    - dense: {units: " + std::to_string(units) +
         ", activation: relu}\n    - output: {units: 2, activation: softmax, loss: mcxent}\n"
         "  updater: {type: " + updater + ", learning_rate: 0.1}\n" + extra +
         "data:\n  train: {format: csv, path: train.csv}\n";
}

struct Fixture {
  std::string dir = testing::temp_dir();
  core::ModelFile saved;
  Fixture() {
    testing::write_text(dir + "/train.csv", "1,2,0\n3,4,1\n");
    // A "trained" model: a 2-4-2 MLP with nesterovs state, parameters 0.5, 1.5, ...
    saved.spec_yaml = spec_text(4, "nesterovs");
    core::JobSpec spec = parse(saved.spec_yaml);
    core::Model m(spec.model);
    for (int64_t i = 0; i < m.num_params(); ++i) saved.params.push_back(0.5f + float(i));
    saved.has_updater = true;
    saved.updater_type = "nesterovs";
    saved.updater_state.assign(size_t(m.num_params()), 0.25f);
    core::write_model_file(dir + "/trained.dtm", saved);
  }
  core::JobSpec parse(const std::string& text) {
    testing::write_text(dir + "/job.yaml", text);
    return core::parse_job_spec_file(dir + "/job.yaml");
  }
  std::string error_of(const core::JobSpec& job) {
    core::Model initial(job.model);
    initial.init(job.seed);
    try {
      core::init_from_model(job, initial);
      return "";
    } catch (const core::UserError& e) {
      return std::string(e.what()) + " | " + e.fix();
    }
  }
};

}  // namespace

TEST_CASE("init_from starts from the saved parameters, and the updater state when asked") {
  Fixture f;
  core::JobSpec job = f.parse(spec_text(4, "nesterovs", "  init_from: trained.dtm\n"));
  CHECK(job.model.init_from == f.dir + "/trained.dtm");
  core::Model initial(job.model);
  initial.init(job.seed);
  CHECK(core::init_from_model(job, initial).empty());  // parameters only
  CHECK(params_of(initial) == f.saved.params);

  job = f.parse(spec_text(4, "nesterovs", "  init_from: trained.dtm\n  init_from_updater: true\n"));
  const std::vector<float> state = core::init_from_model(job, initial);
  CHECK(state == f.saved.updater_state);
  std::unique_ptr<core::Updater> updater =
      core::Updater::create(job.model.updater, 0.0, initial.segments(), initial.num_params());
  core::set_initial_updater_state(job, state, *updater);
  CHECK(updater->host_state() == f.saved.updater_state);

  core::JobSpec plain = f.parse(spec_text(4, "nesterovs"));  // without it: weight_init as before
  core::Model fresh(plain.model);
  fresh.init(plain.seed);
  CHECK(core::init_from_model(plain, fresh).empty());
  CHECK(params_of(fresh) != f.saved.params);
}

TEST_CASE("init_from refuses another shape, another updater and a missing file, with the fix") {
  Fixture f;
  const std::string wider = f.error_of(f.parse(spec_text(5, "nesterovs", "  init_from: trained.dtm\n")));
  CHECK(wider.find("model.layers[0] is dense with 15 parameters") != std::string::npos);
  CHECK(wider.find("dense with 12") != std::string::npos);
  CHECK(wider.find("drop model.init_from") != std::string::npos);
  const std::string other = f.error_of(
      f.parse(spec_text(4, "adam", "  init_from: trained.dtm\n  init_from_updater: true\n")));
  CHECK(other.find("state of a nesterovs updater, the job uses adam") != std::string::npos);
  CHECK(f.error_of(f.parse(spec_text(4, "adam", "  init_from: trained.dtm\n"))) == "");
  testing::write_text(f.dir + "/job.yaml", spec_text(4, "sgd", "  init_from: nowhere.dtm\n"));
  try {
    core::parse_job_spec_file(f.dir + "/job.yaml");
    FAIL("a missing init_from file was accepted");
  } catch (const core::UserError& e) {
    CHECK(std::string(e.what()).find("model.init_from") != std::string::npos);
  }
  testing::write_text(f.dir + "/job.yaml", spec_text(4, "sgd", "  init_from_updater: true\n"));
  CHECK_THROWS_WITH(core::parse_job_spec_file(f.dir + "/job.yaml"),
                    Catch::Contains("init_from_updater needs model.init_from"));
}

}  // namespace dtrain
