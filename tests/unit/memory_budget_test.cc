// The parameter cap (docs/architecture/core.md, "Checks"): a job whose workers' parameter-sized
// buffers exceed 80% of the memory is refused with the parameters asked for, how many fit, and the
// fix.
#include <catch2/catch.hpp>

#include "core/spec/job_spec_parser.h"
#include "core/train/training_run.h"
#include "core/train/memory_budget.h"
#include "core/util/error.h"

using dtrain::core::check_parameter_memory;
using dtrain::core::parameter_memory_bytes;

TEST_CASE("parameter-sized buffers: 4 per worker plus the updater's, and the initial model",
          "[limits]") {
  // Nesterov (1 state vector), 2 workers: 2 * (4 + 1) + 1 = 11 vectors of 4-byte floats.
  CHECK(parameter_memory_bytes(1000, 2, 1) == 1000 * 11 * 4);
  CHECK(parameter_memory_bytes(1000, 1, 0) == 1000 * 5 * 4);
}

TEST_CASE("a model that does not fit is refused with the figures and the fix", "[limits]") {
  const int64_t gib = int64_t(1) << 30;
  CHECK_NOTHROW(check_parameter_memory(100'000'000, 2, 1, 8 * gib, "this node's memory"));
  try {
    check_parameter_memory(1'000'000'000, 4, 2, 8 * gib, "this node's memory");
    FAIL("a 1e9-parameter model with 4 Adam workers was accepted in 8 GiB");
  } catch (const dtrain::core::UserError& e) {
    const std::string what = e.what();
    CHECK(what.find("the model has 1000000000 parameters") != std::string::npos);
    CHECK(what.find("4 workers need about 93.1 GiB") != std::string::npos);
    CHECK(what.find("this node's memory has 8.0 GiB available") != std::string::npos);
    // 80% of 8 GiB over 4 workers * (4 + 2) + 1 = 25 vectors of 4 bytes: 68,719,476.
    CHECK(what.find("at most 68719476 parameters fit") != std::string::npos);
    CHECK(e.fix().find("training.workers_per_node") != std::string::npos);
  }
  CHECK_NOTHROW(check_parameter_memory(1'000'000'000, 4, 2, -1, "unknown"));  // unknown: no check
}

TEST_CASE("a job too large for the node is refused before its data is read or its model built",
          "[limits]") {
  // 100,000 inputs into 1,000,000 units: 1e11 parameters, 400 GB a copy. Its training file
  // does not exist: were the data read first, that would be the error.
  const std::string spec =
      "name: huge\nmodel:\n  input: [100000]\n  layers:\n    - dense: {units: 1000000}\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "data:\n  train: {format: csv, path: /nonexistent/train.csv}\n"
      "training:\n  epochs: 1\n  workers_per_node: 1\n";
  dtrain::core::SpecParseOptions options;
  options.check_files = false;  // as the controller parses it; the node reads the data itself
  const dtrain::core::JobSpec job = dtrain::core::parse_job_spec_text(spec, "huge.yaml", options);
  dtrain::core::TrainingListener quiet;
  dtrain::core::LocalTrainingOptions o;
  o.write_model = false;
  try {
    dtrain::core::train_local(job, quiet, o);
    FAIL("a 1e11-parameter job was accepted");
  } catch (const dtrain::core::UserError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("the model has 100003000002 parameters") != std::string::npos);
    CHECK(what.find("this node's memory") != std::string::npos);
    CHECK(what.find("train.csv") == std::string::npos);
  }
}
