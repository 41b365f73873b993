#include "core/train/update_audit.h"

#include <cmath>

#include "core/codec/message_elements.h"

namespace dtrain::core {
namespace {

// splitmix64's finaliser: spreads (origin, id) so that a sum of them identifies the set.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

UpdateAudit::UpdateAudit(int64_t num_params, bool keep_sum)
    : sum_(keep_sum ? size_t(num_params) : 0, 0.0) {}

void UpdateAudit::applied(const EncodedMessage& m) {
  // One message per segment and step: the segment's offset tells them apart.
  digest_ += mix(mix(uint64_t(m.origin) << 32 ^ uint64_t(m.param_offset)) ^ m.id);
  ++count_;
  if (sum_.empty()) return;
  for_each_sent(m, [this](int64_t i, float v) { sum_[size_t(i)] += double(v); });
}

double UpdateAudit::relative_deviation(const float* initial, const float* params) const {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < sum_.size(); ++i) {
    const double expected = double(initial[i]) - sum_[i];
    const double d = double(params[i]) - expected;
    diff += d * d;
    norm += expected * expected;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace dtrain::core
