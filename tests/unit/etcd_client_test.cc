// EtcdHttpClient (daemon/election/etcd_client.h) against an in-process HTTP server playing etcd's
// JSON gateway: it reads leases, transactions and ranges as etcd 3.4 writes them (int64 as
// strings, base64 values, `succeeded` left out when false, a keepalive's missing TTL for an
// expired lease), and an answer of the wrong shape, one over 64 KiB, one that drips in slower than
// the timeout or an HTTP error is an EtcdError, never a crash; a second endpoint answers when
// the first is down.
#include <catch2/catch.hpp>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/election/etcd_client.h"

namespace {

using dtrain::daemon::EtcdError;
using dtrain::daemon::EtcdHttpClient;
using std::chrono::milliseconds;

// Answers every POST with `body` (status `status`), or drips `drip` in 100 ms steps.
struct FakeGateway {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::string body = "{}";
  int status = 200;
  int drip_steps = 0;
  std::string last_path, last_request;

  FakeGateway() {
    server.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      last_path = req.path;
      last_request = req.body;
      if (drip_steps > 0) {
        auto drip = [this](size_t, httplib::DataSink& sink) {
          for (int i = 0; i < drip_steps; ++i) {
            std::this_thread::sleep_for(milliseconds(100));
            if (!sink.write("          ", 10)) return false;
          }
          sink.done();
          return true;
        };
        res.set_chunked_content_provider("application/json", drip);
        return;
      }
      res.status = status;
      res.set_content(body, "application/json");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
  }
  ~FakeGateway() {
    server.stop();
    thread.join();
  }
  EtcdHttpClient client() { return EtcdHttpClient({{"127.0.0.1", port}}, milliseconds(500)); }
};

}  // namespace

TEST_CASE("etcd's answers as 3.4 writes them") {
  FakeGateway g;
  auto c = g.client();
  g.body = R"({"header":{"revision":"1"},"ID":"7587899402547299845","TTL":"5"})";
  CHECK(c.grant_lease(5) == 7587899402547299845);
  CHECK(g.last_path == "/v3/lease/grant");
  g.body = R"({"result":{"ID":"42","TTL":"5"}})";
  CHECK(c.keep_alive(42) == 5);
  CHECK(g.last_request == R"({"ID":"42"})");
  g.body = R"({"result":{"ID":"42"}})";  // expired: no TTL
  CHECK(c.keep_alive(42) == 0);
  g.body = R"({"header":{},"succeeded":true})";
  CHECK(c.create("/k", "c1 10.0.0.1:7070", 42));
  CHECK_THAT(g.last_request, Catch::Contains(R"("create_revision":"0")") &&
                                 Catch::Contains(R"("lease":"42")") && Catch::Contains("L2s="));
  g.body = R"({"header":{}})";  // a failed compare: succeeded left out
  CHECK_FALSE(c.create("/k", "c1", 42));
  g.body = R"({"kvs":[{"key":"L2s=","value":"YzEgMTAuMC4wLjE6NzA3MA==","lease":"42"}],)"
           R"("count":"1"})";
  const auto v = c.get("/k");
  REQUIRE(v);
  CHECK(v->value == "c1 10.0.0.1:7070");
  CHECK(v->lease == 42);
  g.body = R"({"header":{}})";
  CHECK_FALSE(c.get("/k"));
}

TEST_CASE("answers of the wrong shape are EtcdErrors") {
  FakeGateway g;
  auto c = g.client();
  for (const char* bad : {R"({"succeeded":"yes"})", "not json", "[1,2]"}) {
    g.body = bad;
    CHECK_THROWS_AS(c.create("/k", "v", 1), EtcdError);
  }
  for (const char* bad : {R"({"kvs":[{"value":5}]})", R"({"kvs":[{"value":"***"}]})",
                          R"({"kvs":[7]})", R"({"kvs":"x"})"}) {
    g.body = bad;
    CHECK_THROWS_AS(c.get("/k"), EtcdError);
  }
  for (const char* bad : {R"({"ID":"12x"})", R"({"ID":1.5})", R"({"ID":"0"})", "{}"}) {
    g.body = bad;
    CHECK_THROWS_AS(c.grant_lease(5), EtcdError);
  }
  g.body = R"({"result":"x"})";
  CHECK_THROWS_AS(c.keep_alive(1), EtcdError);
  g.body = R"({"error":"requested lease not found","code":5})";
  g.status = 404;
  CHECK_THROWS_WITH(c.create("/k", "v", 1), Catch::Contains("HTTP 404"));
}

TEST_CASE("an answer over 64 KiB or slower than the timeout is cut off") {
  FakeGateway g;
  auto c = g.client();
  g.body = "{\"pad\":\"" + std::string(1 << 20, 'x') + "\"}";
  CHECK_THROWS_WITH(c.get("/k"), Catch::Contains("over 64 KiB"));
  g.drip_steps = 100;  // 10 s of ten bytes each 100 ms, each read within the read timeout
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(c.get("/k"), Catch::Contains("within the timeout"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("a second endpoint answers when the first is down") {
  FakeGateway g;
  int closed = 0;
  {
    httplib::Server s;  // a port that was free a moment ago and has no listener now
    closed = s.bind_to_any_port("127.0.0.1");
  }
  EtcdHttpClient c({{"127.0.0.1", closed}, {"127.0.0.1", g.port}}, milliseconds(500));
  g.body = R"({"ID":"9","TTL":"5"})";
  CHECK(c.grant_lease(5) == 9);
  EtcdHttpClient none({{"127.0.0.1", closed}}, milliseconds(500));
  CHECK_THROWS_WITH(none.grant_lease(5), Catch::Contains("etcd did not answer /v3/lease/grant"));
}

TEST_CASE("endpoints are http://HOST:PORT") {
  CHECK(dtrain::daemon::parse_etcd_endpoint("http://10.0.0.5:2379").host == "10.0.0.5");
  CHECK(dtrain::daemon::parse_etcd_endpoint("http://etcd-1").port == 2379);
  for (const char* bad : {"https://10.0.0.5:2379", "10.0.0.5:2379", "http://a:99999", "http://a b"})
    CHECK_THROWS(dtrain::daemon::parse_etcd_endpoint(bad));
}
