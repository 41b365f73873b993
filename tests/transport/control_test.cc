// The TCP control channel on loopback: authenticated frames both ways, a client with another
// key refused on both ends, nothing listening (unreachable, fast), a listener that never
// answers (timeout at the deadline), and hostile byte streams (another protocol, an oversized
// length, an unauthenticated frame, a stalled handshake) refused without hurting the server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <vector>
#include <thread>

#include "tests/wait_for.h"
#include "transport/control/control_connection.h"
#include "transport/control/control_server.h"
#include "transport/security/client_credential.h"

using namespace dtrain::transport;
using Clock = std::chrono::steady_clock;
using Kind = ControlError::Kind;
using dtrain::testing::wait_for;
using namespace std::chrono_literals;

namespace {

ClusterKey key_of(uint8_t fill) {
  ClusterKey k;
  k.fill(fill);
  return k;
}

// An echo server: answers every frame with the same bytes.
ControlServer echo_server(const ClusterKey& key, std::atomic<int>* handled = nullptr) {
  return ControlServer("127.0.0.1", 0, key, [handled](ControlConnection& c) {
    if (handled) ++*handled;
    for (;;) c.send(c.receive(5s));
  }, 2s);
}

Kind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ControlError& e) {
    INFO(e.what());
    return e.kind();
  }
  FAIL("no ControlError thrown");
  return Kind::kClosed;
}

// A hello of this version claiming to be a daemon: "DTC", version, 32 nonce bytes, role, no name.
std::array<uint8_t, 38> daemon_hello() {
  std::array<uint8_t, 38> h{'D', 'T', 'C', kControlVersion};
  h[36] = 'D';
  return h;
}

// A raw TCP client, for writing bytes the real client never would; from `source` (any
// 127.x.y.z address is this machine's loopback) to tell sources apart.
int raw_connect(uint16_t port, const char* source = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  REQUIRE(inet_pton(AF_INET, source, &from.sin_addr) == 1);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// A TCP listener on a free loopback port (`port`), which never answers by itself.
int loopback_listener(uint16_t& port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(listen(fd, 4) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// True when the server closed the connection (read returns 0 or an error) within 5 s.
// (The 5 s receive timeout of raw_connect is not a close: read then fails with EAGAIN.)
bool closed_by_server(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) continue;  // whatever it said before closing
    if (n == 0) return true;  // orderly close
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      UNSCOPED_INFO("the server left the connection open for 5 s");
      return false;
    }
    return errno == ECONNRESET || errno == EPIPE;  // closed with unread data: a reset
  }
}

}  // namespace

TEST_CASE("control frames travel both ways, authenticated, in order", "[control]") {
  std::atomic<int> handled{0};
  ControlServer server = echo_server(key_of(1), &handled);
  auto c = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  // The connection carries opaque bodies: bytes of every value, in order.
  std::vector<uint8_t> bytes(300);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i);
  for (int i = 0; i < 50; ++i) {
    bytes[0] = uint8_t(i);
    c->send(bytes);
    const std::vector<uint8_t> back = c->receive(5s);
    REQUIRE(back == bytes);
  }
  // Large frames (a job result with logs) pass too.
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7);
  c->send(big);
  CHECK(c->receive(10s) == big);
  CHECK(handled == 1);
  CHECK(server.refused() == 0);
}

TEST_CASE("a client with another cluster key is refused on both ends", "[control]") {
  std::atomic<int> handled{0};
  ControlServer server = echo_server(key_of(1), &handled);
  try {
    ControlConnection::connect("127.0.0.1", server.port(), key_of(2), 5s);
    FAIL("connected with the wrong key");
  } catch (const ControlError& e) {
    CHECK(e.kind() == Kind::kAuthentication);
    CHECK(std::string(e.what()).find("does not use this cluster key") != std::string::npos);
    CHECK(e.fix().find("--key-file") != std::string::npos);
  }
  const auto end = Clock::now() + 5s;
  while (server.refused() == 0 && Clock::now() < end) std::this_thread::sleep_for(10ms);
  CHECK(server.refused() == 1);
  CHECK(handled == 0);
}

