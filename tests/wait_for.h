#pragma once
// Polls `done` every 10 ms until it holds or `deadline` passes; on a timeout the failing
// assertion's report says what the test was waiting for (a distributed test's wait never hangs
// and never fails silently).
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace dtrain::testing {

inline bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds deadline,
                     const std::string& what) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done()) return true;
  UNSCOPED_INFO("timed out after " << deadline.count() << " ms waiting for " << what);
  return false;
}

}  // namespace dtrain::testing
