// The communicator between nodes of a CUDA build (kernels/node_collective.h) over NCCL: one
// rank per node, non-blocking (NCCL 2.14+), so that forming it and each all-reduce can be given
// up when the mesh says a node is lost (an NCCL call on a dead peer waits forever otherwise).
// The sums go through one device buffer on the node's first GPU: its workers' sum arrives in
// host memory (core/train/gradient_rounds.h), and the mean goes back there.
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/nccl_api.h"
#include "kernels/node_collective.h"

namespace dtrain::kernels {
namespace cuda {
namespace {

std::string failed(const NcclApi& api, ncclResult_t status, const char* call) {
  return std::string(call) + " failed: " + nccl_failure(api, status);
}

class NcclNodes final : public NodeCollective {
 public:
  NcclNodes(const NcclApi& api, ncclComm_t comm, cudaStream_t stream, int device, int ranks)
      : api_(api), comm_(comm), stream_(stream), device_(device), ranks_(ranks) {}
  // Aborted, never destroyed: ncclCommDestroy waits for the peers' outstanding work, and a node
  // leaves the communicator when some peer failed or is gone.
  ~NcclNodes() override {
    DeviceGuard on(device_);
    abort();
    cudaStreamSynchronize(stream_);  // its kernels stopped with the abort
    if (buffer_) cudaFree(buffer_);
    cudaStreamDestroy(stream_);
  }
  NcclNodes(const NcclNodes&) = delete;
  NcclNodes& operator=(const NcclNodes&) = delete;

  std::string name() const override {
    return nccl_version_text(api_.version) + " between " + std::to_string(ranks_) + " nodes";
  }

  void all_reduce_sum(float* values, int64_t n, const GiveUp& give_up) override {
    if (aborted_)
      throw CudaError("the NCCL communicator between nodes was aborted after an earlier failure");
    if (n <= 0) return;
    DeviceGuard on(device_);
    try {
      reserve(n);
      const size_t bytes = sizeof(float) * size_t(n);
      DTRAIN_CUDA_CALL(
          cudaMemcpyAsync(buffer_, values, bytes, cudaMemcpyHostToDevice, stream_));
      ncclResult_t issued = api_.all_reduce(buffer_, buffer_, size_t(n), ncclFloat32, ncclSum,
                                            comm_, stream_);
      // Non-blocking: the call may still be queuing its work; the stream is usable once not.
      while (issued == ncclInProgress) {
        give_up_if(give_up);
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        api_.comm_async_error(comm_, &issued);
      }
      if (issued != ncclSuccess) throw CudaError(failed(api_, issued, "ncclAllReduce"));
      // Waited for before the copy back: a copy into pageable memory returns only once done,
      // and behind a kernel whose peer died it would never return (nothing polled meanwhile).
      wait_for_stream(give_up);
      DTRAIN_CUDA_CALL(
          cudaMemcpyAsync(values, buffer_, bytes, cudaMemcpyDeviceToHost, stream_));
      DTRAIN_CUDA_CALL(cudaStreamSynchronize(stream_));  // not the legacy default stream
    } catch (...) {
      abort();
      throw;
    }
  }

 private:
  void reserve(int64_t n) {
    if (n <= capacity_) return;
    if (buffer_) cudaFree(buffer_);
    buffer_ = nullptr;
    capacity_ = 0;
    DTRAIN_CUDA_CALL(cudaMalloc(reinterpret_cast<void**>(&buffer_), sizeof(float) * size_t(n)));
    capacity_ = n;
  }
  // Until the stream is done, or the communicator reports a failed peer or link, or the caller
  // gives up (a node lost, the deadline).
  void wait_for_stream(const GiveUp& give_up) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) DTRAIN_CUDA_CALL(e);
      ncclResult_t async = ncclSuccess;
      const ncclResult_t asked = api_.comm_async_error(comm_, &async);
      if (asked != ncclSuccess) throw CudaError(failed(api_, asked, "ncclCommGetAsyncError"));
      if (async != ncclSuccess && async != ncclInProgress)
        throw CudaError(failed(api_, async, "the NCCL all-reduce between nodes"));
      give_up_if(give_up);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  void give_up_if(const GiveUp& give_up) {
    if (give_up && give_up())
      throw CudaError("the NCCL all-reduce between nodes was given up: a node was lost or "
                      "the step's deadline passed");
  }
  void abort() {
    if (aborted_) return;
    aborted_ = true;
    api_.comm_abort(comm_);  // its kernels stop; the stream then drains
    comm_ = nullptr;
  }

