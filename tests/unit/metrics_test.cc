// /metrics never fails (docs/architecture/daemon.md, "Status and metrics"): a status document with
// odd or missing figures, wrong types and bytes that are not UTF-8 still renders; what is odd is
// left out or read as 0.
#include <catch2/catch.hpp>

#include "daemon/http/status_server.h"

using dtrain::daemon::Json;
using dtrain::daemon::prometheus_text;

TEST_CASE("odd figures are left out, the rest of the page renders", "[metrics]") {
  Json status = Json::parse(R"({
    "node": {"name": "n1", "controller_connected": "yes",
             "jobs": [{"id": 17, "name": ["x"], "progress": "none", "workers": [{"worker": "w", "tau": "big"}]},
                      "not a job"],
             "peers": [{"peer": 3, "bytes_in": 100, "drops": {"bad_tag": 5, "odd": "many"}},
                       {"peer": {"nested": 1}, "drops": []}],
             "gpus": {"index": 0}},
    "controller": {"jobs": {"jobs": [{"state": "running"}, {"state": 7}, 3]}, "nodes": "?"}
  })");
  std::string page;
  REQUIRE_NOTHROW(page = prometheus_text(status));
  CHECK(page.find("dtrain_node_up{node=\"n1\"} 1") != std::string::npos);
  CHECK(page.find("dtrain_node_controller_connected{node=\"n1\"} 0") != std::string::npos);
  CHECK(page.find("dtrain_job_epoch{job=\"17\",job_name=\"\"} 0") != std::string::npos);
  CHECK(page.find("dtrain_worker_tau{job=\"17\",job_name=\"\",worker=\"w\"} 0") != std::string::npos);
  CHECK(page.find("dtrain_transport_bytes_in_total{peer=\"3\"} 100") != std::string::npos);
  CHECK(page.find("reason=\"bad_tag\"} 5") != std::string::npos);
  CHECK(page.find("reason=\"odd\"") == std::string::npos);  // not a number: left out
  CHECK(page.find("dtrain_jobs{state=\"running\"} 1") != std::string::npos);
  CHECK(page.find("dtrain_nodes{state=\"alive\"} 0") != std::string::npos);
}

TEST_CASE("a status that is not even an object renders an empty page", "[metrics]") {
  CHECK(prometheus_text(Json::array({1, 2})).empty());
  CHECK(prometheus_text(Json("text")).empty());
  CHECK(prometheus_text(Json::object({{"node", 5}, {"controller", nullptr}})).empty());
}

TEST_CASE("the tag workers' figures appear where the node reports them", "[metrics]") {
  const Json with = Json::parse(R"({"node": {"name": "n1", "tag_threads": 2, "tags_on_workers": 1234}})");
  const std::string page = prometheus_text(with);
  CHECK(page.find("dtrain_transport_tag_threads{node=\"n1\"} 2") != std::string::npos);
  CHECK(page.find("dtrain_transport_tags_on_workers_total{node=\"n1\"} 1234") != std::string::npos);
  // An older node's status has neither: nothing is made up.
  const std::string without = prometheus_text(Json::parse(R"({"node": {"name": "n1"}})"));
  CHECK(without.find("tag_threads") == std::string::npos);
  CHECK(without.find("tags_on_workers") == std::string::npos);
}
