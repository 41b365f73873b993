// Transport throughput and latency on loopback, next to a raw UDP baseline measured in the
// same run: a sender thread pushing 1408-byte datagrams with sendmmsg and a receiver thread
// draining them with recvmmsg (what the kernel and loopback allow, no protocol at all). Then
// two dtrain endpoints in this process: goodput of 2 MB messages (authenticated, then
// --insecure), one-way latency of 4 KB messages (p50/p99), and goodput under 5% injected loss.
// Medians over --repeats.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "transport/endpoint/endpoint.h"
#include "tools/bench/bench_timing.h"

using namespace dtrain::transport;
using Clock = std::chrono::steady_clock;

using dtrain::bench::median;
using dtrain::bench::time_once;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes per second the receiver got from a sendmmsg/recvmmsg pair in `seconds`. With `tags`,
// the sender tags every datagram as dtrain does (the same AEAD) and the receiver counts only
// those whose tag holds: what authentication alone costs, with no protocol around it.
double raw_udp(double seconds, bool tagged = false) {
  const int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
  int buf = 8 << 20;
  setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  setsockopt(tx, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(rx, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(rx, reinterpret_cast<sockaddr*>(&addr), &len);
  timeval tv{0, 100000};
  setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  constexpr int kBatch = 32;
  constexpr size_t kSize = kDefaultMaxDatagram;
  // One authenticator per thread, as per endpoint (its key cache is not thread-safe).
  ClusterKey key;
  key.fill(3);
  const Authenticator seal_auth(key, false), verify_auth(key, false);
  const Authenticator* tags = tagged ? &seal_auth : nullptr;
  const Aead aead = seal_auth.aes_gcm() ? Aead::kAes256Gcm : Aead::kXChaCha20Poly1305;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> received{0};
  std::thread receiver([&] {
    std::vector<uint8_t> bufs(kBatch * kSize);
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    for (int i = 0; i < kBatch; ++i) {
      iov[i] = {bufs.data() + i * kSize, kSize};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    while (!done) {
      const int n = recvmmsg(rx, msgs, kBatch, 0, nullptr);
      for (int i = 0; i < n; ++i) {
        if (tags) {
          const uint8_t* d = bufs.data() + i * kSize;
          TagContext c{1, 2, 1, 0, aead};
          std::memcpy(&c.counter, d, 8);
          if (msgs[i].msg_len != kSize || !verify_auth.verify(d, kSize - kTagBytes, c)) continue;
        }
        received += msgs[i].msg_len;
      }
    }
  });
  std::vector<uint8_t> payload(kBatch * kSize, 0x5A);
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  for (int i = 0; i < kBatch; ++i) {
    iov[i] = {payload.data() + i * kSize, kSize};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &addr;
    msgs[i].msg_hdr.msg_namelen = sizeof addr;
  }
  const auto start = Clock::now();
  const uint64_t before = received;
  uint64_t counter = 0;
  while (seconds_since(start) < seconds) {
    for (int i = 0; tags && i < kBatch; ++i) {
      uint8_t* d = payload.data() + i * kSize;
      std::memcpy(d, &++counter, 8);
      tags->seal(d, kSize - kTagBytes, {1, 2, 1, counter, aead});
    }
    sendmmsg(tx, msgs, kBatch, 0);
  }
  const double elapsed = seconds_since(start);
  const double rate = (received - before) / elapsed;
  done = true;
  receiver.join();
  close(rx);
  close(tx);
  return rate;
}

size_t g_credit_window = EndpointConfig{}.credit_window;  // --credit-window
bool g_verbose = false;  // --only: the link's counters after a goodput run

// The AEAD two endpoints on this machine agree on.
const char* tag_name() {
  return aead_name(Authenticator(ClusterKey{}, false).aes_gcm() ? Aead::kAes256Gcm
                                                                 : Aead::kXChaCha20Poly1305);
}


struct Pair {
  std::unique_ptr<Endpoint> a, b;
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t delivered = 0, delivered_bytes = 0;
  std::vector<double> latencies_us;
  std::vector<Clock::time_point> sent_at;

  Pair(bool insecure, double loss) {
    EndpointConfig ca, cb;
    ca.node_id = 1;
    cb.node_id = 2;
    ca.key.fill(3);
    cb.key.fill(3);
    ca.insecure = cb.insecure = insecure;
    ca.credit_window = cb.credit_window = g_credit_window;
    ca.faults.drop = loss;
    ca.faults.seed = 7;
    a = std::make_unique<Endpoint>(ca);
    b = std::make_unique<Endpoint>(cb);
    a->add_peer(2, "127.0.0.1", b->port());
    b->add_peer(1, "127.0.0.1", a->port());
    b->add_job(1);
    a->start([](Delivery&&) {});
    b->start([this](Delivery&& d) {
      std::lock_guard<std::mutex> lock(mutex);
      ++delivered;
      delivered_bytes += d.bytes.size();
      if (d.message_id < sent_at.size())
        latencies_us.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - sent_at[d.message_id]).count());
      cv.notify_all();
    });
  }

  bool wait_for(uint64_t count, std::chrono::seconds deadline) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, deadline, [&] { return delivered >= count; });
  }
};

