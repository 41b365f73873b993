#include "daemon/controller/nccl_offer.h"

namespace dtrain::daemon {

bool wants_node_collective(const core::TrainingSpec& training,
                           const std::vector<JobMemberInfo>& members) {
  // Not mode auto: the id would be made for every GPU job that may choose otherwise, and each
  // id made holds a listener of NCCL's in this process until its communicator forms.
  if (training.mode != core::TrainingMode::kAllreduce) return false;
  int nodes = 0;
  for (const JobMemberInfo& m : members) {
    if (m.address.empty()) continue;  // a vacant slot of an elastic job
    if (!m.gpu) return false;
    ++nodes;
  }
  return nodes >= 2;
}

std::string offer_node_collective(const core::TrainingSpec& training,
                                  std::vector<StartMessage>& starts,
                                  const MakeCollectiveId& make) {
  if (starts.empty() || starts.front().rejoin ||
      !wants_node_collective(training, starts.front().members))
    return "";
  std::string why;
  std::vector<uint8_t> id = make(&why);
  if (id.size() > kMaxNcclIdBytes) {  // a frame the nodes would refuse
    why = "NCCL's id is " + std::to_string(id.size()) + " bytes, more than a start message holds";
    id.clear();
  }
  for (StartMessage& start : starts) {
    start.nccl_id = id;
    if (id.empty()) start.nccl_why = "the controller could not make an NCCL id: " + why;
  }
  if (id.empty()) return "the nodes sum over the mesh: " + starts.front().nccl_why;
  return "the nodes sum over NCCL between them where it forms on every node (else the mesh)";
}

}  // namespace dtrain::daemon
