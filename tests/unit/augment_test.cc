// Augmentation (core/data/augment.h) and the per-channel normaliser: crops are shifts with zeros
// coming in, flips mirror rows, both decided by (seed, epoch, example) alone, so a minibatch
// taken over by another worker is the same; per_channel statistics are each channel's.
#include <catch2/catch.hpp>

#include <set>

#include "core/data/augment.h"
#include "core/data/minibatch_iterator.h"
#include "core/data/normalizer.h"
#include "core/io/model_file.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

// One example [2, 5, 6]: value c * 100 + y * 10 + x, all non-zero.
std::vector<float> image() {
  std::vector<float> v;
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 6; ++x) v.push_back(float(c * 100 + y * 10 + x + 1));
  return v;
}

// Finds the (dy, dx, flip) that turns image() into `out`, or fails.
struct Found {
  int dy = 99, dx = 99;
  bool flip = false;
};
Found identify(const std::vector<float>& out) {
  const std::vector<float> in = image();
  for (int flip = 0; flip < 2; ++flip)
    for (int dy = -3; dy <= 3; ++dy)
      for (int dx = -3; dx <= 3; ++dx) {
        bool same = true;
        for (int c = 0; c < 2 && same; ++c)
          for (int y = 0; y < 5 && same; ++y)
            for (int x = 0; x < 6 && same; ++x) {
              const int sx = (flip ? 5 - x : x) + dx, sy = y + dy;
              const float want = sy >= 0 && sy < 5 && sx >= 0 && sx < 6 ? in[c * 30 + sy * 6 + sx] : 0.0f;
              same = out[c * 30 + y * 6 + x] == want;
            }
        if (same) return {dy, dx, flip == 1};
      }
  return {};
}

}  // namespace

TEST_CASE("crops shift within the padding with zeros coming in; flips mirror; seeded") {
  const core::Shape shape{2, 5, 6};
  const core::Augmentation a{2, true};
  std::vector<float> scratch;
  std::set<std::tuple<int, int, bool>> seen;
  for (int64_t example = 0; example < 400; ++example) {
    std::vector<float> x = image();
    core::augment_example(a, shape, 42, 3, example, x.data(), scratch);
    const Found f = identify(x);
    REQUIRE(f.dy != 99);  // always some shift within the padding, maybe flipped
    CHECK(std::abs(f.dy) <= 2);
    CHECK(std::abs(f.dx) <= 2);
    seen.insert({f.dy, f.dx, f.flip});
    std::vector<float> again = image();
    core::augment_example(a, shape, 42, 3, example, again.data(), scratch);
    CHECK(again == x);  // the same (seed, epoch, example): the same augmentation
  }
  CHECK(seen.size() == 5 * 5 * 2);  // every shift, flipped and not
  // Another epoch changes it (for most examples); no augmentation changes nothing.
  int changed = 0;
  for (int64_t example = 0; example < 50; ++example) {
    std::vector<float> e3 = image(), e4 = image();
    core::augment_example(a, shape, 42, 3, example, e3.data(), scratch);
    core::augment_example(a, shape, 42, 4, example, e4.data(), scratch);
    changed += e3 != e4;
  }
  CHECK(changed > 40);
  std::vector<float> plain = image();
  core::augment_example({0, false}, shape, 42, 3, 0, plain.data(), scratch);
  CHECK(plain == image());
}

TEST_CASE("an augmented minibatch is the same from next() and from batch_of_shard()") {
  core::Dataset data;
  data.features.resize({12, 2, 5, 6});
  for (int64_t i = 0; i < data.features.size(); ++i) data.features[i] = float(i % 97 + 1);
  data.targets.resize({12, 2});
  data.targets.zero();
  core::MinibatchIterator mine(data, 3, 9, 1, 2, {1, true});
  core::MinibatchIterator survivor(data, 3, 9, 0, 2, {1, true});
  mine.start_epoch(2);
  survivor.start_epoch(2);
  core::Tensor a, ta, b, tb;
  REQUIRE(mine.next(a, ta));
  REQUIRE(survivor.batch_of_shard(1, 2, 0, b, tb));
  CHECK(std::equal(a.data(), a.data() + a.size(), b.data()));
  // And it differs from the plain data.
  core::MinibatchIterator plain(data, 3, 9, 1, 2);
  plain.start_epoch(2);
  core::Tensor p, tp;
  REQUIRE(plain.next(p, tp));
  CHECK_FALSE(std::equal(a.data(), a.data() + a.size(), p.data()));
}

TEST_CASE("per_channel normalisation: each channel's mean and deviation, kept in model files") {
  core::Tensor x({4, 2, 1, 3});  // channel 0: 1..12 spread, channel 1: constant 5
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t i = 0; i < 3; ++i) {
      x[n * 6 + i] = float(n * 3 + i + 1);
      x[n * 6 + 3 + i] = 5.0f;
    }
  core::Normalizer norm = core::Normalizer::of("per_channel");
  norm.fit(x);
  REQUIRE(norm.values().size() == 4);
  CHECK(norm.values()[0] == Approx(6.5));
  CHECK(norm.values()[1] == Approx(5.0));
  CHECK(norm.values()[2] == Approx(std::sqrt(143.0 / 12)));  // population deviation of 1..12
  CHECK(norm.values()[3] == Approx(0.0));
  norm.apply(x);
  CHECK(x[0] == Approx((1 - 6.5) / std::sqrt(143.0 / 12)));
  CHECK(x[3] == Approx(0.0));  // a constant channel is centred, not divided by zero
  core::ModelFile f;
  f.spec_yaml = "name: x";
  f.params = {1};
  f.normalizer = norm;
  const std::string path = testing::temp_dir() + "/n.dtm";
  core::write_model_file(path, f);
  const core::ModelFile back = core::read_model_file(path);
  CHECK(back.normalizer.kind() == core::Normalizer::Kind::kPerChannel);
  CHECK(back.normalizer.values() == norm.values());
}

TEST_CASE("data.augment needs image inputs") {
  try {
    testing::job_with_model("  input: [6]\n  layers:\n    - output: {units: 2}\n",
                            "  augment: {crop_padding: 4}\n");
    FAIL("accepted");
  } catch (const core::UserError& e) {
    CHECK_THAT(e.what(), Catch::Contains("data.augment"));
    CHECK_THAT(e.what(), Catch::Contains("model.input is [6]"));
  }
}

}  // namespace dtrain
