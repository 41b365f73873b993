// dtrain-submit: the command line users and ops scripts call.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "submit/commands.h"
#include "submit/exit_codes.h"

int main(int argc, char** argv) {
  using namespace dtrain::submit;
  CLI::App app{
      "dtrain-submit: train, evaluate and run neural networks with dtrain.\n\n"
      "  dtrain-submit --local job.yaml          train in this process (one machine)\n"
      "  dtrain-submit validate job.yaml         check a job spec without running it\n"
      "  dtrain-submit eval model.dtm            evaluate a saved model on its test set\n"
      "  dtrain-submit infer model.dtm --input X.csv --output preds.csv\n\n"
      "Exit codes: 0 success, 1 job failed, 2 bad input, 3 cannot reach the controller.\n"
      "The job spec format is described in README.md; examples are in configs/.",
      "dtrain-submit"};
  app.require_subcommand(0, 1);

  LocalTrainArgs train;
  bool local = false;
  app.add_option("job", train.job_path, "job spec (YAML) to train");
  app.add_flag("--local", local,
               "train in this process instead of submitting to a cluster controller");
  app.add_option("--threads", train.threads, "compute threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--output", train.output, "model file to write (default: the spec's output.model)");
  app.add_flag("--quiet", train.quiet, "print only the final result");

  auto* validate = app.add_subcommand("validate", "check a job spec and report every problem");
  std::string validate_path;
  validate->add_option("job", validate_path, "job spec (YAML)")->required();

  EvalArgs eval;
  auto* eval_cmd = app.add_subcommand("eval", "evaluate a saved model (.dtm) on labelled data");
  eval_cmd->add_option("model", eval.model_path, "model file (.dtm)")->required();
  eval_cmd->add_option("--data", eval.data,
                       "IDX images file (with --labels) or CSV file; default: the test set of "
                       "the model's job spec");
  eval_cmd->add_option("--labels", eval.labels, "IDX labels file for IDX --data");
  eval_cmd->add_option("--label-column", eval.label_column, "CSV label column (-1 = last)");
  eval_cmd->add_flag("--header", eval.header, "CSV has a header line");
  eval_cmd->add_option("--top-n", eval.top_n, "top-N accuracy (default: the spec's)")
      ->check(CLI::Range(1, 1 << 20));
  eval_cmd->add_flag("--json", eval.json, "print one JSON object");

  InferArgs infer;
  auto* infer_cmd = app.add_subcommand("infer", "predict with a saved model (.dtm)");
  infer_cmd->add_option("model", infer.model_path, "model file (.dtm)")->required();
  infer_cmd->add_option("--input", infer.input, "CSV of feature rows, or an IDX images file")
      ->required();
  infer_cmd->add_option("--output", infer.output, "CSV to write ('-' = standard output)")
      ->required();
  infer_cmd->add_option("--key-column", infer.key_column,
                        "CSV column holding each row's key (default: row numbers)");
  infer_cmd->add_flag("--header", infer.header, "CSV input has a header line");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitSuccess : kExitBadInput;
  }

  if (*validate) return run_validate(validate_path);
  if (*eval_cmd) return run_eval(eval);
  if (*infer_cmd) return run_infer(infer);
  if (train.job_path.empty()) {
    std::fprintf(stderr, "%s", app.help().c_str());
    std::fprintf(stderr, "\nerror: no job spec given\n  fix: dtrain-submit --local job.yaml\n");
    return kExitBadInput;
  }
  if (!local) {
    std::fprintf(stderr,
                 "error: cannot reach a controller: cluster submission (dtraind) is not part of "
                 "this build yet\n  fix: add --local to train in this process\n");
    return kExitNoController;
  }
  return run_local_training(train);
}