TEST_CASE("nothing listening: unreachable at once, naming the address and the fix", "[control]") {
  // A port that was free a moment ago.
  uint16_t port;
  {
    ControlServer probe("127.0.0.1", 0, key_of(1), [](ControlConnection&) {});
    port = probe.port();
  }
  const auto start = Clock::now();
  try {
    ControlConnection::connect("127.0.0.1", port, key_of(1), 3s);
    FAIL("connected to nothing");
  } catch (const ControlError& e) {
    CHECK(e.kind() == Kind::kUnreachable);
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  CHECK(Clock::now() - start < 2s);
  CHECK(kind_of([] { ControlConnection::connect("no-such-host.invalid", 1, key_of(1), 3s); }) ==
        Kind::kUnreachable);
}

TEST_CASE("a listener that never answers: timeout at the deadline", "[control]") {
  // A bare TCP listener: connect succeeds (the kernel accepts), the handshake never comes.
  uint16_t port = 0;
  const int fd = loopback_listener(port);
  const auto start = Clock::now();
  CHECK(kind_of([&] { ControlConnection::connect("127.0.0.1", port, key_of(1), 700ms); }) ==
        Kind::kTimeout);
  const auto took = Clock::now() - start;
  CHECK(took >= 600ms);
  CHECK(took < 3s);
  close(fd);
}

TEST_CASE("hostile byte streams are refused and the server keeps serving", "[control]") {
  ControlServer server = echo_server(key_of(1));
  SECTION("another protocol") {
    const int fd = raw_connect(server.port());
    const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n_______________________";
    REQUIRE(write(fd, http, sizeof http) > 0);
    CHECK(closed_by_server(fd));
    close(fd);
  }
  SECTION("a correct hello, then a 4 GB length and garbage") {
    const int fd = raw_connect(server.port());
    const auto hello = daemon_hello();
    REQUIRE(write(fd, hello.data(), hello.size()) == 38);
    uint8_t server_hello[38];
    REQUIRE(read(fd, server_hello, 38) == 38);
    const uint32_t huge = 0xFFFFFFF0u;
    std::vector<uint8_t> junk(4 + 64, 0xAB);
    std::memcpy(junk.data(), &huge, 4);
    REQUIRE(write(fd, junk.data(), junk.size()) > 0);
    CHECK(closed_by_server(fd));
    close(fd);
  }
  SECTION("a correct hello, then a key proof announcing 60 MB: closed at once, nothing read") {
    // The proof must be empty; the server may not wait for (or allocate) 60 MB from a peer
    // that has not proven the key. The handshake timeout is 2 s: closing well before it shows
    // the refusal came from the length itself.
    const int fd = raw_connect(server.port());
    const auto hello = daemon_hello();
    REQUIRE(write(fd, hello.data(), hello.size()) == 38);
    uint8_t server_hello[38];
    REQUIRE(read(fd, server_hello, 38) == 38);
    const uint32_t large = 60u << 20;
    REQUIRE(write(fd, &large, 4) == 4);
    const auto start = Clock::now();
    CHECK(closed_by_server(fd));
    CHECK(Clock::now() - start < 1s);
    close(fd);
  }
  SECTION("an unauthenticated frame after the hello") {
    const int fd = raw_connect(server.port());
    const auto hello = daemon_hello();
    REQUIRE(write(fd, hello.data(), hello.size()) == 38);
    std::vector<uint8_t> frame(4 + 16, 0);  // empty body, all-zero tag
    REQUIRE(write(fd, frame.data(), frame.size()) == 20);
    CHECK(closed_by_server(fd));
    close(fd);
  }
  SECTION("half a handshake, then silence: dropped at the handshake timeout") {
    const int fd = raw_connect(server.port());
    REQUIRE(write(fd, "DT", 2) == 2);
    const auto start = Clock::now();
    CHECK(closed_by_server(fd));
    CHECK(Clock::now() - start < 4s);
    close(fd);
  }
  // Whatever came before, a real client is still served.
  auto c = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  c->send({1, 2, 3});
  CHECK(c->receive(5s) == std::vector<uint8_t>{1, 2, 3});
}

namespace {
// A figure of this process from /proc/self/status ("VmRSS" in KiB, "Threads"); -1 if absent.
int64_t own_status(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  int64_t value = -1;
  const std::string format = std::string(field) + ": %ld";
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format.c_str(), &value) == 1) break;
  if (f) std::fclose(f);
  return value;
}
int64_t resident_kib() { return own_status("VmRSS"); }
int64_t thread_count() { return own_status("Threads"); }

