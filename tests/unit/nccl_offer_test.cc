// The controller's side of NCCL between nodes (daemon/controller/nccl_offer.h): which jobs get
// an NCCL id in their start messages, the same id in every one, the reason when none can be
// made, and the id's trip through the Start frame (bounded: a larger one is refused).
#include <catch2/catch.hpp>

#include "daemon/controller/nccl_offer.h"

using namespace dtrain;
using namespace dtrain::daemon;

namespace {

JobMemberInfo member(uint32_t id, bool gpu, bool vacant = false) {
  JobMemberInfo m;
  m.id = id;
  m.name = "node-" + std::to_string(id);
  m.address = vacant ? "" : "10.0.0." + std::to_string(id);
  m.gpu = gpu;
  if (gpu) m.gpus = {0};
  return m;
}

core::TrainingSpec training(core::TrainingMode mode) {
  core::TrainingSpec t;
  t.mode = mode;
  return t;
}

std::vector<StartMessage> starts(const std::vector<JobMemberInfo>& members) {
  std::vector<StartMessage> out(members.size());
  for (size_t r = 0; r < members.size(); ++r) {
    out[r].members = members;
    out[r].rank = uint32_t(r);
  }
  return out;
}

}  // namespace

TEST_CASE("an NCCL id is wanted for allreduce on two GPU nodes or more") {
  using core::TrainingMode;
  const std::vector<JobMemberInfo> gpus = {member(1, true), member(2, true)};
  CHECK(wants_node_collective(training(TrainingMode::kAllreduce), gpus));
  CHECK_FALSE(wants_node_collective(training(TrainingMode::kAuto), gpus));  // weighs the ring
  CHECK_FALSE(wants_node_collective(training(TrainingMode::kGradientSharing), gpus));
  CHECK_FALSE(wants_node_collective(training(TrainingMode::kParameterAveraging), gpus));
  CHECK_FALSE(wants_node_collective(training(TrainingMode::kAllreduce), {member(1, true)}));
  CHECK_FALSE(wants_node_collective(training(TrainingMode::kAllreduce),
                                    {member(1, true), member(2, false)}));
  // An elastic job's vacant slot is no node yet: two GPU nodes and a slot want one.
  CHECK(wants_node_collective(training(TrainingMode::kAllreduce),
                              {member(1, true), member(2, true), member(3, false, true)}));
}

TEST_CASE("every start message of the job carries the same id, or why there is none") {
  const auto t = training(core::TrainingMode::kAllreduce);
  int made = 0;
  auto id_maker = [&](std::string*) {
    ++made;
    return std::vector<uint8_t>(128, uint8_t(0x5a + made));
  };
  std::vector<StartMessage> job = starts({member(1, true), member(2, true), member(3, true)});
  CHECK(offer_node_collective(t, job, id_maker).find("over NCCL") != std::string::npos);
  CHECK(made == 1);
  for (const StartMessage& s : job) {
    CHECK(s.nccl_id == std::vector<uint8_t>(128, uint8_t(0x5b)));
    CHECK(s.nccl_why.empty());
  }

  std::vector<StartMessage> none = starts({member(1, true), member(2, true)});
  const std::string line = offer_node_collective(t, none, [](std::string* why) {
    *why = "NCCL is not installed here";
    return std::vector<uint8_t>();
  });
  CHECK(line == "the nodes sum over the mesh: the controller could not make an NCCL id: NCCL is "
                "not installed here");
  for (const StartMessage& s : none) {
    CHECK(s.nccl_id.empty());
    CHECK(s.nccl_why == "the controller could not make an NCCL id: NCCL is not installed here");
  }

  // CPU nodes, and a rejoin (no communicator takes a node in later): no id, none made.
  std::vector<StartMessage> cpu = starts({member(1, false), member(2, false)});
  CHECK(offer_node_collective(t, cpu, id_maker).empty());
  std::vector<StartMessage> rejoin = starts({member(1, true), member(2, true)});
  rejoin[0].rejoin = rejoin[1].rejoin = true;
  CHECK(offer_node_collective(t, rejoin, id_maker).empty());
  CHECK(made == 1);
  CHECK(cpu[0].nccl_id.empty());
  CHECK(rejoin[0].nccl_id.empty());

  // An id past what a Start frame holds is not sent (the nodes would refuse the frame).
  std::vector<StartMessage> big = starts({member(1, true), member(2, true)});
  offer_node_collective(t, big, [](std::string*) { return std::vector<uint8_t>(129, 1); });
  CHECK(big[0].nccl_id.empty());
  CHECK(big[0].nccl_why.find("129 bytes") != std::string::npos);
}

TEST_CASE("the NCCL id travels in the Start frame, bounded") {
  StartMessage start = starts({member(1, true), member(2, true)})[1];
  start.spec = "model: {}";
  start.nccl_id = std::vector<uint8_t>(128, 7);
  start.nccl_why = "";
  JobMessageIn in;
  REQUIRE(read_job_message(start_frame(3, start), in));
  CHECK(in.start.nccl_id == start.nccl_id);
  start.nccl_id.clear();
  start.nccl_why = "the controller could not make an NCCL id: no NCCL";
  REQUIRE(read_job_message(start_frame(3, start), in));
  CHECK(in.start.nccl_id.empty());
  CHECK(in.start.nccl_why == start.nccl_why);
  start.nccl_id = std::vector<uint8_t>(129, 7);
  CHECK_FALSE(read_job_message(start_frame(3, start), in));
}
