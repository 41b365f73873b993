#pragma once
// The ids of a job's ring rounds (docs/architecture/core.md, "Dense all-reduce"): a training step's
// bucket (core/train/gradient_rounds.h) is its epoch, counted from 1, above its step in that
// epoch, above its bucket, above one bit: 1 for the bucket's sum, 0 for the vote before it where
// the sums go over NCCL between nodes (daemon/node/node_collective_path.h). Ids below 1 << 32 are
// the rehearsal's, whose ring steps run before a job of `mode: auto` chooses
// (daemon/node/sync_rehearsal.h), and the vote on forming NCCL's communicator is the last of
// them: every training round comes after them, as a ring's rounds must increase.
#include <cstdint>
#include <string>

namespace dtrain::core {

constexpr int kBucketBits = 8;
constexpr int kMaxBuckets = 1 << kBucketBits;
constexpr int64_t kFormingVoteRound = (int64_t(1) << 32) - 1;

inline int64_t step_round_id(int64_t epoch, int64_t step_in_epoch, int bucket = 0) {
  return ((epoch + 1) << 41) + (step_in_epoch << (kBucketBits + 1)) + (int64_t(bucket) << 1) + 1;
}
// Bucket b of the step whose bucket 0 is `step_round`.
inline int64_t bucket_round_id(int64_t step_round, int bucket) {
  return step_round + (int64_t(bucket) << 1);
}
// The check at the end of `epoch` that the replicas are the same (core/train/averaging_rounds.h,
// agree_or_average): after every step's round of the epoch, before the next epoch's first.
constexpr int64_t kEpochEndStep = 0xffffffff;
inline int64_t epoch_end_round_id(int64_t epoch) { return step_round_id(epoch, kEpochEndStep); }
// The NCCL vote before the sum of `round` (a bucket's round).
inline int64_t vote_round_id(int64_t round) { return round - 1; }
// The epoch of a round id, its step in it and its bucket; epoch -1 for a rehearsal's.
inline int64_t epoch_of_round_id(int64_t round) { return (round >> 41) - 1; }
inline int64_t step_of_round_id(int64_t round) {
  return (round >> (kBucketBits + 1)) & 0xffffffff;
}
inline int bucket_of_round_id(int64_t round) { return int((round >> 1) & (kMaxBuckets - 1)); }

// For people: "epoch 2, step 17, bucket 1" (counted from 1), "rehearsal step 3", the votes.
inline std::string describe_round(int64_t round) {
  if (round == kFormingVoteRound) return "the vote on forming NCCL's communicator";
  if (round < (int64_t(1) << 32)) return "rehearsal step " + std::to_string(round + 1);
  if (step_of_round_id(round) == kEpochEndStep)
    return "the replicas' check at the end of epoch " +
           std::to_string(epoch_of_round_id(round) + 1);
  return std::string(round % 2 == 0 ? "the NCCL vote of " : "") + "epoch " +
         std::to_string(epoch_of_round_id(round) + 1) + ", step " +
         std::to_string(step_of_round_id(round) + 1) + ", bucket " +
         std::to_string(bucket_of_round_id(round) + 1);
}

}  // namespace dtrain::core
