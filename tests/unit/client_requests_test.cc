// A client's requests on the control wire (daemon/protocol/client_requests.h): each kind's
// arguments come back as they were built, an absent log_from stays absent (0 is a line number),
// and texts or lists longer than any real request's are refused before anything reads them.
#include <catch2/catch.hpp>

#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/control_frames.h"

using namespace dtrain;
using namespace dtrain::daemon;

namespace {

// The request as the controller reads it; nullopt when its reader refuses it.
std::optional<ClientRequest> round_trip(const ClientRequest& request) {
  const std::vector<uint8_t> frame = request_frame(request);
  const daemon::control::Request* q = daemon::read_control_frame(frame).body_as_Request();
  REQUIRE(q != nullptr);
  ClientRequest out;
  if (!read_request(*q, frame.size(), out)) return std::nullopt;
  return out;
}

}  // namespace

TEST_CASE("each request kind's arguments come back as they were built", "[requests]") {
  ClientRequest submit = client_request(RequestKind::Submit);
  submit.spec = "name: x\n";
  submit.base_dir = "/home/ana/jobs";
  submit.source = "x.yaml";
  const auto s = round_trip(submit);
  REQUIRE(s);
  CHECK(s->kind == RequestKind::Submit);
  CHECK((s->spec == submit.spec && s->base_dir == submit.base_dir && s->source == "x.yaml"));

  ClientRequest status = client_request(RequestKind::Status, 0xabc);
  CHECK_FALSE(round_trip(status)->log_from.has_value());  // no log lines asked for
  status.log_from = 0;
  const auto followed = round_trip(status);
  REQUIRE(followed->log_from.has_value());
  CHECK(*followed->log_from == 0);
  CHECK(followed->job_id == 0xabc);

  ClientRequest fetch = client_request(RequestKind::Fetch, 7);
  fetch.offset = 1ull << 33;
  fetch.length = 4096;
  fetch.node = "node-2";
  const auto f = round_trip(fetch);
  CHECK((f->offset == 1ull << 33 && f->length == 4096 && f->node == "node-2"));

  ClientRequest task = client_request(RequestKind::Task);
  TaskRequest eval;
  eval.task = TaskKind::Eval;
  eval.shards = "/d/{node}/*.dtb";
  eval.format = "packed";
  eval.top_n = 5;
  eval.nodes = 3;
  eval.metrics = {"classification", "roc"};
  eval.roc_csv = "/shared/roc.csv";
  eval.roc_classes = {"cat", "dog"};
  task.task = eval;
  task.data = daemon::shared_bytes({1, 2, 3, 4});
  const auto t = round_trip(task);
  REQUIRE(t->task);
  CHECK(t->task->task == TaskKind::Eval);
  CHECK(t->task->shards == eval.shards);
  CHECK(t->task->top_n == 5);
  CHECK(t->task->nodes == 3);
  CHECK(t->task->metrics == eval.metrics);
  CHECK(t->task->roc_classes == eval.roc_classes);
  // The model is not in the request's frame: the request announces its size, and it follows
  // in a frame of its own.
  CHECK_FALSE(t->data);
  CHECK(t->data_bytes == 4);
  CHECK(request_frame(task).size() < kClientRequestFrameBytes);
  const std::vector<uint8_t> data_frame = request_data_frame(*task.data);
  const daemon::control::RequestData* d = read_control_frame(data_frame).body_as_RequestData();
  REQUIRE(d);
  CHECK(std::vector<uint8_t>(d->data()->begin(), d->data()->end()) == *task.data);
  // The largest spec a request may hold still fits a client's first frame.
  ClientRequest big = client_request(RequestKind::Submit);
  big.spec = std::string(1 << 20, 'x');
  big.base_dir = big.source = std::string(4096, 'p');
  CHECK(request_frame(big).size() <= kClientRequestFrameBytes);
  CHECK_FALSE(round_trip(client_request(RequestKind::Nodes))->task);
}

TEST_CASE("a request with a text or list longer than any real one is refused", "[requests]") {
  ClientRequest submit = client_request(RequestKind::Submit);
  submit.spec = std::string(1 << 20, 'x');
  CHECK(round_trip(submit));
  submit.spec += 'x';
  CHECK_FALSE(round_trip(submit));
  ClientRequest stats = client_request(RequestKind::Stats, 1);
  stats.node = std::string(4097, 'n');
  CHECK_FALSE(round_trip(stats));
  ClientRequest task = client_request(RequestKind::Task);
  TaskRequest many;
  many.metrics.assign(17, "roc");
  task.task = many;
  CHECK_FALSE(round_trip(task));
  many.metrics.clear();
  many.roc_classes.assign(2, std::string(4097, 'c'));
  task.task = many;
  CHECK_FALSE(round_trip(task));
  // A verified frame may point every entry at one string: 2,000 class names sharing one 4 KiB
  // text would copy 8 MB out of a frame of a few KB.
  namespace control = daemon::control;
  flatbuffers::FlatBufferBuilder fbb;
  const auto name = fbb.CreateString(std::string(4000, 'c'));
  const auto classes =
      fbb.CreateVector(std::vector<flatbuffers::Offset<flatbuffers::String>>(2000, name));
  control::TaskRequestBuilder t(fbb);
  t.add_roc_classes(classes);
  const auto table = t.Finish();
  control::RequestBuilder q(fbb);
  q.add_kind(RequestKind::Task);
  q.add_task(table);
  const std::vector<uint8_t> frame =
      daemon::control_frame_bytes(fbb, control::ControlBody::Request, q.Finish().Union());
  REQUIRE(frame.size() < 20000);
  ClientRequest out;
  CHECK_FALSE(read_request(*daemon::read_control_frame(frame).body_as_Request(), frame.size(), out));
}
