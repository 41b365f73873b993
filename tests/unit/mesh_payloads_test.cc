// Mesh payloads between nodes (daemon/protocol/mesh_payloads.h): every kind survives the trip
// through bytes; bytes that are not a payload are refused by name, never read; and an update
// that could write outside the model is refused by core::check_message.
#include <catch2/catch.hpp>

#include <limits>

#include "core/codec/message_check.h"
#include "core/codec/reference_codec.h"
#include "daemon/protocol/mesh_payloads.h"
#include "daemon/protocol/mesh_payloads_generated.h"

using namespace dtrain::core;
using namespace dtrain::daemon;

namespace {

EncodedMessage encode_some(int64_t n, float fill_every, float tau) {
  std::vector<float> u(n, 0.f), r(n, 0.f);
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(fill_every)) u[i] = (i % 3 ? 1.f : -1.f);
  EncodedMessage m = reference_encode(r.data(), u.data(), n, tau, 0.f, nullptr);
  m.id = 77;
  m.origin = 5;
  return m;
}

// A payload's views (floats, parts) point into its bytes: every payload read is kept alive for
// the test's run, so that a view of a temporary's bytes stays readable.
MeshPayloadIn read(const PayloadBytes& b) {
  static std::vector<PayloadBytes> kept;
  kept.push_back(b);
  return read_mesh_payload(b->data(), b->size());
}

// The update after a trip through the mesh, checked against a model of `params` parameters.
bool applies(const EncodedMessage& m, int64_t params, std::string* why = nullptr) {
  const MeshPayloadIn in = read(update_payload(m));
  REQUIRE(in.kind == MeshPayloadIn::Kind::kUpdate);
  std::string error;
  const bool ok = check_message(in.update, params, error);
  if (why) *why = error;
  return ok;
}

}  // namespace

TEST_CASE("updates survive the trip through the mesh with their position", "[mesh]") {
  for (float every : {1.f, 3.f, 50.f}) {
    EncodedMessage m = encode_some(1000, every, 0.5f);
    m.param_offset = 24;
    m.epoch = 3;
    m.batch = -1;
    const MeshPayloadIn in = read(update_payload(m));
    REQUIRE(in.kind == MeshPayloadIn::Kind::kUpdate);
    const EncodedMessage& back = in.update;
    CHECK(back.id == m.id);
    CHECK(back.origin == m.origin);
    CHECK(back.encoding == m.encoding);
    CHECK(back.tau == m.tau);
    CHECK(back.param_offset == 24);
    CHECK(back.length == m.length);
    CHECK(back.count == m.count);
    CHECK(back.words == m.words);
    CHECK(back.epoch == 3);
    CHECK(back.batch == -1);
    std::string error;
    CHECK(check_message(back, 1024, error));
  }
}

