#pragma once
// What a node reports to the controller about a job (transport/schema/node_reports.fbs): one
// struct per report kind, one builder (report_frame) and one reader (read_report). The reader
// refuses what no real node sends (a vector of the wrong shape, figures out of range), so the
// controller works on checked, typed values; it keeps JSON only for what it stores and prints
// (node_reports_json.h).
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/protocol/job_stats.h"
#include "daemon/protocol/shard_list.h"
#include "daemon/protocol/control_generated.h"

namespace dtrain::daemon {

using JobKind = control::JobKind;

struct ProgressReport {
  uint32_t rank = 0;
  int64_t epoch = 0, epochs = 0;  // 1-based, as printed
  int64_t iteration = 0, iteration_in_epoch = 0, iterations_per_epoch = 0;
  double loss = 0, samples_per_sec = 0, eta_seconds = 0;
  int32_t workers = 1;
  bool sharing = false;  // gradient sharing: the codec's figures are set
  double tau = 0, density = 0, message_kb = 0;
  std::string encoding;
  double accuracy = -1;  // the last epoch's test accuracy; -1: none yet
  bool diverging = false;
};
struct LogReport {
  std::string line;
};
struct CheckpointReport {
  int64_t epoch = 0;  // epochs done: 0 .. kMaxEpochs
  std::string path;
};
struct FailedReport {
  int32_t rank = -1;  // -1: a part of a cluster eval/infer job
  std::string error, fix;
  bool cancelled = false;
};
struct RejoinedReport {
  int64_t epoch = 0;
  std::string from;
};
struct AttachedReport {
  uint32_t rank = 0;
};

// Evaluation counts (core/eval/evaluation.h): a classifier's counts or a regression's sums.
struct EvaluationCounts {
  double loss_sum = 0;
  bool regression = false;
  std::vector<int64_t> counts;
  std::vector<double> regression_sums;
};

struct ResultReport {
  uint32_t rank = 0;
  int64_t iterations = 0, samples = 0;
  double train_seconds = 0;
  int64_t messages = 0, message_bytes = 0, params = 0;
  int32_t workers = 1;
  std::string codec_kernel, device;
  int64_t mesh_messages_sent = 0, mesh_bytes_sent = 0;
  std::vector<std::string> lost_nodes;
  std::string sync;
  int64_t sync_bound = 0, max_steps_ahead = 0;
  bool stop_on_divergence = true;
  bool fp16 = false;
  int64_t overflow_skipped_steps = 0;  // with fp16
  std::string gpu_sharing;             // empty: no GPU sharing on this node
  int64_t messages_from_gpus = 0;
  int64_t classes = -1;  // -1: a regression model
  // The updates worker 0 applied (gradient sharing from the start): every node applied the same.
  struct Applied {
    int64_t messages = 0;
    uint64_t digest = 0;
    double deviation = -1;  // -1: not audited
  };
  std::optional<Applied> applied;
  // This node's part of the test set, merged by the controller.
  struct Evaluation {
    int64_t part = 0, parts = 0, examples = 0, test_examples = 0;
    EvaluationCounts counts;
  };
  std::optional<Evaluation> evaluation;
  std::string model_path, model_sha256, stopped_early;
  std::vector<float> params_sample;  // evenly spaced parameters: the controller compares replicas
  std::string mode;                  // as trained (a `mode: auto` resolved), like sync
};

struct ShardsReport {
  std::vector<ShardFile> files;
  // Set by the reader (and files empty) for a list no real node sends: the controller stops the
  // job naming it.
  std::string error;
};

// A part's softmax outputs (rows x classes) and labels, for the controller's exact ROC.
struct PartScores {
  int64_t rows = 0, classes = 0;
  std::vector<float> probabilities;
  std::vector<int32_t> labels;
};
// At most this many bytes of scores per part: more fails the part with the fix.
constexpr size_t kMaxPartScoreBytes = 16u << 20;

struct PartDoneReport {
  uint32_t part_index = 0;
  int64_t examples = 0, begin = 0;
  std::string file;                       // infer: its predictions
  std::optional<EvaluationCounts> counts;  // eval
  std::optional<PartScores> roc;           // eval with the roc metric
};

using NodeReport = std::variant<ProgressReport, LogReport, CheckpointReport, FailedReport,
                                RejoinedReport, AttachedReport, ResultReport, StatsReport,
                                ShardsReport, PartDoneReport>;
// The JobMessage kind that carries the report.
JobKind report_kind(const NodeReport& report);

// `part`: the StartJob.part of the node's part of the job it speaks for (0: none).
std::vector<uint8_t> report_frame(uint64_t job_id, const NodeReport& report, uint64_t part = 0);
std::vector<uint8_t> heartbeat_frame();

// The report in a verified JobMessage of a report kind, read from a frame of `frame_bytes`
// (its texts together take no more; daemon/protocol/wire_text.h); false when its table is
// missing or it holds what no real node sends.
bool read_report(const control::JobMessage& message, size_t frame_bytes,
                 NodeReport& out);

}  // namespace dtrain::daemon
