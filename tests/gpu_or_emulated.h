#pragma once
// The GPUs a GPU test runs on: the real ones where there are some (a CUDA build on a GPU
// machine), else `emulated` emulated GPUs (a build without CUDA: kernels/emulated). Under
// DTRAIN_REQUIRE_GPU=1 (tools/test.sh's CUDA run, tools/gpu/checks.sh) a machine without a
// real GPU skips the whole binary instead: "skipped: no GPU here", exit 77.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/gpu_devices.h"

namespace dtrain::testing {

// True on real GPUs; false after setting up the emulated ones.
inline bool real_gpus_or_emulated(int emulated) {
  if (!kernels::list_gpus().empty()) return true;
  const char* require = std::getenv("DTRAIN_REQUIRE_GPU");
  if (require && std::string(require) == "1") {
    std::printf("skipped: no GPU here\n");
    std::exit(77);
  }
  setenv("DTRAIN_EMULATED_GPUS", std::to_string(emulated).c_str(), 1);
  return false;
}

}  // namespace dtrain::testing
