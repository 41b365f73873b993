// The update codec: properties over random vectors, every kernel against the reference,
// the sparse/bitmap switch, segmenting, clipping, refusals and the threshold algorithms.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <catch2/catch.hpp>

#include "core/codec/codec_engine.h"
#include "core/codec/reference_codec.h"
#include "core/codec/threshold.h"
#include "core/codec/update_encoder.h"
#include "core/util/error.h"

using namespace dtrain::core;

namespace {

struct Case {
  std::vector<float> residual, update;
  float tau;
};

// A residual and an update whose sum crosses tau at about `density` of the elements, with
// negative zeros sprinkled in (they must come out bit for bit as the reference leaves them).
Case make_case(int64_t n, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  Case c;
  c.residual.resize(n);
  c.update.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    c.residual[i] = 0.3f * normal(rng);
    c.update[i] = normal(rng);
    if (i % 97 == 5) c.update[i] = -0.0f;
    if (i % 89 == 7) c.residual[i] = -0.0f;
  }
  std::vector<float> magnitude(n);
  for (int64_t i = 0; i < n; ++i) magnitude[i] = std::fabs(c.residual[i] + c.update[i]);
  const int64_t k = std::clamp<int64_t>(static_cast<int64_t>(density * n), 0, n - 1);
  std::nth_element(magnitude.begin(), magnitude.begin() + (n - 1 - k), magnitude.end());
  c.tau = std::max(magnitude[n - 1 - k], 1e-6f);
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::string> engines() { return CodecEngine::available(); }

TrainingSpec training_with(const std::string& algorithm, double initial) {
  TrainingSpec t;
  t.threshold.algorithm = algorithm;
  t.threshold.initial = initial;
  return t;
}

}  // namespace

TEST_CASE("encoding conserves the update: r_before + u == r_after + decoded") {
  for (int64_t n : {1, 15, 16, 17, 1000, 65537, 1000000}) {
    for (double density : {1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5}) {
      Case c = make_case(n, density, 1000 * n + static_cast<uint64_t>(density * 1e6));
      std::vector<float> r = c.residual;
      const EncodedMessage m = reference_encode(r.data(), c.update.data(), n, c.tau, 0.f);
      std::vector<float> decoded(n, 0.f);
      reference_decode_add(m, decoded.data());
      int64_t sent = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double before = double(c.residual[i]) + double(c.update[i]);
        const double after = double(r[i]) + double(decoded[i]);
        const double tol = FLT_EPSILON * std::max(std::fabs(before), double(c.tau));
        INFO("n=" << n << " density=" << density << " i=" << i);
        REQUIRE(std::fabs(before - after) <= tol);
        // Everything at or above tau was sent (one tau per step), nothing below it.
        REQUIRE((decoded[i] != 0.f) == (std::fabs(float(c.residual[i] + c.update[i])) >= c.tau));
        if (decoded[i] != 0.f) ++sent;
      }
      REQUIRE(sent == m.count);
      REQUIRE(m.encoding == choose_encoding(m.count, n));
      REQUIRE(m.words.size() ==
              size_t(m.encoding == Encoding::kSparse ? m.count : bitmap_words(n)));
    }
  }
}

