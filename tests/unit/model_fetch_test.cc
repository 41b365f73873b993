// `dtrain-submit fetch` (docs/architecture/daemon.md, "Fetching a model"): a node reads a chunk of
// a model only inside its models folder and says why when it cannot; the frames carry bytes
// whole; the controller asks the node that holds the finished job's model (lowest rank first,
// the next when one cannot), passes its chunk and checksum back, and refuses with the reason a
// job that has no model to fetch. In one process, over a real loopback control channel.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>

#include "daemon/protocol/model_fetch.h"
#include "tests/unit/controller_harness.h"

using namespace dtrain;
using namespace dtrain::testing;
using namespace std::chrono_literals;

namespace {

void write_file(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const daemon::RequestRefused& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("a node reads a chunk of a model inside its models folder only", "[fetch]") {
  const std::string models = temp_dir() + "/models";
  write_file(models + "/sub/m.dtm", "0123456789");
  daemon::ChunkMessage c = daemon::read_model_chunk(models, {5, "sub/m.dtm", 3, 4});
  CHECK(c.error == "");
  CHECK(c.request == 5);
  CHECK(c.total == 10);
  CHECK(std::string(c.data.begin(), c.data.end()) == "3456");
  c = daemon::read_model_chunk(models, {5, "sub/m.dtm", 8, 100});  // the rest only
  CHECK(std::string(c.data.begin(), c.data.end()) == "89");
  c = daemon::read_model_chunk(models, {5, "sub/m.dtm", 11, 4});
  CHECK(c.error.find("past the end") != std::string::npos);
  c = daemon::read_model_chunk(models, {5, "../node_id", 0, 4});
  CHECK(c.error.find("leaves the models folder") != std::string::npos);
  CHECK(c.data.empty());
  c = daemon::read_model_chunk(models, {5, "/etc/passwd", 0, 4});
  CHECK(c.error.find("leaves the models folder") != std::string::npos);
  c = daemon::read_model_chunk(models, {5, "gone.dtm", 0, 4});
  CHECK(c.error.find("cannot read") != std::string::npos);
}

TEST_CASE("the SHA-256 of a file, and fetch frames round trip", "[fetch]") {
  const std::string path = temp_dir() + "/abc";
  write_file(path, "abc");
  CHECK(daemon::file_sha256(path) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(daemon::file_sha256(path + ".missing") == "");
  daemon::JobMessageIn in;
  REQUIRE(daemon::read_job_message(daemon::fetch_frame(9, {3, "m.dtm", 16, 1024}), in));
  CHECK(in.kind == daemon::JobKind::FetchModel);
  CHECK(in.fetch.path == "m.dtm");
  CHECK(in.fetch.offset == 16);
  CHECK(in.fetch.length == 1024);
  REQUIRE(daemon::read_job_message(daemon::chunk_frame(9, {3, 16, 20, {1, 2, 3, 4}, ""}), in));
  CHECK(in.kind == daemon::JobKind::ModelChunk);
  CHECK(in.chunk.data == std::vector<uint8_t>{1, 2, 3, 4});
  CHECK(in.chunk.total == 20);
  // A length above the chunk bound is no real controller's: the frame is refused.
  CHECK_FALSE(daemon::read_job_message(
      daemon::fetch_frame(9, {3, "m.dtm", 0, daemon::kMaxModelChunk + 1}), in));
}

TEST_CASE("the controller fetches a finished job's model from the node that holds it",
          "[fetch][controller]") {
  const std::string dir = temp_dir();
  const uint64_t done = 0xd0e, running = 0x7e5;
  daemon::JobRecord r;
  r.id = done;
  r.name = "mlp";
  r.owner = "alice";  // the harness's client asks
  r.state = daemon::JobState::kSucceeded;
  r.spec_text =
      "name: mlp\nmodel:\n  input: [4]\n  layers:\n"
      "    - output: {units: 3, activation: softmax, loss: mcxent}\n"
      "data:\n  train: {format: csv, path: none.csv}\noutput:\n  model: runs/mlp.dtm\n";
  r.nodes = {"node-a", "node-b"};
  r.results["node-a"] = {{"rank", 0}, {"model_sha256", "aaaa"}};
  r.results["node-b"] = {{"rank", 1}, {"model_sha256", "bbbb"}};
  daemon::save_job(dir + "/controller/jobs", r);
  daemon::JobRecord live = r;
  live.id = running;
  live.state = daemon::JobState::kFailed;
  live.results.clear();
  daemon::save_job(dir + "/controller/jobs", live);
  ControllerUnderTest t(dir);
  FakeNode a(t, node_named("node-a", 1));
  FakeNode b(t, node_named("node-b", 2));
  auto fetch = [&](uint64_t offset) {
    return std::async(std::launch::async, [&t, offset] {
      auto c = t.as_alice();
      std::vector<uint8_t> data;
      daemon::ClientRequest q = daemon::client_request(daemon::RequestKind::Fetch, done);
      q.offset = offset;
      daemon::Json reply = daemon::request(*c, q, 10s, &data);
      reply["bytes"] = std::string(data.begin(), data.end());
      return reply;
    });
  };
  SECTION("the lowest rank answers") {
    auto reply = fetch(2);
    const daemon::JobMessageIn ask = a.next();
    REQUIRE(ask.kind == daemon::JobKind::FetchModel);
    CHECK(ask.job_id == done);
    CHECK(ask.fetch.path == "runs/mlp.dtm");
    CHECK(ask.fetch.offset == 2);
    a.connection->send(daemon::chunk_frame(done, {ask.fetch.request, 2, 6, {'d', 't', 'm', '!'}, ""}));
    const daemon::Json got = reply.get();
    CHECK(got.at("node") == "node-a");
    CHECK(got.at("file") == "mlp.dtm");
    CHECK(got.at("total") == 6);
    CHECK(got.at("sha256") == "aaaa");
    CHECK(got.at("bytes") == "dtm!");
  }
  SECTION("a node that cannot read it: the next one is asked") {
    auto reply = fetch(0);
    const daemon::JobMessageIn ask = a.next();
    // A chunk for another request, or from another node, is not taken for this one.
    b.connection->send(daemon::chunk_frame(done, {ask.fetch.request, 0, 1, {'x'}, ""}));
    a.connection->send(daemon::chunk_frame(done, {ask.fetch.request + 100, 0, 1, {'x'}, ""}));
    a.connection->send(daemon::chunk_frame(done, {ask.fetch.request, 0, 0, {}, "cannot read it"}));
    const daemon::JobMessageIn ask_b = b.next();
    b.connection->send(daemon::chunk_frame(done, {ask_b.fetch.request, 0, 2, {'o', 'k'}, ""}));
    const daemon::Json got = reply.get();
    CHECK(got.at("node") == "node-b");
    CHECK(got.at("sha256") == "bbbb");
    CHECK(got.at("bytes") == "ok");
  }
  SECTION("refusals name the reason") {
    CHECK(refusal([&] {
            t.ask(daemon::client_request(daemon::RequestKind::Fetch, running));
          }).find("failed and wrote no final model") != std::string::npos);
    daemon::ClientRequest pinned = daemon::client_request(daemon::RequestKind::Fetch, done);
    pinned.node = "node-z";
    CHECK(refusal([&] { t.ask(pinned); }).find("node node-z holds no model") != std::string::npos);
  }
}
