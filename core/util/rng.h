#pragma once
// One seeded generator type for everything random (init, shuffling, dropout), so a run is
// reproducible from the job's seed. Streams are derived, never shared across threads.
#include <cstdint>
#include <random>

namespace dtrain::core {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(mix(seed)) {}

  // An independent stream for a sub-task (a layer, an epoch, a worker), derived from the seed.
  static Rng derive(uint64_t seed, uint64_t stream) { return Rng(mix(seed) ^ mix(stream + 1)); }

  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine_); }
  float normal(float mean, float stddev) {
    return std::normal_distribution<float>(mean, stddev)(engine_);
  }
  uint64_t next() { return engine_(); }
  std::mt19937_64& engine() { return engine_; }

 private:
  // splitmix64 finaliser: nearby seeds give unrelated streams.
  static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  std::mt19937_64 engine_;
};

}  // namespace dtrain::core
