// Transport throughput and latency on loopback, next to two raw UDP baselines measured in the
// same run (what the kernel and loopback allow, no protocol at all): per datagram (a sender
// thread pushing 1408-byte datagrams with sendmmsg, a receiver draining them with recvmmsg) and
// segmented (the same datagrams sent with UDP GSO and received coalesced with UDP_GRO, as the
// endpoint does), each also with dtrain's tag on every datagram. Then two dtrain endpoints in
// this process: goodput of 2 MB messages (authenticated; with segmentation off; --insecure; 5%
// injected loss) and one-way latency of 4 KB messages (p50/p99). Medians over --repeats, each
// row against both baselines. tools/bench/transport_link.sh runs it over a rate-limited link.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "transport/endpoint/datagram_batch.h"
#include "transport/endpoint/endpoint.h"
#include "transport/endpoint/tag_workers.h"
#include "tools/bench/bench_timing.h"

using namespace dtrain::transport;
using Clock = std::chrono::steady_clock;

using dtrain::bench::median;
using dtrain::bench::time_once;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes per second the receiver got from a raw UDP pair in `seconds`, no protocol at all. Per
// datagram: sendmmsg/recvmmsg of 1408-byte datagrams, 32 per call. `segmented`: the same
// datagrams sent 46 to a message with UDP GSO and received coalesced (UDP_GRO), what the
// endpoint does where the kernel allows it; on loopback nothing then cuts the 64 KB messages
// apart, so this is close to what memory bandwidth allows. With `tags`, the sender tags every
// datagram as dtrain does (the same AEAD) and the receiver counts only those whose tag holds:
// what authentication alone costs, with no protocol around it.
double raw_udp(double seconds, bool tagged, bool segmented) {
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
  const int on = 1;
  if (segmented && setsockopt(rx, SOL_UDP, UDP_GRO, &on, sizeof on) != 0) {
    std::fprintf(stderr, "raw UDP: this kernel has no UDP_GRO\n");
    close(rx);
    close(tx);
    return 0;
  }
  constexpr int kBatch = 32;
  constexpr int kRun = 46;  // datagrams per GSO message: 46 x 1408 bytes fit 65,000
  constexpr size_t kSize = kDefaultMaxDatagram;
  const size_t slot = segmented ? 65536 : kSize;
  // One authenticator per thread, as per endpoint (its key cache is not thread-safe).
  ClusterKey key;
  key.fill(3);
  const Authenticator seal_auth(key, false), verify_auth(key, false);
  const Authenticator* tags = tagged ? &seal_auth : nullptr;
  const Aead aead = seal_auth.aes_gcm() ? Aead::kAes256Gcm : Aead::kXChaCha20Poly1305;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> received{0};
  std::thread receiver([&] {
    std::vector<uint8_t> bufs(kBatch * slot);
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    alignas(cmsghdr) char control[kBatch][kCoalescedControlBytes];
    for (int i = 0; i < kBatch; ++i) iov[i] = {bufs.data() + i * slot, slot};
    while (!done) {
      for (int i = 0; i < kBatch; ++i) {
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = segmented ? control[i] : nullptr;
        msgs[i].msg_hdr.msg_controllen = segmented ? kCoalescedControlBytes : 0;
      }
      const int n = recvmmsg(rx, msgs, kBatch, 0, nullptr);
      for (int i = 0; i < n; ++i) {
        if (!tags) {
          received += msgs[i].msg_len;
          continue;
        }
        // Every datagram of the slot (one, or a coalesced run of kSize each).
        for (size_t at = 0; at + kSize <= msgs[i].msg_len; at += kSize) {
          const uint8_t* d = bufs.data() + i * slot + at;
          TagContext c{1, 2, 1, 0, aead};
          std::memcpy(&c.counter, d, 8);
          if (verify_auth.verify(d, kSize - kTagBytes, c)) received += kSize;
        }
      }
    }
  });
  const int per_call = segmented ? kBatch / 4 : kBatch;  // messages per sendmmsg
  const int per_message = segmented ? kRun : 1;          // datagrams per message
  std::vector<uint8_t> payload(size_t(per_call) * per_message * kSize, 0x5A);
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  alignas(cmsghdr) char control[kBatch][kSegmentControlBytes];
  for (int i = 0; i < per_call; ++i) {
    iov[i] = {payload.data() + size_t(i) * per_message * kSize, per_message * kSize};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &addr;
    msgs[i].msg_hdr.msg_namelen = sizeof addr;
    if (segmented) set_segment_size(msgs[i].msg_hdr, control[i], kSize);
  }
  const auto start = Clock::now();
  const uint64_t before = received;
  uint64_t counter = 0;
  while (seconds_since(start) < seconds) {
    for (int i = 0; tags && i < per_call * per_message; ++i) {
      uint8_t* d = payload.data() + size_t(i) * kSize;
      std::memcpy(d, &++counter, 8);
      tags->seal(d, kSize - kTagBytes, {1, 2, 1, counter, aead});
    }
    if (sendmmsg(tx, msgs, per_call, 0) < 0 && segmented && errno != EAGAIN) {
      std::fprintf(stderr, "raw UDP: this kernel refuses UDP GSO (%s)\n", std::strerror(errno));
      break;
    }
  }
  const double elapsed = seconds_since(start);
  const double rate = (received - before) / elapsed;
  done = true;
  receiver.join();
  close(rx);
  close(tx);
  return rate;
}