// 200 connections from 127.0.0.2 that send a daemon's hello; every other one then announces a
// 64 MB key proof, the rest stay half-open. Returns those the server did not close unread.
std::vector<int> hostile_handshakes(uint16_t port) {
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    const int fd = raw_connect(port, "127.0.0.2");
    const auto hello = daemon_hello();
    // send, not write: a connection closed unread must not end the test with SIGPIPE.
    if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != 38) {  // closed unread
      close(fd);
      continue;
    }
    if (i % 2 == 0) {
      const uint32_t large = 64u << 20;
      (void)!send(fd, &large, 4, MSG_NOSIGNAL);
    }
    fds.push_back(fd);
  }
  return fds;
}
}  // namespace

TEST_CASE("200 hostile connections from one address cost the server little; others are served",
          "[control]") {
  ControlServer server = echo_server(key_of(1));  // default bounds: 8 handshakes per source
  const int64_t before = resident_kib();
  const int64_t threads_before = thread_count();
  const std::vector<int> fds = hostile_handshakes(server.port());
  std::this_thread::sleep_for(500ms);
  const int64_t grew_kib = resident_kib() - before;
  INFO("resident memory grew by " << grew_kib / 1024 << " MiB, threads by "
                                  << thread_count() - threads_before);
  CHECK(grew_kib < 50 * 1024);
  CHECK(thread_count() - threads_before == 0);  // handshakes run on the server's I/O thread
  CHECK(server.over_limit() > 0);
  // While they are still open, a real client from another address is served.
  auto c = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  c->send({7});
  CHECK(c->receive(5s) == std::vector<uint8_t>{7});
  for (int fd : fds) close(fd);
}

TEST_CASE("200 connections in their handshake at once cost no thread and little memory",
          "[control]") {
  ControlServer::Limits limits;
  limits.handshakes = limits.handshakes_per_source = limits.handshakes_per_range = 256;  // all 200
  ControlServer server("127.0.0.1", 0, daemons_only(key_of(1)), [](ControlConnection& c) {
    for (;;) c.send(c.receive(5s));
  }, 5s, limits);
  const int64_t before = resident_kib();
  const int64_t threads_before = thread_count();
  const std::vector<int> fds = hostile_handshakes(server.port());
  CHECK(fds.size() == 200);
  // The 100 that announced a large proof are refused on its length, long before the 5 s
  // handshake timeout; the half-open rest are still waiting.
  CHECK(wait_for([&] { return server.refused() == 100; }, 4s, "100 large proofs refused"));
  CHECK(wait_for([&] { return server.handshaking() == 100; }, 1s, "100 half-open handshakes"));
  INFO("resident memory grew by " << (resident_kib() - before) / 1024 << " MiB");
  CHECK(resident_kib() - before < 50 * 1024);
  CHECK(thread_count() == threads_before);
  CHECK(server.over_limit() == 0);
  auto c = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  c->send({9});
  CHECK(c->receive(5s) == std::vector<uint8_t>{9});
  for (int fd : fds) close(fd);
}