  const NcclApi& api_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  const int device_, ranks_;
  float* buffer_ = nullptr;
  int64_t capacity_ = 0;
  bool aborted_ = false;
};

// Joins the communicator of `uid`; null with `why`. Polls the non-blocking init so that a rank
// that never comes costs only the caller's patience.
ncclComm_t join(const NcclApi& api, const ncclUniqueId& uid, int ranks, int rank,
                const GiveUp& give_up, std::string* why) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = api.comm_init_rank_config(&comm, ranks, uid, rank, &config);
  while (r == ncclInProgress && comm) {
    if (give_up && give_up()) {
      api.comm_abort(comm);
      *why = "NCCL's communicator between nodes did not form in time (a node never joined it; "
             "NCCL_DEBUG=WARN on every node says why): check that the nodes reach the "
             "controller's address on NCCL_SOCKET_IFNAME";
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    api.comm_async_error(comm, &r);
  }
  if (r == ncclSuccess && comm) return comm;
  *why = failed(api, r, "ncclCommInitRankConfig");
  if (comm) api.comm_abort(comm);
  return nullptr;
}

}  // namespace
}  // namespace cuda

std::vector<uint8_t> make_node_collective_id(std::string* why) {
  std::string problem;
  const cuda::NcclApi* api = cuda::nccl_api(&problem);
  ncclUniqueId uid;
  if (api && !api->get_unique_id)
    problem = "libnccl.so.2 has no ncclGetUniqueId: update NCCL";
  else if (api) {
    const ncclResult_t r = api->get_unique_id(&uid);
    if (r == ncclSuccess) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(uid.internal);
      return std::vector<uint8_t>(bytes, bytes + sizeof uid.internal);
    }
    problem = cuda::failed(*api, r, "ncclGetUniqueId");
  }
  if (why) *why = problem;
  return {};
}

std::unique_ptr<NodeCollective> open_node_collective(const std::vector<uint8_t>& id, int ranks,
                                                     int rank, int device, const GiveUp& give_up,
                                                     std::string* why) {
  std::string problem;
  auto fail = [&](const std::string& what) -> std::unique_ptr<NodeCollective> {
    if (why) *why = what;
    return nullptr;
  };
  static_assert(sizeof(ncclUniqueId) == kNodeCollectiveIdBytes, "NCCL's unique id changed size");
  if (id.size() != kNodeCollectiveIdBytes || ranks < 2 || rank < 0 || rank >= ranks)
    return fail("the start message's NCCL id or rank does not fit (" +
                std::to_string(id.size()) + " bytes, rank " + std::to_string(rank) + " of " +
                std::to_string(ranks) + "): run the same dtrain release on every node");
  const cuda::NcclApi* api = cuda::nccl_api(&problem);
  if (!api) return fail(problem);
  if (!api->comm_init_rank_config)
    return fail(cuda::nccl_version_text(api->version) +
                " cannot form a communicator that can be given up (ncclCommInitRankConfig): "
                "update to NCCL 2.14 or later");
  // It would override blocking = 0, and a wait for a lost node could not be given up.
  const char* blocking = std::getenv("NCCL_COMM_BLOCKING");
  if (blocking && std::strtol(blocking, nullptr, 10) == 1)
    return fail("NCCL_COMM_BLOCKING=1 in dtraind's environment makes NCCL's calls wait without "
                "a deadline: unset it");
  cuda::DeviceGuard on(device);
  cudaStream_t stream = nullptr;
  if (cudaSetDevice(device) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return fail("GPU " + std::to_string(device) + " cannot take NCCL's communicator: " +
                cudaGetErrorString(cudaGetLastError()));
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), sizeof uid.internal);
  ncclComm_t comm = cuda::join(*api, uid, ranks, rank, give_up, &problem);
  if (!comm) {
    cudaStreamDestroy(stream);
    return fail(problem);
  }
  return std::make_unique<cuda::NcclNodes>(*api, comm, stream, device, ranks);
}

}  // namespace dtrain::kernels
