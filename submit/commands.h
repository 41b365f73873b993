#pragma once
// The dtrain-submit subcommands. Each returns the process exit code (see exit_codes.h).
#include <string>

namespace dtrain::submit {

struct LocalTrainArgs {
  std::string job_path;
  int threads = 0;
  std::string output;
  bool quiet = false;
  std::string resume;  // a checkpoint, or a model file whose newest whole checkpoint is used
};
int run_local_training(const LocalTrainArgs& args);

struct EvalArgs {
  std::string model_path;
  std::string data;          // IDX images or CSV; empty = the test set named in the model's spec
  std::string labels;        // IDX labels, with an IDX --data
  long label_column = -1;    // CSV
  bool header = false;       // CSV
  long top_n = 0;            // 0 = the spec's evaluation.top_n
  bool json = false;
  // comma-separated: classification, roc, regression; "" = the model's kind
  std::string metrics;
  std::string roc_csv;       // write the ROC curves here (class,threshold,fpr,tpr)
  bool cluster = false;      // a job of the cluster's (submit/cluster_task_command.cc)
  long nodes = 0;            // with cluster: on this many nodes (0 = every live one)
  // With cluster: the packed files each node holds ({node}: its name); replaces data.
  std::string shards;
};
int run_eval(const EvalArgs& args);

struct InferArgs {
  std::string model_path;
  std::string input;         // CSV rows of features, or an IDX images file
  std::string output;        // CSV; "-" = standard output
  long key_column = -1;      // CSV column holding a key; -1 = use the row number
  bool header = false;
  long batch_size = 256;     // examples per forward pass
  bool cluster = false;      // a job of the cluster's: output is then a folder
  bool parts = false;        // with cluster: leave the part files, do not join them
  long nodes = 0;            // with cluster: on this many nodes (0 = every live one)
};
int run_infer(const InferArgs& args);

int run_validate(const std::string& job_path);

struct ExportArgs {
  std::string job_path;
  std::string out_dir;
  long files = 1;       // the training set is cut into this many files
  long test_files = 1;  // and the test set into this many (node-local evaluation)
};
int run_export(const ExportArgs& args);

}  // namespace dtrain::submit
