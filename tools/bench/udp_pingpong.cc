// The baseline of tools/bench/mesh_scale: one-way latency of a single tiny datagram over plain
// loopback UDP sockets (no protocol, no authentication), as half the round trip of a ping-pong
// between two threads with blocking sockets. Both ends sleep in recv like the endpoint's I/O
// thread does, so the figure includes one wake-up per hop: what one mesh hop cannot beat.
// --cpu pins both threads to one core: on a VM, waking a thread on an idle other core can cost
// 50 us more (the hypervisor wakes the virtual CPU), and whether it does depends on what else
// runs; on one core the figure is the kernel's path and a context switch, and stays put.
// Prints "one_way_us P50 P99".
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

namespace dtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A socket bound to a free loopback port whose receives give up after a second, so a lost
// datagram ends the run instead of hanging it.
int bound_socket(sockaddr_in* addr) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  *addr = {};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(addr), sizeof *addr) != 0) return -1;
  socklen_t len = sizeof *addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(addr), &len);
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

int run(int rounds, int size) {
  sockaddr_in a_addr, b_addr;
  const int a = bound_socket(&a_addr), b = bound_socket(&b_addr);
  if (a < 0 || b < 0) {
    std::perror("udp_pingpong: cannot bind a loopback UDP socket");
    return 2;
  }
  std::atomic<bool> echo_failed{false};
  std::thread echo([&] {
    std::vector<char> buf(size);
    for (int i = 0; i < rounds; ++i) {
      const ssize_t n = recv(b, buf.data(), buf.size(), 0);
      if (n <= 0 ||
          sendto(b, buf.data(), n, 0, reinterpret_cast<sockaddr*>(&a_addr), sizeof a_addr) != n) {
        echo_failed = true;
        return;
      }
    }
  });
  std::vector<char> buf(size, 0x5A);
  std::vector<double> one_way_us;
  for (int i = 0; i < rounds && !echo_failed; ++i) {
    const auto t = Clock::now();
    if (sendto(a, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&b_addr), sizeof b_addr) !=
            ssize_t(buf.size()) ||
        recv(a, buf.data(), buf.size(), 0) != ssize_t(buf.size())) {
      std::fprintf(stderr, "udp_pingpong: round %d got no echo within 1 s\n", i);
      break;
    }
    one_way_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count() / 2);
  }
  echo_failed = true;
  shutdown(b, SHUT_RDWR);  // wakes the echo thread if it still waits
  echo.join();
  close(a);
  close(b);
  if (one_way_us.size() < size_t(rounds)) return 1;
  // The first rounds warm caches and the scheduler's idea of these threads.
  one_way_us.erase(one_way_us.begin(), one_way_us.begin() + rounds / 10);
  std::sort(one_way_us.begin(), one_way_us.end());
  std::printf("one_way_us %.1f %.1f\n", one_way_us[one_way_us.size() / 2],
              one_way_us[one_way_us.size() * 99 / 100]);
  return 0;
}

}  // namespace
}  // namespace dtrain::bench

int main(int argc, char** argv) {
  CLI::App app{"loopback UDP ping-pong: one-way latency of one datagram (mesh_scale's baseline)"};
  int rounds = 5000, size = 32;
  app.add_option("--rounds", rounds)->check(CLI::Range(100, 10000000));
  app.add_option("--size", size, "datagram bytes")->check(CLI::Range(1, 65507));
  int cpu = -1;
  app.add_option("--cpu", cpu, "pin both threads to this core (-1: let the scheduler place them)")
      ->check(CLI::Range(-1, CPU_SETSIZE - 1));
  CLI11_PARSE(app, argc, argv);
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    // Before the echo thread starts: it inherits the mask.
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      std::perror("udp_pingpong: cannot pin to --cpu");
      return 2;
    }
  }
  return dtrain::bench::run(rounds, size);
}
