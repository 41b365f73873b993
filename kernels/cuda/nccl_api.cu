#include "kernels/cuda/nccl_api.h"

#include <dlfcn.h>

#include <mutex>

namespace dtrain::kernels::cuda {
namespace {

template <typename F>
bool resolve(void* lib, const char* symbol, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, symbol));
  return *f != nullptr;
}

}  // namespace

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
                    resolve(lib, "ncclAllReduce", &api.all_reduce) &&
                    resolve(lib, "ncclGroupStart", &api.group_start) &&
                    resolve(lib, "ncclGroupEnd", &api.group_end) &&
                    resolve(lib, "ncclGetErrorString", &api.error_string) &&
                    resolve(lib, "ncclCommAbort", &api.comm_abort) &&
                    resolve(lib, "ncclCommGetAsyncError", &api.comm_async_error);
    resolve(lib, "ncclGetLastError", &api.last_error);
    resolve(lib, "ncclGetUniqueId", &api.get_unique_id);
    resolve(lib, "ncclCommInitRankConfig", &api.comm_init_rank_config);
    if (!ok || api.get_version(&api.version) != ncclSuccess) {
      failure = "libnccl.so.2 lacks the calls dtrain needs (NCCL 2.4 or later): update NCCL";
      api.get_version = nullptr;
    }
  });
  if (api.get_version) return &api;
  if (why) *why = failure;
  return nullptr;
}

std::string nccl_failure(const NcclApi& api, ncclResult_t status) {
  std::string detail = api.error_string(status);
  // One process-wide buffer, never cleared: it may describe an earlier warning, so it is
  // labelled as what it is.
  const char* last = api.last_error ? api.last_error(nullptr) : nullptr;
  if (last && *last) detail += " (NCCL's last warning: " + std::string(last) + ")";
  return detail;
}

std::string nccl_version_text(int v) {
  // 2.9 and later: 22809 is 2.28.9; before: 2708 is 2.7.8
  const int major = v >= 10000 ? v / 10000 : v / 1000;
  const int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return "nccl " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(v % 100);
}

}  // namespace dtrain::kernels::cuda
