#pragma once
// Fusion for dense all-reduce (docs/architecture/core.md, "Dense all-reduce"): a step's gradient
// goes over the ring in buckets, runs of whole layers of about `training.allreduce.bucket_mb`
// each, in the order the backward pass finishes them (from the flat gradient's end). A bucket's
// ring starts as soon as every worker of the node has finished it, while the layers before it
// are still being computed; many small layers share one round, so their latency is paid once.
#include <cstdint>
#include <string>
#include <vector>

#include "core/collective/round_ids.h"  // kMaxBuckets

namespace dtrain::core {

// Values [begin, end) of the flat gradient.
struct GradientBucket {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The values a bucket of `bucket_mb` MiB holds; 0 (one bucket a step) for 0.
int64_t bucket_values(double bucket_mb);

// The buckets of a gradient of `num_params` values whose backward pass makes it final from the
// `frontiers` on (Model::backward_frontiers: decreasing, the last 0), in send order: each closes
// at the first frontier by which it holds at least `bucket_values` (0: one bucket), the last
// takes what is left. Never more than kMaxBuckets (larger buckets then).
std::vector<GradientBucket> plan_buckets(const std::vector<int64_t>& frontiers,
                                         int64_t num_params, int64_t bucket_values);

// For the log: "2 buckets (134 KiB, 803 KiB), each sent as the backward pass finishes it" (or
// "..., sent when the backward pass ends" when they do not overlap it).
std::string describe_buckets(const std::vector<GradientBucket>& buckets, bool overlap);

}  // namespace dtrain::core