TEST_CASE("every codec kernel gives the reference's words and residual, bit for bit") {
  REQUIRE(engines().size() >= 2);  // the build machines have at least AVX2
  for (int64_t n : {1, 7, 16, 31, 33, 4099, 1000000, 10000000}) {
    for (double density : {1e-5, 1e-3, 1e-2, 0.0625, 0.5}) {
      if (n == 10000000 && density != 1e-3 && density != 0.5) continue;  // keep the test quick
      Case c = make_case(n, density, 7 * n + static_cast<uint64_t>(density * 1e6));
      for (float clip : {0.f, 2.5f * c.tau}) {
        std::vector<float> r_ref = c.residual;
        double ss_ref = 0;
        const EncodedMessage ref =
            reference_encode(r_ref.data(), c.update.data(), n, c.tau, clip, &ss_ref);
        for (const std::string& name : engines()) {
          INFO("kernel " << name << " n=" << n << " density=" << density << " clip=" << clip);
          std::vector<float> r = c.residual;
          CodecEngine::Scratch scratch;
          double ss = 0;
          const EncodedMessage m = CodecEngine::get(name).encode_segment(
              r.data(), c.update.data(), n, c.tau, clip, &ss, scratch);
          REQUIRE(m.encoding == ref.encoding);
          REQUIRE(m.count == ref.count);
          REQUIRE(m.words == ref.words);
          REQUIRE(same_bits(r, r_ref));
          REQUIRE(ss == Approx(ss_ref).epsilon(1e-4));
        }
      }
    }
  }
}

TEST_CASE("every kernel applies sparse and bitmap messages exactly as the reference") {
  const int64_t n = 100003, offset = 37;
  for (double density : {1e-3, 0.3}) {
    Case c = make_case(n, density, 99);
    std::vector<float> r = c.residual;
    EncodedMessage m = reference_encode(r.data(), c.update.data(), n, c.tau, 0.f);
    m.param_offset = offset;
    std::vector<float> base(n + offset + 5);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (float& v : base) v = uniform(rng);
    std::vector<float> expected = base;
    reference_apply(m, expected.data());
    for (const std::string& name : engines()) {
      INFO("kernel " << name << " encoding " << encoding_name(m.encoding));
      std::vector<float> p = base;
      CodecEngine::get(name).apply(m, p.data());
      REQUIRE(same_bits(p, expected));
    }
  }
}

TEST_CASE("the encoding switches to the bitmap above length/16 sent elements") {
  const int64_t n = 1600;
  for (int64_t above : {int64_t(0), int64_t(1), n / 16, n / 16 + 1, n}) {
    std::vector<float> u(n, 0.25f), r(n, 0.f);
    for (int64_t i = 0; i < above; ++i) u[(i * 7919) % n] = (i % 2) ? 2.f : -2.f;
    for (const std::string& name : engines()) {
      std::vector<float> rr = r;
      CodecEngine::Scratch scratch;
      const EncodedMessage m =
          CodecEngine::get(name).encode_segment(rr.data(), u.data(), n, 1.f, 0.f, nullptr, scratch);
      INFO("kernel " << name << " above=" << above);
      REQUIRE(m.count == above);
      REQUIRE(m.encoding == (above <= n / 16 ? Encoding::kSparse : Encoding::kBitmap));
    }
  }
}

TEST_CASE("negative zeros are never sent and keep their sign bit") {
  const int64_t n = 37;
  std::vector<float> u(n, -0.0f);
  for (const std::string& name : engines()) {
    std::vector<float> r(n, -0.0f);
    CodecEngine::Scratch scratch;
    const EncodedMessage m =
        CodecEngine::get(name).encode_segment(r.data(), u.data(), n, 1e-3f, 5e-3f, nullptr, scratch);
    REQUIRE(m.count == 0);
    for (float v : r) REQUIRE(std::signbit(v));
  }
}

TEST_CASE("NaN or Inf in the update is refused with the parameter named") {
  const int64_t n = 1000;
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (int64_t at : {int64_t(0), int64_t(513), n - 1}) {
      std::vector<float> u(n, 0.01f);
      u[at] = bad;
      for (const std::string& name : engines()) {
        std::vector<float> r(n, 0.f);
        CodecEngine::Scratch scratch;
        INFO("kernel " << name << " value " << bad << " at " << at);
        try {
          CodecEngine::get(name).encode_segment(r.data(), u.data(), n, 1e-3f, 0.f, nullptr,
                                                scratch);
          FAIL("a non-finite update was encoded");
        } catch (const UserError& e) {
          const std::string what = e.what();
          REQUIRE(what.find("parameter " + std::to_string(at)) != std::string::npos);
          REQUIRE(what.find(std::isnan(bad) ? "NaN" : "infinite") != std::string::npos);
          REQUIRE(what.find("learning_rate") != std::string::npos);
        }
      }
      // The reference refuses before touching the residual.
      std::vector<float> r(n, 0.5f);
      REQUIRE_THROWS_AS(reference_encode(r.data(), u.data(), n, 1e-3f, 0.f), UserError);
      REQUIRE(std::all_of(r.begin(), r.end(), [](float v) { return v == 0.5f; }));
    }
  }
}

