#include "daemon/protocol/node_reports.h"

#include <array>
#include <cmath>
#include <functional>
#include <iterator>

#include "daemon/protocol/wire_text.h"
#include "daemon/protocol/control_frames.h"
#include "transport/schema/vector_alignment.h"

namespace dtrain::daemon {

using namespace transport;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

// Bounds on what a report may hold: far above what a real node sends, far below what would cost
// the controller memory on a forged report's say-so (the frame itself is bounded too).
constexpr size_t kMaxText = 1 << 16;            // a log line, an error, a path
constexpr size_t kMaxLostNodes = 4096;          // a cluster's nodes
constexpr size_t kMaxParamSample = 1 << 17;     // job_runner.cc's stride sends fewer
constexpr int64_t kMaxRank = 4096;              // a job's members
constexpr size_t kMaxCounts = 1 << 26;           // the frame's own bound is lower still
constexpr size_t kMaxSums = 1 << 16;            // a regression's per-column sums
constexpr int64_t kMaxEpochs = 100000;          // the most a spec may ask for
constexpr size_t kMaxShardFiles = 1 << 20;

// ---- building ------------------------------------------------------------------------------

Offset<control::EvaluationCounts> counts_table(FlatBufferBuilder& fbb, const EvaluationCounts& c) {
  return control::CreateEvaluationCounts(fbb, c.loss_sum, c.regression,
                                         fbb.CreateVector(c.counts),
                                         fbb.CreateVector(c.regression_sums));
}

template <size_t N>
Offset<flatbuffers::Vector<double>> rows_vector(FlatBufferBuilder& fbb,
                                                const std::vector<std::array<double, N>>& rows) {
  std::vector<double> flat;
  flat.reserve(rows.size() * N);
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return fbb.CreateVector(flat);
}

// Each report kind's table; `m` is filled once every table below the message is built.
struct TableBuilder {
  FlatBufferBuilder& fbb;
  std::function<void(control::JobMessageBuilder&)> add;

