#pragma once
// The file handshake between a benchmark's driver and its member processes (mesh_scale_member,
// ring_member): files in a shared directory, written atomically, each wait with a deadline that
// says what it waited for.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace dtrain::bench {

inline bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Atomic, so the driver and the other members never read half a file.
inline void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

// Polls for `path` until `deadline`; false (after saying, as `who`, what it waited for) on
// timeout.
inline bool wait_for_file(const std::string& path, std::chrono::steady_clock::time_point deadline,
                          const std::string& who, const std::string& what,
                          std::chrono::milliseconds poll) {
  while (!file_exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s: timed out waiting for %s (%s)\n", who.c_str(), path.c_str(),
                   what.c_str());
      return false;
    }
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace dtrain::bench
