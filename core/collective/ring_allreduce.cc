#include "core/collective/ring_allreduce.h"

#include <algorithm>
#include <string>

#include "core/util/error.h"

namespace dtrain::core {
namespace {

int wrap(int i, int ranks) { return ((i % ranks) + ranks) % ranks; }

// The segment step `step` receives: the reduce-scatter's rank - step - 1, then the all-gather's
// rank - (step - (R - 1)). The one it sends at step + 1 is the same: a part received and added
// (or copied) is passed on at once.
RingSegment received_segment(int64_t n, int rank, int ranks, int step) {
  const int index = step < ranks - 1 ? rank - step - 1 : rank - (step - (ranks - 1));
  return ring_segment(n, ranks, wrap(index, ranks));
}

// Part `part` of `parts` of a segment: cut as ring_segment cuts a buffer.
RingSegment part_of(const RingSegment& segment, int parts, int part) {
  const RingSegment p = ring_segment(segment.size(), parts, part);
  return {segment.begin + p.begin, segment.begin + p.end};
}

RingPart received(RingLinks& links, int step, int parts, int part, const RingSegment& s) {
  RingPart in = links.receive_previous(step * parts + part);
  if (in.size() != s.size())
    throw UserError("ring all-reduce step " + std::to_string(step + 1) + ", part " +
                        std::to_string(part + 1) + " of " + std::to_string(parts) + ": " +
                        std::to_string(in.size()) + " values arrived where " +
                        std::to_string(s.size()) + " were due",
                    "run the same dtrain release and job on every node");
  return in;
}

}  // namespace

RingSegment ring_segment(int64_t n, int ranks, int index) {
  const int64_t base = n / ranks, extra = n % ranks;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

int ring_max_parts(int ranks) {
  return std::max(1, kMaxRingPartsARound / std::max(1, 2 * (ranks - 1)));
}

int ring_parts(int64_t n, int ranks, int64_t part_values) {
  if (ranks <= 1) return 1;
  const int64_t largest = ring_segment(n, ranks, 0).size();
  const int64_t most = std::max<int64_t>(part_values, 1);
  const int64_t wanted = largest / most + (largest % most != 0 ? 1 : 0);
  return int(std::clamp<int64_t>(wanted, 1, ring_max_parts(ranks)));
}

void ring_allreduce(float* values, int64_t n, int rank, int ranks, RingLinks& links,
                    const RingWire& wire) {
  if (ranks <= 1) return;
  const int parts = ring_parts(n, ranks, wire.part_values);
  const int steps = 2 * (ranks - 1);
  // Step 0 sends this rank's own segment (its values rounded in place: the segment's sum comes
  // back from another rank in the all-gather, so they are not used here again).
  const RingSegment own = ring_segment(n, ranks, rank);
  for (int p = 0; p < parts; ++p) {
    const RingSegment out = part_of(own, parts, p);
    round_for_wire(values, n, out.begin, out.end, wire);
    links.send_next(p, values + out.begin, out.size());
  }
  for (int s = 0; s < steps; ++s) {
    const RingSegment segment = received_segment(n, rank, ranks, s);
    for (int p = 0; p < parts; ++p) {
      const RingSegment in = part_of(segment, parts, p);
      const RingPart part = received(links, s, parts, p, in);
      const float* from = part.data();
      if (s < ranks - 1)
        for (int64_t i = 0; i < in.size(); ++i) values[in.begin + i] += from[i];
      else
        std::copy(from, from + part.size(), values + in.begin);
      if (s + 1 == steps) continue;
      // Rounded before it goes on: a partial sum (not used here again), then, at the last
      // reduce-scatter step, this rank's whole sum of the segment, kept as sent; the all-gather
      // passes on copies that are rounded already.
      round_for_wire(values, n, in.begin, in.end, wire);
      links.send_next((s + 1) * parts + p, values + in.begin, in.size());
    }
  }
}

}  // namespace dtrain::core
