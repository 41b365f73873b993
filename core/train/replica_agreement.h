#pragma once
// How far replicas are apart (docs/architecture/core.md, "Invariants": once every message is
// applied everywhere, all replicas agree up to float rounding; a gap means a lost or doubled
// update).
#include <cstdint>
#include <vector>

namespace dtrain::core {

struct ReplicaAgreement {
  int replicas = 0;
  // Largest |a_i - b_i|. Rounding keeps it far below tau; a lost or doubled message
  // element shows up as a difference of about tau at its index.
  double max_abs_diff = 0.0;
  int64_t worst_index = -1;
  // ||a - b|| / ||a|| (L2), the largest over replicas: the "relative difference" reported.
  double relative_diff = 0.0;
};

// A replica's fingerprint, cheap to send and compare across processes: its L2 norm and its
// projection on a fixed pseudo-random +-1 vector. Replicas within relative difference d have
// norms within d and projections within a few d * norm of each other.
struct ReplicaFingerprint {
  double norm = 0.0, projection = 0.0;
};
ReplicaFingerprint fingerprint(const float* params, int64_t n);

// Compares every replica with the first; each pointer covers n floats.
ReplicaAgreement compare_replicas(const std::vector<const float*>& replicas, int64_t n);

}  // namespace dtrain::core
