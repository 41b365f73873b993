#pragma once
// The update rules. Each maps the (L2-adjusted) gradient g to the step u, in place.
#include <cmath>

#include "core/updaters/updater.h"

namespace dtrain::core {

// u = lr * g
class SgdRule : public Updater {
 public:
  SgdRule(const UpdaterSpec& s, double l2, std::vector<ParamSegment> seg, int64_t n)
      : Updater(s, l2, std::move(seg), n, 0) {}
  void rule(float* g, float lr, int64_t) override {
    for (int64_t i = 0; i < n_; ++i) g[i] *= lr;
  }
};

// Nesterov momentum in DL4J's form: v' = mu v - lr g; params += -mu v + (1 + mu) v',
// so u = mu v - (1 + mu) v'.
class NesterovsRule : public Updater {
 public:
  NesterovsRule(const UpdaterSpec& s, double l2, std::vector<ParamSegment> seg, int64_t n)
      : Updater(s, l2, std::move(seg), n, 1) {}
  float* momentum() override { return state_.data(); }
  void rule(float* g, float lr, int64_t) override {
    const float mu = static_cast<float>(spec_.momentum);
    float* v = state_.data();
    for (int64_t i = 0; i < n_; ++i) {
      const float v_old = v[i];
      const float v_new = mu * v_old - lr * g[i];
      v[i] = v_new;
      g[i] = mu * v_old - (1.0f + mu) * v_new;
    }
  }
};

// Adam (and AMSGrad, which keeps the running maximum of v):
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; u = lr sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
class AdamRule : public Updater {
 public:
  AdamRule(const UpdaterSpec& s, double l2, std::vector<ParamSegment> seg, int64_t n,
           bool amsgrad)
      : Updater(s, l2, std::move(seg), n, amsgrad ? 3 : 2), amsgrad_(amsgrad) {}
  float* momentum() override { return state_.data(); }  // m
  void rule(float* g, float lr, int64_t t) override {
    const float b1 = static_cast<float>(spec_.beta1), b2 = static_cast<float>(spec_.beta2);
    const float eps = static_cast<float>(spec_.epsilon);
    const float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double(b2), double(t))) /
                                           (1.0 - std::pow(double(b1), double(t))));
    float* m = state_.data();
    float* v = m + n_;
    float* vmax = amsgrad_ ? v + n_ : v;
    for (int64_t i = 0; i < n_; ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      if (amsgrad_ && v[i] > vmax[i]) vmax[i] = v[i];
      g[i] = alpha * m[i] / (std::sqrt(vmax[i]) + eps);
    }
  }

 private:
  bool amsgrad_;
};

// s = d s + (1-d) g^2; u = lr g / (sqrt(s) + eps)
class RmsPropRule : public Updater {
 public:
  RmsPropRule(const UpdaterSpec& s, double l2, std::vector<ParamSegment> seg, int64_t n)
      : Updater(s, l2, std::move(seg), n, 1) {}
  void rule(float* g, float lr, int64_t) override {
    const float d = static_cast<float>(spec_.rms_decay);
    const float eps = static_cast<float>(spec_.epsilon);
    float* s = state_.data();
    for (int64_t i = 0; i < n_; ++i) {
      s[i] = d * s[i] + (1.0f - d) * g[i] * g[i];
      g[i] = lr * g[i] / (std::sqrt(s[i]) + eps);
    }
  }
};

}  // namespace dtrain::core
