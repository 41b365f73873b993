// The corrections (docs/architecture/core.md, "Staleness and corrections"), each against a small
// case computed by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/codec/message_elements.h"
#include "core/train/corrections.h"
#include "core/updaters/updater.h"

using namespace dtrain::core;


TEST_CASE("learning-rate scaling: linear, sqrt and none, with a linear warm-up from 1/W") {
  CorrectionsSpec c = corrections_off();
  CHECK(lr_scale(c, 4, 0.0) == 1.0);  // linear: each worker keeps its rate, the sum is 4x
  c.lr_scaling = "sqrt";
  CHECK(lr_scale(c, 4, 3.0) == Approx(0.5));  // 4 workers * 0.5 = 2 = sqrt(4)
  c.lr_scaling = "none";
  CHECK(lr_scale(c, 4, 3.0) == Approx(0.25));
  c.lr_scaling = "linear";
  c.lr_warmup_epochs = 2.0;
  CHECK(lr_scale(c, 4, 0.0) == Approx(0.25));    // starts as one worker's rate in all
  CHECK(lr_scale(c, 4, 1.0) == Approx(0.625));   // half way: 0.25 + (1 - 0.25) / 2
  CHECK(lr_scale(c, 4, 2.0) == Approx(1.0));
  CHECK(lr_scale(c, 4, 7.0) == Approx(1.0));
  CHECK(lr_scale(c, 1, 0.0) == Approx(1.0));     // one worker: nothing to scale
}

TEST_CASE("averaging and local steps take the spec's clipping and warm-up, not its scaling") {
  TrainingSpec t;  // the defaults: gradient sharing, bsp, DGC's corrections
  t.corrections.lr_scaling = "sqrt";
  CHECK(worker_corrections(t).lr_scaling == "sqrt");
  CHECK(worker_corrections(t).momentum_masking);
  for (const char* mode : {"averaging", "local"}) {
    INFO(mode);
    TrainingSpec other = t;
    if (std::string(mode) == "averaging") other.mode = TrainingMode::kParameterAveraging;
    else other.sync.mode = "local";
    // Each worker steps its own replica: the spec's rate after the warm-up, whatever the
    // scaling rule (which is about summed steps); no message to mask or thin.
    CorrectionsSpec c = worker_corrections(other);
    CHECK(lr_scale(c, 3, 0.0) == Approx(1.0 / 3));
    CHECK(lr_scale(c, 3, 1.0) == 1.0);
    CHECK(c.clip_norm == 5.0);
    CHECK_FALSE(c.momentum_masking);
    CHECK(c.sparsity_warmup_epochs == 0.0);
    // Turned off in the spec: off.
    other.corrections.clip_norm = 0.0;
    other.corrections.lr_warmup_epochs = 0.0;
    c = worker_corrections(other);
    CHECK(lr_scale(c, 3, 0.0) == 1.0);
    CHECK(c.clip_norm == 0.0);
  }
}

TEST_CASE("sparsity warm-up: the density band shrinks exponentially to the configured one") {
  CorrectionsSpec c = corrections_off();
  CHECK(density_scale(c, 0.01, 0.0) == 1.0);  // off
  c.sparsity_warmup_epochs = 2.0;
  c.sparsity_warmup_start = 0.0625;
  CHECK(density_scale(c, 0.01, 0.0) == Approx(6.25));           // 0.0625 / 0.01
  CHECK(density_scale(c, 0.01, 1.0) == Approx(std::sqrt(6.25)));  // half way, geometric: 2.5
  CHECK(density_scale(c, 0.01, 2.0) == 1.0);
  CHECK(density_scale(c, 0.1, 0.0) == 1.0);  // the band is already above the start
}

TEST_CASE("local gradient clipping bounds the norm by clip_norm / sqrt(workers)") {
  CorrectionsSpec c = corrections_off();
  std::vector<float> g = {3.0f, 4.0f};  // norm 5
  CHECK(clip_gradient(c, 4, dtrain::kernels::cpu_backend(), g.data(), 2) == 1.0);  // off
  c.clip_norm = 4.0;  // bound 4 / sqrt(4) = 2
  CHECK(clip_gradient(c, 4, dtrain::kernels::cpu_backend(), g.data(), 2) == Approx(0.4));
  CHECK(g[0] == Approx(1.2f));
  CHECK(g[1] == Approx(1.6f));
  CHECK(clip_gradient(c, 4, dtrain::kernels::cpu_backend(), g.data(), 2) == Approx(1.0));  // at the bound: (nearly) unchanged
  CHECK(g[0] == Approx(1.2f));
}

TEST_CASE("momentum factor masking clears the momentum of every element a message sent") {
  EncodedMessage sparse;
  sparse.encoding = Encoding::kSparse;
  sparse.tau = 0.5f;
  sparse.param_offset = 2;
  sparse.length = 6;
  sparse.words = {1u, 3u | kSparseSignBit};  // elements 3 (+tau) and 5 (-tau) of the vector
  std::vector<float> momentum = {1, 2, 3, 4, 5, 6, 7, 8};
  mask_momentum(sparse, momentum.data());
  CHECK(momentum == std::vector<float>{1, 2, 3, 0, 5, 0, 7, 8});

  EncodedMessage bitmap;  // 2 bits per element: 01 +tau, 10 -tau
  bitmap.encoding = Encoding::kBitmap;
  bitmap.tau = 0.25f;
  bitmap.length = 18;
  bitmap.words = {(1u << 0) | (2u << 30), 1u << 2};  // elements 0, 15 and 17
  std::vector<float> m2(18, 1.0f);
  mask_momentum(bitmap, m2.data());
  for (int i = 0; i < 18; ++i) CHECK(m2[i] == ((i == 0 || i == 15 || i == 17) ? 0.0f : 1.0f));
  std::vector<std::pair<int64_t, float>> seen;
  for_each_sent(bitmap, [&](int64_t i, float v) { seen.push_back({i, v}); });
  CHECK(seen == std::vector<std::pair<int64_t, float>>{{0, 0.25f}, {15, -0.25f}, {17, 0.25f}});
}

TEST_CASE("the updater's learning-rate factor and its momentum vector") {
  UpdaterSpec spec;
  spec.type = "nesterovs";
  spec.learning_rate = 0.1;
  spec.momentum = 0.5;
  auto u = Updater::create(spec, 0.0, {}, 2);
  std::vector<float> params = {0, 0}, g = {1.0f, -2.0f}, step(2);
  // v' = mu v - lr s g = -0.05 g (lr 0.1 times factor 0.5); u = mu v - (1 + mu) v' = 0.075 g
  u->compute_step(params.data(), g.data(), step.data(), 0, 1, 0.5);
  CHECK(step[0] == Approx(0.075f));
  CHECK(step[1] == Approx(-0.15f));
  REQUIRE(u->momentum() != nullptr);
  CHECK(u->momentum()[0] == Approx(-0.05f));
  spec.type = "sgd";
  CHECK(Updater::create(spec, 0.0, {}, 2)->momentum() == nullptr);
}