TEST_CASE("connections over a bound are closed unread, at once; under the bounds all is served",
          "[control]") {
  ControlServer::Limits limits;
  limits.handshakes = 3;
  limits.handshakes_per_source = 2;
  limits.sessions = 2;
  ControlServer server("127.0.0.1", 0, daemons_only(key_of(1)), [](ControlConnection& c) {
    for (;;) c.send(c.receive(5s));
  }, 3s, limits);
  auto closed_at_once = [](int fd) {
    const auto start = std::chrono::steady_clock::now();
    const bool closed = closed_by_server(fd);
    close(fd);
    return closed && std::chrono::steady_clock::now() - start < 1s;  // not the 3 s timeout
  };
  // Per source: two silent connections from 127.0.0.2 hold its share.
  const int a = raw_connect(server.port(), "127.0.0.2");
  const int b = raw_connect(server.port(), "127.0.0.2");
  REQUIRE(wait_for([&] { return server.handshaking() == 2; }, 5s, "two handshakes under way"));
  CHECK(closed_at_once(raw_connect(server.port(), "127.0.0.2")));
  // In total: one from 127.0.0.3 takes the last handshake; one from 127.0.0.4 is over.
  const int d = raw_connect(server.port(), "127.0.0.3");
  REQUIRE(wait_for([&] { return server.handshaking() == 3; }, 5s, "three handshakes under way"));
  CHECK(closed_at_once(raw_connect(server.port(), "127.0.0.4")));
  CHECK(server.over_limit() == 2);
  close(a);
  close(b);
  close(d);
  // Their handshakes end (refused: no hello).
  REQUIRE(wait_for([&] { return server.handshaking() == 0; }, 5s, "the handshakes to end"));
  // Sessions: two clients hold both; a third is closed before its handshake.
  auto c1 = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  auto c2 = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  c1->send({1});
  CHECK(c1->receive(5s) == std::vector<uint8_t>{1});
  c2->send({2});  // an answer: the server counts c2's session now
  CHECK(c2->receive(5s) == std::vector<uint8_t>{2});
  CHECK_THROWS_AS(ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s),
                  ControlError);
  CHECK(server.over_limit() == 3);
  c1.reset();  // one session ends: room for the next client
  REQUIRE(wait_for([&] { return server.sessions() == 1; }, 5s, "c1's session to end"));
  auto c3 = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  c3->send({3});
  CHECK(c3->receive(5s) == std::vector<uint8_t>{3});
  c2->send({2});
  CHECK(c2->receive(5s) == std::vector<uint8_t>{2});
}

TEST_CASE("stop() ends open connections and returns", "[control]") {
  std::atomic<int> handled{0};
  auto server = std::make_unique<ControlServer>(
      "127.0.0.1", 0, key_of(1),
      [&](ControlConnection& c) {
        ++handled;
        c.receive(60s);  // would wait a minute; stop() must cut it short
      },
      2s);
  auto c = ControlConnection::connect("127.0.0.1", server->port(), key_of(1), 5s);
  const auto end = Clock::now() + 5s;
  while (handled == 0 && Clock::now() < end) std::this_thread::sleep_for(10ms);
  const auto start = Clock::now();
  server->stop();
  CHECK(Clock::now() - start < 2s);
  CHECK(kind_of([&] { c->receive(5s); }) == Kind::kClosed);
}

namespace {

// A controller-like lookup: daemons with the cluster key, and the listed clients.
KeyLookup clients_lookup(const ClusterKey& cluster, std::map<std::string, ClusterKey>* clients) {
  return [cluster, clients](const ControlIdentity& who, std::string& refusal) -> std::optional<ClusterKey> {
    if (who.role == ControlIdentity::Role::kDaemon) return cluster;
    auto it = clients->find(who.name);
    if (it != clients->end()) return it->second;
    refusal = "client '" + who.name + "' is not listed";
    return std::nullopt;
  };
}

ControlCredential client(const std::string& name, const ClusterKey& key) {
  return {{ControlIdentity::Role::kClient, name}, key};
}

}  // namespace