TEST_CASE("updates that could write outside the model are refused", "[mesh]") {
  const EncodedMessage sparse = encode_some(1000, 50.f, 0.5f);
  const EncodedMessage bitmap = encode_some(1000, 1.f, 0.5f);
  REQUIRE(sparse.encoding == Encoding::kSparse);
  REQUIRE(bitmap.encoding == Encoding::kBitmap);
  std::string why;
  // A model smaller than the segment.
  CHECK_FALSE(applies(sparse, 999, &why));
  CHECK(why.find("outside the model") != std::string::npos);
  // Offsets past the end, negative, or overflowing; lengths that are not a segment.
  for (int64_t offset : {int64_t(1), int64_t(-1), std::numeric_limits<int64_t>::max()}) {
    EncodedMessage m = sparse;
    m.param_offset = offset;
    CHECK_FALSE(applies(m, 1000));
  }
  for (int64_t length : {int64_t(0), int64_t(-5), kMaxSegmentLength + 1}) {
    EncodedMessage m = sparse;
    m.length = length;
    CHECK_FALSE(applies(m, std::numeric_limits<int64_t>::max()));
  }
  // A sparse index beyond the segment.
  EncodedMessage m = sparse;
  m.words[0] = 1000;
  CHECK_FALSE(applies(m, 1000, &why));
  CHECK(why.find("sparse index") != std::string::npos);
  // Word count that disagrees with the count, or with the bitmap length; a negative count.
  m = sparse;
  m.count += 1;
  CHECK_FALSE(applies(m, 1000));
  m = sparse;
  m.count = -1;
  CHECK_FALSE(applies(m, 1000));
  m = bitmap;
  m.words.pop_back();
  CHECK_FALSE(applies(m, 1000));
  // Bitmap bits past the end of a segment of 1000 (= 62.5 words).
  m = bitmap;
  m.words.back() |= 1u << 30;
  CHECK_FALSE(applies(m, 1000, &why));
  CHECK(why.find("past the end") != std::string::npos);
  // Unknown encoding, and tau that is not a positive number.
  m = sparse;
  m.encoding = static_cast<Encoding>(7);
  CHECK_FALSE(applies(m, 1000, &why));
  CHECK(why.find("unknown encoding") != std::string::npos);
  for (float tau : {0.f, -1.f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    m = sparse;
    m.tau = tau;
    CHECK_FALSE(applies(m, 1000));
  }
}

TEST_CASE("epoch ends, snapshots and parameter rounds survive the trip", "[mesh]") {
  const MeshPayloadIn e = read(epoch_end_payload({4, 1, 123, 2.5, 3, {7, 9}}));
  REQUIRE(e.kind == MeshPayloadIn::Kind::kEpochEnd);
  CHECK(e.epoch_end.epoch == 4);
  CHECK(e.epoch_end.phase == 1);
  CHECK(e.epoch_end.published == 123);
  CHECK(e.epoch_end.tau_sum == 2.5);
  CHECK(e.epoch_end.workers == 3);
  CHECK(e.epoch_end.joiners == std::vector<uint32_t>{7, 9});
  CHECK(e.epoch_end.state_sum.empty());
  // The second barrier's batch-norm statistics, summed over the node's workers.
  const MeshPayloadIn st = read(epoch_end_payload({4, 1, 0, 0.0, 0, {}, {0.5, -1.25, 3e9}, 2}));
  REQUIRE(st.kind == MeshPayloadIn::Kind::kEpochEnd);
  CHECK(st.epoch_end.state_sum == std::vector<double>{0.5, -1.25, 3e9});
  CHECK(st.epoch_end.state_workers == 2);
  CHECK(read(epoch_end_payload({4, 1, 0, 0.0, 0, {}, {1.0}, -1})).kind ==
        MeshPayloadIn::Kind::kMalformed);  // negative workers
  // The first barrier's last minibatch heard from each of the job's workers.
  const MeshPayloadIn heard = read(epoch_end_payload({4, 0, 9, 1.0, 1, {}, {}, 0, {-1, 17, 0}}));
  REQUIRE(heard.kind == MeshPayloadIn::Kind::kEpochEnd);
  CHECK(heard.epoch_end.last_batches == std::vector<int64_t>{-1, 17, 0});
  CHECK(e.epoch_end.last_batches.empty());
  const MeshPayloadIn counted =
      read(epoch_end_payload({4, 0, 9, 1.0, 1, {}, {}, 0, {-1, 17}, {0, 40}}));
  CHECK(counted.epoch_end.heard_updates == std::vector<int64_t>{0, 40});
  // A lost worker's updates that a survivor forwards to one that missed them.
  EncodedMessage lost = encode_some(1000, 50.f, 0.5f);
  lost.origin = 5;
  lost.id = 77;
  lost.batch = 12;
  const MeshPayloadIn f = read(forwarded_payload(
      {2, 3, 5, 11, true, {}}, {std::make_shared<const EncodedMessage>(lost)}));
  REQUIRE(f.kind == MeshPayloadIn::Kind::kForwarded);
  CHECK(f.forwarded.for_node == 2);
  CHECK(f.forwarded.epoch == 3);
  CHECK(f.forwarded.worker == 5);
  CHECK(f.forwarded.after == 11);
  CHECK(f.forwarded.complete);
  REQUIRE(f.forwarded.updates.size() == 1);
  CHECK(f.forwarded.updates[0].id == 77);
  CHECK(f.forwarded.updates[0].batch == 12);
  CHECK(f.forwarded.updates[0].words == lost.words);
  CHECK_FALSE(read(forwarded_payload({2, 3, 5, 11, false, {}}, {})).forwarded.complete);

  const std::vector<float> params{1.f, -2.f, 3.5f}, state{0.25f};
  const PayloadBytes sb = snapshot_payload(8, 2, 0.125f, params.data(), 3, state.data(), 1);
  const MeshPayloadIn s = read(sb);
  REQUIRE(s.kind == MeshPayloadIn::Kind::kSnapshot);
  CHECK(s.snapshot.for_node == 8);
  CHECK(s.snapshot.epoch == 2);
  CHECK(s.snapshot.tau == 0.125f);
  CHECK(std::vector<float>(s.snapshot.params.data, s.snapshot.params.data + 3) == params);
  REQUIRE(s.snapshot.state.size == 1);
  CHECK(s.snapshot.state.data[0] == 0.25f);
  CHECK(s.snapshot.outer_momentum.size == 0);
  const MeshPayloadIn with_momentum =
      read(snapshot_payload(8, 2, 0.125f, params.data(), 3, nullptr, 0, 0, 0, {0.5f, -1.f, 2.f}));
  REQUIRE(with_momentum.snapshot.outer_momentum.size == 3);
  CHECK(with_momentum.snapshot.outer_momentum.data[1] == -1.f);

  // A round's pseudo-gradient, in levels.
  dtrain::core::EncodedMessage level;
  level.tau = 0.5f;
  level.length = 40;
  level.count = 1;
  level.words = {7u | dtrain::core::kSparseSignBit};
  const MeshPayloadIn g = read(pseudo_gradient_payload(6, 2, {level, level}));
  REQUIRE(g.kind == MeshPayloadIn::Kind::kPseudoGradient);
  CHECK(g.pseudo_gradient.round == 6);
  CHECK(g.pseudo_gradient.workers == 2);
  REQUIRE(g.pseudo_gradient.levels.size() == 2);
  CHECK(g.pseudo_gradient.levels[1].words == level.words);
  const MeshPayloadIn none = read(pseudo_gradient_payload(6, 2, {}));
  CHECK(none.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK_THAT(none.error, Catch::Contains("0 levels"));
  const MeshPayloadIn too_many = read(pseudo_gradient_payload(6, 2, std::vector<dtrain::core::EncodedMessage>(9, level)));
  CHECK(too_many.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK(read(pseudo_gradient_payload(6, 0, {level})).kind == MeshPayloadIn::Kind::kMalformed);

  const MeshPayloadIn p = read(parameters_payload(11, params.data(), 3));
  REQUIRE(p.kind == MeshPayloadIn::Kind::kParameters);
  CHECK(p.parameters.round == 11);
  CHECK(std::vector<float>(p.parameters.values.data, p.parameters.values.data + 3) == params);
}

TEST_CASE("training.sync: auto's probes, answers and choice survive the trip", "[mesh]") {
  const MeshPayloadIn probe = read(link_probe_payload(7, 1000));
  REQUIRE(probe.kind == MeshPayloadIn::Kind::kLinkProbe);
  CHECK(probe.probe_id == 7);
  CHECK(link_probe_payload(7, 1000)->size() > 1000);  // the padding travels
  const MeshPayloadIn ack = read(link_probe_ack_payload(7));
  REQUIRE(ack.kind == MeshPayloadIn::Kind::kLinkProbeAck);
  CHECK(ack.probe_id == 7);
  const MeshPayloadIn choice = read(sync_choice_payload({20, "RTT 50 ms"}));
  REQUIRE(choice.kind == MeshPayloadIn::Kind::kSyncChoice);
  CHECK(choice.sync_choice.local_steps == 20);
  CHECK(choice.sync_choice.reason == "RTT 50 ms");
  CHECK_FALSE(choice.sync_choice.allreduce);
  const MeshPayloadIn dense = read(sync_choice_payload({0, "10 Gbit/s", true}));
  REQUIRE(dense.kind == MeshPayloadIn::Kind::kSyncChoice);
  CHECK(dense.sync_choice.allreduce);  // mode auto's choice
  CHECK(read(sync_choice_payload({20, "", true})).kind == MeshPayloadIn::Kind::kMalformed);
  // A reason past the bound is cut when built; a forged one, or a wild H, is refused.
  CHECK(read(sync_choice_payload({0, std::string(5000, 'x')})).sync_choice.reason.size() ==
        kMaxReasonBytes);
  flatbuffers::FlatBufferBuilder fbb;
  const auto reason = fbb.CreateString(std::string(kMaxReasonBytes + 1, 'x'));
  fbb.Finish(mesh::CreateMeshPayload(fbb, mesh::Payload::SyncChoice,
                                     mesh::CreateSyncChoice(fbb, 10, reason).Union()));
  const MeshPayloadIn forged = read_mesh_payload(fbb.GetBufferPointer(), fbb.GetSize());
  CHECK(forged.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK_THAT(forged.error, Catch::Contains("1025-byte reason"));
  CHECK(read(sync_choice_payload({-1, ""})).kind == MeshPayloadIn::Kind::kMalformed);
  CHECK(read(sync_choice_payload({kMaxChosenSteps + 1, ""})).kind ==
        MeshPayloadIn::Kind::kMalformed);
}

TEST_CASE("an earlier release's replica digest is refused, naming it", "[mesh]") {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<uint8_t> digest_bytes(32, 0x5A);
  const auto digest = fbb.CreateVector(digest_bytes);
  fbb.Finish(mesh::CreateMeshPayload(fbb, mesh::Payload::ReplicaDigest,
                                     mesh::CreateReplicaDigest(fbb, 3, digest).Union()));
  const MeshPayloadIn old = read_mesh_payload(fbb.GetBufferPointer(), fbb.GetSize());
  CHECK(old.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK_THAT(old.error, Catch::Contains("a replica digest, which this release no longer uses"));
}

TEST_CASE("a rehearsal's plan and marks survive the trip; wild ones are refused", "[mesh]") {
  const MeshPayloadIn plan = read(rehearsal_plan_payload({40, 9400, 177000}));
  REQUIRE(plan.kind == MeshPayloadIn::Kind::kRehearsalPlan);
  CHECK(plan.rehearsal_plan.steps == 40);
  CHECK(plan.rehearsal_plan.step_bytes == 9400);
  CHECK(plan.rehearsal_plan.round_bytes == 177000);
  CHECK(plan.rehearsal_plan.ring_steps == 0);
  CHECK(read(rehearsal_plan_payload({40, 9400, 177000, 24})).rehearsal_plan.ring_steps == 24);
  const MeshPayloadIn mark = read(rehearsal_mark_payload({true, 1}, 5000));
  REQUIRE(mark.kind == MeshPayloadIn::Kind::kRehearsalMark);
  CHECK(mark.rehearsal_mark.round);
  CHECK(mark.rehearsal_mark.index == 1);
  CHECK(rehearsal_mark_payload({false, 3}, 5000)->size() > 5000);  // the padding travels
  // Plans that would have a node step for ever, or send more than a round's largest probe.
  const RehearsalPlanPayload wild[] = {{kMinRehearsalSteps - 1, 1, 1},
                                       {kMaxRehearsalSteps + 1, 1, 1},
                                       {8, kMaxRehearsalBytes + 1, 1},
                                       {8, 1, kMaxRehearsalBytes + 1},
                                       {8, 1, 1, kMaxRehearsalSteps + 1},
                                       {8, 1, 1, -1}};
  for (const RehearsalPlanPayload& p : wild) {
    const MeshPayloadIn bad = read(rehearsal_plan_payload(p));
    CHECK(bad.kind == MeshPayloadIn::Kind::kMalformed);
    CHECK_THAT(bad.error, Catch::Contains("a rehearsal plan of"));
  }
  // Marks past the plan's bounds.
  for (const RehearsalMarkPayload& m : {RehearsalMarkPayload{false, -1},
                                        RehearsalMarkPayload{false, kMaxRehearsalSteps},
                                        RehearsalMarkPayload{true, kRehearsalRounds}}) {
    const MeshPayloadIn bad = read(rehearsal_mark_payload(m, 0));
    CHECK(bad.kind == MeshPayloadIn::Kind::kMalformed);
    CHECK_THAT(bad.error, Catch::Contains("a rehearsal mark of"));
  }
}

TEST_CASE("an all-reduce part survives the trip", "[mesh]") {
  const std::vector<float> values = {1.1f, -2.25f, 3.f};  // 1.1 is no bf16: sent as fp32
  const MeshPayloadIn part =
      read(ring_segment_payload((int64_t(2) << 32) + 7, {4, 9, 1}, 3, values.data(), 3));
  REQUIRE(part.kind == MeshPayloadIn::Kind::kRingSegment);
  CHECK(part.ring.round == (int64_t(2) << 32) + 7);
  CHECK(part.ring.members == std::vector<uint32_t>{4, 9, 1});
  CHECK(part.ring.step == 3);
  REQUIRE(part.ring.values.size == 3);
  CHECK(part.ring.bf16 == nullptr);
  CHECK(part.ring.floats() == values);
  // Every value a bf16 (a ring of training.precision: bf16 rounds them so): 2 bytes each.
  std::vector<float> halves(1000);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = float(int(i % 256) - 128) / 64.f;
  const PayloadBytes small = ring_segment_payload(1, {1, 2}, 0, halves.data(), 1000);
  CHECK(small->size() < 1000 * 2 + 128);
  const MeshPayloadIn packed = read(small);
  REQUIRE(packed.kind == MeshPayloadIn::Kind::kRingSegment);
  CHECK(packed.ring.bf16_size == 1000);
  CHECK(packed.ring.values.size == 0);
  CHECK(packed.ring.floats() == halves);
  CHECK(read(ring_result_payload(1, {1, 2}, halves.data(), 1000)).ring.floats() == halves);
  {  // bf16 values, then two that are not (a step's exact counts): only those go as fp32
    std::vector<float> counted = halves;
    counted.push_back(3001.f);
    counted.push_back(0.3f);
    const PayloadBytes mixed = ring_segment_payload(1, {1, 2}, 0, counted.data(), 1002);
    CHECK(mixed->size() < 1000 * 2 + 2 * 4 + 128);
    const MeshPayloadIn both = read(mixed);
    REQUIRE(both.kind == MeshPayloadIn::Kind::kRingSegment);
    CHECK(both.ring.bf16_size == 1000);
    CHECK(both.ring.values.size == 2);
    CHECK(both.ring.floats() == counted);
  }
}

TEST_CASE("an all-fp32 ring part is read in place and keeps its bytes; bf16 ones are converted",
          "[mesh]") {
  std::vector<float> values(5000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * float(i) + 0.01f;  // no bf16s
  auto bytes = std::make_shared<const std::vector<uint8_t>>(
      *ring_segment_payload(3, {1, 2}, 1, values.data(), int64_t(values.size())));
  const MeshPayloadIn in = read_mesh_payload(bytes->data(), bytes->size());
  REQUIRE(in.kind == MeshPayloadIn::Kind::kRingSegment);
  const std::weak_ptr<const std::vector<uint8_t>> watch = bytes;
  const uint8_t* begin = bytes->data();
  const uint8_t* end = begin + bytes->size();
  dtrain::core::RingPart part = in.ring.part(std::move(bytes));
  REQUIRE(part.size() == int64_t(values.size()));
  // The values are the message's own bytes, not a copy of them.
  const auto* at = reinterpret_cast<const uint8_t*>(part.data());
  CHECK(at >= begin);
  CHECK(at + values.size() * 4 <= end);
  CHECK(std::equal(values.begin(), values.end(), part.data()));
  // The part alone keeps the message alive, through a move too.
  CHECK_FALSE(watch.expired());
  dtrain::core::RingPart moved = std::move(part);
  CHECK(moved.data() == reinterpret_cast<const float*>(at));
  CHECK_FALSE(watch.expired());
  moved = dtrain::core::RingPart();
  CHECK(watch.expired());

  // A message padded far past its values (bytes nothing refers to, which the verifier allows) is
  // not kept: a held part must not pin more than its values.
  flatbuffers::FlatBufferBuilder fbb;
  fbb.CreateVector(std::vector<uint8_t>(size_t(1) << 20, 0x5A));  // the padding
  const auto padded_values = fbb.CreateVector(values.data(), 3);
  const auto members = fbb.CreateVector(std::vector<uint32_t>{1, 2});
  fbb.Finish(mesh::CreateMeshPayload(
      fbb, mesh::Payload::RingSegment,
      mesh::CreateRingSegment(fbb, 3, members, 1, padded_values).Union()));
  auto padded = std::make_shared<const std::vector<uint8_t>>(
      fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  REQUIRE(padded->size() > (size_t(1) << 20));
  const MeshPayloadIn padded_in = read_mesh_payload(padded->data(), padded->size());
  REQUIRE(padded_in.kind == MeshPayloadIn::Kind::kRingSegment);
  const std::weak_ptr<const std::vector<uint8_t>> padded_watch = padded;
  const dtrain::core::RingPart copied = padded_in.ring.part(std::move(padded));
  CHECK(padded_watch.expired());
  CHECK(std::equal(values.begin(), values.begin() + 3, copied.data()));

  // bf16 values cannot be read in place: they come converted, the bytes not kept.
  const std::vector<float> halves = {1.f, -2.f, 0.5f};
  auto packed = std::make_shared<const std::vector<uint8_t>>(
      *ring_segment_payload(3, {1, 2}, 1, halves.data(), 3));
  const MeshPayloadIn packed_in = read_mesh_payload(packed->data(), packed->size());
  REQUIRE(packed_in.ring.bf16_size == 3);
  const std::weak_ptr<const std::vector<uint8_t>> packed_watch = packed;
  const dtrain::core::RingPart converted = packed_in.ring.part(std::move(packed));
  CHECK(std::vector<float>(converted.data(), converted.data() + 3) == halves);
  CHECK(packed_watch.expired());
}

TEST_CASE("a step's all-reduce result survives the trip; odd rings are refused", "[mesh]") {
  const std::vector<float> values = {1.1f, -2.25f, 3.f};
  const MeshPayloadIn result = read(ring_result_payload(11, {1, 2}, values.data(), 3));
  REQUIRE(result.kind == MeshPayloadIn::Kind::kRingResult);
  CHECK(result.ring.step == -1);
  CHECK(result.ring.members == std::vector<uint32_t>{1, 2});
  // A ring of one member (nothing to sum), of more members than a cluster has, a negative part.
  const std::vector<uint32_t> huge(kMaxRingMembers + 1, 5);
  CHECK_THAT(read(ring_segment_payload(1, {3}, 0, values.data(), 3)).error,
             Catch::Contains("a ring of 1 members"));
  CHECK_THAT(read(ring_result_payload(1, huge, values.data(), 3)).error,
             Catch::Contains("a ring of 4097 members"));
  const MeshPayloadIn negative = read(ring_segment_payload(1, {1, 2}, -2, values.data(), 3));
  CHECK(negative.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK_THAT(negative.error, Catch::Contains("an all-reduce part numbered -2"));
}

TEST_CASE("bytes that are not a mesh payload are refused by name", "[mesh]") {
  CHECK(read_mesh_payload(nullptr, 0).kind == MeshPayloadIn::Kind::kMalformed);
  const std::vector<uint8_t> garbage(64, 0xA5);
  const MeshPayloadIn g = read_mesh_payload(garbage.data(), garbage.size());
  CHECK(g.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK(g.error.find("not a valid MeshPayload") != std::string::npos);
  // Every truncation of a real update.
  const PayloadBytes u = update_payload(encode_some(1000, 50.f, 0.5f));
  for (size_t n = 0; n < u->size(); ++n)
    CHECK(read_mesh_payload(u->data(), n).kind == MeshPayloadIn::Kind::kMalformed);
  // A union type without its table, and more joiners than a cluster has nodes.
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(mesh::CreateMeshPayload(fbb, mesh::Payload::Update, 0));
  CHECK(read_mesh_payload(fbb.GetBufferPointer(), fbb.GetSize()).kind ==
        MeshPayloadIn::Kind::kMalformed);
  EpochEndPayload crowded;
  crowded.joiners.assign(kMaxJoiners + 1, 1);
  const MeshPayloadIn c = read(epoch_end_payload(crowded));
  CHECK(c.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK(c.error.find("joiners") != std::string::npos);
  // Last minibatches for more workers than a job has, or past any epoch's (a takeover would
  // start beyond its end), or before the first.
  EpochEndPayload heard;
  heard.last_batches.assign(kMaxLastBatches + 1, 0);
  CHECK(read(epoch_end_payload(heard)).error.find("65537 workers") != std::string::npos);
  for (int64_t batch : {int64_t(-2), kMaxLastBatch + 1, std::numeric_limits<int64_t>::max()}) {
    heard.last_batches = {0, batch};
    const MeshPayloadIn far = read(epoch_end_payload(heard));
    CHECK(far.kind == MeshPayloadIn::Kind::kMalformed);
    CHECK(far.error.find(std::to_string(batch) + " among its last minibatches") !=
          std::string::npos);
  }
  heard.last_batches.clear();
  heard.heard_updates = {3, -1};  // a count below none
  CHECK(read(epoch_end_payload(heard)).error.find("-1 among its counts of updates heard") !=
        std::string::npos);
  // More forwarded updates than a survivor keeps.
  std::vector<SharedUpdate> many(kMaxForwardedUpdates + 1,
                                 std::make_shared<const EncodedMessage>(
                                     encode_some(100, 50.f, 0.5f)));
  const MeshPayloadIn crowd = read(forwarded_payload({2, 0, 5, 1, true, {}}, many));
  CHECK(crowd.kind == MeshPayloadIn::Kind::kMalformed);
  CHECK(crowd.error.find("9 of them (at most 8)") != std::string::npos);
}
