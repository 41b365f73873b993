#include "daemon/protocol/control_messages.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "daemon/protocol/wire_text.h"
#include "daemon/protocol/control_frames.h"
#include "transport/schema/vector_alignment.h"

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
                                         fbb.CreateVector(node.running_jobs), node.data_lanes,
                                         node.data_wire, node.data_mtu);
  return control_frame_bytes(fbb, control::ControlBody::Register, r.Union());
}

bool read_registration(const control::Register& r, NodeRegistration& out) {
  if (!r.node_name() || !r.address() || r.node_name()->size() == 0) return false;
  if (!transport::elements_aligned(r.running_jobs())) return false;  // a forged or broken frame
  out.node_id = r.node_id();
  out.boot_id = r.boot_id();
  out.name = r.node_name()->str();
  out.address = r.address()->str();
  out.data_port = r.data_port();
  out.data_lanes = r.data_lanes();  // the controller checks its range
  out.data_wire = r.data_wire();    // and this, against its own
  out.data_mtu = r.data_mtu();      // and this, against the live nodes'
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

const char* job_kind_name(JobKind kind) { return control::EnumNameJobKind(kind); }

namespace {

// Bounds on what a start message may name: far above any real cluster, far below what would
// cost a node memory on a forged frame's say-so.
constexpr size_t kMaxMembers = 4096, kMaxGpus = 64, kMaxText = 1024, kMaxSpec = 1 << 20;
constexpr size_t kMaxPlanFiles = 1 << 20;

std::vector<uint8_t> job_message_bytes(flatbuffers::FlatBufferBuilder& fbb, uint64_t job_id,
                                       JobKind kind, flatbuffers::Offset<control::StartJob> start,
                                       flatbuffers::Offset<control::RejoinJob> rejoin) {
  control::JobMessageBuilder m(fbb);
  m.add_job_id(job_id);
  m.add_kind(kind);
  m.add_start(start);
  m.add_rejoin(rejoin);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

std::string text(const flatbuffers::String* s, size_t limit = kMaxText) {
  if (!s) return "";
  return std::string(s->c_str(), std::min<size_t>(s->size(), limit));
}

bool read_member(const control::JobMember& m, JobMemberInfo& out) {
  if (!m.name() || m.name()->size() == 0 || (m.gpus() && m.gpus()->size() > kMaxGpus))
    return false;
  out = {m.id(), text(m.name()), text(m.address()), m.port(), m.workers(),
         m.device() && text(m.device()) == "gpu", {}, m.boot(), m.cores()};
  if (m.gpus()) out.gpus.assign(m.gpus()->begin(), m.gpus()->end());
  return out.workers >= 1 && out.cores <= kMaxShareCores;
}

bool read_start(const control::StartJob& s, StartMessage& out) {
  if (!s.spec() || s.spec()->size() > kMaxSpec || !s.members() ||
      s.members()->size() > kMaxMembers || s.rank() >= s.members()->size() ||
      (s.lost() && s.lost()->size() > kMaxMembers) ||
      (s.readable_jobs() && s.readable_jobs()->size() > kMaxReadableJobs) ||
      !transport::elements_aligned(s.readable_jobs()) ||  // hostile bytes may misplace [ulong]
      (s.nccl_id() && s.nccl_id()->size() > kMaxNcclIdBytes) || s.resume_epoch() < -1 ||
      s.resume_epoch() > (int64_t(1) << 40))
    return false;
  out.spec = s.spec()->str();
  out.base_dir = s.base_dir() ? text(s.base_dir(), 4096) : ".";
  out.name = text(s.name());
  out.mesh = s.mesh() ? text(s.mesh()) : "plain";
  out.rank = s.rank();
  out.peer_timeout_ms = s.peer_timeout_ms();
  out.rejoin = s.rejoin();
  out.resume_epoch = s.resume_epoch();
  out.joining = s.joining();
  out.part = s.part();
  out.members.clear();
  for (const control::JobMember* m : *s.members()) {
    JobMemberInfo member;
    if (!m || !read_member(*m, member)) return false;
    out.members.push_back(std::move(member));
  }
  out.lost.clear();
  if (s.lost()) out.lost.assign(s.lost()->begin(), s.lost()->end());
  out.readable_jobs.clear();
  if (s.readable_jobs())
    out.readable_jobs.assign(s.readable_jobs()->begin(), s.readable_jobs()->end());
  out.nccl_id.clear();
  if (s.nccl_id()) out.nccl_id.assign(s.nccl_id()->begin(), s.nccl_id()->end());
  out.nccl_why = text(s.nccl_why());
  return true;
}

// Bounds on a task: a part list no larger than a job splits into, short data options.
constexpr size_t kMaxParts = 1 << 16, kMaxMetrics = 8;

// A list's file names: each 1 to 4096 bytes, all of them together within the frame's `budget`
// (a verified frame may point many entries at one shared string; wire_text.h).
bool read_file_name(const flatbuffers::String* f, TextBudget& budget,
                    std::vector<std::string>& out) {
  std::string name;
  if (!f || f->size() == 0 || f->size() > 4096 || !budget.take(f, 4096, name)) return false;
  out.push_back(std::move(name));
  return true;
}

bool read_plan(const control::DataPlan& p, size_t frame_bytes, DataPlanMessage& out) {
  if (!p.files() || !p.member_examples() || p.files()->size() > kMaxPlanFiles ||
      p.member_examples()->size() > kMaxMembers ||
      !transport::elements_aligned(p.member_examples()))  // hostile bytes may misplace [long]
    return false;
  TextBudget budget(frame_bytes);
  for (const flatbuffers::String* f : *p.files())
    if (!read_file_name(f, budget, out.files)) return false;
  for (int64_t n : *p.member_examples()) {
    if (n < 0 || n > (int64_t(1) << 40)) return false;
    out.member_examples.push_back(n);
  }
  return true;
}

bool read_task(const control::RunTask& t, size_t frame_bytes, TaskMessage& out) {
  if (!t.model() || !t.data() || !t.parts() || t.parts()->size() > kMaxParts ||
      (t.part_count() == 0 && text(t.data()->shards()).empty()) || t.part_count() > kMaxParts ||
      (t.metrics() && t.metrics()->size() > kMaxMetrics) || t.top_n() < 1 ||
      t.batch_size() < 1 || t.batch_size() > (1 << 20))
    return false;
  out.kind = t.kind();
  if (out.kind != TaskKind::Eval && out.kind != TaskKind::Infer) return false;
  out.model.assign(t.model()->begin(), t.model()->end());
  const control::TaskData& d = *t.data();
  out.format = text(d.format());
  out.path = text(d.path(), 4096);
  out.labels = text(d.labels(), 4096);
  out.label_column = d.label_column();
  out.key_column = d.key_column();
  out.header = d.header();
  out.shards = text(d.shards(), 4096);
  // Node-local data is for evaluations only.
  if (!out.shards.empty() && out.kind != TaskKind::Eval) return false;
  out.metrics.clear();
  if (t.metrics())
    for (const flatbuffers::String* m : *t.metrics()) out.metrics.push_back(text(m));
  out.top_n = t.top_n();
  out.batch_size = t.batch_size();
  out.output_dir = text(t.output_dir(), 4096);
  out.part_count = t.part_count();
  out.parts.clear();
  if (!transport::elements_aligned(t.parts())) return false;
  for (uint32_t p : *t.parts()) {
    if (p >= out.part_count) return false;
    out.parts.push_back(p);
  }
  // Node-local: a file of this node's for each part, and none without shards.
  out.part_files.clear();
  const size_t files = t.part_files() ? t.part_files()->size() : 0;
  if (files != (out.shards.empty() ? 0 : out.parts.size())) return false;
  TextBudget budget(frame_bytes);
  for (size_t i = 0; i < files; ++i)
    if (!read_file_name(t.part_files()->Get(flatbuffers::uoffset_t(i)), budget, out.part_files))
      return false;
  return true;
}

}  // namespace

std::string part_file_name(uint32_t part) {
  char name[32];
  std::snprintf(name, sizeof name, "part-%05u.csv", part);
  return name;
}

std::vector<uint8_t> task_frame(uint64_t job_id, const TaskMessage& task) {
  return task_frame(job_id, task, task.model);
}

std::vector<uint8_t> task_frame(uint64_t job_id, const TaskMessage& task,
                                const std::vector<uint8_t>& model) {
  flatbuffers::FlatBufferBuilder fbb(1024 + model.size());
  const auto data = control::CreateTaskData(
      fbb, fbb.CreateString(task.format), fbb.CreateString(task.path),
      fbb.CreateString(task.labels), task.label_column, task.header, task.key_column,
      task.shards.empty() ? 0 : fbb.CreateString(task.shards));
  std::vector<flatbuffers::Offset<flatbuffers::String>> part_files;
  for (const std::string& f : task.part_files) part_files.push_back(fbb.CreateString(f));
  std::vector<flatbuffers::Offset<flatbuffers::String>> metrics;
  for (const std::string& m : task.metrics) metrics.push_back(fbb.CreateString(m));
  const auto t = control::CreateRunTask(
      fbb, task.kind, fbb.CreateVector(model), data,
      fbb.CreateVector(metrics), task.top_n, task.batch_size, fbb.CreateString(task.output_dir),
      fbb.CreateVector(task.parts), task.part_count,
      part_files.empty() ? 0 : fbb.CreateVector(part_files));
  control::JobMessageBuilder m(fbb);
  m.add_job_id(job_id);
  m.add_kind(JobKind::Task);
  m.add_task(t);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

std::vector<uint8_t> data_plan_frame(uint64_t job_id, const DataPlanMessage& plan) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<flatbuffers::String>> files;
  for (const std::string& f : plan.files) files.push_back(fbb.CreateString(f));
  const auto p = control::CreateDataPlan(fbb, fbb.CreateVector(files),
                                         fbb.CreateVector(plan.member_examples));
  control::JobMessageBuilder m(fbb);
  m.add_job_id(job_id);
  m.add_kind(JobKind::DataPlan);
  m.add_plan(p);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

namespace {

flatbuffers::Offset<control::JobMember> member_table(flatbuffers::FlatBufferBuilder& fbb,
                                                     const JobMemberInfo& m) {
  return control::CreateJobMember(fbb, m.id, fbb.CreateString(m.name),
                                  fbb.CreateString(m.address), m.port, m.workers,
                                  fbb.CreateString(m.gpu ? "gpu" : "cpu"),
                                  fbb.CreateVector(m.gpus), m.boot, m.cores);
}

}  // namespace

std::vector<uint8_t> start_frame(uint64_t job_id, const StartMessage& start) {
  flatbuffers::FlatBufferBuilder fbb(1024 + start.spec.size());
  std::vector<flatbuffers::Offset<control::JobMember>> members;
  for (const JobMemberInfo& m : start.members) members.push_back(member_table(fbb, m));
  const auto s = control::CreateStartJob(
      fbb, fbb.CreateString(start.spec), fbb.CreateString(start.base_dir),
      fbb.CreateString(start.name), start.rank, fbb.CreateVector(members),
      fbb.CreateString(start.mesh), start.peer_timeout_ms, start.rejoin,
      fbb.CreateVector(start.lost), start.resume_epoch, start.joining, start.part,
      fbb.CreateVector(start.readable_jobs), fbb.CreateVector(start.nccl_id),
      fbb.CreateString(start.nccl_why));
  return job_message_bytes(fbb, job_id, JobKind::Start, s, 0);
}

std::vector<uint8_t> rejoin_frame(uint64_t job_id, const RejoinMessage& rejoin) {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<control::JobMember> member = 0;
  if (const auto& m = rejoin.member) member = member_table(fbb, *m);
  const auto r = control::CreateRejoinJob(fbb, rejoin.id, rejoin.boot, member, rejoin.slot,
                                          rejoin.withdrawn);
  return job_message_bytes(fbb, job_id, JobKind::Rejoin, 0, r);
}

std::vector<uint8_t> cancel_frame(uint64_t job_id) {
  flatbuffers::FlatBufferBuilder fbb;
  return job_message_bytes(fbb, job_id, JobKind::Cancel, 0, 0);
}

std::vector<uint8_t> received_frame(uint64_t count) {
  flatbuffers::FlatBufferBuilder fbb;
  control::JobMessageBuilder m(fbb);
  m.add_kind(JobKind::Received);
  m.add_received(count);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

bool read_job_message(const std::vector<uint8_t>& frame, JobMessageIn& out) {
  const control::JobMessage* jm = nullptr;
  try {
    jm = read_control_frame(frame).body_as_JobMessage();
  } catch (const ControlError&) {
    return false;  // one malformed frame is dropped; the connection goes on
  }
  if (!jm) return false;
  out.job_id = jm->job_id();
  out.kind = jm->kind();
  out.part = jm->part();
  switch (out.kind) {
    case JobKind::Start:
      return jm->start() && read_start(*jm->start(), out.start);
    case JobKind::Rejoin:
      if (!jm->rejoin()) return false;
      out.rejoin = {jm->rejoin()->id(), jm->rejoin()->boot(), std::nullopt, jm->rejoin()->slot(),
                    jm->rejoin()->withdrawn()};
      if (const control::JobMember* m = jm->rejoin()->member()) {
        JobMemberInfo member;
        if (!read_member(*m, member) || !is_slot_id(out.rejoin.slot) ||
            member.id != out.rejoin.id || is_slot_id(member.id))
          return false;
        out.rejoin.member = std::move(member);
      }
      return true;
    case JobKind::Cancel:
    case JobKind::Heartbeat:
      return true;
    case JobKind::Received:
      out.received = jm->received();
      return true;
    case JobKind::FetchModel:
      return jm->fetch() && read_fetch(*jm->fetch(), out.fetch);
    case JobKind::ModelChunk:
      return jm->chunk() && read_chunk(*jm->chunk(), out.chunk);
    case JobKind::Task:
      return jm->task() && read_task(*jm->task(), frame.size(), out.task);
    case JobKind::DataPlan:
      return jm->plan() && read_plan(*jm->plan(), frame.size(), out.plan);
    case JobKind::Progress:
    case JobKind::Log:
    case JobKind::Result:
    case JobKind::Failed:
    case JobKind::Rejoined:
    case JobKind::Checkpoint:
    case JobKind::Stats:
    case JobKind::PartDone:
    case JobKind::Attached:
    case JobKind::Shards:
      return read_report(*jm, frame.size(), out.report);
  }
  return false;  // a kind this release does not know
}

}  // namespace dtrain::daemon
