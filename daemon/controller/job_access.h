#pragma once
// Who may act on a job (docs/operations.md, "Who may do what"): its owner and operators read
// its log and stats, fetch its model, cancel and resume it; anyone may list the jobs and see
// one job's state. A refusal names the job's owner and who else may.
#include <optional>
#include <string>

#include "core/util/error.h"
#include "daemon/controller/job_record.h"
#include "daemon/protocol/requester.h"

namespace dtrain::daemon {

// Why `who` may not `action` (a verb: "cancel", "read the log of") `job`; nullopt if it may.
std::optional<core::UserError> access_refusal(const JobRecord& job, const Requester& who,
                                              const std::string& action);
// Throws the refusal, if any.
void check_access(const JobRecord& job, const Requester& who, const std::string& action);

}  // namespace dtrain::daemon
