#pragma once
// The payloads nodes of a job send each other over the mesh (mesh_payloads.fbs): one function
// builds each kind, and read_mesh_payload() reads any of them, after the FlatBuffers verifier
// and the checks that need no model. Whether an update fits the model is the receiver's check
// (core::check_message), since a node may hear updates before it has built its model.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/codec/message.h"
#include "core/collective/ring_part.h"

namespace dtrain::daemon {

using PayloadBytes = std::shared_ptr<const std::vector<uint8_t>>;

// An update with the position its worker was at (m.epoch, m.batch).
PayloadBytes update_payload(const core::EncodedMessage& m);

struct EpochEndPayload {
  int64_t epoch = 0;
  int32_t phase = 0;        // 0: the node's own shards; 1: the lost nodes' takeover
  uint64_t published = 0;   // updates the node published tagged with `epoch`
  double tau_sum = 0.0;
  int32_t workers = 0;
  std::vector<uint32_t> joiners;  // restarted members the node knows of (phase 1)
  std::vector<double> state_sum;  // phase 1: model state summed over state_workers workers
  int32_t state_workers = 0;
  // Phase 0: per worker of the job (global order), the last minibatch of `epoch` whose update
  // the node received from it, -1 for none; and how many of its updates of `epoch` it received.
  std::vector<int64_t> last_batches, heard_updates;
};
// At most this many joiners, and last minibatches, are believed (a cluster has far fewer nodes
// and workers).
constexpr size_t kMaxJoiners = 4096;
constexpr size_t kMaxLastBatches = 65536;
constexpr int64_t kMaxLastBatch = int64_t(1) << 40;  // minibatches an epoch, far past any

// A lost worker's updates that one survivor missed, from another (mesh_payloads.fbs).
struct ForwardedPayload {
  uint32_t for_node = 0;
  int64_t epoch = 0;
  uint32_t worker = 0;
  int64_t after = 0;
  bool complete = false;
  std::vector<core::EncodedMessage> updates;  // not yet checked against a model
};
// At most this many updates a payload (a survivor keeps as many of each worker's last ones).
constexpr size_t kMaxForwardedUpdates = 8;
using SharedUpdate = std::shared_ptr<const core::EncodedMessage>;
PayloadBytes forwarded_payload(const ForwardedPayload& f,
                               const std::vector<SharedUpdate>& updates);
PayloadBytes epoch_end_payload(const EpochEndPayload& e);

// Floats inside a received payload's bytes: valid while those bytes live.
struct FloatView {
  const float* data = nullptr;
  size_t size = 0;
};

struct SnapshotPayload {
  uint32_t for_node = 0;
  int64_t epoch = 0;
  float tau = 0.0f;
  FloatView params, state;
  int64_t applied_messages = 0;
  uint64_t applied_digest = 0;
  FloatView outer_momentum;  // local steps; empty otherwise
};
// A replica at the end of `epoch` for the restarted node `for_node`, with what the sender's
// audited replica applied. Throws core::UserError when the floats cannot be one message.
PayloadBytes snapshot_payload(uint32_t for_node, int64_t epoch, float tau, const float* params,
                              int64_t num_params, const float* state, int64_t num_state,
                              int64_t applied_messages = 0, uint64_t applied_digest = 0,
                              const std::vector<float>& outer_momentum = {});

struct ParametersPayload {
  int64_t round = 0;
  FloatView values;
};
PayloadBytes parameters_payload(int64_t round, const float* values, int64_t n);

// A node's encoded pseudo-gradient of a round of local steps (not yet checked against a model).
// At most this many levels are believed (core::kMaxPseudoGradientLevels, checked where both
// are known: mesh_exchange.cc).
constexpr size_t kMaxPayloadLevels = 8;
struct PseudoGradientPayload {
  int64_t round = 0;
  int32_t workers = 0;
  std::vector<core::EncodedMessage> levels;
};
PayloadBytes pseudo_gradient_payload(int64_t round, int32_t workers,
                                     const std::vector<core::EncodedMessage>& levels);

// `training.sync: auto`: a probe of `padding` bytes, its answer, and the choice. A reason
// longer than kMaxReasonBytes, or an H past kMaxChosenSteps, is malformed.
PayloadBytes link_probe_payload(uint64_t id, size_t padding);
PayloadBytes link_probe_ack_payload(uint64_t id);
constexpr size_t kMaxReasonBytes = 1024;
constexpr int64_t kMaxChosenSteps = 1 << 20;
struct SyncChoicePayload {
  int64_t local_steps = 0;
  std::string reason;
  bool allreduce = false;  // `mode: auto` chose allreduce (local_steps is then 0)
};
PayloadBytes sync_choice_payload(const SyncChoicePayload& c);


// `training.sync: auto`'s rehearsal (daemon/node/sync_rehearsal.h). A plan of fewer than
// kMinRehearsalSteps steps or more than kMaxRehearsalSteps, or of messages larger than kMaxRehearsalBytes, is malformed,
// as is a mark past them. The lock step is timed over its second half.
constexpr int32_t kMinRehearsalSteps = 2;
constexpr int32_t kMaxRehearsalSteps = 64;
constexpr int32_t kRehearsalRounds = 2;
constexpr uint64_t kMaxRehearsalBytes = uint64_t(16) << 20;
struct RehearsalPlanPayload {
  int32_t steps = 0;
  uint64_t step_bytes = 0;   // each node's message after a step
  uint64_t round_bytes = 0;  // each node's message of a round
  // `mode: auto`: steps each summing a step's values over the nodes' ring, as allreduce does
  // (each node sizes them from its own model); 0: none, else within the bounds of `steps`.
  int32_t ring_steps = 0;
};
PayloadBytes rehearsal_plan_payload(const RehearsalPlanPayload& plan);
struct RehearsalMarkPayload {
  bool round = false;
  int32_t index = 0;
};
PayloadBytes rehearsal_mark_payload(const RehearsalMarkPayload& mark, size_t padding);

// mode allreduce: a part of a step's ring all-reduce, or a step's whole result
// (core/collective/ring_rounds.h). A ring of more than kMaxRingMembers is malformed.
constexpr size_t kMaxRingMembers = 4096;
// Its values came as fp32 or, each a bf16 already, as their high 16 bits (never both).
struct RingPayload {
  int64_t round = 0;
  std::vector<uint32_t> members;
  int32_t step = -1;  // -1: the whole result
  FloatView values;                   // the fp32 values, after the bf16 ones
  const uint16_t* bf16 = nullptr;     // the leading values, as bf16
  size_t bf16_size = 0;
  std::vector<float> floats() const;  // the part's values as fp32: the bf16 ones, then the rest
  // The same values, read in place when they all came as fp32 (`bytes`: the message they are
  // in, kept alive by the part) and the message is not much larger than they are: a part held
  // for a later round is bounded by its values (core/collective/ring_rounds.h), so a message
  // padded past them is copied out instead of kept.
  core::RingPart part(std::shared_ptr<const std::vector<uint8_t>> bytes) const;
};
PayloadBytes ring_segment_payload(int64_t round, const std::vector<uint32_t>& members,
                                  int32_t step, const float* values, int64_t n);
PayloadBytes ring_result_payload(int64_t round, const std::vector<uint32_t>& members,
                                 const float* values, int64_t n);

struct MeshPayloadIn {
  enum class Kind {
    kMalformed, kUpdate, kEpochEnd, kSnapshot, kParameters, kPseudoGradient,
    kLinkProbe, kLinkProbeAck, kSyncChoice, kRehearsalPlan, kRehearsalMark,
    kRingSegment, kRingResult, kForwarded
  };
  Kind kind = Kind::kMalformed;
  std::string error;               // kMalformed: what is wrong with it
  core::EncodedMessage update;     // kUpdate (not yet checked against a model)
  EpochEndPayload epoch_end;       // kEpochEnd
  SnapshotPayload snapshot;        // kSnapshot (views into the bytes)
  ParametersPayload parameters;    // kParameters (views into the bytes)
  PseudoGradientPayload pseudo_gradient;  // kPseudoGradient
  uint64_t probe_id = 0;                  // kLinkProbe, kLinkProbeAck
  SyncChoicePayload sync_choice;          // kSyncChoice
  RehearsalPlanPayload rehearsal_plan;    // kRehearsalPlan
  RehearsalMarkPayload rehearsal_mark;    // kRehearsalMark
  RingPayload ring;                       // kRingSegment, kRingResult (views into the bytes)
  ForwardedPayload forwarded;             // kForwarded
};
// Never throws; anything that is not a well-formed payload is kMalformed with the reason.
MeshPayloadIn read_mesh_payload(const uint8_t* data, size_t size);

}  // namespace dtrain::daemon