TEST_CASE("client credentials: listed ones get in under their name; others are refused, saying why",
          "[control]") {
  std::map<std::string, ClusterKey> clients{{"alice", key_of(5)}};
  std::atomic<int> handled{0};
  std::string seen_name;
  std::mutex seen_mutex;
  ControlServer server("127.0.0.1", 0, clients_lookup(key_of(1), &clients),
                       [&](ControlConnection& c) {
                         ++handled;
                         {
                           std::lock_guard<std::mutex> lock(seen_mutex);
                           seen_name = c.peer_identity().describe();
                         }
                         for (;;) c.send(c.receive(5s));
                       }, 2s);
  // A listed client: in, and the server knows who it is.
  auto c = ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(5)), 5s);
  c->send({4});
  CHECK(c->receive(5s) == std::vector<uint8_t>{4});
  {
    std::lock_guard<std::mutex> lock(seen_mutex);
    CHECK(seen_name == "client 'alice'");
  }
  // An unlisted (or revoked) name: refused by the server before any frame, with its reason.
  try {
    ControlConnection::connect("127.0.0.1", server.port(), client("mallory", key_of(5)), 5s);
    FAIL("an unlisted client got in");
  } catch (const ControlError& e) {
    CHECK(e.kind() == Kind::kAuthentication);
    CHECK(std::string(e.what()).find("client 'mallory' is not listed") != std::string::npos);
    CHECK(e.fix().find("clients_dir") != std::string::npos);
  }
  // A listed name with the wrong key: the key proof fails on both ends.
  try {
    ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(6)), 5s);
    FAIL("a wrong client key got in");
  } catch (const ControlError& e) {
    CHECK(e.kind() == Kind::kAuthentication);
    CHECK(std::string(e.what()).find("does not hold the key of client 'alice'") != std::string::npos);
  }
  // A client's key is not the cluster key: claiming to be a daemon with it fails too.
  CHECK(kind_of([&] { ControlConnection::connect("127.0.0.1", server.port(), key_of(5), 5s); }) ==
        Kind::kAuthentication);
  // Revoked: taken off the list, the same credential no longer gets in.
  clients.clear();  // (the lookup reads the map at each handshake; this test's only writer)
  CHECK(kind_of([&] {
          ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(5)), 5s);
        }) == Kind::kAuthentication);
  const auto end = Clock::now() + 5s;
  while (server.refused() < 4 && Clock::now() < end) std::this_thread::sleep_for(10ms);
  CHECK(server.refused() == 4);
  CHECK(handled == 1);
  // A daemon with the cluster key is still served.
  auto d = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  d->send({9});
  CHECK(d->receive(5s) == std::vector<uint8_t>{9});
}

TEST_CASE("client credential files: made, read back, checked", "[control]") {
  const std::string dir = "/tmp/dtrain-cred-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/clients");
  generate_client_credential(dir + "/alice.cred", "alice");
  const ClientCredential a = load_client_credential(dir + "/alice.cred");
  CHECK(a.name == "alice");
  CHECK(a.key != ClusterKey{});
  CHECK_THROWS_WITH(generate_client_credential(dir + "/x.cred", "no spaces"),
                    Catch::Contains("not a client name"));
  std::filesystem::copy_file(dir + "/alice.cred", dir + "/clients/alice.cred");
  ClientList list = ClientList::load(dir + "/clients");
  CHECK(list.size() == 1);
  CHECK(list.key_of("alice") == a.key);
  CHECK_FALSE(list.key_of("bob"));
  CHECK_FALSE(a.operator_role);
  CHECK_FALSE(list.is_operator("alice"));
  // An operator's credential says so on its first line; the controller's copy decides.
  const std::string alice_only = list.digest();
  CHECK(alice_only.size() == 32);
  CHECK(ClientList::load(dir + "/clients").digest() == alice_only);  // the same list, the same
  CHECK(ClientList().digest() != alice_only);
  generate_client_credential(dir + "/clients/carol.cred", "carol", /*operator_role=*/true);
  CHECK(load_client_credential(dir + "/clients/carol.cred").operator_role);
  CHECK(ClientList::load(dir + "/clients").digest() != alice_only);  // standbys would differ
  CHECK(ClientList::load(dir + "/clients").is_operator("carol"));
  CHECK_FALSE(ClientList::load(dir + "/clients").is_operator("alice"));
  std::filesystem::remove(dir + "/clients/carol.cred");
  // Another word after the name is no role this release knows: refused.
  for (const char* header : {"dtrain-client dave admin", "dtrain-client dave operator extra"}) {
    const std::string path = dir + "/dave.cred";
    std::filesystem::remove(path);
    {
      std::ofstream(path) << header << "\n" << std::string(64, 'a') << "\n";
    }
    chmod(path.c_str(), 0600);
    CHECK_THROWS_WITH(load_client_credential(path), Catch::Contains("dtrain-client NAME operator"));
  }
  // A credential under another client's file name is refused, naming the fix.
  std::filesystem::copy_file(dir + "/alice.cred", dir + "/clients/bob.cred");
  CHECK_THROWS_WITH(ClientList::load(dir + "/clients"), Catch::Contains("name the file alice.cred"));
  std::filesystem::remove(dir + "/clients/bob.cred");
  // One that others may read is refused like a cluster key.
  chmod((dir + "/clients/alice.cred").c_str(), 0644);
  CHECK_THROWS_WITH(ClientList::load(dir + "/clients"), Catch::Contains("chmod 600"));
  std::filesystem::remove_all(dir);
}

