#include "daemon/protocol/client_requests.h"

#include <cctype>

#include "daemon/protocol/wire_text.h"
#include "daemon/protocol/control_frames.h"

namespace dtrain::daemon {

using namespace transport;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

// Longer than any real request's texts and lists, far below what a forged one could cost.
constexpr size_t kMaxSpec = 1 << 20, kMaxText = 4096, kMaxClasses = 100000, kMaxMetrics = 16;

Offset<control::TaskRequest> task_table(FlatBufferBuilder& fbb, const TaskRequest& t) {
  return control::CreateTaskRequest(
      fbb, t.task, fbb.CreateString(t.name), fbb.CreateString(t.format),
      fbb.CreateString(t.path), fbb.CreateString(t.shards), fbb.CreateString(t.labels),
      t.label_column, t.header, t.key_column, t.top_n, t.batch_size, t.nodes,
      fbb.CreateVectorOfStrings(t.metrics), fbb.CreateString(t.output_dir), t.keep_parts,
      fbb.CreateString(t.roc_csv), fbb.CreateVectorOfStrings(t.roc_classes));
}

// One request's reader: its texts share the frame's budget and are valid UTF-8
// (daemon/protocol/wire_text.h); a text longer than `max` marks the request unreadable.
struct Reader {
  TextBudget budget;
  bool ok = true;
  void text(const flatbuffers::String* s, size_t max, std::string& out) {
    if (!s) return;  // absent: the default stays
    if (s->size() > max || !budget.take(s, max, out)) ok = false;
  }
  void texts(const flatbuffers::Vector<Offset<flatbuffers::String>>* v, size_t max_items,
             std::vector<std::string>& out) {
    out.clear();
    if (!v) return;
    if (v->size() > max_items) {
      ok = false;
      return;
    }
    for (const flatbuffers::String* s : *v) {
      std::string item;
      text(s, kMaxText, item);
      if (!ok) return;
      out.push_back(std::move(item));
    }
  }
};

void read_task(Reader& in, const control::TaskRequest& t, TaskRequest& out) {
  out.task = t.task();  // an unknown one is refused by the controller, naming it
  out.label_column = t.label_column();
  out.header = t.header();
  out.key_column = t.key_column();
  out.top_n = t.top_n();
  out.batch_size = t.batch_size();
  out.nodes = t.nodes();
  out.keep_parts = t.keep_parts();
  in.text(t.name(), kMaxText, out.name);
  in.text(t.format(), kMaxText, out.format);
  in.text(t.path(), kMaxText, out.path);
  in.text(t.shards(), kMaxText, out.shards);
  in.text(t.labels(), kMaxText, out.labels);
  in.texts(t.metrics(), kMaxMetrics, out.metrics);
  in.text(t.output_dir(), kMaxText, out.output_dir);
  in.text(t.roc_csv(), kMaxText, out.roc_csv);
  in.texts(t.roc_classes(), kMaxClasses, out.roc_classes);
}

}  // namespace

const char* task_kind_word(TaskKind kind) {
  switch (kind) {
    case TaskKind::Eval:
      return "eval";
    case TaskKind::Infer:
      return "infer";
    default:
      return "";
  }
}

TaskKind parse_task_kind(const std::string& word) {
  if (word == "eval") return TaskKind::Eval;
  if (word == "infer") return TaskKind::Infer;
  return TaskKind::Unknown;
}

std::string request_kind_name(RequestKind kind) {
  const char* name = control::EnumNameRequestKind(kind);
  std::string word = name && *name ? name : "unknown";
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return word;
}

std::vector<uint8_t> request_frame(const ClientRequest& r) {
  FlatBufferBuilder fbb(1024 + r.spec.size());
  const auto task = r.task ? task_table(fbb, *r.task) : 0;
  const auto spec = fbb.CreateString(r.spec), base_dir = fbb.CreateString(r.base_dir),
             source = fbb.CreateString(r.source), node = fbb.CreateString(r.node);
  control::RequestBuilder b(fbb);
  b.add_kind(r.kind);
  b.add_job_id(r.job_id);
  b.add_data_bytes(r.data_size());
  b.add_spec(spec);
  b.add_base_dir(base_dir);
  b.add_source(source);
  b.add_follow_log(r.log_from.has_value());
  b.add_log_from(r.log_from.value_or(0));
  b.add_offset(r.offset);
  b.add_length(r.length);
  b.add_node(node);
  b.add_task(task);
  return control_frame_bytes(fbb, control::ControlBody::Request, b.Finish().Union());
}

