#include "submit/command_line.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/spec/spec_reader.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {
namespace {

constexpr const char* kHelp =
    "dtrain-submit: train, evaluate and run neural networks with dtrain.\n\n"
    "  dtrain-submit job.yaml                  submit to the cluster's controller and follow it\n"
    "  dtrain-submit job.yaml --detach         submit, print the job id, return\n"
    "  dtrain-submit status [JOB] [--json]     jobs (or one job) and their figures\n"
    "  dtrain-submit nodes [--json]            the cluster's nodes\n"
    "  dtrain-submit cancel JOB | logs JOB\n"
    "  dtrain-submit fetch JOB [-o model.dtm]  copy a finished job's model here\n"
    "  dtrain-submit stats JOB [--csv|--json]  its recorded steps and epochs (loss, samples/s,\n"
    "                                          tau, density, bytes, step times)\n"
    "  dtrain-submit timeline JOB > trace.json  Chrome trace: a track per worker and per link\n"
    "  dtrain-submit resume JOB [--detach]     go on with a failed or cancelled job from its\n"
    "                                          consistent checkpoint (on the nodes holding it)\n"
    "  dtrain-submit --local job.yaml          train in this process (one machine)\n"
    "  dtrain-submit --local [job.yaml] --resume model.ckpt-N.dtm\n"
    "                                          go on from a checkpoint (or the newest whole\n"
    "                                          checkpoint of model.dtm)\n"
    "  dtrain-submit validate job.yaml         check a job spec without running it\n"
    "  dtrain-submit export job.yaml --out DIR [--files N] [--test-files N]\n"
    "                                          write its data once as packed, shuffled files\n"
    "                                          that training streams (format: packed)\n"
    "  dtrain-submit eval model.dtm            evaluate a saved model on its test set\n"
    "  dtrain-submit infer model.dtm --input X.csv --output preds.csv\n"
    "  dtrain-submit eval MODEL|JOB --cluster [--data ... | --shards '/data/{node}/test-*.dtb']\n"
    "  dtrain-submit infer MODEL|JOB --cluster --input X --output DIR [--parts]\n"
    "                                          the same as jobs of the cluster's: the nodes\n"
    "                                          share the data, the controller merges exactly\n\n"
    "Exit codes: 0 success, 1 job failed, 2 bad input, 3 cannot reach the controller.\n"
    "The job spec format is described in docs/user-guide.md (\"The job spec\"); examples are in "
    "configs/.";

}  // namespace

CommandLine::CommandLine() : app(kHelp, "dtrain-submit") {
  app.require_subcommand(0, 1);
  add_training_options();
  add_cluster_options();
  add_job_commands();
  add_job_outputs();
  add_spec_commands();
  add_eval_command();
  add_infer_command();
}

void CommandLine::add_training_options() {
  app.add_option("job", train.job_path, "job spec (YAML) to train");
  app.add_flag("--local", local,
               "train in this process instead of submitting to a cluster controller");
  app.add_option("--threads", train.threads, "compute threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--output", train.output, "model file to write (default: the spec's output.model)");
  app.add_flag("--quiet", train.quiet, "print only the final result");
  app.add_option("--resume", train.resume,
                 "with --local: go on from this checkpoint (MODEL.ckpt-N.dtm), or from the newest "
                 "whole checkpoint of MODEL.dtm; the job is job.yaml if given, else the one the "
                 "checkpoint holds");
  app.add_flag("--detach", detach, "submit and return at once (prints the job id)");
}

void CommandLine::add_cluster_options() {
  if (const char* c = std::getenv("DTRAIN_CONTROLLER")) cluster.controller = c;
  if (const char* k = std::getenv("DTRAIN_KEY_FILE")) cluster.key_file = k;
  app.add_option("--controller", cluster.controller,
                 "controller's control channel, host:port (default $DTRAIN_CONTROLLER or "
                 "127.0.0.1:7070); with standby controllers a list A:7070,B:7070,C:7070, tried "
                 "in turn (a standby names the leader)");
  if (const char* k = std::getenv("DTRAIN_CREDENTIAL")) cluster.credential = k;
  app.add_option("--key-file", cluster.key_file,
                 "cluster key file (default $DTRAIN_KEY_FILE or /etc/dtrain/cluster.key)");
  app.add_option("--credential", cluster.credential,
                 "your client credential (from `dtraind keygen --client NAME FILE`; default "
                 "$DTRAIN_CREDENTIAL), used instead of the cluster key");
  app.add_option("--connect-timeout-ms", cluster.connect_timeout_ms,
                 "give up reaching the controller after this long (exit code 3)")
      ->check(CLI::Range(1, 600000));
}

void CommandLine::add_connection_options(CLI::App* sub, const std::string& prefix) {
  sub->add_option("--controller", cluster.controller,
                  prefix + "controller host:port (or a list A,B,C)");
  sub->add_option("--key-file", cluster.key_file, prefix + "cluster key file");
  sub->add_option("--credential", cluster.credential, prefix + "client credential file");
  sub->add_option("--connect-timeout-ms", cluster.connect_timeout_ms,
                  prefix + "connect deadline");
}

