#include "daemon/protocol/mesh_payloads.h"

#include <algorithm>

#include "core/collective/ring_wire.h"
#include "core/util/error.h"
#include "daemon/protocol/mesh_payloads_generated.h"
#include "transport/schema/vector_alignment.h"

namespace dtrain::daemon {
namespace {

// FlatBuffers addresses a buffer with 32-bit offsets; a payload also has to fit the
// endpoint's reassembly. Refused here with the reason instead of failing inside the builder.
constexpr size_t kMaxPayloadBytes = size_t(1) << 30;

PayloadBytes finish(flatbuffers::FlatBufferBuilder& fbb, mesh::Payload type,
                    flatbuffers::Offset<void> payload) {
  fbb.Finish(mesh::CreateMeshPayload(fbb, type, payload));
  const uint8_t* p = fbb.GetBufferPointer();
  return std::make_shared<const std::vector<uint8_t>>(p, p + fbb.GetSize());
}

void check_floats(int64_t count, const char* what) {
  if (count < 0 || size_t(count) > (kMaxPayloadBytes - 1024) / sizeof(float))
    throw core::UserError(std::string(what) + " of " + std::to_string(count) +
                              " floats do not fit one mesh message (at most " +
                              std::to_string(kMaxPayloadBytes >> 20) + " MiB)",
                          "train a smaller model, or use gradient sharing (training.mode)");
}

FloatView view(const flatbuffers::Vector<float>* v) {
  return v ? FloatView{v->data(), v->size()} : FloatView{};
}

MeshPayloadIn malformed(std::string why) {
  MeshPayloadIn in;
  in.error = std::move(why);
  return in;
}

void read_message(const mesh::Update& u, core::EncodedMessage& m) {
  m.epoch = u.epoch();
  m.batch = u.minibatch();
  m.id = u.id();
  m.origin = u.origin();
  m.encoding = static_cast<core::Encoding>(u.encoding());
  m.tau = u.tau();
  m.param_offset = u.param_offset();
  m.length = u.length();
  m.count = u.count();
  if (u.words()) m.words.assign(u.words()->begin(), u.words()->end());
}

void read_update(const mesh::Update& u, MeshPayloadIn& in) {
  read_message(u, in.update);
  in.kind = MeshPayloadIn::Kind::kUpdate;
}

void read_pseudo_gradient(const mesh::PseudoGradient& g, MeshPayloadIn& in) {
  if (!g.levels() || g.levels()->size() == 0 ||
      g.levels()->size() > kMaxPayloadLevels) {
    in.error = "a pseudo-gradient of " + std::to_string(g.levels() ? g.levels()->size() : 0) +
               " levels (1 to " + std::to_string(kMaxPayloadLevels) + ")";
    return;
  }
  if (g.workers() <= 0) {
    in.error = "a pseudo-gradient of " + std::to_string(g.workers()) + " workers";
    return;
  }
  in.pseudo_gradient.round = g.round();
  in.pseudo_gradient.workers = g.workers();
  in.pseudo_gradient.levels.resize(g.levels()->size());
  for (flatbuffers::uoffset_t i = 0; i < g.levels()->size(); ++i)
    read_message(*g.levels()->Get(i), in.pseudo_gradient.levels[i]);
  in.kind = MeshPayloadIn::Kind::kPseudoGradient;
}

// An epoch end's figure per worker of the job (a last minibatch, a count): for no more workers
// than a job has, each from `least` to kMaxLastBatch.
bool read_worker_figures(const flatbuffers::Vector<int64_t>* v, int64_t least, const char* what,
                         std::string& error) {
  if (!v) return true;
  if (v->size() > kMaxLastBatches) {
    error = std::string("an epoch end with the ") + what + " of " + std::to_string(v->size()) +
            " workers";
    return false;
  }
  if (!transport::elements_aligned(v)) {
    error = std::string("an epoch end whose ") + what + " are not 8-byte aligned";
    return false;
  }
  for (int64_t figure : *v)
    if (figure < least || figure > kMaxLastBatch) {
      error = std::string("an epoch end with ") + std::to_string(figure) + " among its " + what;
      return false;
    }
  return true;
}

void read_forwarded(const mesh::ForwardedUpdates& f, MeshPayloadIn& in) {
  const auto* updates = f.updates();
  if (updates && updates->size() > kMaxForwardedUpdates) {
    in.error = "forwarded updates, " + std::to_string(updates->size()) + " of them (at most " +
               std::to_string(kMaxForwardedUpdates) + ")";
    return;
  }
  if (f.epoch() < 0 || f.after() < 0 || f.after() > kMaxLastBatch) {
    in.error = "forwarded updates of epoch " + std::to_string(f.epoch()) + " after update " +
               std::to_string(f.after());
    return;
  }
  in.forwarded = {f.for_node(), f.epoch(), f.worker(), f.after(), f.complete(), {}};
  if (updates)
    for (const mesh::Update* u : *updates) {
      in.forwarded.updates.emplace_back();
      read_message(*u, in.forwarded.updates.back());
    }
  in.kind = MeshPayloadIn::Kind::kForwarded;
}

void read_epoch_end(const mesh::EpochEnd& e, MeshPayloadIn& in) {
  if (e.joiners() && e.joiners()->size() > kMaxJoiners) {
    in.error = "an epoch end naming " + std::to_string(e.joiners()->size()) + " joiners";
    return;
  }
  if (!read_worker_figures(e.last_batches(), -1, "last minibatches", in.error) ||
      !read_worker_figures(e.heard_updates(), 0, "counts of updates heard", in.error))
    return;
  if (e.state_workers() < 0) {
    in.error = "an epoch end with " + std::to_string(e.state_workers()) + " state workers";
    return;
  }
  if (!transport::elements_aligned(e.state_sum())) {  // a forged or broken payload
    in.error = "an epoch end whose state sum is not 8-byte aligned";
    return;
  }
  in.epoch_end = {e.epoch(), e.phase(), e.published(), e.tau_sum(), e.workers(), {}, {}, 0, {}, {}};
  if (e.joiners()) in.epoch_end.joiners.assign(e.joiners()->begin(), e.joiners()->end());
  // Bounded by the payload's size, which the reader already bounded.
  if (const auto* s = e.state_sum()) in.epoch_end.state_sum.assign(s->begin(), s->end());
  in.epoch_end.state_workers = e.state_workers();
  if (const auto* b = e.last_batches()) in.epoch_end.last_batches.assign(b->begin(), b->end());
  if (const auto* h = e.heard_updates()) in.epoch_end.heard_updates.assign(h->begin(), h->end());
  in.kind = MeshPayloadIn::Kind::kEpochEnd;
}

void read_sync_choice(const mesh::SyncChoice& c, MeshPayloadIn& in) {
  const size_t reason = c.reason() ? c.reason()->size() : 0;
  if (c.local_steps() < 0 || c.local_steps() > kMaxChosenSteps || reason > kMaxReasonBytes) {
    in.error = "a sync choice of " + std::to_string(c.local_steps()) + " local steps with a " +
               std::to_string(reason) + "-byte reason";
    return;
  }
  if (c.allreduce() && c.local_steps() != 0) {
    in.error = "a choice of allreduce with " + std::to_string(c.local_steps()) + " local steps";
    return;
  }
  in.sync_choice = {c.local_steps(), c.reason() ? c.reason()->str() : "", c.allreduce()};
  in.kind = MeshPayloadIn::Kind::kSyncChoice;
}

void read_rehearsal_plan(const mesh::RehearsalPlan& r, MeshPayloadIn& in) {
  auto outside = [](int32_t steps) {
    return steps < kMinRehearsalSteps || steps > kMaxRehearsalSteps;
  };
  if (outside(r.steps()) || (r.ring_steps() != 0 && outside(r.ring_steps())) ||
      r.step_bytes() > kMaxRehearsalBytes || r.round_bytes() > kMaxRehearsalBytes) {
    in.error = "a rehearsal plan of " + std::to_string(r.steps()) + " steps, " +
               std::to_string(r.step_bytes()) + " bytes a step, " +
               std::to_string(r.round_bytes()) + " a round and " +
               std::to_string(r.ring_steps()) + " ring steps";
    return;
  }
  in.rehearsal_plan = {r.steps(), r.step_bytes(), r.round_bytes(), r.ring_steps()};
  in.kind = MeshPayloadIn::Kind::kRehearsalPlan;
}

void read_rehearsal_mark(const mesh::RehearsalMark& m, MeshPayloadIn& in) {
  const int32_t limit = m.round() ? kRehearsalRounds : kMaxRehearsalSteps;
  if (m.index() < 0 || m.index() >= limit) {
    in.error = std::string("a rehearsal mark of ") + (m.round() ? "round " : "step ") +
               std::to_string(m.index());
    return;
  }
  in.rehearsal_mark = {m.round(), m.index()};
  in.kind = MeshPayloadIn::Kind::kRehearsalMark;
}

}  // namespace

namespace {

flatbuffers::Offset<mesh::Update> build_update(flatbuffers::FlatBufferBuilder& fbb,
                                               const core::EncodedMessage& m) {
  const auto words = fbb.CreateVector(m.words);
  return mesh::CreateUpdate(fbb, m.epoch, m.batch, m.id, m.origin,
                            static_cast<mesh::Encoding>(m.encoding), m.tau, m.param_offset,
                            m.length, m.count, words);
}

const core::EncodedMessage& message_of(const core::EncodedMessage& m) { return m; }
const core::EncodedMessage& message_of(const SharedUpdate& m) { return *m; }

// A builder's capacity for `updates` (a pseudo-gradient's levels, forwarded updates), and their
// Update tables in order.
template <typename Updates>
size_t updates_capacity(const Updates& updates) {
  size_t words = 0;
  for (const auto& m : updates) words += message_of(m).words.size();
  return 160 + updates.size() * 80 + words * 4;
}

template <typename Updates>
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<mesh::Update>>> build_updates(
    flatbuffers::FlatBufferBuilder& fbb, const Updates& updates) {
  std::vector<flatbuffers::Offset<mesh::Update>> built;
  for (const auto& m : updates) built.push_back(build_update(fbb, message_of(m)));
  return fbb.CreateVector(built);
}

}  // namespace

PayloadBytes update_payload(const core::EncodedMessage& m) {
  flatbuffers::FlatBufferBuilder fbb(128 + m.words.size() * 4);
  return finish(fbb, mesh::Payload::Update, build_update(fbb, m).Union());
}

PayloadBytes forwarded_payload(const ForwardedPayload& f,
                               const std::vector<SharedUpdate>& updates) {
  flatbuffers::FlatBufferBuilder fbb(updates_capacity(updates));
  const auto v = build_updates(fbb, updates);
  return finish(fbb, mesh::Payload::ForwardedUpdates,
                mesh::CreateForwardedUpdates(fbb, f.for_node, f.epoch, f.worker, f.after,
                                             f.complete, v)
                    .Union());
}

PayloadBytes pseudo_gradient_payload(int64_t round, int32_t workers,
                                     const std::vector<core::EncodedMessage>& levels) {
  flatbuffers::FlatBufferBuilder fbb(updates_capacity(levels));
  const auto v = build_updates(fbb, levels);
  return finish(fbb, mesh::Payload::PseudoGradient,
                mesh::CreatePseudoGradient(fbb, round, workers, v).Union());
}

PayloadBytes epoch_end_payload(const EpochEndPayload& e) {
  flatbuffers::FlatBufferBuilder fbb(128 + e.joiners.size() * 4 + e.state_sum.size() * 8 +
                                     (e.last_batches.size() + e.heard_updates.size()) * 8);
  const auto joiners = fbb.CreateVector(e.joiners);
  const auto state = e.state_sum.empty() ? 0 : fbb.CreateVector(e.state_sum);
  const auto last = e.last_batches.empty() ? 0 : fbb.CreateVector(e.last_batches);
  const auto heard = e.heard_updates.empty() ? 0 : fbb.CreateVector(e.heard_updates);
  const auto t = mesh::CreateEpochEnd(fbb, e.epoch, e.phase, e.published, e.tau_sum, e.workers,
                                      joiners, state, e.state_workers, last, heard);
  return finish(fbb, mesh::Payload::EpochEnd, t.Union());
}

PayloadBytes snapshot_payload(uint32_t for_node, int64_t epoch, float tau, const float* params,
                              int64_t num_params, const float* state, int64_t num_state,
                              int64_t applied_messages, uint64_t applied_digest,
                              const std::vector<float>& outer_momentum) {
  const int64_t floats = num_params + num_state + int64_t(outer_momentum.size());
  check_floats(floats, "parameters and updater state");
  flatbuffers::FlatBufferBuilder fbb(1024 + size_t(floats) * 4);
  const auto m = outer_momentum.empty() ? 0 : fbb.CreateVector(outer_momentum);
  const auto s = fbb.CreateVector(state, size_t(num_state));
  const auto p = fbb.CreateVector(params, size_t(num_params));
  const auto t = mesh::CreateSnapshot(fbb, for_node, epoch, tau, p, s, applied_messages,
                                      applied_digest, m);
  return finish(fbb, mesh::Payload::Snapshot, t.Union());
}

PayloadBytes parameters_payload(int64_t round, const float* values, int64_t n) {
  check_floats(n, "parameters");
  flatbuffers::FlatBufferBuilder fbb(1024 + size_t(n) * 4);
  const auto v = fbb.CreateVector(values, size_t(n));
  return finish(fbb, mesh::Payload::Parameters, mesh::CreateParameters(fbb, round, v).Union());
}

PayloadBytes link_probe_payload(uint64_t id, size_t padding) {
  flatbuffers::FlatBufferBuilder fbb(128 + padding);
  const std::vector<uint8_t> zeros(padding);
  const auto p = fbb.CreateVector(zeros);
  return finish(fbb, mesh::Payload::LinkProbe, mesh::CreateLinkProbe(fbb, id, p).Union());
}

PayloadBytes link_probe_ack_payload(uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return finish(fbb, mesh::Payload::LinkProbeAck, mesh::CreateLinkProbeAck(fbb, id).Union());
}

PayloadBytes sync_choice_payload(const SyncChoicePayload& c) {
  flatbuffers::FlatBufferBuilder fbb(128 + c.reason.size());
  const auto reason = fbb.CreateString(c.reason.substr(0, kMaxReasonBytes));
  return finish(fbb, mesh::Payload::SyncChoice,
                mesh::CreateSyncChoice(fbb, c.local_steps, reason, c.allreduce).Union());
}

PayloadBytes rehearsal_plan_payload(const RehearsalPlanPayload& plan) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return finish(fbb, mesh::Payload::RehearsalPlan,
                mesh::CreateRehearsalPlan(fbb, plan.steps, plan.step_bytes, plan.round_bytes,
                                          plan.ring_steps)
                    .Union());
}

