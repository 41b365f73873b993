// dtrain-submit eval|infer MODEL --cluster: the evaluation or inference as a job of the
// cluster's (docs/architecture/daemon.md, "Evaluation and inference jobs"). The model is read here
// (or fetched from the job that wrote it, `eval JOB`) and shipped with the request; the data is
// read by every node at the same, absolute path. An evaluation prints what `eval` on one
// machine prints; an inference leaves DIR/predictions.csv (or, --parts, the part files).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <stdlib.h>
#include <unistd.h>

#include "core/io/saved_model.h"
#include "core/util/error.h"
#include "submit/cluster_commands.h"
#include "submit/commands.h"
#include "submit/controller_client.h"
#include "submit/eval_report.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {
namespace {

namespace fs = std::filesystem;
using daemon::Json;

std::string absolute(const std::string& path) {
  return path.empty() ? path : fs::absolute(path).lexically_normal().string();
}

// The model file's bytes: MODEL as given, or JOB's model fetched into a temporary file.
// Throws UserError; `path` is where it can be read while this runs.
struct ModelBytes {
  std::vector<uint8_t> bytes;
  std::string path;
  std::string fetched;  // a temporary file to remove
  ~ModelBytes() {
    if (!fetched.empty()) fs::remove(fetched);
  }
};

int read_model(const ClusterArgs& a, const std::string& model, ModelBytes& out) {
  uint64_t job = 0;
  out.path = model;
  if (!fs::exists(model) && daemon::parse_job_id(model, job)) {
    // A fresh private file (not a predictable name another user could place first).
    std::string name = (fs::temp_directory_path() / "dtrain-model-XXXXXX").string();
    const int fd = ::mkstemp(name.data());
    if (fd < 0) {
      std::fprintf(stderr, "error: cannot create a temporary file for job %s's model\n  fix: "
                           "check $TMPDIR\n", model.c_str());
      return kExitBadInput;
    }
    ::close(fd);
    out.fetched = name;
    if (const int rc = run_cluster_fetch(a, model, out.fetched, 8192, stderr); rc != kExitSuccess)
      return rc;
    out.path = out.fetched;
  }
  std::ifstream in(out.path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot read '%s'\n  fix: give a model file (.dtm) or the id of a "
                         "finished job\n", model.c_str());
    return kExitBadInput;
  }
  out.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return kExitSuccess;
}

// Submits the task and follows it; `status` receives its final status.
int run_task(const ClusterArgs& a, const daemon::TaskRequest& task, const ModelBytes& model,
             bool quiet, Json& status) {
  Json job;
  try {
    daemon::ClientRequest request = daemon::client_request(daemon::RequestKind::Task);
    request.task = task;
    request.data = daemon::shared_bytes(model.bytes);
    job = call(a, request, nullptr, std::chrono::seconds(60));
  } catch (const std::exception& e) {
    return report_error(e);
  }
  if (!quiet)
    std::printf("submitted %s job %s (%s) to %s\n", daemon::task_kind_word(task.task),
                job.value("id", "").c_str(), job.value("name", "").c_str(), a.controller.c_str());
  return follow_job(a, job.value("id", ""), 0, quiet, &status);
}

// A finished evaluation job's merged result, printed as `eval` on one machine prints it.
int print_task_evaluation(const EvalArgs& args, const core::SavedModel& saved,
                          const std::set<std::string>& metrics, const Json& r) {
  std::optional<core::Evaluation> eval;
  if (r.contains("counts"))
    eval = core::Evaluation::from_counts(r.value("counts", std::vector<int64_t>{}),
                                         r.value("loss_sum", 0.0));
  else if (auto sums = core::RegressionEvaluation::from_sums(
               r.value("regression_sums", std::vector<double>{})))
    eval = core::Evaluation::from_regression(*sums, r.value("loss_sum", 0.0));
  if (!eval) {
    std::fprintf(stderr, "error: the job's result holds no evaluation\n  fix: run the same dtrain "
                         "release on the controller and here\n");
    return kExitJobFailed;
  }
  std::optional<RocFigures> roc;
  if (metrics.count("roc")) {
    roc.emplace();
    for (const Json& a : r.value("auc", Json::array()))
      roc->auc.push_back(a.is_number() ? a.get<double>() : NAN);
    roc->curves_file = r.value("roc_csv", "");
    roc->macro_auc = r.contains("macro_auc") && r["macro_auc"].is_number()
                         ? r["macro_auc"].get<double>() : NAN;
  }
  return print_evaluation(args, saved, metrics, *eval, roc ? &*roc : nullptr);
}

}  // namespace