// `pairs` segmented raw pairs at once, each with its own sockets and threads (as many as the
// dtrain rows' lanes): the raw baseline with as many flows and threads a side as dtrain uses.
double raw_udp_pairs(double seconds, size_t pairs) {
  std::vector<double> rates(pairs);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < pairs; ++i)
    threads.emplace_back([&rates, i, seconds] { rates[i] = raw_udp(seconds, false, true); });
  for (auto& t : threads) t.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

size_t g_credit_window = EndpointConfig{}.credit_window;  // --credit-window
size_t g_tag_threads = 0;  // --tag-threads: each endpoint's tag workers
size_t g_lanes = 1;        // --lanes: each endpoint's I/O threads
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

  Pair(bool insecure, double loss, bool segmented = true) {
    EndpointConfig ca, cb;
    ca.segmentation = cb.segmentation = segmented;
    ca.node_id = 1;
    cb.node_id = 2;
    ca.key.fill(3);
    cb.key.fill(3);
    ca.insecure = cb.insecure = insecure;
    ca.credit_window = cb.credit_window = g_credit_window;
    ca.tag_threads = cb.tag_threads = g_tag_threads;
    ca.lanes = cb.lanes = g_lanes;
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
double goodput(bool insecure, double loss, int messages, bool segmented = true) {
  Pair p(insecure, loss, segmented);
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
    if (g_tag_threads > 0) {
      // Whether the batches are large enough for the workers' fork and join to pay.
      auto mean = [](const Endpoint::TagBatches& t) {
        return t.batches ? double(t.items) / double(t.batches) : 0.0;
      };
      const Endpoint::TagBatches ts = p.a->tag_batches_shared(), tr = p.b->tag_batches_shared();
      std::fprintf(stderr,
                   "  batches shared with the tag workers: sender %llu (mean %.1f datagrams), "
                   "receiver %llu (mean %.1f)\n",
                   (unsigned long long)ts.batches, mean(ts), (unsigned long long)tr.batches,
                   mean(tr));
    }
  }
  return rate;
}

