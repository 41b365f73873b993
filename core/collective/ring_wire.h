#pragma once
// How a ring all-reduce's values travel (docs/architecture/core.md, "Dense all-reduce"): as fp32,
// or as bf16 for a job of `training.precision: bf16`. With bf16 each rank rounds the values it is
// about to send in place (round to nearest even), so that it keeps exactly what it sent: every
// segment's whole sum is rounded once by the rank that made it, and every rank copies the same
// bits. The last `exact_last` values of every sum are never rounded (GradientRounds' two counts
// that close each bucket of a step: its examples and workers with more must stay exact).
//
// On the wire a part is its longest run of leading values that are bf16 already (their low 16
// bits zero) as bf16, then the rest as fp32: the encoding loses nothing, so a receiver needs no
// setting to read it, and a part ending with the exact counts sends only those as fp32.
#include <cstdint>
#include <vector>

namespace dtrain::core {

// Values a ring part carries at most (512 KiB of fp32): about 4 ms at 1 Gbit/s, long enough
// that a part's own costs (its message, its acknowledgement) are small against it, short
// enough that a step's segment of a 1-16 MiB bucket is several parts in flight at once.
constexpr int64_t kRingPartValues = int64_t(1) << 17;

struct RingWire {
  bool bf16 = false;
  int64_t exact_last = 0;
  // Every rank of a round must use the same (it sets how segments are cut into parts).
  int64_t part_values = kRingPartValues;
};

// Rounds values[begin, end) of the n-value buffer to bf16 in place where `wire` says so (none of
// its last exact_last).
void round_for_wire(float* values, int64_t n, int64_t begin, int64_t end, const RingWire& wire);
// Whether every one of the n values is a bf16 (its low 16 bits zero): sent as bf16, it loses
// nothing.
bool all_bf16(const float* values, int64_t n);
// How many of the n values, from the first, are bf16s (what a part sends as bf16).
int64_t bf16_prefix(const float* values, int64_t n);
// The high 16 bits of each value, and back.
std::vector<uint16_t> bf16_bits(const float* values, int64_t n);
void floats_from_bf16(const uint16_t* bits, int64_t n, float* out);

}  // namespace dtrain::core
