#pragma once
// Dense ring all-reduce (docs/architecture/core.md, "Dense all-reduce"): the sum of every rank's
// buffer on every rank, as reduce-scatter then all-gather around a ring of R ranks. The buffer is
// cut into R segments; in R - 1 steps each rank passes one segment to the next rank and adds the
// one it receives from the previous, after which rank r holds the whole sum of segment r + 1; in
// R - 1 more steps those sums go round once. Each rank sends and receives 2 (R - 1) / R of the
// buffer, which is bandwidth-optimal. Every segment's sum is made on one rank and copied to the
// others, so all ranks end with the same bits.
//
// Each step's segment goes as parts of at most RingWire::part_values values, and a part is passed
// on as soon as it has arrived and been added: the ring is a pipeline, so the link is not idle
// while a whole segment is received, summed and sent again at each step boundary (gloo and NCCL
// pipeline their rings so; docs/architecture/core.md, "Dense all-reduce").
//
// The links are a seam (RingLinks): the mesh sends segments between daemons, tests pass them
// between threads.
#include <cstdint>
#include <vector>

#include "core/collective/ring_part.h"
#include "core/collective/ring_wire.h"

namespace dtrain::core {

// Elements [begin, end) of the buffer: segment `index` of `ranks`, the first n % ranks one
// element longer (a buffer shorter than the ring leaves some segments empty).
struct RingSegment {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
RingSegment ring_segment(int64_t n, int ranks, int index);

// Parts a step's segment is cut into: enough for parts of at most `part_values` values (the
// largest segment's), at most ring_max_parts(ranks). The same on every rank for the same n.
int ring_parts(int64_t n, int ranks, int64_t part_values);
// A round's parts over its 2 (R - 1) steps: at most kMaxRingPartsARound, so that what a
// receiver holds early (the rest of a round, the next round's first steps, a round abandoned
// for a lost node and its attempt again) stays within RingRounds::kMaxHeldSegments. Rings of
// more than 65 ranks send one part a step, their segments whole, and hold as many as before.
constexpr int kMaxRingPartsARound = 128;
int ring_max_parts(int ranks);

// What carries the parts to the next rank and brings the previous rank's. Part p is part
// p % P of step p / P, P = ring_parts(...): parts are numbered in the order they are sent.
class RingLinks {
 public:
  virtual ~RingLinks() = default;
  // Part `part` of the round: `values` to the next rank.
  virtual void send_next(int part, const float* values, int64_t n) = 0;
  // Part `part` from the previous rank (throws when it cannot come: a lost rank).
  virtual RingPart receive_previous(int part) = 0;
};

// Sums `values` (n floats, the same n on every rank) over the ring in place, each part rounded
// for `wire` before it is sent (core/collective/ring_wire.h). Throws UserError naming the step
// and part when a received part is not the size the plan says (nothing is read past what
// arrived).
void ring_allreduce(float* values, int64_t n, int rank, int ranks, RingLinks& links,
                    const RingWire& wire = {});

}  // namespace dtrain::core
