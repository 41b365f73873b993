// GPU-to-GPU sharing (core/train/gpu_sharing.h): a message all-gathered from one rank lands,
// word for word, in every rank's device memory, from the sender's device words or from its
// host words; the group is refused, with why, where NCCL could not serve (two workers on one
// GPU; no NCCL: DTRAIN_EMULATED_NCCL=0). On real GPUs (a CUDA build; NCCL) with up to three
// of them as ranks (one GPU: a communicator of one); elsewhere three emulated GPUs.
// DTRAIN_REQUIRE_GPU=1 (tools/test.sh's CUDA run, tools/gpu/checks.sh) exits 77 without one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "core/train/gpu_sharing.h"
#include "kernels/backend.h"
#include "kernels/gpu_devices.h"
#include "tests/gpu_or_emulated.h"
#include "tests/skip.h"

namespace dtrain::core {
namespace {

struct Gpus {
  std::vector<std::unique_ptr<kernels::Backend>> owned;
  std::vector<kernels::Backend*> ranks;
  bool emulated = true;
};

// The GPUs to use: up to three real ones, else three emulated ones.
std::vector<int> devices() {
  testing::real_gpus_or_emulated(3);
  std::vector<int> out;
  for (const kernels::GpuInfo& g : kernels::list_gpus())
    if (out.size() < 3) out.push_back(g.index);
  return out;
}

Gpus gpus(const std::vector<int>& on) {
  Gpus g;
  for (int d : on) {
    std::string why;
    g.owned.push_back(kernels::make_gpu_backend(d, &why));
    REQUIRE(g.owned.back());
    g.emulated = g.emulated && g.owned.back()->name().rfind("emulated-gpu", 0) == 0;
    g.ranks.push_back(g.owned.back().get());
  }
  return g;
}

std::vector<uint32_t> download(kernels::Backend& b, const uint32_t* p, size_t n) {
  std::vector<uint32_t> out(n);
  b.download(reinterpret_cast<float*>(out.data()), reinterpret_cast<const float*>(p),
             int64_t(n));
  return out;
}

}  // namespace

TEST_CASE("a message all-gathered from one GPU lands word for word on every GPU") {
  const std::vector<int> on = devices();
  Gpus g = gpus(on);
  const int n = int(on.size());
  unsetenv("DTRAIN_EMULATED_NCCL");
  std::string how;
  std::unique_ptr<GpuSharing> sharing = make_gpu_sharing(g.ranks, &how);
  INFO(how);
  REQUIRE(sharing);
  std::printf("%s\n", how.c_str());
  if (g.emulated) CHECK(how == "emulated between GPUs 0, 1, 2");
  else CHECK(how.rfind("nccl ", 0) == 0);
  CHECK(sharing->ranks() == n);
  const int last = n - 1;

  EncodedMessage m;
  m.words = {7, 0x80000003u, 11, 12, 99};
  // From the host words (the sender's message is not on its GPU).
  GpuSharing::Landed a = sharing->share(std::min(1, last), m, nullptr);
  REQUIRE(a.words.size() == size_t(n));
  for (int q = 0; q < n; ++q) CHECK(download(*g.ranks[q], a.words[q], 5) == m.words);

  // From the sender's device words; a longer message after a shorter one grows the buffers,
  // and the first landing stays intact while it is held.
  EncodedMessage big;
  for (uint32_t i = 0; i < 1000; ++i) big.words.push_back(i * 2654435761u);
  float* on_gpu = g.ranks[last]->allocate(1000);
  g.ranks[last]->upload(on_gpu, reinterpret_cast<const float*>(big.words.data()), 1000);
  GpuSharing::Landed b = sharing->share(last, big, reinterpret_cast<const uint32_t*>(on_gpu));
  for (int q = 0; q < n; ++q) CHECK(download(*g.ranks[q], b.words[q], 1000) == big.words);
  for (int q = 0; q < n; ++q) CHECK(download(*g.ranks[q], a.words[q], 5) == m.words);
  CHECK(sharing->rounds() == 2);
  a = {};
  b = {};
  g.ranks[last]->release(on_gpu);
  sharing.reset();  // before the backends: its buffers are theirs
}

TEST_CASE("GPU sharing falls back to host memory when two workers share a GPU, and says why") {
  const std::vector<int> on = devices();
  Gpus same = gpus({on[0], on[0]});
  std::string how;
  CHECK_FALSE(make_gpu_sharing(same.ranks, &how));
  CHECK(how.rfind("host memory (two workers share GPU " + std::to_string(on[0]), 0) == 0);
}

TEST_CASE("GPU sharing falls back to host memory without NCCL, and says why") {
  if (!gpus({devices()[0]}).emulated)
    DTRAIN_SKIP("real GPUs here: the case imitates a machine without NCCL on emulated ones");
  Gpus two = gpus({0, 1});
  std::string how;
  setenv("DTRAIN_EMULATED_NCCL", "0", 1);
  CHECK_FALSE(make_gpu_sharing(two.ranks, &how));
  unsetenv("DTRAIN_EMULATED_NCCL");
  CHECK(how == "host memory (DTRAIN_EMULATED_NCCL=0 (emulated GPUs without NCCL))");
}

// A group that only counts and fails on demand (what no real GPU lets a test do).
class FakeGroup final : public kernels::DeviceGroup {
 public:
  explicit FakeGroup(bool* fail) : fail_(fail) {}
  std::string name() const override { return "fake"; }
  int size() const override { return 2; }
  uint32_t* allocate(int, int64_t words) override { return new uint32_t[size_t(words)]; }
  void release(int, uint32_t* p) override { delete[] p; }
  void upload(int, uint32_t*, const uint32_t*, int64_t) override {}
  void all_gather(const std::vector<const uint32_t*>&, const std::vector<uint32_t*>&,
                  int64_t) override {
    if (*fail_) throw std::runtime_error("ncclAllGather failed: unhandled system error");
  }
  void all_reduce_sum(const std::vector<const float*>&, const std::vector<float*>&,
                      int64_t) override {}

 private:
  bool* fail_;
};

TEST_CASE("GPU sharing bounds the buffers receivers hold and survives a failed round") {
  bool fail = false;
  GpuSharing sharing(std::make_unique<FakeGroup>(&fail));
  EncodedMessage m;
  m.words = {1, 2, 3};
  // Receivers that never apply pin at most kMaxInFlight rounds; then host memory.
  std::vector<GpuSharing::Landed> held;
  for (int i = 0; i < GpuSharing::kMaxInFlight; ++i) {
    held.push_back(sharing.share(0, m, nullptr));
    REQUIRE(held.back().words.size() == 2);
  }
  CHECK(sharing.share(0, m, nullptr).words.empty());
  held.pop_back();  // one applied: GPU to GPU again, reusing its buffer
  CHECK(sharing.share(0, m, nullptr).words.size() == 2);
  held.clear();
  // A failed round: this message and every later one through host memory, and why.
  fail = true;
  CHECK(sharing.share(1, m, nullptr).words.empty());
  fail = false;
  CHECK(sharing.share(1, m, nullptr).words.empty());
  CHECK(sharing.failure() == "ncclAllGather failed: unhandled system error");
  CHECK(sharing.rounds() == GpuSharing::kMaxInFlight + 1);
}

}  // namespace dtrain::core
