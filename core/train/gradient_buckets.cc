#include "core/train/gradient_buckets.h"

#include <algorithm>
#include <cmath>

namespace dtrain::core {

int64_t bucket_values(double bucket_mb) {
  return bucket_mb > 0.0 ? std::max<int64_t>(1, int64_t(std::llround(bucket_mb * 262144.0))) : 0;
}

namespace {

std::vector<GradientBucket> cut(const std::vector<int64_t>& frontiers, int64_t num_params,
                                int64_t bucket_values) {
  std::vector<GradientBucket> buckets;
  int64_t end = num_params;
  for (int64_t from : frontiers) {
    if (bucket_values <= 0 || from <= 0 || from >= end || end - from < bucket_values) continue;
    buckets.push_back({from, end});
    end = from;
  }
  buckets.push_back({0, end});
  return buckets;
}

}  // namespace

std::vector<GradientBucket> plan_buckets(const std::vector<int64_t>& frontiers,
                                         int64_t num_params, int64_t bucket_values) {
  std::vector<GradientBucket> buckets = cut(frontiers, num_params, bucket_values);
  while (int64_t(buckets.size()) > kMaxBuckets) {
    bucket_values *= 2;
    buckets = cut(frontiers, num_params, bucket_values);
  }
  return buckets;
}

std::string describe_buckets(const std::vector<GradientBucket>& buckets, bool overlap) {
  std::string sizes;
  for (const GradientBucket& b : buckets) {
    if (!sizes.empty()) sizes += ", ";
    sizes += std::to_string((b.size() * 4 + 1023) / 1024) + " KiB";
  }
  const std::string count =
      std::to_string(buckets.size()) + (buckets.size() == 1 ? " bucket (" : " buckets (");
  return count + sizes + "), " +
         (overlap ? "each sent as the backward pass finishes it" : "sent when the backward pass ends");
}

}  // namespace dtrain::core
