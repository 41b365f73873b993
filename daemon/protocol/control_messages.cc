#include "daemon/protocol/control_messages.h"

#include <algorithm>
#include <cstdio>

#include "transport/control/control_frames.h"

namespace dtrain::daemon {

using namespace transport;

std::vector<uint8_t> register_frame(const NodeRegistration& node) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<control::Gpu>> gpus;
  for (const auto& g : node.gpus)
    gpus.push_back(control::CreateGpu(fbb, g.index, fbb.CreateString(g.name), g.memory_bytes));
  const auto r = control::CreateRegister(fbb, fbb.CreateString(node.name),
                                         fbb.CreateString(node.address), node.data_port,
                                         node.cores, node.node_id, node.boot_id,
                                         fbb.CreateVector(gpus),
                                         fbb.CreateVector(node.running_jobs));
  return control_frame_bytes(fbb, control::ControlBody::Register, r.Union());
}

bool read_registration(const transport::control::Register& r, NodeRegistration& out) {
  if (!r.node_name() || !r.address() || r.node_name()->size() == 0) return false;
  out.node_id = r.node_id();
  out.boot_id = r.boot_id();
  out.name = r.node_name()->str();
  out.address = r.address()->str();
  out.data_port = r.data_port();
  out.cores = std::max(1u, r.cores());
  out.gpus.clear();
  // Bounded: a node has a handful of GPUs; more entries or longer names are not believed.
  constexpr size_t kMaxGpus = 64, kMaxName = 128;
  if (r.gpus())
    for (const auto* g : *r.gpus()) {
      if (!g || out.gpus.size() == kMaxGpus) continue;
      std::string name = g->name() ? g->name()->str() : "";
      if (name.size() > kMaxName) name.resize(kMaxName);
      out.gpus.push_back({g->index(), name, g->memory_bytes()});
    }
  out.running_jobs.clear();
  if (r.running_jobs())
    for (size_t i = 0; i < r.running_jobs()->size() && i < 64; ++i)
      out.running_jobs.push_back(r.running_jobs()->Get(flatbuffers::uoffset_t(i)));
  return true;
}

Json gpus_json(const std::vector<NodeRegistration::Gpu>& gpus) {
  Json out = Json::array();
  for (const auto& g : gpus)
    out.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes}});
  return out;
}

std::vector<uint8_t> job_frame(uint64_t job_id, const std::string& kind, const Json& body) {
  flatbuffers::FlatBufferBuilder fbb;
  const std::string text = body.dump();
  const auto m = control::CreateJobMessage(
      fbb, job_id, fbb.CreateString(kind),
      fbb.CreateVector(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Union());
}

bool read_job_message(const std::vector<uint8_t>& frame, JobMessageIn& out) {
  const control::JobMessage* jm = nullptr;
  try {
    jm = read_control_frame(frame).body_as_JobMessage();
  } catch (const ControlError&) {
    return false;  // one malformed frame is dropped; the connection goes on
  }
  if (!jm) return false;
  const std::string text(jm->body() ? reinterpret_cast<const char*>(jm->body()->data()) : "",
                         jm->body() ? jm->body()->size() : 0);
  out.job_id = jm->job_id();
  out.kind = jm->kind() ? jm->kind()->str() : "";
  out.body = Json::parse(text.empty() ? "{}" : text, nullptr, /*allow_exceptions=*/false);
  return !out.body.is_discarded();
}

std::vector<uint8_t> request_frame(const std::string& kind, uint64_t job_id, const Json& body) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto r = control::CreateRequest(fbb, fbb.CreateString(kind), job_id,
                                        fbb.CreateString(body.dump()));
  return control_frame_bytes(fbb, control::ControlBody::Request, r.Union());
}

std::vector<uint8_t> reply_ok(const Json& body) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto r = control::CreateReply(fbb, true, fbb.CreateString(body.dump()));
  return control_frame_bytes(fbb, control::ControlBody::Reply, r.Union());
}

std::vector<uint8_t> reply_error(const std::string& error, const std::string& fix) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto r = control::CreateReply(fbb, false, 0, fbb.CreateString(error),
                                      fbb.CreateString(fix));
  return control_frame_bytes(fbb, control::ControlBody::Reply, r.Union());
}

Json request(ControlConnection& c, const std::string& kind, uint64_t job_id, const Json& body,
             std::chrono::milliseconds timeout) {
  c.send(request_frame(kind, job_id, body), timeout);
  const std::vector<uint8_t> bytes = c.receive(timeout);
  const control::ControlFrame& f = read_control_frame(bytes);
  const control::Reply* r = f.body_as_Reply();
  if (!r)
    throw ControlError(ControlError::Kind::kMalformed, "the controller answered with no reply",
                       "run the same dtrain release on the controller and here");
  if (!r->ok())
    throw RequestRefused(r->error() ? r->error()->str() : "refused",
                         r->fix() ? r->fix()->str() : "");
  const std::string text = r->body() ? r->body()->str() : "{}";
  const Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw ControlError(ControlError::Kind::kMalformed, "the controller's reply is not JSON",
                       "run the same dtrain release on the controller and here");
  return parsed;
}

std::string job_id_text(uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

bool parse_job_id(const std::string& text, uint64_t& id) {
  if (text.empty() || text.size() > 16) return false;
  id = 0;
  for (char ch : text) {
    int v;
    if (ch >= '0' && ch <= '9') v = ch - '0';
    else if (ch >= 'a' && ch <= 'f') v = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') v = ch - 'A' + 10;
    else return false;
    id = id * 16 + static_cast<uint64_t>(v);
  }
  return true;
}

}  // namespace dtrain::daemon