PayloadBytes rehearsal_mark_payload(const RehearsalMarkPayload& mark, size_t padding) {
  flatbuffers::FlatBufferBuilder fbb(128 + padding);
  const std::vector<uint8_t> zeros(padding);
  const auto p = fbb.CreateVector(zeros);
  return finish(fbb, mesh::Payload::RehearsalMark,
                mesh::CreateRehearsalMark(fbb, mark.round, mark.index, p).Union());
}

namespace {

// The values of a ring part: its leading values that are bf16s already as bf16, the rest as fp32
// (core/collective/ring_wire.h).
struct RingValues {
  flatbuffers::Offset<flatbuffers::Vector<float>> fp32;
  flatbuffers::Offset<flatbuffers::Vector<uint16_t>> bf16;
};
size_t ring_part_capacity(const std::vector<uint32_t>& members, int64_t n) {
  return 1024 + members.size() * 4 + size_t(std::max<int64_t>(n, 0)) * 4;
}

RingValues ring_values(flatbuffers::FlatBufferBuilder& fbb, const float* values, int64_t n) {
  check_floats(n, "all-reduce values");
  const int64_t body = core::bf16_prefix(values, n);
  RingValues v;
  if (body < n || n == 0) v.fp32 = fbb.CreateVector(values + body, size_t(n - body));
  if (body > 0) v.bf16 = fbb.CreateVector(core::bf16_bits(values, body));
  return v;
}

}  // namespace