namespace {

// A TCP relay on loopback that keeps every byte it passes: what someone on the path would see.
class Eavesdropper {
 public:
  explicit Eavesdropper(uint16_t server_port) : server_port_(server_port) {
    listener_ = loopback_listener(port_);
    thread_ = std::thread([this] { relay(); });
  }
  ~Eavesdropper() {
    stop_ = true;
    thread_.join();
    close(listener_);
  }
  uint16_t port() const { return port_; }
  std::string seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  void relay() {
    pollfd l{listener_, POLLIN, 0};
    while (!stop_ && poll(&l, 1, 50) == 0) {}
    if (stop_) return;
    const int client = accept(listener_, nullptr, nullptr);
    const int server = socket(AF_INET, SOCK_STREAM, 0);  // no REQUIRE off the test's thread
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (client < 0 || connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      stop_ = true;
    pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    char buf[65536];
    while (!stop_) {
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        const ssize_t n = read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          stop_ = true;
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          seen_.append(buf, size_t(n));
        }
        if (write(p[1 - i].fd, buf, size_t(n)) != n) stop_ = true;
      }
    }
    close(client);
    close(server);
  }
  uint16_t server_port_, port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string seen_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("a capture of a control session shows no frame body in clear", "[control]") {
  ControlServer server = echo_server(key_of(1));
  Eavesdropper tap(server.port());
  auto c = ControlConnection::connect("127.0.0.1", tap.port(), key_of(1), 5s);
  const std::string spec = "name: secret-experiment-7f3a\nmodel: {layers: [...]}\n";
  c->send(std::vector<uint8_t>(spec.begin(), spec.end()));
  const std::vector<uint8_t> back = c->receive(5s);
  CHECK(std::string(back.begin(), back.end()) == spec);  // the peers read it
  const std::string wire = tap.seen();
  CHECK(wire.size() > 2 * spec.size());  // both ways passed the tap
  CHECK(wire.find("secret-experiment") == std::string::npos);
  CHECK(wire.find("model:") == std::string::npos);
}

TEST_CASE("one client holds at most its share of sessions; daemons and other clients get in",
          "[control]") {
  std::map<std::string, ClusterKey> clients{{"alice", key_of(5)}, {"bob", key_of(6)}};
  ControlServerLimits limits;
  limits.sessions_per_client = 3;
  ControlServer server("127.0.0.1", 0, clients_lookup(key_of(1), &clients),
                       [](ControlConnection& c) { for (;;) c.send(c.receive(5s)); }, 2s, limits);
  auto echoes = [](ControlConnection& c) {
    c.send({7});
    return c.receive(5s) == std::vector<uint8_t>{7};
  };
  std::vector<std::unique_ptr<ControlConnection>> alice;
  for (int i = 0; i < 3; ++i) {
    alice.push_back(
        ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(5)), 5s));
    CHECK(echoes(*alice.back()));
  }
  // Her fourth passes the handshake and is then closed, unserved.
  auto fourth =
      ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(5)), 5s);
  CHECK(kind_of([&] { echoes(*fourth); }) == Kind::kClosed);
  auto bob = ControlConnection::connect("127.0.0.1", server.port(), client("bob", key_of(6)), 5s);
  CHECK(echoes(*bob));
  auto node = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  CHECK(echoes(*node));
  // One of hers ends: she may open another.
  alice.pop_back();
  REQUIRE(wait_for([&] { return server.sessions() == 4; }, 5s, "her session to end"));
  auto again =
      ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(5)), 5s);
  CHECK(echoes(*again));
}

