#pragma once
// How a ring all-reduce's values travel (docs/architecture/core.md, "Dense all-reduce"): as fp32,
// or as bf16 for a job of `training.precision: bf16`. With bf16 each rank rounds the values it is
// about to send in place (round to nearest even), so that it keeps exactly what it sent: every
// segment's whole sum is rounded once by the rank that made it, and every rank copies the same
// bits. Values at and past `exact_from` are never rounded (GradientRounds' two counts: a step's
// examples and workers with more must stay exact).
//
// On the wire a part is bf16 when every value in it is a bf16 already (its low 16 bits zero),
// fp32 otherwise: the encoding loses nothing either way, so a receiver needs no setting to read
// it, and a part holding the exact counts goes as fp32 when they are not bf16 themselves.
#include <cstdint>
#include <limits>
#include <vector>

namespace dtrain::core {

struct RingWire {
  bool bf16 = false;
  int64_t exact_from = std::numeric_limits<int64_t>::max();
};

// Rounds values[begin, end) of the buffer to bf16 in place where `wire` says so (none at or past
// exact_from).
void round_for_wire(float* values, int64_t begin, int64_t end, const RingWire& wire);
// Whether every one of the n values is a bf16 (its low 16 bits zero): sent as bf16, it loses
// nothing.
bool all_bf16(const float* values, int64_t n);
// The high 16 bits of each value, and back.
std::vector<uint16_t> bf16_bits(const float* values, int64_t n);
void floats_from_bf16(const uint16_t* bits, int64_t n, float* out);

}  // namespace dtrain::core
