#pragma once
// Exactly-once, checked on one replica (docs/architecture/core.md, "Checks"): every replica equals
// the initial parameters minus the sum of the messages it applied, and every replica applied the
// same set of messages. The audit keeps an order-independent digest of the (origin, id) pairs
// applied, their count and, when asked, the sum of the decoded messages in double precision.
// Two replicas with equal digests applied the same set; a replica that applied a message twice
// or missed one differs in count and digest; the sum catches an apply that went wrong.
#include <cstdint>
#include <vector>

#include "core/codec/message.h"

namespace dtrain::core {

// What one replica applied so far: how many messages and the digest of their ids.
struct AppliedTotals {
  int64_t messages = 0;
  uint64_t digest = 0;
};

class UpdateAudit {
 public:
  // keep_sum: also sum the decoded messages (n doubles).
  UpdateAudit(int64_t num_params, bool keep_sum);

  void applied(const EncodedMessage& m);

  uint64_t digest() const { return digest_; }
  int64_t count() const { return count_; }
  AppliedTotals totals() const { return {count_, digest_}; }
  // A replica that starts from another's (a rejoining node, from a live node's snapshot) goes
  // on from that one's totals: the digest is a sum, so both end equal when both apply the same
  // messages from here on. The sum restarts: the deviation is then measured from the snapshot.
  void continue_from(const AppliedTotals& totals) {
    count_ = totals.messages;
    digest_ = totals.digest;
  }
  bool has_sum() const { return !sum_.empty(); }
  // ||params - (initial - sum)|| / ||initial - sum||, L2 (needs keep_sum).
  double relative_deviation(const float* initial, const float* params) const;

 private:
  std::vector<double> sum_;
  uint64_t digest_ = 0;
  int64_t count_ = 0;
};

}  // namespace dtrain::core
