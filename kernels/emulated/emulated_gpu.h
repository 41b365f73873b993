#pragma once
// An emulated GPU for tests on machines without one: a backend whose memory is not the
// host's as far as the rest of dtrain knows (host_memory() is false, so every GPU code path
// runs: uploads, downloads, the device codec, host views of the model), while the arithmetic is
// the CPU backend's. Every pointer an operation receives must lie in memory this backend
// allocated; a host pointer handed to "device" code fails loudly (std::logic_error), which is
// exactly the bug a real GPU would turn into a crash. The other way round, the pointers it hands
// out carry a tag in their top bits (as a real GPU's device addresses mean nothing to the host):
// host code that reads or writes "device" memory directly, instead of through download/upload,
// crashes here too (SIGSEGV), instead of only on a GPU.
//
// Builds without CUDA offer DTRAIN_EMULATED_GPUS=N emulated GPUs (kernels/no_gpu.cc); nothing
// else uses this.
#include <memory>

#include "kernels/backend.h"

namespace dtrain::kernels {

std::unique_ptr<Backend> make_emulated_gpu(int device);
// Bytes the emulated GPU `device`'s backends hold now (GpuInfo::memory_used_bytes).
int64_t emulated_gpu_bytes_in_use(int device);

}  // namespace dtrain::kernels