  void operator()(const ProgressReport& p) {
    const auto t = control::CreateProgressReport(
        fbb, p.rank, p.epoch, p.epochs, p.iteration, p.iteration_in_epoch,
        p.iterations_per_epoch, p.loss, p.samples_per_sec, p.eta_seconds, p.workers, p.sharing,
        p.tau, p.density, fbb.CreateString(p.encoding), p.message_kb, p.accuracy, p.diverging);
    add = [t](control::JobMessageBuilder& m) { m.add_progress(t); };
  }
  void operator()(const LogReport& l) {
    const auto t = control::CreateLogReport(fbb, fbb.CreateString(l.line));
    add = [t](control::JobMessageBuilder& m) { m.add_log(t); };
  }
  void operator()(const CheckpointReport& c) {
    const auto t = control::CreateCheckpointReport(fbb, c.epoch, fbb.CreateString(c.path));
    add = [t](control::JobMessageBuilder& m) { m.add_checkpoint(t); };
  }
  void operator()(const FailedReport& f) {
    const auto t = control::CreateFailedReport(fbb, f.rank, fbb.CreateString(f.error),
                                               fbb.CreateString(f.fix), f.cancelled);
    add = [t](control::JobMessageBuilder& m) { m.add_failed(t); };
  }
  void operator()(const RejoinedReport& r) {
    const auto t = control::CreateRejoinedReport(fbb, r.epoch, fbb.CreateString(r.from));
    add = [t](control::JobMessageBuilder& m) { m.add_rejoined(t); };
  }
  void operator()(const AttachedReport& a) {
    const auto t = control::CreateAttachedReport(fbb, a.rank);
    add = [t](control::JobMessageBuilder& m) { m.add_attached(t); };
  }
  void operator()(const ResultReport& r) {
    Offset<control::AppliedUpdates> applied = 0;
    if (r.applied)
      applied = control::CreateAppliedUpdates(fbb, r.applied->messages, r.applied->digest,
                                              r.applied->deviation);
    Offset<control::EvaluationPart> evaluation = 0;
    if (const auto& e = r.evaluation)
      evaluation = control::CreateEvaluationPart(fbb, e->part, e->parts, e->examples,
                                                 e->test_examples, counts_table(fbb, e->counts));
    const auto t = control::CreateResultReport(
        fbb, r.rank, r.iterations, r.samples, r.train_seconds, r.messages, r.message_bytes,
        r.params, r.workers, fbb.CreateString(r.codec_kernel), fbb.CreateString(r.device),
        r.mesh_messages_sent, r.mesh_bytes_sent, fbb.CreateVectorOfStrings(r.lost_nodes),
        fbb.CreateString(r.sync), r.sync_bound, r.max_steps_ahead, r.stop_on_divergence, r.fp16,
        r.overflow_skipped_steps, fbb.CreateString(r.gpu_sharing), r.messages_from_gpus,
        r.classes, applied, evaluation, fbb.CreateString(r.model_path),
        fbb.CreateString(r.model_sha256), fbb.CreateString(r.stopped_early),
        fbb.CreateVector(r.params_sample), fbb.CreateString(r.mode));
    add = [t](control::JobMessageBuilder& m) { m.add_result(t); };
  }
  void operator()(const StatsReport& s) {
    const auto t = control::CreateStatsReport(fbb, rows_vector(fbb, s.steps),
                                              rows_vector(fbb, s.epochs),
                                              rows_vector(fbb, s.links));
    add = [t](control::JobMessageBuilder& m) { m.add_stats(t); };
  }
  void operator()(const ShardsReport& s) {
    std::vector<Offset<control::ShardFile>> files;
    for (const ShardFile& f : s.files)
      files.push_back(control::CreateShardFile(fbb, fbb.CreateString(f.path), f.examples,
                                               f.total, f.export_id));
    const auto t = control::CreateShardsReport(fbb, fbb.CreateVector(files));
    add = [t](control::JobMessageBuilder& m) { m.add_shards(t); };
  }
  void operator()(const PartDoneReport& p) {
    Offset<control::EvaluationCounts> counts = 0;
    if (p.counts) counts = counts_table(fbb, *p.counts);
    Offset<control::PartScores> roc = 0;
    if (p.roc)
      roc = control::CreatePartScores(fbb, p.roc->rows, p.roc->classes,
                                      fbb.CreateVector(p.roc->probabilities),
                                      fbb.CreateVector(p.roc->labels));
    const auto t = control::CreatePartDoneReport(fbb, p.part_index, p.examples, p.begin,
                                                 fbb.CreateString(p.file), counts, roc);
    add = [t](control::JobMessageBuilder& m) { m.add_part_done(t); };
  }
};

// ---- reading -------------------------------------------------------------------------------

// One message's reader: its texts share the frame's budget (daemon/protocol/wire_text.h); a
// text past it marks the whole message unreadable.
struct Reader {
  TextBudget budget;
  bool ok = true;
  std::string text(const flatbuffers::String* s) {
    std::string out;
    if (!budget.take(s, kMaxText, out)) ok = false;
    return out;
  }
};

// A rank names a member of the job: below kMaxRank (-1 where a report may have none).
bool rank_ok(int64_t rank) { return rank >= -1 && rank < kMaxRank; }

template <class T>
bool read_vector(const flatbuffers::Vector<T>* v, size_t limit, std::vector<T>& out) {
  out.clear();
  if (!v) return true;
  if (v->size() > limit || !elements_aligned(v)) return false;
  out.assign(v->begin(), v->end());
  return true;
}

bool read_counts(const control::EvaluationCounts* c, EvaluationCounts& out) {
  if (!c) return false;
  out.loss_sum = c->loss_sum();
  out.regression = c->regression();
  return read_vector(c->counts(), kMaxCounts, out.counts) &&
         read_vector(c->regression_sums(), kMaxSums, out.regression_sums) &&
         (out.regression ? out.counts.empty() : out.regression_sums.empty());
}

bool read_progress(Reader& in, const control::ProgressReport& p, ProgressReport& out) {
  out = {p.rank(), p.epoch(), p.epochs(), p.iteration(), p.iteration_in_epoch(),
         p.iterations_per_epoch(), p.loss(), p.samples_per_sec(), p.eta_seconds(),
         p.workers(), p.sharing(), p.tau(), p.density(), p.message_kb(), in.text(p.encoding()),
         p.accuracy(), p.diverging()};
  return rank_ok(p.rank()) && in.ok;
}

bool read_result(Reader& in, const control::ResultReport& r, ResultReport& out) {
  out = ResultReport{};
  if (!rank_ok(r.rank())) return false;
  out.rank = r.rank();
  out.iterations = r.iterations();
  out.samples = r.samples();
  out.train_seconds = r.train_seconds();
  out.messages = r.messages();
  out.message_bytes = r.message_bytes();
  out.params = r.params();
  out.workers = r.workers();
  out.codec_kernel = in.text(r.codec_kernel());
  out.device = in.text(r.device());
  out.mesh_messages_sent = r.mesh_messages_sent();
  out.mesh_bytes_sent = r.mesh_bytes_sent();
  if (r.lost_nodes()) {
    if (r.lost_nodes()->size() > kMaxLostNodes) return false;
    for (const flatbuffers::String* n : *r.lost_nodes()) out.lost_nodes.push_back(in.text(n));
  }
  out.sync = in.text(r.sync());
  out.sync_bound = r.sync_bound();
  out.max_steps_ahead = r.max_steps_ahead();
  out.stop_on_divergence = r.stop_on_divergence();
  out.fp16 = r.fp16();
  out.overflow_skipped_steps = r.overflow_skipped_steps();
  out.gpu_sharing = in.text(r.gpu_sharing());
  out.messages_from_gpus = r.messages_from_gpus();
  out.classes = r.classes();
  if (const control::AppliedUpdates* a = r.applied())
    out.applied = ResultReport::Applied{a->messages(), a->digest(), a->deviation()};
  if (const control::EvaluationPart* e = r.evaluation()) {
    ResultReport::Evaluation part{e->part(), e->parts(), e->examples(), e->test_examples(), {}};
    if (!read_counts(e->counts(), part.counts)) return false;
    out.evaluation = std::move(part);
  }
  out.model_path = in.text(r.model_path());
  out.model_sha256 = in.text(r.model_sha256());
  out.stopped_early = in.text(r.stopped_early());
  out.mode = in.text(r.mode());
  return read_vector(r.params_sample(), kMaxParamSample, out.params_sample) && in.ok;
}

template <size_t N>
bool read_rows(const flatbuffers::Vector<double>* v, std::vector<std::array<double, N>>& out) {
  out.clear();
  if (!v) return true;
  if (v->size() % N != 0 || v->size() / N > kMaxStatsRows || !elements_aligned(v)) return false;
  out.resize(v->size() / N);
  for (size_t i = 0; i < v->size(); ++i) out[i / N][i % N] = v->Get(flatbuffers::uoffset_t(i));
  return true;
}

bool read_stats(const control::StatsReport& s, StatsReport& out) {
  return read_rows(s.steps(), out.steps) && read_rows(s.epochs(), out.epochs) &&
         read_rows(s.links(), out.links) && stats_rows_plausible(out);
}

// A list no real node sends is still a readable report: its error goes to the controller, which
// stops the job naming it (the node's data cannot be planned without it).
bool read_shards(Reader& in, const control::ShardsReport& s, ShardsReport& out) {
  if (!s.files() || s.files()->size() > kMaxShardFiles) {
    out.error = "no list of at most " + std::to_string(kMaxShardFiles) + " files";
    return true;
  }
  for (const control::ShardFile* f : *s.files()) {
    ShardFile file{in.text(f->path()), f->examples(), f->total(), f->export_id()};
    if (!in.ok) {
      out = {{}, "a list whose paths are larger than the report that carried them"};
      return true;
    }
    if (!check_shard_file(file, out.error)) {
      out.files.clear();
      return true;
    }
    out.files.push_back(std::move(file));
  }
  return true;
}

bool read_part_done(Reader& in, const control::PartDoneReport& p, PartDoneReport& out) {
  out = {p.part_index(), p.examples(), p.begin(), in.text(p.file()), std::nullopt, std::nullopt};
  if (p.counts()) {
    EvaluationCounts counts;
    if (!read_counts(p.counts(), counts)) return false;
    out.counts = std::move(counts);
  }
  if (const control::PartScores* s = p.roc()) {
    PartScores roc{s->rows(), s->classes(), {}, {}};
    // Each factor bounded before the product, so that it cannot wrap (the fuzzer's find).
    constexpr int64_t kMaxScores = int64_t(kMaxPartScoreBytes / sizeof(float));
    if (roc.rows < 0 || roc.rows > kMaxScores || roc.classes < 1 || roc.classes > 100000 ||
        roc.rows * roc.classes > kMaxScores ||
        !read_vector(s->probabilities(), size_t(roc.rows * roc.classes), roc.probabilities) ||
        !read_vector(s->labels(), size_t(roc.rows), roc.labels) ||
        roc.probabilities.size() != size_t(roc.rows * roc.classes) ||
        roc.labels.size() != size_t(roc.rows))
      return false;
    for (int32_t l : roc.labels)
      if (l < 0 || l >= roc.classes) return false;
    // A diverged model's NaN would break the ROC's sort (a strict weak order is required).
    for (float p : roc.probabilities)
      if (!std::isfinite(p)) return false;
    out.roc = std::move(roc);
  }
  return in.ok;
}

}  // namespace

