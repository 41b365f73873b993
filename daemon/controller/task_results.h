#pragma once
// What the controller does with the parts of a cluster evaluation or inference job
// (docs/architecture/daemon.md, "Evaluation and inference jobs"): checks each node's PartDone
// report, and at the end joins the parts, in part order, into the job's result. Pure functions over
// the reports, so the merging is unit-tested without daemons.
#include <cstdint>
#include <map>
#include <string>

#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

// Where part `part` of an inference job writes its predictions under `output_dir`.
std::string part_file(const std::string& output_dir, uint32_t part);

// "" when a node's PartDone `body` for `part` of a `task` (eval | infer) job may be taken;
// otherwise what is wrong with it. An inference part must name exactly its own file; an
// evaluation with `roc` must bring its scores.
std::string check_part_done(TaskKind task, const Json& body, uint32_t part,
                            const std::string& output_dir, bool roc = false);

// eval: every part's counts (or regression sums) added in part order: the figures of
// put_evaluation plus the raw "counts" (or "regression_sums") and "loss_sum", from which
// `dtrain-submit eval --cluster` prints the one-machine report. With the parts' ROC scores,
// "auc" (per class, null where undefined) and "macro_auc"; and the curves into the request's
// roc_csv file, classes named by its roc_classes. Throws core::UserError.
Json merge_eval_parts(const std::map<uint32_t, Json>& parts, const Json& request = Json::object());

// infer: the part files joined in part order into output_dir/predictions.csv (one header line)
// and removed; with keep_parts they stay and are listed instead. Throws core::UserError when
// a part file cannot be read or the parts' headers differ.
// The part files the parts reported (a failed or cancelled inference), removed if there.
void remove_part_files(const std::map<uint32_t, Json>& parts, const std::string& output_dir);

Json merge_infer_parts(const std::map<uint32_t, Json>& parts, const std::string& output_dir,
                       bool keep_parts);

}  // namespace dtrain::daemon
