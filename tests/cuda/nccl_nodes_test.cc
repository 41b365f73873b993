// NCCL between nodes on real GPUs (kernels/node_collective.h; docs/architecture/daemon.md, "NCCL
// between nodes"): ranks on distinct GPUs of this machine, one thread each as the nodes'
// processes would be, join the communicator of an id made as the controller makes it and sum
// exactly, the same bits on every rank; a rank that never comes costs the others the wait they
// allow, and the communicator then refuses further calls. NCCL refuses two ranks of one
// communicator on one GPU, so this needs two GPUs: exits 77 (skipped) with fewer. Built with
// --config=cuda by tools/test.sh.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kernels/gpu_devices.h"
#include "kernels/node_collective.h"

namespace {

using namespace dtrain;
using Clock = std::chrono::steady_clock;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::printf("FAILED: %s\n", what.c_str());
  ++failures;
}

kernels::GiveUp after(std::chrono::milliseconds wait) {
  const auto until = Clock::now() + wait;
  return [until] { return Clock::now() > until; };
}

// Every rank sums rank + 1 + i / 4 over n values: 3 + 2 i / 4 for two ranks, exact in fp32.
void sums_exactly(const std::vector<uint8_t>& id, int ranks, int64_t n) {
  std::vector<std::vector<float>> out(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      std::string why;
      auto c =
          kernels::open_node_collective(id, ranks, r, r, after(std::chrono::seconds(60)), &why);
      if (!c) {
        errors[size_t(r)] = "rank " + std::to_string(r) + " did not join: " + why;
        return;
      }
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(r + 1) + float(i) / 4.f;
      try {
        c->all_reduce_sum(v.data(), n, after(std::chrono::seconds(60)));
        c->all_reduce_sum(v.data(), n, after(std::chrono::seconds(60)));  // twice: doubled
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
      out[size_t(r)] = std::move(v);
    });
  for (std::thread& t : threads) t.join();
  const double per = double(ranks) * (ranks + 1) / 2.0;
  for (int r = 0; r < ranks; ++r) {
    expect(errors[size_t(r)].empty(), errors[size_t(r)]);
    bool exact = out[size_t(r)].size() == size_t(n);
    for (int64_t i = 0; exact && i < n; ++i)
      exact = out[size_t(r)][size_t(i)] == float(ranks * (per + double(ranks) * i / 4.0));
    expect(exact, "rank " + std::to_string(r) + "'s sum of " + std::to_string(n) +
                      " values is not the exact one");
    expect(out[size_t(r)] == out[0], "rank " + std::to_string(r) + " differs from rank 0");
  }
}

}  // namespace

int main() {
  std::string why;
  const std::vector<kernels::GpuInfo> gpus = kernels::list_gpus(&why);
  if (gpus.size() < 2) {
    std::printf("SKIPPED: %s (NCCL between nodes needs two GPUs here: one rank per GPU)\n",
                gpus.empty() ? why.c_str() : "one GPU");
    return 77;
  }
  const std::vector<uint8_t> id = kernels::make_node_collective_id(&why);
  if (id.empty()) {
    std::printf("FAILED: no NCCL id: %s\n", why.c_str());
    return 1;
  }
  const int ranks = int(std::min<size_t>(gpus.size(), 4));
  sums_exactly(id, ranks, 1);
  sums_exactly(kernels::make_node_collective_id(&why), ranks, 5'000'003);

  // Rank 1 never joins: rank 0 gives up forming after 3 s and says why.
  const std::vector<uint8_t> lonely = kernels::make_node_collective_id(&why);
  const auto start = Clock::now();
  auto alone = kernels::open_node_collective(lonely, 2, 0, 0, after(std::chrono::seconds(3)), &why);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  expect(!alone, "a communicator formed without its second rank");
  expect(waited < 30, "giving up on a missing rank took " + std::to_string(waited) + " s");
  std::printf("a missing rank: %s (after %.1f s)\n", why.c_str(), waited);

  // Both join, then only rank 0 sums: it gives up after 3 s, and refuses every later call.
  const std::vector<uint8_t> pair = kernels::make_node_collective_id(&why);
  std::unique_ptr<kernels::NodeCollective> c0, c1;
  std::thread second([&] {
    std::string w;
    c1 = kernels::open_node_collective(pair, 2, 1, 1, after(std::chrono::seconds(60)), &w);
  });
  c0 = kernels::open_node_collective(pair, 2, 0, 0, after(std::chrono::seconds(60)), &why);
  second.join();
  expect(c0 && c1, "the pair did not form: " + why);
  if (c0) {
    std::vector<float> v(1000, 1.f);
    bool threw = false;
    try {
      c0->all_reduce_sum(v.data(), 1000, after(std::chrono::seconds(3)));
    } catch (const std::exception& e) {
      threw = true;
      std::printf("a silent peer: %s\n", e.what());
    }
    expect(threw, "an all-reduce without its peer did not give up");
    threw = false;
    try {
      c0->all_reduce_sum(v.data(), 1000, after(std::chrono::seconds(3)));
    } catch (const std::exception&) {
      threw = true;
    }
    expect(threw, "an aborted communicator took another call");
  }
  c0.reset();
  c1.reset();
  if (failures) return 1;
  std::printf("All tests passed (NCCL between %d GPUs as nodes)\n", ranks);
  return 0;
}
