#pragma once
// Dense ring all-reduce (docs/architecture/core.md, "Dense all-reduce"): the sum of every rank's
// buffer on every rank, as reduce-scatter then all-gather around a ring of R ranks. The buffer is
// cut into R segments; in R - 1 steps each rank passes one segment to the next rank and adds the
// one it receives from the previous, after which rank r holds the whole sum of segment r + 1; in
// R - 1 more steps those sums go round once. Each rank sends and receives 2 (R - 1) / R of the
// buffer, which is bandwidth-optimal. Every segment's sum is made on one rank and copied to the
// others, so all ranks end with the same bits.
//
// The links are a seam (RingLinks): the mesh sends segments between daemons, tests pass them
// between threads.
#include <cstdint>
#include <vector>

#include "core/collective/ring_wire.h"

namespace dtrain::core {

// Elements [begin, end) of the buffer: segment `index` of `ranks`, the first n % ranks one
// element longer (a buffer shorter than the ring leaves some segments empty).
struct RingSegment {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
RingSegment ring_segment(int64_t n, int ranks, int index);

// What carries one step's segment to the next rank and brings the previous rank's.
class RingLinks {
 public:
  virtual ~RingLinks() = default;
  // Step `step` of 2 (R - 1): `values` to the next rank.
  virtual void send_next(int step, const float* values, int64_t n) = 0;
  // Step `step`'s segment from the previous rank (throws when it cannot come: a lost rank).
  virtual std::vector<float> receive_previous(int step) = 0;
};

// Sums `values` (n floats, the same n on every rank) over the ring in place, each part rounded
// for `wire` before it is sent (core/collective/ring_wire.h). Throws UserError naming the step
// when a received segment is not the size the plan says (nothing is read past what arrived).
void ring_allreduce(float* values, int64_t n, int rank, int ranks, RingLinks& links,
                    const RingWire& wire = {});

}  // namespace dtrain::core
