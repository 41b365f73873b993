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

}  // namespace dtrain::core
