// The status port's gate (daemon/http/http_access.h), as a rule and on the real server over
// loopback: a Host header that names another site is refused (DNS rebinding), a port bound
// beyond loopback wants its token (a header, or ?token= once, which leaves a cookie), and a
// large request body is refused before any handler reads it.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <filesystem>
#include <fstream>

#include "daemon/http/http_access.h"
#include "daemon/http/status_server.h"
#include "tests/test_util.h"

using namespace dtrain;

namespace {

const std::string kToken(40, 'k');

daemon::HttpCredentials from(const std::string& host, const std::string& authorization = "",
                             const std::string& param = "", const std::string& cookie = "") {
  return {host, authorization, param, cookie};
}

}  // namespace

TEST_CASE("the rule: loopback names and the configured ones; the token when one is set") {
  daemon::HttpAccess open{{"dtrain-head.example"}, ""};
  CHECK_FALSE(daemon::http_refusal(open, from("127.0.0.1:7080")));
  CHECK_FALSE(daemon::http_refusal(open, from("localhost")));
  CHECK_FALSE(daemon::http_refusal(open, from("[::1]:7080")));
  CHECK_FALSE(daemon::http_refusal(open, from("DTRAIN-HEAD.example:7080")));
  const auto foreign = daemon::http_refusal(open, from("attacker.example:7080"));
  REQUIRE(foreign);
  CHECK(foreign->status == 403);
  CHECK_THAT(foreign->fix, Catch::Contains("http.hosts"));
  CHECK(daemon::http_refusal(open, from("")));  // no Host at all: not this daemon's name

  daemon::HttpAccess guarded{{"dtrain-head.example"}, kToken};
  const auto bare = daemon::http_refusal(guarded, from("dtrain-head.example"));
  REQUIRE(bare);
  CHECK(bare->status == 401);
  CHECK_FALSE(daemon::http_refusal(guarded, from("dtrain-head.example", "Bearer " + kToken)));
  CHECK_FALSE(daemon::http_refusal(guarded, from("dtrain-head.example", "", kToken)));
  CHECK_FALSE(daemon::http_refusal(guarded, from("dtrain-head.example", "", "",
                                                 "a=1; dtrain_token=" + kToken)));
  CHECK(daemon::http_refusal(guarded, from("dtrain-head.example", "Bearer " + kToken + "x")));
  CHECK(daemon::http_refusal(guarded, from("dtrain-head.example", "", "",
                                           "dtrain_token=" + std::string(40, 'j'))));
  CHECK(daemon::loopback_address("127.0.0.2"));
  CHECK_FALSE(daemon::loopback_address("0.0.0.0"));
  // A name that merely starts like a loopback address is anyone's to point anywhere.
  CHECK_FALSE(daemon::loopback_address("127.0.0.1.rebind.example"));
  CHECK(daemon::http_refusal(open, from("127.0.0.1.rebind.example:7080")));
}

TEST_CASE("the token file is made once, mode 0600, and a short one is refused") {
  const std::string dir = testing::temp_dir();
  const std::string token = daemon::load_or_make_http_token(dir + "/http.token");
  CHECK(token.size() == 64);
  CHECK(daemon::load_or_make_http_token(dir + "/http.token") == token);
  CHECK((std::filesystem::status(dir + "/http.token").permissions() &
         std::filesystem::perms::group_read) == std::filesystem::perms::none);
  std::filesystem::remove(dir + "/http.token");
  {
    std::ofstream(dir + "/http.token") << "short\n";
  }
  std::filesystem::permissions(dir + "/http.token", std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::owner_write);
  CHECK_THROWS_WITH(daemon::load_or_make_http_token(dir + "/http.token"),
                    Catch::Contains("shorter than 32 characters"));
}

TEST_CASE("the real server refuses a foreign Host, wants its token, and bounds bodies") {
  daemon::StatusServer server("127.0.0.1", 0, [] { return daemon::Json{{"node", {}}}; }, {},
                              daemon::HttpAccess{{"dtrain-head.example"}, kToken});
  httplib::Client client("127.0.0.1", server.port());
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  auto status_of = [&](const httplib::Headers& headers, const std::string& path = "/status") {
    const auto res = client.Get(path.c_str(), headers);
    REQUIRE(res);
    return res->status;
  };
  CHECK(status_of({{"Host", "attacker.example"}, {"Authorization", "Bearer " + kToken}}) == 403);
  CHECK(status_of({{"Host", "dtrain-head.example"}}) == 401);
  CHECK(status_of({{"Host", "dtrain-head.example"}, {"Authorization", "Bearer " + kToken}}) ==
        200);
  // A browser: ?token= once, then the cookie it left.
  const auto page = client.Get(("/?token=" + kToken).c_str(), {{"Host", "dtrain-head.example"}});
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK_THAT(page->get_header_value("Set-Cookie"), Catch::Contains("HttpOnly"));
  CHECK(status_of({{"Host", "dtrain-head.example"}, {"Cookie", "dtrain_token=" + kToken}},
                  "/api/jobs") != 401);
  // The probes' page: any Host, no token, and nothing in it but "ok".
  const auto health = client.Get("/healthz", {{"Host", "10.1.2.3:7080"}});
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(health->body == "ok\n");
  CHECK(status_of({{"Host", "10.1.2.3:7080"}}, "/healthz?x=/status") == 200);
  CHECK(status_of({{"Host", "10.1.2.3:7080"}}, "/healthz/../status") != 200);
  CHECK(status_of({{"Host", "10.1.2.3:7080"}}, "/status") == 403);
  // A body far past anything this port takes: refused before a handler reads it.
  const auto big = client.Post("/status", {{"Authorization", "Bearer " + kToken}},
                               std::string(1 << 20, 'x'), "text/plain");
  REQUIRE(big);
  CHECK(big->status == 413);
}
