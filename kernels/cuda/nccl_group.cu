// The device group of a CUDA build (kernels/device_group.h) over NCCL. libnccl is loaded at run
// time (dlopen): a node without it, or with a broken one, still trains, sharing through host
// memory, and the trainer says why. The build needs only nccl.h (for the types).
#include <nccl.h>

#include <chrono>
#include <thread>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/nccl_api.h"
#include "kernels/device_group.h"

namespace dtrain::kernels {
namespace cuda {
namespace {

void check(const NcclApi& api, ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  throw CudaError(std::string(call) + " failed: " + nccl_failure(api, status) +
                  "; fix: check the GPUs with nvidia-smi and NCCL_DEBUG=WARN, or run one "
                  "worker per node (sharing then needs no NCCL)");
}

// How long one all-gather may take before the group gives up on it (a stuck peer or link):
// the round then fails, the communicators are aborted, and the node shares through host
// memory from then on (core/train/gpu_sharing.h).
constexpr auto kRoundDeadline = std::chrono::seconds(60);

class NcclGroup final : public DeviceGroup {
 public:
  NcclGroup(const NcclApi& api, std::vector<int> devices)
      : api_(api), devices_(std::move(devices)), comms_(devices_.size()),
        streams_(devices_.size()) {
    DeviceGuard restore(-1);
    check(api_, api_.comm_init_all(comms_.data(), int(devices_.size()), devices_.data()),
          "ncclCommInitAll");
    try {
      for (size_t r = 0; r < devices_.size(); ++r) {
        DTRAIN_CUDA_CALL(cudaSetDevice(devices_[r]));
        DTRAIN_CUDA_CALL(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking));
      }
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~NcclGroup() override { destroy(); }
  std::string name() const override { return nccl_version_text(api_.version); }
  int size() const override { return int(devices_.size()); }
  uint32_t* allocate(int rank, int64_t words) override {
    DeviceGuard on(devices_[size_t(rank)]);
    void* p = nullptr;
    DTRAIN_CUDA_CALL(cudaMalloc(&p, sizeof(uint32_t) * size_t(words > 0 ? words : 1)));
    return static_cast<uint32_t*>(p);
  }
  void release(int rank, uint32_t* p) override {
    if (!p) return;
    DeviceGuard on(devices_[size_t(rank)]);
    cudaFree(p);
  }
  void upload(int rank, uint32_t* dst, const uint32_t* src, int64_t words) override {
    if (words <= 0) return;
    DeviceGuard on(devices_[size_t(rank)]);
    DTRAIN_CUDA_CALL(cudaMemcpyAsync(dst, src, sizeof(uint32_t) * size_t(words),
                                     cudaMemcpyHostToDevice, streams_[size_t(rank)]));
    DTRAIN_CUDA_CALL(cudaStreamSynchronize(streams_[size_t(rank)]));
  }
  // Every rank's part issued from this thread inside one NCCL group, on the group's own
  // streams, then waited for with a deadline: nothing here waits on another thread.
  void all_gather(const std::vector<const uint32_t*>& send, const std::vector<uint32_t*>& recv,
                  int64_t words) override {
    if (words <= 0) return;
    collective("all-gather", [&](size_t r) {
      check(api_, api_.all_gather(send[r], recv[r], size_t(words), ncclUint32, comms_[r],
                                  streams_[r]),
            "ncclAllGather");
    });
  }
  void all_reduce_sum(const std::vector<const float*>& send, const std::vector<float*>& recv,
                      int64_t n) override {
    if (n <= 0) return;
    collective("all-reduce", [&](size_t r) {
      check(api_, api_.all_reduce(send[r], recv[r], size_t(n), ncclFloat32, ncclSum, comms_[r],
                                  streams_[r]),
            "ncclAllReduce");
    });
  }

 private:
  // `issue(r)` launches rank r's part; all inside one NCCL group, then waited for.
  template <class Issue>
  void collective(const char* what, Issue issue) {
    if (aborted_) throw CudaError("the GPUs' NCCL group was aborted after an earlier failure");
    DeviceGuard restore(-1);
    check(api_, api_.group_start(), "ncclGroupStart");
    try {
      for (size_t r = 0; r < devices_.size(); ++r) {
        DTRAIN_CUDA_CALL(cudaSetDevice(devices_[r]));
        issue(r);
      }
    } catch (...) {
      api_.group_end();  // a group left open would swallow this thread's later NCCL calls
      abort();
      throw;
    }
    const ncclResult_t ended = api_.group_end();
    if (ended != ncclSuccess) abort();  // ranks whose part was launched would spin on
    check(api_, ended, "ncclGroupEnd");
    wait_all(what);
  }
  // Polls every rank's stream until done or kRoundDeadline, and its communicator for an
  // asynchronous error (a failed peer or link, which would otherwise show only as the
  // deadline); on an error or the deadline the communicators are aborted (their kernels stop)
  // and the round fails.
  void wait_all(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + kRoundDeadline;
    for (size_t r = 0; r < devices_.size(); ++r) {
      DTRAIN_CUDA_CALL(cudaSetDevice(devices_[r]));
      for (;;) {
        const cudaError_t e = cudaStreamQuery(streams_[r]);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) {
          abort();
          DTRAIN_CUDA_CALL(e);
        }
        check_async_errors(what);
        if (std::chrono::steady_clock::now() > deadline) {
          abort();
          throw CudaError(std::string("an NCCL ") + what +
                          " between GPUs did not finish within 60 s (GPU " +
                          std::to_string(devices_[r]) +
                          "); fix: check the GPUs and their links with nvidia-smi topo -m and "
                          "NCCL_DEBUG=WARN");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  // Every rank's communicator, not only the one waited on: a failed later rank leaves the
  // earlier ones spinning with nothing to report.
  void check_async_errors(const char* what) {
    for (ncclComm_t c : comms_) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t asked = api_.comm_async_error(c, &async);
      if (asked == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) continue;
      abort();
      check(api_, asked != ncclSuccess ? asked : async,
            (std::string("an NCCL ") + what + " between GPUs").c_str());
    }
  }
  void abort() {
    if (aborted_) return;
    aborted_ = true;
    for (ncclComm_t& c : comms_)
      if (c) {
        api_.comm_abort(c);
        c = nullptr;
      }
  }
  void destroy() {
    DeviceGuard restore(-1);
    for (size_t r = 0; r < devices_.size(); ++r) {
      cudaSetDevice(devices_[r]);
      if (streams_[r]) {
        if (!aborted_) cudaStreamSynchronize(streams_[r]);
        cudaStreamDestroy(streams_[r]);
        streams_[r] = nullptr;
      }
      if (comms_[r]) {
        api_.comm_destroy(comms_[r]);
        comms_[r] = nullptr;
      }
    }
  }

  const NcclApi& api_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  bool aborted_ = false;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceGroup> make_device_group(const std::vector<Backend*>& backends,
                                               std::string* why) {
  std::vector<int> devices;
  if (!group_devices(backends, &devices, why)) return nullptr;
  const cuda::NcclApi* api = cuda::nccl_api(why);
  if (!api) return nullptr;
  try {
    return std::make_unique<cuda::NcclGroup>(*api, devices);
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return nullptr;
  }
}

}  // namespace dtrain::kernels
