#include "core/train/replica_agreement.h"

#include <cmath>

namespace dtrain::core {

ReplicaAgreement compare_replicas(const std::vector<const float*>& replicas, int64_t n) {
  ReplicaAgreement out;
  out.replicas = static_cast<int>(replicas.size());
  double norm = 0.0;
  for (int64_t i = 0; i < n; ++i) norm += double(replicas[0][i]) * replicas[0][i];
  for (size_t r = 1; r < replicas.size(); ++r) {
    double squares = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double diff = std::fabs(double(replicas[0][i]) - double(replicas[r][i]));
      squares += diff * diff;
      if (diff > out.max_abs_diff || std::isnan(diff)) {
        out.max_abs_diff = std::isnan(diff) ? INFINITY : diff;
        out.worst_index = i;
      }
    }
    const double rel = norm > 0 ? std::sqrt(squares / norm) : std::sqrt(squares);
    if (!(rel <= out.relative_diff)) out.relative_diff = rel;
  }
  return out;
}

ReplicaFingerprint fingerprint(const float* params, int64_t n) {
  ReplicaFingerprint f;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64: the same signs everywhere
    const double p = params[i];
    f.norm += p * p;
    f.projection += (x & 1) ? p : -p;
  }
  f.norm = std::sqrt(f.norm);
  return f;
}

}  // namespace dtrain::core
