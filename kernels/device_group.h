#pragma once
// GPU-to-GPU sharing among the GPU workers of one process (docs/architecture/core.md, "Sharing"):
// one rank per GPU, NCCL in CUDA builds (kernels/cuda/nccl_group.cu, libnccl loaded at run
// time), host copies between emulated GPUs otherwise. The trainer all-gathers encoded messages
// over it, so a message reaches the other GPUs of its node without going through host memory,
// and mode allreduce sums its workers' gradients over it (core/train/gradient_rounds.h).
//
// Every call is driven from one thread for all ranks (the group issues each rank's part of a
// collective itself), so no rank can wait on a peer that is busy elsewhere: a collective cannot
// hang on a slow or failed worker. Calls must not overlap (the caller serialises them).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace dtrain::kernels {

class DeviceGroup {
 public:
  virtual ~DeviceGroup() = default;
  // What it runs on: "nccl 2.28.9", "emulated".
  virtual std::string name() const = 0;
  virtual int size() const = 0;
  // `words` 32-bit words of device memory on rank r's GPU, owned by the group (thread-safe).
  virtual uint32_t* allocate(int rank, int64_t words) = 0;
  virtual void release(int rank, uint32_t* p) = 0;
  // Host words into rank r's memory (a message that is not on its GPU yet); returns when done.
  virtual void upload(int rank, uint32_t* dst, const uint32_t* src, int64_t words) = 0;
  // One all-gather: send[r] (`words` words on rank r's GPU) lands at recv[q] + r * words on
  // every rank q. Returns when every copy is complete. Throws (CudaError) on failure.
  virtual void all_gather(const std::vector<const uint32_t*>& send,
                          const std::vector<uint32_t*>& recv, int64_t words) = 0;
  // One all-reduce: recv[q] (`n` floats on rank q's GPU) gets the sum over the ranks of send[r]
  // (each on rank r's GPU), the same bits on every rank. send is left as it was. Returns when
  // every rank's sum is complete. Throws (CudaError) on failure.
  virtual void all_reduce_sum(const std::vector<const float*>& send,
                              const std::vector<float*>& recv, int64_t n) = 0;
};

// The devices of `backends` in rank order when they can form a group: every one a GPU backend,
// no device twice, at least one. Otherwise false, with `why`. (Shared by the implementations.)
inline bool group_devices(const std::vector<Backend*>& backends, std::vector<int>* devices,
                          std::string* why) {
  devices->clear();
  for (Backend* b : backends) {
    std::string problem;
    if (!b || b->device() < 0) problem = "not every worker is on a GPU";
    for (int d : *devices)
      if (b && d == b->device())
        problem = "two workers share GPU " + std::to_string(d) +
                  " (a device group needs one worker per GPU: workers_per_node: auto)";
    if (!problem.empty()) {
      if (why) *why = problem;
      return false;
    }
    devices->push_back(b->device());
  }
  if (devices->empty() && why) *why = "no GPU workers";
  return !devices->empty();
}

// A group over the GPUs of `backends` (GPU backends, one per distinct device, rank = position).
// Null, with `why` saying what is missing and what to do, when there is none: no GPU backends,
// two on one device, a build or machine without NCCL, or DTRAIN_EMULATED_NCCL=0 with emulated
// GPUs (tests of the host fallback).
std::unique_ptr<DeviceGroup> make_device_group(const std::vector<Backend*>& backends,
                                               std::string* why);

}  // namespace dtrain::kernels
