#pragma once
// libnccl, loaded at run time (dlopen) once per process, for the device group between a node's
// GPUs (nccl_group.cu) and the communicator between nodes (nccl_nodes.cu): a machine without
// it, or with a broken one, still trains, and says why. The build needs only nccl.h (the types).
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace dtrain::kernels::cuda {

struct NcclApi {
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*last_error)(ncclComm_t) = nullptr;  // optional (NCCL 2.13+): the detail
  // Optional: the communicator between nodes (node_collective.h) needs them, NCCL 2.14+ for a
  // non-blocking init that can be given up.
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int,
                                        ncclConfig_t*) = nullptr;
  int version = 0;
};

// The library's calls; null with `why` (what is missing, how to get it) when it cannot be loaded.
const NcclApi* nccl_api(std::string* why);

// What `status` means, with NCCL's last warning when it has one.
std::string nccl_failure(const NcclApi& api, ncclResult_t status);

// "nccl 2.28.9" from ncclGetVersion's code.
std::string nccl_version_text(int code);

// Makes `device` current (-1: keeps it) and restores the caller's device after. Never throws:
// it runs in release and destructor paths, where a sticky CUDA error must not terminate the
// process (the next checked call reports it).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (device >= 0) cudaSetDevice(device);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace dtrain::kernels::cuda