// Application bytes per second delivered, 2 MB messages.
double goodput(bool insecure, double loss, int messages) {
  Pair p(insecure, loss);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(2 << 20, 0x42);
  const auto start = Clock::now();
  for (int m = 1; m <= messages; ++m) p.a->send(2, 1, 1, 100000 + m, bytes);
  if (!p.wait_for(messages, std::chrono::seconds(120))) {
    std::fprintf(stderr, "goodput: only %llu of %d messages arrived within 120 s\n",
                 (unsigned long long)p.delivered, messages);
    return 0;
  }
  const double rate = p.delivered_bytes / seconds_since(start);
  if (g_verbose) {
    // What the link did (for --only runs): the sender's side towards node 2, the receiver's.
    const PeerCounters s = p.a->counters()[2], r = p.b->counters()[1];
    std::fprintf(stderr,
                 "  sender: %llu datagrams, %llu retransmits, %llu NAKs received, %llu credit "
                 "stalls; receiver: %llu NAKs sent, %llu duplicates\n",
                 (unsigned long long)s.datagrams_out, (unsigned long long)s.retransmits,
                 (unsigned long long)s.naks_received, (unsigned long long)s.credit_stalls,
                 (unsigned long long)r.naks_sent, (unsigned long long)r.duplicates);
  }
  return rate;
}

// One-way latency of 4 KB messages sent 1 ms apart (same clock on both ends).
std::pair<double, double> latency(int messages) {
  Pair p(false, 0.0);
  p.sent_at.resize(messages + 1);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(4096, 0x17);
  for (int m = 1; m <= messages; ++m) {
    {
      std::lock_guard<std::mutex> lock(p.mutex);
      p.sent_at[m] = Clock::now();
    }
    p.a->send(2, 1, 1, m, bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  p.wait_for(messages, std::chrono::seconds(30));
  std::vector<double> l = p.latencies_us;
  std::sort(l.begin(), l.end());
  if (l.empty()) return {0, 0};
  return {l[l.size() / 2], l[std::min(l.size() - 1, l.size() * 99 / 100)]};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrain transport benchmark (loopback, against raw sendmmsg/recvmmsg)"};
  int repeats = 3, messages = 100;
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100));
  app.add_option("--messages", messages, "2 MB messages per goodput run")->check(CLI::Range(1, 10000));
  app.add_option("--credit-window", g_credit_window, "receiver credit in bytes (default 128 KiB)")
      ->check(CLI::Range(size_t(4096), size_t(1) << 30));
  std::string only;
  app.add_option("--only", only,
                 "run one measurement (for profiling): raw, raw-tagged, auth, insecure, loss, latency")
      ->check(CLI::IsMember({"raw", "raw-tagged", "auth", "insecure", "loss", "latency"}));
  CLI11_PARSE(app, argc, argv);
  if (!only.empty()) {
    g_verbose = true;
    if (only == "raw") std::printf("raw UDP: %.0f MB/s\n", raw_udp(2.0) / 1e6);
    if (only == "raw-tagged")
      std::printf("raw UDP, tagged: %.0f MB/s\n", raw_udp(2.0, true) / 1e6);
    if (only == "auth") std::printf("authenticated: %.0f MB/s\n", goodput(false, 0.0, messages) / 1e6);
    if (only == "insecure") std::printf("insecure: %.0f MB/s\n", goodput(true, 0.0, messages) / 1e6);
    if (only == "loss") std::printf("5%% loss: %.0f MB/s\n", goodput(false, 0.05, messages) / 1e6);
    if (only == "latency") {
      const auto [a, b] = latency(1000);
      std::printf("latency: p50 %.0f us, p99 %.0f us\n", a, b);
    }
    return 0;
  }
  spdlog::set_level(spdlog::level::warn);
  std::vector<double> raw, tagged, auth, insecure, lossy, p50, p99;
  for (int r = 0; r < repeats; ++r) {
    raw.push_back(raw_udp(2.0));
    tagged.push_back(raw_udp(2.0, true));
    auth.push_back(goodput(false, 0.0, messages));
    insecure.push_back(goodput(true, 0.0, messages));
    lossy.push_back(goodput(false, 0.05, messages));
    const auto [a, b] = latency(1000);
    p50.push_back(a);
    p99.push_back(b);
  }
  const double base = median(raw);
  std::printf("%-44s %10s %8s\n", "", "MB/s", "x raw");
  std::printf("%-44s %10.0f %8.2f\n", "raw UDP (sendmmsg/recvmmsg, 1408 B)", base / 1e6, 1.0);
  std::printf("%-44s %10.0f %8.2f\n",
              (std::string("raw UDP + dtrain's tags (") + tag_name() + ")").c_str(),
              median(tagged) / 1e6, median(tagged) / base);
  std::printf("%-44s %10.0f %8.2f\n", "dtrain, 2 MB messages, authenticated", median(auth) / 1e6,
              median(auth) / base);
  std::printf("%-44s %10.0f %8.2f\n", "dtrain, 2 MB messages, --insecure", median(insecure) / 1e6,
              median(insecure) / base);
  std::printf("%-44s %10.0f %8.2f\n", "dtrain, 2 MB messages, 5% injected loss",
              median(lossy) / 1e6, median(lossy) / base);
  std::printf("one-way latency, 4 KB messages: p50 %.0f us, p99 %.0f us\n", median(p50),
              median(p99));
  return 0;
}