std::vector<float> RingPayload::floats() const {
  std::vector<float> out(bf16_size + values.size);
  if (bf16) core::floats_from_bf16(bf16, int64_t(bf16_size), out.data());
  std::copy(values.data, values.data + values.size, out.data() + bf16_size);
  return out;
}

core::RingPart RingPayload::part(std::shared_ptr<const std::vector<uint8_t>> bytes) const {
  constexpr size_t kEnvelopeBytes = 64 * 1024;  // the members, the tables: far less in practice
  if (bf16 || !bytes || bytes->size() > values.size * sizeof(float) + kEnvelopeBytes)
    return floats();
  return core::RingPart(std::move(bytes), values.data, int64_t(values.size));
}

PayloadBytes ring_segment_payload(int64_t round, const std::vector<uint32_t>& members,
                                  int32_t step, const float* values, int64_t n) {
  flatbuffers::FlatBufferBuilder fbb(ring_part_capacity(members, n));
  const RingValues v = ring_values(fbb, values, n);
  const auto m = fbb.CreateVector(members);
  return finish(fbb, mesh::Payload::RingSegment,
                mesh::CreateRingSegment(fbb, round, m, step, v.fp32, v.bf16).Union());
}

PayloadBytes ring_result_payload(int64_t round, const std::vector<uint32_t>& members,
                                 const float* values, int64_t n) {
  flatbuffers::FlatBufferBuilder fbb(ring_part_capacity(members, n));
  const RingValues v = ring_values(fbb, values, n);
  const auto m = fbb.CreateVector(members);
  return finish(fbb, mesh::Payload::RingResult,
                mesh::CreateRingResult(fbb, round, m, v.fp32, v.bf16).Union());
}

