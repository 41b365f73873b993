#include "kernels/emulated/emulated_group.h"

#include <vector>

namespace dtrain::kernels {
namespace {

class EmulatedGroup final : public DeviceGroup {
 public:
  explicit EmulatedGroup(std::vector<Backend*> ranks) : ranks_(std::move(ranks)) {}
  std::string name() const override { return "emulated"; }
  int size() const override { return int(ranks_.size()); }
  // Through the rank's own backend, so its operations accept the memory as theirs.
  uint32_t* allocate(int rank, int64_t words) override {
    return reinterpret_cast<uint32_t*>(ranks_[size_t(rank)]->allocate(words));
  }
  void release(int rank, uint32_t* p) override {
    ranks_[size_t(rank)]->release(reinterpret_cast<float*>(p));
  }
  void upload(int rank, uint32_t* dst, const uint32_t* src, int64_t words) override {
    ranks_[size_t(rank)]->upload(reinterpret_cast<float*>(dst),
                                 reinterpret_cast<const float*>(src), words);
  }
  // Through each rank's own download and upload, which check that send[r] is rank r's memory
  // and recv[q] rank q's (as NCCL requires of its buffers).
  void all_gather(const std::vector<const uint32_t*>& send, const std::vector<uint32_t*>& recv,
                  int64_t words) override {
    if (words <= 0) return;
    std::vector<float> staging(static_cast<size_t>(words));
    for (size_t r = 0; r < ranks_.size(); ++r) {
      ranks_[r]->download(staging.data(), reinterpret_cast<const float*>(send[r]), words);
      for (size_t q = 0; q < ranks_.size(); ++q)
        ranks_[q]->upload(reinterpret_cast<float*>(recv[q] + r * size_t(words)), staging.data(),
                          words);
    }
  }
  // Summed in rank order on the host, through each rank's own download and upload.
  void all_reduce_sum(const std::vector<const float*>& send, const std::vector<float*>& recv,
                      int64_t n) override {
    if (n <= 0) return;
    std::vector<float> sum(static_cast<size_t>(n), 0.f), part(static_cast<size_t>(n));
    for (size_t r = 0; r < ranks_.size(); ++r) {
      ranks_[r]->download(part.data(), send[r], n);
      for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += part[size_t(i)];
    }
    for (size_t q = 0; q < ranks_.size(); ++q) ranks_[q]->upload(recv[q], sum.data(), n);
  }

 private:
  std::vector<Backend*> ranks_;
};

}  // namespace

std::unique_ptr<DeviceGroup> make_emulated_group(const std::vector<Backend*>& backends,
                                                 std::string* why) {
  for (Backend* b : backends)
    if (b && b->name().rfind("emulated-gpu", 0) != 0) {
      if (why) *why = "not every worker is on an emulated GPU";
      return nullptr;
    }
  std::vector<int> devices;
  if (!group_devices(backends, &devices, why)) return nullptr;
  return std::make_unique<EmulatedGroup>(backends);
}

}  // namespace dtrain::kernels