// status, nodes, cancel, logs, resume: the cluster's jobs and nodes.
void CommandLine::add_job_commands() {
  auto* status = app.add_subcommand("status", "jobs on the cluster, or one job in detail");
  status->add_option("job", job_arg, "job id");
  status->add_flag("--json", json, "print the controller's JSON (stable; docs/user-guide.md)");
  auto* nodes = app.add_subcommand("nodes", "the cluster's nodes and their state");
  nodes->add_flag("--json", json, "print the controller's JSON (stable; docs/user-guide.md)");
  auto* cancel = app.add_subcommand("cancel", "cancel a queued or running job");
  cancel->add_option("job", job_arg, "job id")->required();
  auto* logs = app.add_subcommand("logs", "a job's log, as the controller recorded it");
  logs->add_option("job", job_arg, "job id")->required();
  auto* resume = app.add_subcommand(
      "resume", "go on with a failed or cancelled job from its consistent checkpoint");
  resume->add_option("job", job_arg, "job id")->required();
  resume->add_flag("--detach", detach, "queue the resume and return at once");
  for (auto* sub : {status, nodes, cancel, logs, resume}) add_connection_options(sub, "");
  commands.push_back({status, [this] { return run_cluster_status(cluster, job_arg, json); }});
  commands.push_back({nodes, [this] { return run_cluster_nodes(cluster, json); }});
  commands.push_back({cancel, [this] { return run_cluster_cancel(cluster, job_arg); }});
  commands.push_back({logs, [this] { return run_cluster_logs(cluster, job_arg); }});
  commands.push_back({resume, [this] { return run_cluster_resume(cluster, job_arg, detach); }});
}

// fetch, stats, timeline: what a job left behind.
void CommandLine::add_job_outputs() {
  auto* fetch = app.add_subcommand(
      "fetch", "copy a finished job's model here from the node that holds it (checksummed)");
  fetch->add_option("job", job_arg, "job id")->required();
  fetch->add_option("-o,--output", fetch_output,
                    "file to write (default: the model's file name, here)");
  fetch->add_option("--chunk-kb", chunk_kb, "KiB per request (default 8192, the most)")
      ->check(CLI::Range(1, 8192));
  auto* stats = app.add_subcommand(
      "stats", "a job's stats history: loss, samples/s, tau, density, bytes, step times");
  stats->add_option("job", job_arg, "job id")->required();
  auto* csv = stats->add_flag("--csv", stats_format.csv, "comma-separated, a header line");
  stats->add_flag("--json", stats_format.json, "the controller's JSON")->excludes(csv);
  stats->add_option("--node", stats_format.node, "only this node's rows");
  auto* timeline = app.add_subcommand(
      "timeline", "a job's steps and transport as Chrome trace events (> trace.json; open it in "
                  "Perfetto or chrome://tracing)");
  timeline->add_option("job", job_arg, "job id")->required();
  for (auto* sub : {fetch, stats, timeline}) add_connection_options(sub, "");
  commands.push_back(
      {fetch, [this] { return run_cluster_fetch(cluster, job_arg, fetch_output, chunk_kb); }});
  commands.push_back({stats, [this] { return run_cluster_stats(cluster, job_arg, stats_format); }});
  commands.push_back({timeline, [this] { return run_cluster_timeline(cluster, job_arg); }});
}

// validate, export: a job spec and its data, without a cluster.
void CommandLine::add_spec_commands() {
  auto* validate = app.add_subcommand(
      "validate",
      "check a job spec: prints the first problem (line, what is wrong, the fix) or that it is "
      "valid");
  validate->add_option("job", validate_path, "job spec (YAML)")->required();
  auto* out = app.add_subcommand(
      "export", "write a spec's training (and test) data as packed, shuffled .dtb files");
  out->add_option("job", export_args.job_path, "job spec (YAML) whose data to export")
      ->required();
  out->add_option("--out", export_args.out_dir, "folder to write the files into")->required();
  out->add_option("--files", export_args.files,
                  "cut the training set into this many files (default 1)")
      ->check(CLI::Range(1, 100000));
  out->add_option("--test-files", export_args.test_files,
                  "cut the test set into this many files (default 1; more to spread them over "
                  "nodes for eval --cluster --shards)")
      ->check(CLI::Range(1, 100000));
  commands.push_back({validate, [this] { return run_validate(validate_path); }});
  commands.push_back({out, [this] { return run_export(export_args); }});
}