std::vector<uint8_t> request_data_frame(const std::vector<uint8_t>& data) {
  FlatBufferBuilder fbb(1024 + data.size());
  const auto d = fbb.CreateVector(data);
  return control_frame_bytes(fbb, control::ControlBody::RequestData,
                             control::CreateRequestData(fbb, d).Union());
}

bool read_request(const control::Request& q, size_t frame_bytes, ClientRequest& out) {
  out = ClientRequest{};
  Reader in{TextBudget(frame_bytes)};
  out.kind = q.kind();
  out.job_id = q.job_id();
  if (q.follow_log()) out.log_from = q.log_from();
  out.offset = q.offset();
  out.length = q.length();
  out.data_bytes = q.data_bytes();
  if (const control::TaskRequest* t = q.task()) {
    TaskRequest task;
    read_task(in, *t, task);
    out.task = std::move(task);
  }
  in.text(q.spec(), kMaxSpec, out.spec);
  in.text(q.base_dir(), kMaxText, out.base_dir);
  in.text(q.source(), kMaxText, out.source);
  in.text(q.node(), kMaxText, out.node);
  return in.ok;
}

std::vector<uint8_t> reply_ok(const Json& body, const std::vector<uint8_t>& data) {
  FlatBufferBuilder fbb(1024 + data.size());
  // Replaced, not thrown on: a text that is not UTF-8 must not make a reply fail.
  const std::string json = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  const auto r = control::CreateReply(fbb, true, fbb.CreateString(json), 0, 0,
                                      data.empty() ? 0 : fbb.CreateVector(data));
  return control_frame_bytes(fbb, control::ControlBody::Reply, r.Union());
}

std::vector<uint8_t> reply_error(const std::string& error, const std::string& fix) {
  FlatBufferBuilder fbb;
  const auto r = control::CreateReply(fbb, false, 0, fbb.CreateString(error),
                                      fbb.CreateString(fix));
  return control_frame_bytes(fbb, control::ControlBody::Reply, r.Union());
}

std::vector<uint8_t> reply_not_leader(const std::string& error, const std::string& fix,
                                      const std::string& leader) {
  FlatBufferBuilder fbb;
  // Always present (empty when none leads): its presence marks a standby's refusal.
  const auto r = control::CreateReply(fbb, false, 0, fbb.CreateString(error),
                                      fbb.CreateString(fix), 0, fbb.CreateString(leader));
  return control_frame_bytes(fbb, control::ControlBody::Reply, r.Union());
}

Json request(ControlConnection& c, const ClientRequest& request, std::chrono::milliseconds timeout,
             std::vector<uint8_t>* data) {
  // What the controller would close the connection on, said here with the reason.
  const std::vector<uint8_t> frame = request_frame(request);
  if (frame.size() > kClientRequestFrameBytes)
    throw RequestRefused("the request is " + std::to_string(frame.size()) + " bytes, more than the " +
                             std::to_string(kClientRequestFrameBytes) + " a request may be",
                         "shorten what it carries (the spec, or the ROC's class names)");
  if (request.data_size() > kMaxRequestDataBytes)
    throw RequestRefused("the model of " + std::to_string(request.data_size()) +
                             " bytes is larger than the " + std::to_string(kMaxRequestDataBytes) +
                             " a request may bring",
                         "evaluate a smaller model, or run eval/infer on one machine");
  c.send(frame, timeout);
  if (request.data_size() > 0) c.send(request_data_frame(*request.data), timeout);
  const std::vector<uint8_t> bytes = c.receive(timeout);
  const control::ControlFrame& f = read_control_frame(bytes);
  const control::Reply* r = f.body_as_Reply();
  if (!r)
    throw ControlError(ControlError::Kind::kMalformed, "the controller answered with no reply",
                       "run the same dtrain release on the controller and here");
  if (!r->ok()) {
    RequestRefused refused(r->error() ? r->error()->str() : "refused",
                           r->fix() ? r->fix()->str() : "", r->leader() ? r->leader()->str() : "");
    if (r->leader()) refused.from_standby();
    throw refused;
  }
  const std::string text = r->body() ? r->body()->str() : "{}";
  const Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw ControlError(ControlError::Kind::kMalformed, "the controller's reply is not JSON",
                       "run the same dtrain release on the controller and here");
  if (data) {
    data->clear();
    if (r->data()) data->assign(r->data()->begin(), r->data()->end());
  }
  return parsed;
}

}  // namespace dtrain::daemon
