#pragma once
// The ids of a job's ring rounds (docs/architecture/core.md, "Dense all-reduce"): a training step's
// bucket (core/train/gradient_rounds.h) is its epoch, counted from 1, above its step in that
// epoch, above its bucket. Ids below 1 << 32 are the rehearsal's, whose ring steps run before a
// job of `mode: auto` chooses (daemon/node/sync_rehearsal.h): every training round comes after
// them, as a ring's rounds must increase.
#include <cstdint>
#include <string>

namespace dtrain::core {

constexpr int kBucketBits = 8;
constexpr int kMaxBuckets = 1 << kBucketBits;

inline int64_t step_round_id(int64_t epoch, int64_t step_in_epoch, int bucket = 0) {
  return ((epoch + 1) << 40) + (step_in_epoch << kBucketBits) + bucket;
}
// The epoch of a round id, its step in it and its bucket; epoch -1 for a rehearsal's.
inline int64_t epoch_of_round_id(int64_t round) { return (round >> 40) - 1; }
inline int64_t step_of_round_id(int64_t round) { return (round >> kBucketBits) & 0xffffffff; }
inline int bucket_of_round_id(int64_t round) { return int(round & (kMaxBuckets - 1)); }

// For people: "epoch 2, step 17, bucket 1" (counted from 1), or "rehearsal step 3".
inline std::string describe_round(int64_t round) {
  if (round < (int64_t(1) << 32)) return "rehearsal step " + std::to_string(round + 1);
  return "epoch " + std::to_string(epoch_of_round_id(round) + 1) + ", step " +
         std::to_string(step_of_round_id(round) + 1) + ", bucket " +
         std::to_string(bucket_of_round_id(round) + 1);
}

}  // namespace dtrain::core