namespace {

template <typename Ring>
void read_ring(const Ring& r, int32_t step, MeshPayloadIn::Kind kind, MeshPayloadIn& in) {
  const auto* members = r.members();
  if (!members || members->size() < 2 || members->size() > kMaxRingMembers) {
    in.error = "an all-reduce part of a ring of " +
               std::to_string(members ? members->size() : 0) + " members (2 to " +
               std::to_string(kMaxRingMembers) + " expected)";
    return;
  }
  in.ring.round = r.round();
  in.ring.members.assign(members->begin(), members->end());
  in.ring.step = step;
  in.ring.values = view(r.values());
  if (const auto* b = r.bf16_values()) {
    in.ring.bf16 = b->data();
    in.ring.bf16_size = b->size();
  }
  in.kind = kind;
}

}  // namespace

MeshPayloadIn read_mesh_payload(const uint8_t* data, size_t size) {
  if (!data || size == 0 || size > kMaxPayloadBytes)
    return malformed("a mesh payload of " + std::to_string(size) + " bytes");
  flatbuffers::Verifier verifier(data, size, /*max_depth=*/8, /*max_tables=*/16);
  if (!mesh::VerifyMeshPayloadBuffer(verifier))
    return malformed("a mesh payload of " + std::to_string(size) +
                     " bytes that is not a valid MeshPayload");
  const mesh::MeshPayload& p = *mesh::GetMeshPayload(data);
  MeshPayloadIn in;
  if (const auto* u = p.payload_as_Update()) {
    read_update(*u, in);
  } else if (const auto* e = p.payload_as_EpochEnd()) {
    read_epoch_end(*e, in);
  } else if (const auto* s = p.payload_as_Snapshot()) {
    in.snapshot = {s->for_node(),       s->epoch(),          s->tau(),
                   view(s->params()),   view(s->state()),    s->applied_messages(),
                   s->applied_digest(), view(s->outer_momentum())};
    in.kind = MeshPayloadIn::Kind::kSnapshot;
  } else if (const auto* q = p.payload_as_Parameters()) {
    in.parameters = {q->round(), view(q->values())};
    in.kind = MeshPayloadIn::Kind::kParameters;
  } else if (const auto* g = p.payload_as_PseudoGradient()) {
    read_pseudo_gradient(*g, in);
  } else if (const auto* l = p.payload_as_LinkProbe()) {
    in.probe_id = l->id();
    in.kind = MeshPayloadIn::Kind::kLinkProbe;
  } else if (const auto* a = p.payload_as_LinkProbeAck()) {
    in.probe_id = a->id();
    in.kind = MeshPayloadIn::Kind::kLinkProbeAck;
  } else if (const auto* c = p.payload_as_SyncChoice()) {
    read_sync_choice(*c, in);
  } else if (p.payload_as_ReplicaDigest()) {
    in.error = "a replica digest, which this release no longer uses (its replicas' check is a "
               "ring round): an earlier release's";
  } else if (const auto* r = p.payload_as_RehearsalPlan()) {
    read_rehearsal_plan(*r, in);
  } else if (const auto* m = p.payload_as_RehearsalMark()) {
    read_rehearsal_mark(*m, in);
  } else if (const auto* g = p.payload_as_RingSegment()) {
    if (g->step() < 0)
      in.error = "an all-reduce part numbered " + std::to_string(g->step());
    else
      read_ring(*g, g->step(), MeshPayloadIn::Kind::kRingSegment, in);
  } else if (const auto* r = p.payload_as_RingResult()) {
    read_ring(*r, -1, MeshPayloadIn::Kind::kRingResult, in);
  } else if (const auto* f = p.payload_as_ForwardedUpdates()) {
    read_forwarded(*f, in);
  } else {
    in.error = "a mesh payload of an unknown kind";  // a newer release, or no body at all
  }
  return in;
}

}  // namespace dtrain::daemon
