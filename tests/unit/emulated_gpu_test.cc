// The emulated GPU (kernels/emulated/emulated_gpu.h) keeps device-memory discipline both ways,
// so CI finds what a real GPU turns into crashes: operations refuse host pointers, and host
// code that touches its memory directly (instead of download/upload) dies with SIGSEGV. The
// first H200 run (2026-11-26) crashed in evaluation reading a device tensor on the host, a bug
// the emulation let through before the second half existed.
#include <catch2/catch.hpp>

#include "tests/skip.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "kernels/backend.h"

namespace {

std::unique_ptr<dtrain::kernels::Backend> emulated_gpu() {
  setenv("DTRAIN_EMULATED_GPUS", "1", 1);
  std::string why;
  auto gpu = dtrain::kernels::make_gpu_backend(0, &why);
  unsetenv("DTRAIN_EMULATED_GPUS");
  return gpu;
}

}  // namespace

TEST_CASE("emulated GPU memory round-trips through upload and download only") {
  auto gpu = emulated_gpu();
  REQUIRE(gpu);
  if (gpu->name().rfind("emulated-gpu", 0) != 0)
    DTRAIN_SKIP("this build has a real GPU backend (" << gpu->name() << ")");
  CHECK_FALSE(gpu->host_memory());
  float* d = gpu->allocate(4);
  const std::vector<float> in = {1.f, 2.f, 3.f, 4.f};
  std::vector<float> out(4, 0.f);
  gpu->upload(d, in.data(), 4);
  gpu->scale(d, 4, 2.f);
  gpu->download(out.data(), d, 4);
  CHECK(out == std::vector<float>{2.f, 4.f, 6.f, 8.f});

  // An operation given host memory refuses it.
  std::vector<float> host(4, 1.f);
  CHECK_THROWS_AS(gpu->scale(host.data(), 4, 2.f), std::logic_error);

  // Host code reading the device pointer dies, as on a GPU.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL);  // not Catch's handler: the child just dies
    signal(SIGBUS, SIG_DFL);
    volatile float v = d[1];
    (void)v;
    _exit(0);  // reached only if the read worked
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK((WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS));
  gpu->release(d);
}
