#pragma once
// Whether a training job's nodes sum over NCCL between them (docs/architecture/daemon.md, "NCCL
// between nodes"), and the communicator's id in their start messages: under mode allreduce, two
// nodes or more, every one training on GPUs (mode auto rehearses and weighs the mesh's ring, and
// sums over it when it chooses allreduce). The id is made here (NCCL's unique id: this process
// then serves its bootstrap until every rank has joined), once for all the job's start
// messages; when it cannot be, each message says why and the nodes sum over the mesh.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

using MakeCollectiveId = std::function<std::vector<uint8_t>(std::string* why)>;

bool wants_node_collective(const core::TrainingSpec& training,
                           const std::vector<JobMemberInfo>& members);

// `starts`: the job's start messages, one per member, as they go out together (a fresh start
// or a resume; never a rejoin: a communicator cannot take a member in later). Returns a line for
// the job's log (empty: not a job that would).
std::string offer_node_collective(const core::TrainingSpec& training,
                                  std::vector<StartMessage>& starts,
                                  const MakeCollectiveId& make);

}  // namespace dtrain::daemon
