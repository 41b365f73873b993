#include "daemon/controller/job_access.h"

namespace dtrain::daemon {
namespace {

std::string owner_text(const std::string& owner) {
  if (owner.empty()) return "no owner on record (a job of a release before owners)";
  if (owner == kClusterKeyHolder) return "the cluster key's holder";
  return "client '" + owner + "'";
}

}  // namespace

std::optional<core::UserError> access_refusal(const JobRecord& job, const Requester& who,
                                              const std::string& action) {
  if (who.operator_role || (!job.owner.empty() && job.owner == who.name)) return std::nullopt;
  return core::UserError(who.describe() + " may not " + action + " job " + job_id_text(job.id) +
                             ": it belongs to " + owner_text(job.owner),
                         "ask its owner or an operator (a credential made with `dtraind keygen "
                         "--client NAME --operator`, or the cluster key) to do it");
}

void check_access(const JobRecord& job, const Requester& who, const std::string& action) {
  if (auto refusal = access_refusal(job, who, action)) throw *refusal;
}

}  // namespace dtrain::daemon
