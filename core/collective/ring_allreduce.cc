#include "core/collective/ring_allreduce.h"

#include <algorithm>
#include <string>

#include "core/util/error.h"

namespace dtrain::core {
namespace {

int wrap(int i, int ranks) { return ((i % ranks) + ranks) % ranks; }

std::vector<float> received(RingLinks& links, int step, const RingSegment& s) {
  std::vector<float> in = links.receive_previous(step);
  if (int64_t(in.size()) != s.size())
    throw UserError("ring all-reduce step " + std::to_string(step + 1) + ": a segment of " +
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

void ring_allreduce(float* values, int64_t n, int rank, int ranks, RingLinks& links,
                    const RingWire& wire) {
  if (ranks <= 1) return;
  // Reduce-scatter: at step s, segment rank - s goes on; rank - s - 1 comes in and is added.
  for (int s = 0; s < ranks - 1; ++s) {
    const RingSegment out = ring_segment(n, ranks, wrap(rank - s, ranks));
    round_for_wire(values, n, out.begin, out.end, wire);  // a partial sum, not used here again
    links.send_next(s, values + out.begin, out.size());
    const RingSegment in = ring_segment(n, ranks, wrap(rank - s - 1, ranks));
    const std::vector<float> part = received(links, s, in);
    for (int64_t i = 0; i < in.size(); ++i) values[in.begin + i] += part[size_t(i)];
  }
  // All-gather: this rank's whole sum (segment rank + 1) goes round; each one arriving is copied.
  for (int s = 0; s < ranks - 1; ++s) {
    const int step = ranks - 1 + s;
    const RingSegment out = ring_segment(n, ranks, wrap(rank + 1 - s, ranks));
    // The first send rounds this rank's whole sum, kept as sent; later ones pass on copies of
    // parts that are bf16 already.
    round_for_wire(values, n, out.begin, out.end, wire);
    links.send_next(step, values + out.begin, out.size());
    const RingSegment in = ring_segment(n, ranks, wrap(rank - s, ranks));
    const std::vector<float> part = received(links, step, in);
    std::copy(part.begin(), part.end(), values + in.begin);
  }
}

}  // namespace dtrain::core