// Bytes per second tagged in batches of DatagramBatch::kMax datagrams of 1408 bytes, on the
// calling thread and `workers` tag workers beside it (what one endpoint's sends cost in tags).
double tag_batches(size_t workers, double seconds) {
  ClusterKey key;
  key.fill(3);
  Authenticator auth(key, false, true, 1);
  const Aead aead = auth.aes_gcm() ? Aead::kAes256Gcm : Aead::kXChaCha20Poly1305;
  const Authenticator::Keys* keys = auth.seal_key({1, 2, 5, 1, aead});
  std::vector<std::vector<uint8_t>> frames(DatagramBatch::kMax,
                                           std::vector<uint8_t>(kDefaultMaxDatagram, 7));
  TagWorkers pool(workers, "bench-tag");
  uint64_t counter = 0, bytes = 0;
  const auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    for (int b = 0; b < 100; ++b) {
      pool.run(frames.size(), [&](size_t i) {
        Authenticator::seal_with(*keys, frames[i].data(), frames[i].size() - kTagBytes,
                                 {1, 2, 5, counter + i, aead});
      });
      counter += frames.size();
      bytes += frames.size() * (kDefaultMaxDatagram - kTagBytes);
    }
  }
  return bytes / seconds_since(start);
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

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrain transport benchmark (loopback, against raw UDP in the same run)"};
  int repeats = 3, messages = 100;
  double raw_seconds = 2.0;
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100));
  app.add_option("--raw-seconds", raw_seconds, "seconds each raw UDP baseline runs (default 2)")
      ->check(CLI::Range(0.2, 60.0));
  app.add_option("--messages", messages, "2 MB messages per goodput run")->check(CLI::Range(1, 10000));
  app.add_option("--credit-window", g_credit_window, "receiver credit in bytes (default 512 KiB)")
      ->check(CLI::Range(size_t(4096), size_t(1) << 30));
  app.add_option("--tag-threads", g_tag_threads,
                 "threads beside each endpoint's I/O thread that seal and check tags (default 0; "
                 "the dtrain rows run two endpoints, so 2 x (1 + N) threads)")
      ->check(CLI::Range(size_t(0), size_t(64)));
  app.add_option("--lanes", g_lanes,
                 "I/O threads (lanes) of each endpoint in the dtrain rows (default 1; the raw "
                 "pairs keep one thread a side)")
      ->check(CLI::Range(size_t(1), size_t(kMaxLanes)));
  std::string only;
  const std::vector<std::string> kOnly = {"raw", "raw-tagged", "raw-gso", "raw-gso-tagged",
                                          "raw-gso-pairs", "auth",
                                          "auth-per-datagram", "insecure", "loss", "latency",
                                          "tag-batches"};
  app.add_option("--only", only, "run one measurement (for profiling): raw, raw-tagged, raw-gso, "
                                  "raw-gso-tagged, raw-gso-pairs, auth, auth-per-datagram, insecure, loss, latency; "
                                  "or tag-batches: tagging alone, on one thread against 1 + "
                                  "--tag-threads")
      ->check(CLI::IsMember(kOnly));
  std::string subset;
  app.add_option("--rows", subset, "the table's rows to measure, comma-separated (names as in "
                                   "--only; default all); the ratios need raw and raw-gso");
  CLI11_PARSE(app, argc, argv);
  // The measurements, in the order of the table.
  struct Row {
    std::string name, label;
    std::function<double()> run;
    std::vector<double> mb_s;
  };
  std::vector<Row> rows = {
      {"raw", "raw UDP, per datagram (sendmmsg/recvmmsg)",
       [&] { return raw_udp(raw_seconds, false, false); }},
      {"raw-tagged", std::string("  + dtrain's tags (") + tag_name() + ")",
       [&] { return raw_udp(raw_seconds, true, false); }},
      {"raw-gso", "raw UDP, segmented (GSO/GRO)", [&] { return raw_udp(raw_seconds, false, true); }},
      {"raw-gso-tagged", std::string("  + dtrain's tags (") + tag_name() + ")",
       [&] { return raw_udp(raw_seconds, true, true); }},
      {"raw-gso-pairs", "raw UDP, segmented, one pair per lane",
       [&] { return raw_udp_pairs(raw_seconds, g_lanes); }},
      {"auth", "dtrain, 2 MB messages, authenticated", [&] { return goodput(false, 0.0, messages); }},
      {"auth-per-datagram", "  the same, segmentation off",
       [&] { return goodput(false, 0.0, messages, false); }},
      {"insecure", "dtrain, 2 MB messages, --insecure", [&] { return goodput(true, 0.0, messages); }},
      {"loss", "dtrain, 2 MB messages, 5% injected loss",
       [&] { return goodput(false, 0.05, messages); }},
  };
  if (!only.empty()) {
    g_verbose = true;
    for (Row& row : rows)
      if (row.name == only) std::printf("%s: %.0f MB/s\n", row.label.c_str(), row.run() / 1e6);
    if (only == "tag-batches") {
      // The same work on one thread, then with the workers: how the tagging itself scales.
      const double alone = tag_batches(0, 2.0), shared = tag_batches(g_tag_threads, 2.0);
      std::printf("tags, %zu-datagram batches: %.0f MB/s on one thread, %.0f MB/s with %zu tag "
                  "workers beside it (%.2fx)\n",
                  DatagramBatch::kMax, alone / 1e6, shared / 1e6, g_tag_threads, shared / alone);
    }
    if (only == "latency") {
      const auto [a, b] = latency(1000);
      std::printf("latency: p50 %.0f us, p99 %.0f us\n", a, b);
    }
    return 0;
  }
  const auto wanted = [&](const std::string& name) {
    return subset.empty() || ("," + subset + ",").find("," + name + ",") != std::string::npos;
  };
  for (const std::string& name : split_list(subset))
    if (std::find(kOnly.begin(), kOnly.end(), name) == kOnly.end() || name == "tag-batches") {
      std::fprintf(stderr, "--rows: no row '%s' (the rows: raw, raw-tagged, raw-gso, "
                           "raw-gso-tagged, raw-gso-pairs, auth, auth-per-datagram, insecure, loss, latency; "
                           "tag-batches runs with --only)\n",
                   name.c_str());
      return 2;
    }
  spdlog::set_level(spdlog::level::warn);
  std::vector<double> p50, p99;
  for (int r = 0; r < repeats; ++r) {
    for (Row& row : rows)
      if (wanted(row.name)) row.mb_s.push_back(row.run() / 1e6);
    if (!wanted("latency")) continue;
    const auto [a, b] = latency(1000);
    p50.push_back(a);
    p99.push_back(b);
  }
  // Each row against the raw baselines, where they were measured.
  const double per_datagram = rows[0].mb_s.empty() ? 0 : median(rows[0].mb_s);
  const double segmented = rows[2].mb_s.empty() ? 0 : median(rows[2].mb_s);
  const double pairs = rows[4].mb_s.empty() ? 0 : median(rows[4].mb_s);
  if (g_lanes > 1)
    std::printf("the dtrain rows: %zu lanes (I/O threads) per endpoint; %zu raw pairs at once\n",
                g_lanes, g_lanes);
  std::printf("medians of %d runs%-18s %10s %14s %14s %10s\n", repeats, "", "MB/s",
              "x per datagram", "x segmented", "x pairs");
  for (const Row& row : rows) {
    if (row.mb_s.empty()) continue;
    const double m = median(row.mb_s);
    // "-" where that baseline was not among --rows.
    const auto ratio = [&](double base) {
      char text[32] = "-";
      if (base > 0) std::snprintf(text, sizeof text, "%.2f", m / base);
      return std::string(text);
    };
    std::printf("%-44s %10.0f %14s %14s %10s\n", row.label.c_str(), m,
                ratio(per_datagram).c_str(), ratio(segmented).c_str(), ratio(pairs).c_str());
  }
  if (!p50.empty())
    std::printf("one-way latency, 4 KB messages: p50 %.0f us, p99 %.0f us\n", median(p50),
                median(p99));
  return 0;
}