TEST_CASE("a client holding every session it may, each announcing the largest frame, costs the "
          "server under 100 MB; daemons and other clients get in", "[control]") {
  std::map<std::string, ClusterKey> clients{{"alice", key_of(5)}, {"bob", key_of(6)}};
  ControlServer server("127.0.0.1", 0, clients_lookup(key_of(1), &clients),
                       [](ControlConnection& c) { for (;;) c.send(c.receive(30s)); }, 2s);
  const int64_t before = resident_kib();
  const int held = ControlServerLimits().sessions_per_client;
  // Each of her sessions announces 64 MiB and sends 1 MiB of it; she opens four more than she
  // may hold (those are closed after their handshake).
  std::vector<std::unique_ptr<ControlConnection>> alice;
  const std::vector<uint8_t> part(1 << 20, 0x5a);
  for (int i = 0; i < held + 4; ++i) {
    alice.push_back(
        ControlConnection::connect("127.0.0.1", server.port(), client("alice", key_of(5)), 5s));
    const int fd = alice.back()->native_handle_for_tests();
    const uint32_t announced = ControlConnection::kMaxFrameBytes;
    CHECK(::send(fd, &announced, sizeof announced, MSG_NOSIGNAL) == sizeof announced);
    size_t sent = 0;
    while (sent < part.size()) {
      const ssize_t n = ::send(fd, part.data() + sent, part.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;  // one over her share: the server closed it
      sent += size_t(n);
    }
  }
  REQUIRE(wait_for([&] { return server.sessions() == held; }, 5s,
                   std::to_string(held) + " of her sessions held, the rest closed"));
  std::this_thread::sleep_for(500ms);  // the server reads what was sent
  const int64_t grew_kib = resident_kib() - before;
  std::printf("%d sessions announcing %u-byte frames, 1 MiB sent on each: resident memory +%lld "
              "MiB\n", held, ControlConnection::kMaxFrameBytes, (long long)(grew_kib / 1024));
  CHECK(grew_kib < 100 * 1024);
  auto bob = ControlConnection::connect("127.0.0.1", server.port(), client("bob", key_of(6)), 5s);
  bob->send({7});
  CHECK(bob->receive(5s) == std::vector<uint8_t>{7});
  auto node = ControlConnection::connect("127.0.0.1", server.port(), key_of(1), 5s);
  node->send({8});
  CHECK(node->receive(5s) == std::vector<uint8_t>{8});
}

TEST_CASE("a few addresses of one range cannot hold every handshake slot", "[control]") {
  ControlServer server = echo_server(key_of(1));  // 8 per address, 16 per /24, 64 in all
  std::vector<int> held;
  for (const char* source : {"127.0.0.2", "127.0.0.3"})
    for (int i = 0; i < 8; ++i) held.push_back(raw_connect(server.port(), source));
  REQUIRE(wait_for([&] { return server.handshaking() == 16; }, 5s, "16 silent handshakes"));
  // A third address of 127.0.0.0/24 is over its range's share; another range is not.
  const int over = raw_connect(server.port(), "127.0.0.4");
  CHECK(closed_by_server(over));
  close(over);
  CHECK(server.over_limit() == 1);
  held.push_back(raw_connect(server.port(), "127.0.1.5"));
  CHECK(wait_for([&] { return server.handshaking() == 17; }, 5s, "a handshake from 127.0.1.5"));
  CHECK(server.over_limit() == 1);
  for (int fd : held) close(fd);
}