JobKind report_kind(const NodeReport& report) {
  static constexpr JobKind kKinds[] = {JobKind::Progress, JobKind::Log,      JobKind::Checkpoint,
                                       JobKind::Failed,   JobKind::Rejoined, JobKind::Attached,
                                       JobKind::Result,   JobKind::Stats,    JobKind::Shards,
                                       JobKind::PartDone};
  static_assert(std::size(kKinds) == std::variant_size_v<NodeReport>);
  return kKinds[report.index()];
}

std::vector<uint8_t> report_frame(uint64_t job_id, const NodeReport& report, uint64_t part) {
  FlatBufferBuilder fbb(1024);
  TableBuilder tables{fbb, {}};
  std::visit(tables, report);
  control::JobMessageBuilder m(fbb);
  m.add_job_id(job_id);
  m.add_kind(report_kind(report));
  m.add_part(part);
  tables.add(m);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

std::vector<uint8_t> heartbeat_frame() {
  FlatBufferBuilder fbb;
  control::JobMessageBuilder m(fbb);
  m.add_kind(JobKind::Heartbeat);
  return control_frame_bytes(fbb, control::ControlBody::JobMessage, m.Finish().Union());
}

bool read_report(const control::JobMessage& m, size_t frame_bytes, NodeReport& out) {
  Reader in{TextBudget(frame_bytes)};
  switch (m.kind()) {
    case JobKind::Progress: {
      ProgressReport r;
      if (!m.progress() || !read_progress(in, *m.progress(), r)) return false;
      out = std::move(r);
      return true;
    }
    case JobKind::Log:
      if (!m.log()) return false;
      out = LogReport{in.text(m.log()->line())};
      return in.ok;
    case JobKind::Checkpoint:
      if (!m.checkpoint() || m.checkpoint()->epoch() < 0 || m.checkpoint()->epoch() > kMaxEpochs)
        return false;
      out = CheckpointReport{m.checkpoint()->epoch(), in.text(m.checkpoint()->path())};
      return in.ok;
    case JobKind::Failed:
      if (!m.failed() || !rank_ok(m.failed()->rank())) return false;
      out = FailedReport{m.failed()->rank(), in.text(m.failed()->error()),
                         in.text(m.failed()->fix()), m.failed()->cancelled()};
      return in.ok;
    case JobKind::Rejoined:
      if (!m.rejoined()) return false;
      out = RejoinedReport{m.rejoined()->epoch(), in.text(m.rejoined()->from())};
      return in.ok;
    case JobKind::Attached:
      if (!m.attached() || !rank_ok(m.attached()->rank())) return false;
      out = AttachedReport{m.attached()->rank()};
      return true;
    case JobKind::Result: {
      ResultReport r;
      if (!m.result() || !read_result(in, *m.result(), r)) return false;
      out = std::move(r);
      return true;
    }
    case JobKind::Stats: {
      StatsReport r;
      if (!m.stats() || !read_stats(*m.stats(), r)) return false;
      out = std::move(r);
      return true;
    }
    case JobKind::Shards: {
      ShardsReport r;
      if (!m.shards() || !read_shards(in, *m.shards(), r)) return false;
      out = std::move(r);
      return true;
    }
    case JobKind::PartDone: {
      PartDoneReport r;
      if (!m.part_done() || !read_part_done(in, *m.part_done(), r)) return false;
      out = std::move(r);
      return true;
    }
    default:
      return false;  // not a report
  }
}

}  // namespace dtrain::daemon