TEST_CASE("models larger than a segment are split, and the segments decode to the whole") {
  const int64_t n = 3500;
  Case c = make_case(n, 0.01, 3);
  TrainingSpec t = training_with("fixed", c.tau);
  t.residual.clip = false;
  for (const std::string& name : engines()) {
    UpdateEncoder segmented(n, t, 9, CodecEngine::get(name), 1000);
    UpdateEncoder whole(n, t, 9, CodecEngine::get(name));
    const auto parts = segmented.encode(c.update.data());
    const auto one = whole.encode(c.update.data());
    REQUIRE(parts.size() == 4);
    REQUIRE(one.size() == 1);
    std::set<uint64_t> ids;
    std::vector<float> sum_parts(n, 0.f), sum_one(n, 0.f);
    for (size_t k = 0; k < parts.size(); ++k) {
      REQUIRE(parts[k].param_offset == int64_t(1000 * k));
      REQUIRE(parts[k].length == std::min<int64_t>(1000, n - 1000 * k));
      REQUIRE(parts[k].origin == 9u);
      ids.insert(parts[k].id);
      reference_decode_add(parts[k], sum_parts.data());
    }
    REQUIRE(ids.size() == parts.size());
    reference_decode_add(one[0], sum_one.data());
    REQUIRE(same_bits(sum_parts, sum_one));
    REQUIRE(same_bits(segmented.residual(), whole.residual()));
    REQUIRE(segmented.last_stats().sent == one[0].count);
    REQUIRE(segmented.last_stats().messages == 4);
  }
}

TEST_CASE("the residual is clipped to clip_multiple * tau every `every` steps") {
  const int64_t n = 64;
  TrainingSpec t = training_with("fixed", 1e-2);
  t.residual.clip_multiple = 5;
  t.residual.every = 2;
  std::vector<float> u(n, 0.f);
  u[3] = 1.0f;    // 100 tau: far above the clip bound
  u[10] = -1.0f;
  UpdateEncoder enc(n, t, 0, CodecEngine::get());
  enc.encode(u.data());
  REQUIRE(enc.residual()[3] == Approx(0.99f));  // step 1: subtracted once, not clipped
  enc.encode(u.data());
  REQUIRE(enc.residual()[3] == Approx(0.05f));  // step 2: clipped to 5 tau
  REQUIRE(enc.residual()[10] == Approx(-0.05f));
  REQUIRE(enc.last_stats().residual_norm == Approx(std::sqrt(2 * 0.05 * 0.05)).epsilon(1e-5));
}

TEST_CASE("messages sum: applying two messages subtracts both") {
  const int64_t n = 5000;
  Case a = make_case(n, 1e-2, 11), b = make_case(n, 0.2, 12);
  std::vector<float> ra = a.residual, rb = b.residual;
  const EncodedMessage ma = reference_encode(ra.data(), a.update.data(), n, a.tau, 0.f);
  const EncodedMessage mb = reference_encode(rb.data(), b.update.data(), n, b.tau, 0.f);
  std::vector<float> p(n, 1.f), decoded(n, 0.f);
  CodecEngine::get().apply(ma, p.data());
  CodecEngine::get().apply(mb, p.data());
  reference_decode_add(ma, decoded.data());
  reference_decode_add(mb, decoded.data());
  for (int64_t i = 0; i < n; ++i) REQUIRE(p[i] == Approx(1.f - decoded[i]).margin(1e-6));
}

