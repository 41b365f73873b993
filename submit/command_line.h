#pragma once
// dtrain-submit's command line: every option and subcommand, and which function each
// subcommand runs (a table: CommandLine::commands). main() parses and dispatches.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "submit/cluster_commands.h"
#include "submit/commands.h"

namespace dtrain::submit {

struct CommandLine {
  CommandLine();

  CLI::App app;
  // Training (no subcommand): dtrain-submit [--local] job.yaml
  LocalTrainArgs train;
  bool local = false;
  bool detach = false;
  ClusterArgs cluster;
  // The job commands' arguments.
  bool json = false;
  std::string job_arg;
  std::string fetch_output;
  uint32_t chunk_kb = 8192;
  StatsFormat stats_format;
  std::string validate_path;
  ExportArgs export_args;
  EvalArgs eval;
  InferArgs infer;

  // What runs when subcommand `app` was given.
  struct Command {
    CLI::App* app;
    std::function<int()> run;
  };
  std::vector<Command> commands;

 private:
  void add_training_options();
  void add_cluster_options();
  void add_job_commands();
  void add_job_outputs();
  void add_spec_commands();
  void add_eval_command();
  void add_infer_command();
  // --controller, --key-file, --credential, --connect-timeout-ms on a subcommand; `prefix` says
  // when they apply ("with --cluster: ").
  void add_connection_options(CLI::App* sub, const std::string& prefix);
};

// The run without a subcommand: submit job.yaml to the cluster, or train it here with --local.
int run_training(CommandLine& cli);

}  // namespace dtrain::submit