void CommandLine::add_eval_command() {
  auto* sub = app.add_subcommand("eval", "evaluate a saved model (.dtm) on labelled data");
  sub->add_option("model", eval.model_path, "model file (.dtm)")->required();
  sub->add_option("--data", eval.data,
                  "IDX images file (with --labels), CSV file, packed files (a .dtb glob) or a "
                  "folder of class folders of images; default: the test set of the model's job "
                  "spec");
  sub->add_option("--labels", eval.labels, "IDX labels file for IDX --data");
  sub->add_option("--label-column", eval.label_column, "CSV label column (-1 = last)");
  sub->add_flag("--header", eval.header, "CSV has a header line");
  sub->add_option("--top-n", eval.top_n, "top-N accuracy (default: the spec's)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_flag("--json", eval.json, "print one JSON object");
  sub->add_option("--metrics", eval.metrics,
                  "comma-separated: classification, roc (AUC per class, one vs all), regression "
                  "(MSE, MAE, RMSE, R\u00b2 per column); default: classification, or regression "
                  "for a model trained on labels: regression");
  sub->add_option("--roc-csv", eval.roc_csv,
                  "with roc: write the curves to this CSV (class,threshold,fpr,tpr); with "
                  "--cluster the controller writes DIR/<job id>/FILE and says where");
  sub->add_flag("--cluster", eval.cluster,
                "evaluate as a job of the cluster's: the model (a file, or a finished job's id) "
                "is shipped to the nodes, each evaluates its parts of the data (read at the same "
                "path on every node), the controller adds their counts");
  sub->add_option("--nodes", eval.nodes, "with --cluster: on this many nodes (default all)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--shards", eval.shards,
                  "with --cluster, instead of --data: the packed files (dtrain-submit export) "
                  "that each node holds itself, an absolute glob in which {node} stands for the "
                  "node's name, e.g. '/data/{node}/test-*.dtb'; every file is evaluated once, by "
                  "one of the nodes that hold it");
  add_connection_options(sub, "with --cluster: ");
  commands.push_back(
      {sub, [this] { return eval.cluster ? run_cluster_eval(cluster, eval) : run_eval(eval); }});
}

void CommandLine::add_infer_command() {
  auto* sub = app.add_subcommand("infer", "predict with a saved model (.dtm)");
  sub->add_option("model", infer.model_path, "model file (.dtm)")->required();
  sub->add_option("--input", infer.input,
                  "CSV of feature rows, an IDX images file, or a folder of images (keyed by "
                  "path)")
      ->required();
  sub->add_option("--output", infer.output,
                  "CSV to write ('-' = standard output); with --cluster a folder, which gets "
                  "a folder of the job's own: DIR/<job id>/predictions.csv")
      ->required();
  sub->add_flag("--cluster", infer.cluster,
                "predict as a job of the cluster's: each node predicts its parts of the input "
                "(read at the same path everywhere) into the --output folder, and the "
                "controller joins them in key order into predictions.csv");
  sub->add_flag("--parts", infer.parts,
                "with --cluster: leave the part files (part-NNNNN.csv, in key order) instead of "
                "joining them");
  sub->add_option("--nodes", infer.nodes, "with --cluster: on this many nodes (default all)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--key-column", infer.key_column,
                  "CSV column holding each row's key (default: row numbers)");
  sub->add_flag("--header", infer.header, "CSV input has a header line");
  sub->add_option("--batch-size", infer.batch_size,
                  "examples per forward pass (default 256; larger is faster, takes more memory)")
      ->check(CLI::Range(1, 1 << 20));
  add_connection_options(sub, "with --cluster: ");
  commands.push_back({sub, [this] {
                        return infer.cluster ? run_cluster_infer(cluster, infer) : run_infer(infer);
                      }});
}

int run_training(CommandLine& cli) {
  const LocalTrainArgs& train = cli.train;
  if (!train.resume.empty() && !cli.local) {
    std::fprintf(stderr, "error: --resume trains in this process\n  fix: add --local; a cluster "
                         "job goes on from a checkpoint with model.init_from "
                         "(docs/operations.md, \"When things fail\")\n");
    return kExitBadInput;
  }
  if (train.job_path.empty() && !(cli.local && !train.resume.empty())) {
    std::fprintf(stderr, "%s", cli.app.help().c_str());
    std::fprintf(stderr, "\nerror: no job spec given\n  fix: dtrain-submit --local job.yaml\n");
    return kExitBadInput;
  }
  // A mistyped command reads as a job spec that is not there: say what it looks like.
  if (!train.job_path.empty() && train.job_path.find_first_of("./") == std::string::npos &&
      !std::filesystem::exists(train.job_path)) {
    std::vector<std::string> names;
    for (const CommandLine::Command& c : cli.commands) names.push_back(c.app->get_name());
    const std::string near = core::closest(train.job_path, names);
    std::fprintf(stderr, "error: '%s' is neither a command nor a job spec file\n  fix: %s\n",
                 train.job_path.c_str(),
                 near.empty() ? "dtrain-submit --help lists the commands"
                              : ("did you mean `dtrain-submit " + near + "`?").c_str());
    return kExitBadInput;
  }
  if (!cli.local) return run_cluster_submit(cli.cluster, train.job_path, cli.detach);
  return run_local_training(train);
}

}  // namespace dtrain::submit
