#pragma once
// A part of an evaluation in report form (node_reports.h), from core/eval's figures: its counts
// (a training job's Result, a cluster evaluation's PartDone) and its ROC scores
// (docs/architecture/daemon.md, "Evaluation and inference jobs"): the softmax outputs and labels of
// its examples, so that the controller's ROC is exactly the one-machine one. In the controller's
// job record the scores are raw little-endian float32 and int32, base64 (node_reports_json.h).
#include <optional>

#include "core/eval/evaluation.h"
#include "core/eval/roc.h"
#include "daemon/protocol/node_reports_json.h"

namespace dtrain::daemon {

// A classifier's counts or a regression model's sums, with the loss sum.
EvaluationCounts evaluation_counts(const core::Evaluation& evaluation);
PartScores part_scores(const core::RocOneVsAll& roc);
// The scores as a job record keeps them, or nullopt when they are malformed, larger than the
// bound, not of `classes` classes and `rows` rows, or hold a label outside the classes.
std::optional<core::RocOneVsAll> decode_part_scores(const Json& scores, int64_t rows,
                                                    int64_t classes);

}  // namespace dtrain::daemon
