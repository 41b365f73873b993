// Conformance: every updater rule over several steps, and the update codec (encode, apply).
#include "tests/conformance/backend_fixture.h"

namespace dtrain::conformance {
namespace {
using kernels::UpdaterRule;

// Three steps of `rule` in double precision, state kept between them; returns each step's u.
std::vector<std::vector<double>> reference_steps(const kernels::UpdaterArgs& a,
                                                 const std::vector<std::vector<float>>& grads,
                                                 const std::vector<float>& scales) {
  const int64_t n = a.n;
  std::vector<double> s1(static_cast<size_t>(n), 0.0), s2(static_cast<size_t>(n), 0.0), s3(static_cast<size_t>(n), 0.0);
  std::vector<std::vector<double>> out;
  for (size_t step = 0; step < grads.size(); ++step) {
    std::vector<double> u(static_cast<size_t>(n));
    const double lr = scales[step];
    for (int64_t i = 0; i < n; ++i) {
      const double g = grads[step][i];
      switch (a.rule) {
        case UpdaterRule::kSgd: u[i] = lr * g; break;
        case UpdaterRule::kNesterovs: {
          const double v_old = s1[i], v_new = a.momentum * v_old - lr * g;
          s1[i] = v_new;
          u[i] = a.momentum * v_old - (1 + a.momentum) * v_new;
          break;
        }
        case UpdaterRule::kAdam:
        case UpdaterRule::kAmsgrad: {
          s1[i] = a.beta1 * s1[i] + (1 - a.beta1) * g;
          s2[i] = a.beta2 * s2[i] + (1 - a.beta2) * g * g;
          s3[i] = std::max(s3[i], s2[i]);
          const double v = a.rule == UpdaterRule::kAmsgrad ? s3[i] : s2[i];
          u[i] = lr * s1[i] / (std::sqrt(v) + a.epsilon);
          break;
        }
        case UpdaterRule::kRmsProp:
          s1[i] = a.rms_decay * s1[i] + (1 - a.rms_decay) * g * g;
          u[i] = lr * g / (std::sqrt(s1[i]) + a.epsilon);
          break;
      }
    }
    out.push_back(u);
  }
  return out;
}
}  // namespace

TEST_CASE("updater rules: three steps of each, state carried (rtol 1e-5)") {
  const int64_t n = 1000;
  const std::vector<std::vector<float>> grads = {random_vector(n, 81), random_vector(n, 82),
                                                 random_vector(n, 83)};
  const std::vector<float> scales = {0.1f, 0.05f, 0.02f};
  for (int r = 0; r <= int(UpdaterRule::kRmsProp); ++r) {
    kernels::UpdaterArgs a;
    a.rule = static_cast<UpdaterRule>(r);
    a.n = n;
    a.momentum = 0.9f;
    a.beta1 = 0.9f;
    a.beta2 = 0.99f;
    a.epsilon = 1e-6f;
    a.rms_decay = 0.9f;
    const auto expected = reference_steps(a, grads, scales);
    for (Backend* be : backends_under_test()) {
      const int64_t state_n = std::max<int64_t>(1, n * kernels::updater_state_vectors(a.rule));
      Buffer state(*be, state_n);
      for (size_t step = 0; step < grads.size(); ++step) {
        Buffer g(*be, grads[step]);
        kernels::UpdaterArgs args = a;
        args.g_to_u = g.get();
        args.state = state.get();
        args.scale = scales[step];
        be->updater_step(args);
        expect_close(be->name() + " updater " + std::to_string(r) + " step " + std::to_string(step),
                     g.host(), expected[step], 1e-5, 1e-7);
      }
    }
  }
}

TEST_CASE("codec: encode and apply match the plain definition bit for bit") {
  // 16 * 300 + 7 elements: full bitmap words and a ragged last one; tau chosen so that about
  // 5% are sent (sparse) and, in the second round, about 40% (bitmap).
  const int64_t n = 16 * 300 + 7;
  for (float tau : {0.95f, 0.3f}) {
    const auto residual = random_vector(n, 91, -0.5f, 0.5f), update = random_vector(n, 92, -0.5f, 0.5f);
    const float clip = 0.6f;
    std::vector<float> r(residual);
    std::vector<uint32_t> bitmap(static_cast<size_t>((n + 15) / 16), 0u), sparse;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      float v = r[i] + update[i];
      uint32_t code = 0;
      if (v >= tau) { v = v - tau; code = 1; }
      else if (v <= -tau) { v = v + tau; code = 2; }
      v = std::fmin(std::fmax(v, -clip), clip);
      r[i] = v;
      bitmap[i / 16] |= code << (2 * (i % 16));
      if (code) {
        ++count;
        sparse.push_back(code == 2 ? uint32_t(i) | 0x80000000u : uint32_t(i));
      }
    }
    std::vector<float> params = random_vector(n, 93);
    std::vector<double> applied(params.begin(), params.end());
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t code = (bitmap[i / 16] >> (2 * (i % 16))) & 3u;
      if (code == 1) applied[i] = params[i] - tau;
      if (code == 2) applied[i] = params[i] + tau;
    }
    for (Backend* be : backends_under_test()) {
      const std::string what = be->name() + " codec (tau " + std::to_string(tau) + ")";
      Buffer dr(*be, residual), du(*be, update), db(*be, (n + 15) / 16),
          ds(*be, kernels::sparse_capacity(n));
      kernels::CodecEncodeArgs args;
      args.residual = dr.get();
      args.update = du.get();
      args.n = n;
      args.tau = tau;
      args.clip = clip;
      args.bitmap = db.word_ptr();
      args.sparse = ds.word_ptr();
      const kernels::CodecEncodeResult res = be->codec().encode(args);
      INFO(what);
      REQUIRE(res.nonfinite_index == -1);
      REQUIRE(res.count == count);
      CHECK(dr.host() == r);
      CHECK(db.host_words() == bitmap);
      if (count <= n / 16) {
        std::vector<uint32_t> words = ds.host_words();
        words.resize(static_cast<size_t>(count));
        CHECK(words == sparse);
      }
      Buffer p1(*be, params), p2(*be, params);
      be->codec().apply_bitmap(db.word_ptr(), n, tau, p1.get());
      expect_close(what + " apply_bitmap", p1.host(), applied, 0, 0);
      Buffer words = Buffer::words(*be, sparse);
      be->codec().apply_sparse(words.word_ptr(), count, tau, p2.get());
      expect_close(what + " apply_sparse", p2.host(), applied, 0, 0);
    }
  }
}

}  // namespace dtrain::conformance