int run_cluster_eval(const ClusterArgs& a, const EvalArgs& args) {
  ModelBytes model;
  if (const int rc = read_model(a, args.model_path, model); rc != kExitSuccess) return rc;
  core::SavedModel saved;
  std::set<std::string> metrics;
  daemon::TaskRequest request;
  request.task = daemon::TaskKind::Eval;
  request.batch_size = 256;
  request.nodes = args.nodes;
  try {
    saved = core::load_saved_model(model.path);
    metrics = parse_metrics(args.metrics, saved.spec.regression());
    if (metrics.count("roc")) {  // the controller writes the curves (a shared folder)
      request.roc_csv = absolute(args.roc_csv);
      request.roc_classes = class_labels(saved);
    }
    request.name = saved.spec.name + "-eval";
    request.top_n = args.top_n > 0 ? args.top_n : saved.spec.evaluation.top_n;
    request.metrics = std::vector<std::string>(metrics.begin(), metrics.end());
    if (!args.shards.empty()) {  // node-local: each node lists what it holds
      if (!args.data.empty() || !args.labels.empty())
        throw core::UserError(std::string(args.data.empty() ? "--labels" : "--data") +
                                  " with --shards: both name the data",
                              "give one: --shards for packed files each node holds, --data "
                              "(with --labels for IDX) for one path every node reads");
      if (saved.spec.regression())
        throw core::UserError("packed files hold class labels, and this model predicts values",
                              "evaluate it with --data on a CSV file");
      request.format = "packed";
      request.shards = absolute(args.shards);
    } else {
      const core::DataSourceSpec source = eval_source(args, saved.spec);
      request.format = source.format;
      request.path = absolute(source.format == "idx" ? source.images : source.path);
      request.labels = absolute(source.labels);
      request.label_column = source.label_column;
      request.header = source.header;
    }
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  Json status;
  if (const int rc = run_task(a, request, model, args.json, status); rc != kExitSuccess) return rc;
  return print_task_evaluation(args, saved, metrics, status["result"]);
}

int run_cluster_infer(const ClusterArgs& a, const InferArgs& args) {
  ModelBytes model;
  if (const int rc = read_model(a, args.model_path, model); rc != kExitSuccess) return rc;
  const std::string output_dir = absolute(args.output);
  daemon::TaskRequest request;
  request.task = daemon::TaskKind::Infer;
  request.path = absolute(args.input);
  request.key_column = args.key_column;
  request.header = args.header;
  request.batch_size = args.batch_size;
  request.output_dir = output_dir;
  request.keep_parts = args.parts;
  request.nodes = args.nodes;
  bool created_output = false;  // made here for the controller to check: removed if refused
  try {
    const core::SavedModel saved = core::load_saved_model(model.path);
    request.name = saved.spec.name + "-infer";
    if (args.output == "-")
      throw core::UserError("--cluster writes its predictions into a folder, not to stdout",
                            "give --output DIR (one every node can write, e.g. a shared one)");
    if (!fs::exists(args.input))
      throw core::UserError("cannot read '" + args.input + "'",
                            "give --input a path every node reads at the same place");
    std::error_code ec;
    created_output = !fs::exists(output_dir, ec);
    fs::create_directories(output_dir, ec);
    if (ec || !fs::is_directory(output_dir))
      throw core::UserError("cannot create the folder '" + output_dir + "'",
                            "give --output a folder every node can write");
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  Json status;
  const int rc = run_task(a, request, model, false, status);
  // Refused (the controller may not write there, say): take back the empty folder made above.
  std::error_code ec;
  if (rc == kExitBadInput && created_output && fs::is_empty(output_dir, ec) && !ec)
    fs::remove(output_dir, ec);
  return rc;
}

}  // namespace dtrain::submit
