// A user-space delay line between two TAP devices in two network namespaces: every Ethernet
// frame read from one is written to the other after a fixed delay. tools/netns_hosts.sh puts
// one between each test host and the hub's bridge, because this kernel has no netem: with half
// the one-way delay on each host's line, any two hosts see the whole one-way delay
// (docs/operations.md, "Test hosts with latency").
//
//   delay_line HOST_NS HOST_TAP HUB_NS HUB_TAP DELAY    DELAY: e.g. 12500us, 12.5ms, 0
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/delay_line/frame_queue.h"

namespace {

using dtrain::tools::FrameQueue;
using std::chrono::microseconds;

volatile sig_atomic_t stop_requested = 0;
void request_stop(int) { stop_requested = 1; }

// Enough for every frame in flight at 10 Gbit/s and 100 ms, and far below this machine's memory.
constexpr size_t kMaxQueuedBytes = 128u << 20;
constexpr size_t kMaxFrame = 65536;

[[noreturn]] void die(const std::string& what, const std::string& fix) {
  std::fprintf(stderr, "delay_line: %s (%s)\n", what.c_str(), fix.c_str());
  std::exit(1);
}

// "12500us", "12.5ms", "1s" or "0" as microseconds; -1 when it is none of these.
long long parse_delay(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || value < 0 || value > 10e6) return -1;
  const std::string unit(end);
  if (unit == "us") return static_cast<long long>(value);
  if (unit == "ms") return static_cast<long long>(value * 1e3);
  if (unit == "s") return static_cast<long long>(value * 1e6);
  if (unit.empty() && value == 0) return 0;
  return -1;
}

// Opens TAP device `name` of namespace `ns` (made by `ip tuntap add mode tap` beforehand).
int open_tap(const std::string& ns, const std::string& name) {
  const std::string path = "/var/run/netns/" + ns;
  const int ns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0) die("cannot open " + path + ": " + std::strerror(errno), "ip netns add " + ns);
  if (setns(ns_fd, CLONE_NEWNET) != 0)
    die("cannot enter namespace " + ns + ": " + std::strerror(errno), "run as root");
  close(ns_fd);
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die(std::string("cannot open /dev/net/tun: ") + std::strerror(errno), "modprobe tun");
  ifreq request{};
  request.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (name.size() >= sizeof(request.ifr_name)) die("TAP name too long: " + name, "use a shorter tag");
  std::strncpy(request.ifr_name, name.c_str(), sizeof(request.ifr_name) - 1);
  if (ioctl(fd, TUNSETIFF, &request) != 0)
    die("cannot attach to TAP " + name + " in " + ns + ": " + std::strerror(errno),
        "ip -n " + ns + " tuntap add dev " + name + " mode tap");
  return fd;
}

// Reads every frame waiting on `fd` into `queue`.
void take_frames(int fd, FrameQueue& queue) {
  static uint8_t frame[kMaxFrame];
  for (;;) {
    const ssize_t n = read(fd, frame, sizeof frame);
    if (n <= 0) return;  // EAGAIN: no more for now
    queue.push(frame, static_cast<size_t>(n), FrameQueue::Clock::now());
  }
}

// Writes every frame of `queue` that is due to `fd`; a frame the device refuses is dropped.
void release_frames(FrameQueue& queue, int fd, unsigned long long& refused) {
  const auto now = FrameQueue::Clock::now();
  while (queue.due(now)) {
    const auto& bytes = queue.front();
    if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) ++refused;
    queue.pop();
  }
}

void forward(int host_fd, int hub_fd, microseconds delay) {
  FrameQueue to_hub(delay, kMaxQueuedBytes), to_host(delay, kMaxQueuedBytes);
  unsigned long long refused = 0;
  while (!stop_requested) {
    const auto now = FrameQueue::Clock::now();
    const microseconds idle(200000);  // wake now and then to see a stop request
    const microseconds wait = std::min(to_hub.wait(now, idle), to_host.wait(now, idle));
    timespec timeout{static_cast<time_t>(wait.count() / 1000000),
                     static_cast<long>(wait.count() % 1000000) * 1000};
    pollfd fds[2] = {{host_fd, POLLIN, 0}, {hub_fd, POLLIN, 0}};
    if (ppoll(fds, 2, &timeout, nullptr) < 0 && errno != EINTR)
      die(std::string("poll: ") + std::strerror(errno), "report it");
    // A device that went away (its namespace deleted first): stop rather than spin on it.
    if ((fds[0].revents | fds[1].revents) & (POLLERR | POLLHUP | POLLNVAL)) {
      std::fprintf(stderr, "delay_line: a TAP device went away; stopping\n");
      break;
    }
    if (fds[0].revents & POLLIN) take_frames(host_fd, to_hub);
    if (fds[1].revents & POLLIN) take_frames(hub_fd, to_host);
    release_frames(to_hub, hub_fd, refused);
    release_frames(to_host, host_fd, refused);
  }
  std::fprintf(stderr, "delay_line: stopped; dropped %llu frames (queue full), %llu refused\n",
               static_cast<unsigned long long>(to_hub.dropped() + to_host.dropped()), refused);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(
        "usage: delay_line HOST_NS HOST_TAP HUB_NS HUB_TAP DELAY\n"
        "Forwards Ethernet frames between TAP device HOST_TAP of namespace HOST_NS and HUB_TAP\n"
        "of HUB_NS, each direction delayed by DELAY (e.g. 12500us, 12.5ms, 0). Both devices\n"
        "must exist (ip tuntap add mode tap). tools/netns_hosts.sh starts one per host.\n");
    return 0;
  }
  if (argc != 6) die("expected 5 arguments, got " + std::to_string(argc - 1), "see --help");
  const long long delay_us = parse_delay(argv[5]);
  if (delay_us < 0)
    die(std::string("not a delay: '") + argv[5] + "'", "write it as 12500us, 12.5ms or 0");
  signal(SIGTERM, request_stop);
  signal(SIGINT, request_stop);
  const int host_fd = open_tap(argv[1], argv[2]);
  const int hub_fd = open_tap(argv[3], argv[4]);
  forward(host_fd, hub_fd, microseconds(delay_us));
  return 0;
}
