#pragma once
// Seeded faults inside the endpoint's send path (netem is not available on the build
// machines, and a seed makes a failing run repeatable). Off unless configured.
#include <chrono>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace dtrain::transport {

struct FaultSpec {
  double drop = 0.0;          // probability a datagram is dropped
  double duplicate = 0.0;     // probability it is sent twice
  double reorder = 0.0;       // probability it is held back and sent after the next one
  std::chrono::microseconds delay{0};  // every datagram waits this long
  uint64_t drop_every = 0;    // fixed gap: drop every k-th datagram (0 = off)
  uint64_t seed = 1;
  bool active() const {
    return drop > 0 || duplicate > 0 || reorder > 0 || delay.count() > 0 || drop_every > 0;
  }
};

class FaultInjector {
 public:
  using Clock = std::chrono::steady_clock;
  struct Datagram {
    std::vector<uint8_t> bytes;
    uint32_t peer;
  };

  explicit FaultInjector(const FaultSpec& spec) : spec_(spec), rng_(spec.seed) {}
  bool active() const { return spec_.active(); }

  // Decides the fate of one outgoing datagram; appends to `out` what to send now (zero, one or
  // more datagrams, possibly an earlier held one). Returns false when it was dropped.
  bool process(Datagram d, Clock::time_point now, std::vector<Datagram>& out);
  // Datagrams whose delay has passed.
  void release_due(Clock::time_point now, std::vector<Datagram>& out);
  uint64_t dropped() const { return dropped_; }

 private:
  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  FaultSpec spec_;
  std::mt19937_64 rng_;
  uint64_t count_ = 0, dropped_ = 0;
  std::vector<Datagram> held_;  // reordered: go out after the next datagram
  std::deque<std::pair<Clock::time_point, Datagram>> delayed_;
};

}  // namespace dtrain::transport
