// The device group of a CUDA build (kernels/device_group.h) over NCCL. libnccl is loaded at run
// time (dlopen): a node without it, or with a broken one, still trains, sharing through host
// memory, and the trainer says why. The build needs only nccl.h (for the types).
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>

#include "kernels/cuda/cuda_check.h"
#include "kernels/device_group.h"

namespace dtrain::kernels {
namespace cuda {
namespace {

struct NcclApi {
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  int version = 0;
};

template <typename F>
bool resolve(void* lib, const char* symbol, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, symbol));
  return *f != nullptr;
}

// The library, loaded once per process; null with `why` when it cannot be.
const NcclApi* nccl_api(std::string* why) {
  static std::once_flag once;
  static NcclApi api;
  static std::string failure;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      failure = std::string("NCCL is not installed here (") + (e ? e : "libnccl.so.2") +
                "); install it (libnccl2, or the nvidia-nccl wheel on LD_LIBRARY_PATH)";
      return;
    }
    const bool ok = resolve(lib, "ncclGetVersion", &api.get_version) &&
                    resolve(lib, "ncclCommInitAll", &api.comm_init_all) &&
                    resolve(lib, "ncclCommDestroy", &api.comm_destroy) &&
                    resolve(lib, "ncclAllGather", &api.all_gather) &&
                    resolve(lib, "ncclGroupStart", &api.group_start) &&
                    resolve(lib, "ncclGroupEnd", &api.group_end) &&
                    resolve(lib, "ncclGetErrorString", &api.error_string);
    if (!ok || api.get_version(&api.version) != ncclSuccess) {
      failure = "libnccl.so.2 lacks the calls dtrain needs (NCCL 2.x): update NCCL";
      api.get_version = nullptr;
    }
  });
  if (api.get_version) return &api;
  if (why) *why = failure;
  return nullptr;
}

void check(const NcclApi& api, ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  throw CudaError(std::string(call) + " failed: " + api.error_string(status) +
                  "; fix: check the GPUs with nvidia-smi and NCCL_DEBUG=WARN, or run one "
                  "worker per node (sharing then needs no NCCL)");
}

class NcclGroup final : public DeviceGroup {
 public:
  NcclGroup(const NcclApi& api, std::vector<int> devices)
      : api_(api), devices_(std::move(devices)), comms_(devices_.size()),
        streams_(devices_.size()) {
    check(api_, api_.comm_init_all(comms_.data(), int(devices_.size()), devices_.data()),
          "ncclCommInitAll");
    for (size_t r = 0; r < devices_.size(); ++r) {
      DTRAIN_CUDA_CALL(cudaSetDevice(devices_[r]));
      DTRAIN_CUDA_CALL(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking));
    }
  }
  ~NcclGroup() override {
    for (size_t r = 0; r < devices_.size(); ++r) {
      cudaSetDevice(devices_[r]);
      if (streams_[r]) {
        cudaStreamSynchronize(streams_[r]);
        cudaStreamDestroy(streams_[r]);
      }
      if (comms_[r]) api_.comm_destroy(comms_[r]);
    }
  }
  std::string name() const override {
    const int v = api_.version;  // e.g. 22809: 2.28.9
    return "nccl " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
  }
  int size() const override { return int(devices_.size()); }
  uint32_t* allocate(int rank, int64_t words) override {
    Device on(devices_[size_t(rank)]);
    void* p = nullptr;
    DTRAIN_CUDA_CALL(cudaMalloc(&p, sizeof(uint32_t) * size_t(words > 0 ? words : 1)));
    return static_cast<uint32_t*>(p);
  }
  void release(int rank, uint32_t* p) override {
    if (!p) return;
    Device on(devices_[size_t(rank)]);
    cudaFree(p);
  }
  void upload(int rank, uint32_t* dst, const uint32_t* src, int64_t words) override {
    if (words <= 0) return;
    Device on(devices_[size_t(rank)]);
    DTRAIN_CUDA_CALL(cudaMemcpyAsync(dst, src, sizeof(uint32_t) * size_t(words),
                                     cudaMemcpyHostToDevice, streams_[size_t(rank)]));
    DTRAIN_CUDA_CALL(cudaStreamSynchronize(streams_[size_t(rank)]));
  }
  // Every rank's part issued from this thread inside one NCCL group, on the group's own
  // streams, then waited for: nothing here waits on another thread.
  void all_gather(const std::vector<const uint32_t*>& send, const std::vector<uint32_t*>& recv,
                  int64_t words) override {
    if (words <= 0) return;
    Device restore(-1);
    check(api_, api_.group_start(), "ncclGroupStart");
    for (size_t r = 0; r < devices_.size(); ++r) {
      DTRAIN_CUDA_CALL(cudaSetDevice(devices_[r]));
      check(api_, api_.all_gather(send[r], recv[r], size_t(words), ncclUint32, comms_[r],
                                  streams_[r]),
            "ncclAllGather");
    }
    check(api_, api_.group_end(), "ncclGroupEnd");
    for (size_t r = 0; r < devices_.size(); ++r) {
      DTRAIN_CUDA_CALL(cudaSetDevice(devices_[r]));
      DTRAIN_CUDA_CALL(cudaStreamSynchronize(streams_[r]));
    }
  }

 private:
  // Makes `device` current (-1: keeps it) and restores the caller's device after.
  class Device {
   public:
    explicit Device(int device) {
      cudaGetDevice(&previous_);
      if (device >= 0) DTRAIN_CUDA_CALL(cudaSetDevice(device));
    }
    ~Device() { cudaSetDevice(previous_); }

   private:
    int previous_ = 0;
  };

  const NcclApi& api_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
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
