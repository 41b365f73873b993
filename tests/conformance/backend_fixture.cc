#include "tests/conformance/backend_fixture.h"

#include <cstdlib>
#include <iostream>

#include "kernels/gpu_devices.h"

namespace dtrain::conformance {

std::vector<Backend*> backends_under_test() {
  static std::vector<Backend*> list = [] {
    std::vector<Backend*> out{&kernels::cpu_backend()};
    std::string why;
    static std::unique_ptr<Backend> gpu;
    if (!kernels::list_gpus(&why).empty()) gpu = kernels::make_gpu_backend(0, &why);
    if (gpu) {
      gpu->allow_tf32(false);
      out.push_back(gpu.get());
      std::cerr << "conformance: testing cpu and " << gpu->name() << "\n";
    } else {
      const char* require = std::getenv("DTRAIN_REQUIRE_GPU");
      if (require && std::string(require) == "1") {
        std::cerr << "skipped: no GPU backend here (" << why << ")\n";
        std::exit(77);
      }
      std::cerr << "conformance: testing cpu only (" << why << ")\n";
    }
    return out;
  }();
  return list;
}

}  // namespace dtrain::conformance