TEST_CASE("adaptive threshold: multiplicative steps outside [min, max] sparsity") {
  ThresholdSpec s;  // defaults: adaptive, 1e-3, [1e-4, 1e-2]
  ThresholdAlgorithm t(s);
  const double d = 0.96593632892484568;
  REQUIRE(t.tau() == Approx(1e-3));
  t.observe(0, 1000000, Encoding::kSparse);  // too sparse: lower tau
  REQUIRE(t.tau() == Approx(1e-3 * d));
  t.observe(1000, 1000000, Encoding::kSparse);  // 1e-3: inside the band, unchanged
  REQUIRE(t.tau() == Approx(1e-3 * d));
  t.observe(20000, 1000000, Encoding::kSparse);  // 2e-2: too dense, raise tau
  REQUIRE(t.tau() == Approx(1e-3));
  t.observe(10, 100, Encoding::kBitmap);  // a bitmap counts as 1/16: raise
  REQUIRE(t.tau() == Approx(1e-3 / d));
  ThresholdAlgorithm halving(s);
  for (int i = 0; i < 20; ++i) halving.observe(0, 1000, Encoding::kSparse);
  REQUIRE(halving.tau() == Approx(0.5e-3).epsilon(1e-5));  // twenty steps halve tau
}

TEST_CASE("target_sparsity moves every step; fixed never moves") {
  ThresholdSpec s;
  s.algorithm = "target_sparsity";
  s.initial = 1e-4;
  s.target_sparsity = 1e-3;
  ThresholdAlgorithm t(s);
  const double d = 0.96593632892484568;
  t.observe(5, 10000, Encoding::kSparse);  // 5e-4 < 1e-3: lower
  REQUIRE(t.tau() == Approx(1e-4 * d));
  t.observe(50, 10000, Encoding::kSparse);  // 5e-3 > 1e-3: raise
  t.observe(50, 10000, Encoding::kSparse);
  REQUIRE(t.tau() == Approx(1e-4 / d));
  t.observe(10, 10000, Encoding::kSparse);  // exactly on target: unchanged
  REQUIRE(t.tau() == Approx(1e-4 / d));
  ThresholdSpec f;
  f.algorithm = "fixed";
  f.initial = 0.02;
  ThresholdAlgorithm fixed(f);
  fixed.observe(0, 100, Encoding::kSparse);
  fixed.observe(100, 100, Encoding::kBitmap);
  REQUIRE(fixed.tau() == 0.02f);
}

TEST_CASE("the encoder carries tau, counts and sizes in its step figures") {
  const int64_t n = 20000;
  Case c = make_case(n, 1e-3, 21);
  TrainingSpec t = training_with("adaptive", c.tau);
  UpdateEncoder enc(n, t, 2, CodecEngine::get());
  const auto msgs = enc.encode(c.update.data());
  const CodecStepStats& s = enc.last_stats();
  REQUIRE(s.tau == c.tau);
  REQUIRE(msgs[0].tau == c.tau);
  REQUIRE(s.sent == msgs[0].count);
  REQUIRE(s.density == Approx(double(s.sent) / n));
  REQUIRE(s.message_bytes == kMessageHeaderBytes + 4 * s.sent);
  REQUIRE(s.encoding == Encoding::kSparse);
  double squares = 0;
  for (float v : enc.residual()) squares += double(v) * v;
  REQUIRE(s.residual_norm == Approx(std::sqrt(squares)).epsilon(1e-4));
  REQUIRE(msgs[0].id != enc.encode(c.update.data())[0].id);
}

TEST_CASE("unknown codec names are refused with the choices") {
  REQUIRE_THROWS_WITH(CodecEngine::get("sse9"), Catch::Contains("auto, avx512, avx2 or reference"));
}
