// libFuzzer target for the status port as anyone who can reach it meets it: each input is sent
// as it is, over a TCP connection on loopback, to a real StatusServer (the daemon's HTTP server,
// its routes, its Host and token checks, its bounds), and the reply read until the server closes.
// Every 64 inputs a well-formed request with the token must still be answered 200: a server
// that stops answering, or crashes its thread, fails the run like a crash.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <memory>
#include <string>

#include "core/util/error.h"
#include "daemon/http/status_server.h"

using namespace dtrain;

namespace {

constexpr const char* kToken = "fuzz-token-0123456789";

daemon::StatusServer& server() {
  static std::unique_ptr<daemon::StatusServer> s = [] {
    daemon::DashboardApi api;
    api.jobs = [] { return daemon::Json::array({{{"id", "00000000000000aa"}, {"state", "running"}}}); };
    api.nodes = [] { return daemon::Json::array({{{"name", "node-1"}, {"state", "alive"}}}); };
    api.job = [](uint64_t id) -> daemon::Json {
      if (id != 0xaa) throw core::UserError("no job " + std::to_string(id), "list the jobs");
      return {{"id", "00000000000000aa"}, {"state", "running"}, {"log", {"a line"}}};
    };
    const auto status = [] {
      return daemon::Json{{"node", {{"name", "node-1"}}},
                          {"jobs", {{{"id", "aa"}, {"progress", {{"epoch", 2}}}}}},
                          {"peers", {{{"peer", "node-2"}, {"bytes_in", 5}}}}};
    };
    return std::make_unique<daemon::StatusServer>("127.0.0.1", 0, status, api,
                                                  daemon::HttpAccess{{"dtrain.example"}, kToken});
  }();
  return *s;
}

// Sends `size` bytes on a new connection and reads the reply until the server closes or is
// silent for `quiet_ms`; then closes the connection (which ends the server's read of an
// incomplete request). The reply's bytes. (No half-close: cpp-httplib drops a request whose
// client shut its sending side before the answer.)
std::string exchange(const uint8_t* data, size_t size, int quiet_ms) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(server().port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::fprintf(stderr, "the status server refuses connections: %s\n", std::strerror(errno));
    std::abort();
  }
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // it closed early (a bounded header or body): fine
    sent += size_t(n);
  }
  std::string reply;
  char buffer[4096];
  pollfd p{fd, POLLIN, 0};
  // Once the answer has begun, the rest follows at once; a connection kept alive after it
  // is not waited for long.
  while (::poll(&p, 1, reply.empty() ? quiet_ms : std::min(quiet_ms, 2)) > 0) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    if (reply.size() < (1 << 20)) reply.append(buffer, size_t(n));
  }
  ::close(fd);
  return reply;
}

void check_still_serving() {
  const std::string request = std::string("GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n") +
                              "Authorization: Bearer " + kToken + "\r\nConnection: close\r\n\r\n";
  // Within the server's read timeout (5 s) and some: connections of earlier inputs that are
  // still being read hold its threads at most that long.
  const std::string reply =
      exchange(reinterpret_cast<const uint8_t*>(request.data()), request.size(), 10000);
  if (reply.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "the status server no longer answers a good request: '%s'\n",
                 reply.substr(0, 200).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t runs = 0;
  exchange(data, size, 10);  // a reply on loopback comes well within 10 ms, or not at all
  if (++runs % 64 == 0) check_still_serving();
  return 0;
}
