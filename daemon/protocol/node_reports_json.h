#pragma once
// The JSON the controller keeps for a node's progress, result and finished parts: what its job
// records hold and `dtrain-submit status --json` prints (docs/architecture/daemon.md, "Status and
// metrics"). The wire carries the typed reports (node_reports.h); this is their one JSON form.
#include <nlohmann/json.hpp>

#include "daemon/protocol/node_reports.h"

namespace dtrain::daemon {

using Json = nlohmann::json;

// `report` with "part": which run of the job on its node sent it (StartJob.part; none when 0).
Json with_part(Json report, uint64_t part);

Json progress_json(const ProgressReport& progress);
// {rank, error, fix, cancelled}
Json failed_json(const FailedReport& failed);
// With "samples_per_sec" and the applied updates' digest as 16 hex digits.
Json result_json(const ResultReport& result);
// {part_index, examples, begin, file | loss_sum, counts | regression_sums, roc}.
Json part_done_json(const PartDoneReport& part);
// A part's ROC scores: raw little-endian float32 and int32, base64 (libsodium), read back by
// daemon/protocol/part_scores.h.
Json part_scores_json(const PartScores& scores);

}  // namespace dtrain::daemon
