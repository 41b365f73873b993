// A node's reports on the control wire (daemon/protocol/node_reports.h): every kind comes back
// from its table as it was built, with its part; what no real node sends (a missing table, an
// epoch no spec asks for, ROC scores of the wrong shape, an impossible file entry) is refused;
// and the JSON the controller keeps is the one `status --json` always printed.
#include <catch2/catch.hpp>

#include <cmath>

#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/node_reports_json.h"
#include "daemon/protocol/wire_text.h"
#include "daemon/protocol/control_frames.h"

using namespace dtrain;
using namespace dtrain::daemon;
namespace control = daemon::control;

namespace {

JobMessageIn round_trip(const NodeReport& report, uint64_t part = 0) {
  JobMessageIn in;
  REQUIRE(read_job_message(report_frame(42, report, part), in));
  CHECK(in.job_id == 42);
  CHECK(in.kind == report_kind(report));
  CHECK(in.part == part);
  REQUIRE(in.report.index() == report.index());
  return in;
}

// A job message of `kind` whose table `add` sets (built by `make` first), as a forged or broken
// node might send it.
template <class Make, class Add>
std::vector<uint8_t> forged(JobKind kind, Make make, Add add) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto table = make(fbb);
  control::JobMessageBuilder m(fbb);
  m.add_job_id(42);
  m.add_kind(kind);
  add(m, table);
  return daemon::control_frame_bytes(fbb, control::ControlBody::JobMessage,
                                        m.Finish().Union());
}

bool readable(const std::vector<uint8_t>& frame) {
  JobMessageIn in;
  return read_job_message(frame, in);
}

ResultReport sample_result() {
  ResultReport r;
  r.rank = 2;
  r.iterations = 300;
  r.samples = 19200;
  r.train_seconds = 4.0;
  r.messages = 900;
  r.message_bytes = 123456;
  r.params = 101770;
  r.workers = 2;
  r.codec_kernel = "avx2";
  r.device = "cpu";
  r.lost_nodes = {"node-4"};
  r.mode = "allreduce";
  r.sync = "ssp";
  r.sync_bound = 2;
  r.classes = 10;
  r.applied = ResultReport::Applied{900, 0xfeedbeef12345678ull, 2e-7};
  r.evaluation = ResultReport::Evaluation{1, 3, 5, 15, EvaluationCounts{2.5, false, {2, 1, 3, 0, 1, 1, 3, 0}, {}}};
  r.model_path = "/var/lib/dtrain/models/m.dtm";
  r.model_sha256 = std::string(64, 'a');
  r.params_sample = {0.5f, -1.25f, 3.0f};
  return r;
}

}  // namespace

TEST_CASE("every report kind comes back from its table as it was built", "[reports]") {
  ProgressReport p;
  p.rank = 1;
  p.epoch = 3;
  p.epochs = 10;
  p.iteration = 250;
  p.loss = 0.75;
  p.sharing = true;
  p.tau = 1e-3;
  p.encoding = "bitmap";
  p.accuracy = 0.91;
  p.diverging = true;
  const auto progress = std::get<ProgressReport>(round_trip(p, 77).report);
  CHECK(progress.epoch == 3);
  CHECK(progress.iteration == 250);
  CHECK(progress.loss == 0.75);
  CHECK(progress.encoding == "bitmap");
  CHECK(progress.accuracy == 0.91);
  CHECK(progress.diverging);

  CHECK(std::get<LogReport>(round_trip(LogReport{"epoch 1: done"}).report).line == "epoch 1: done");
  const auto ck = std::get<CheckpointReport>(round_trip(CheckpointReport{4, "m.ckpt-4.dtm"}).report);
  CHECK((ck.epoch == 4 && ck.path == "m.ckpt-4.dtm"));
  const auto failed =
      std::get<FailedReport>(round_trip(FailedReport{3, "no data", "check the path", true}, 9).report);
  CHECK((failed.rank == 3 && failed.error == "no data" && failed.fix == "check the path"));
  CHECK(failed.cancelled);
  const auto back = std::get<RejoinedReport>(round_trip(RejoinedReport{5, "node-1"}).report);
  CHECK((back.epoch == 5 && back.from == "node-1"));
  CHECK(std::get<AttachedReport>(round_trip(AttachedReport{6}).report).rank == 6);

  const auto result = std::get<ResultReport>(round_trip(sample_result(), 3).report);
  CHECK(result.lost_nodes == std::vector<std::string>{"node-4"});
  CHECK(result.mode == "allreduce");
  REQUIRE(result.applied);
  CHECK(result.applied->digest == 0xfeedbeef12345678ull);
  REQUIRE(result.evaluation);
  CHECK(result.evaluation->counts.counts == sample_result().evaluation->counts.counts);
  CHECK(result.params_sample == sample_result().params_sample);

  StatsReport stats;
  stats.steps.push_back({});
  stats.steps[0][1] = 7;
  stats.links.push_back({});
  const auto rows = std::get<StatsReport>(round_trip(stats).report);
  CHECK(rows.steps.size() == 1);
  CHECK(rows.steps[0][1] == 7);
  CHECK(rows.links.size() == 1);

  const auto shards =
      std::get<ShardsReport>(round_trip(ShardsReport{{{"/d/a-0.dtb", 5, 9, 77}}}).report);
  REQUIRE(shards.files.size() == 1);
  CHECK((shards.files[0].path == "/d/a-0.dtb" && shards.files[0].export_id == 77));

  PartDoneReport done{3, 2, 10, "", EvaluationCounts{0.5, false, {1, 1, 0, 0, 2}, {}},
                      PartScores{2, 2, {0.25f, 0.75f, 0.5f, 0.5f}, {1, 0}}};
  const auto part = std::get<PartDoneReport>(round_trip(done).report);
  REQUIRE(part.roc);
  CHECK(part.roc->probabilities == done.roc->probabilities);
  CHECK(part.roc->labels == done.roc->labels);
}

TEST_CASE("a report no real node sends is refused", "[reports]") {
  // Its kind without its table.
  CHECK_FALSE(readable(forged(JobKind::Result, [](auto&) { return 0; }, [](auto&, auto) {})));
  CHECK_FALSE(readable(forged(JobKind::Log, [](auto&) { return 0; }, [](auto&, auto) {})));
  // Another kind's table under this kind.
  CHECK_FALSE(readable(forged(
      JobKind::Failed, [](auto& fbb) { return control::CreateLogReport(fbb, fbb.CreateString("x")); },
      [](auto& m, auto t) { m.add_log(t); })));
  // An epoch no spec can ask for.
  for (int64_t epoch : {int64_t(-1), int64_t(100001)})
    CHECK_FALSE(readable(report_frame(42, CheckpointReport{epoch, "m.ckpt"})));
  // ROC scores of the wrong shape, with a label outside the classes, or whose size would wrap.
  auto scores = [](int64_t rows, int64_t classes, std::vector<float> p, std::vector<int32_t> l) {
    PartDoneReport d{0, rows, 0, "", EvaluationCounts{}, PartScores{rows, classes, p, l}};
    return report_frame(42, d);
  };
  CHECK(readable(scores(1, 2, {0.5f, 0.5f}, {1})));
  CHECK_FALSE(readable(scores(1, 2, {0.5f}, {1})));
  CHECK_FALSE(readable(scores(2, 2, {0.5f, 0.5f}, {1})));
  CHECK_FALSE(readable(scores(1, 2, {0.5f, 0.5f}, {2})));
  CHECK_FALSE(readable(scores(int64_t(1) << 59, 512, {}, {})));
  // Counts and regression sums at once.
  CHECK_FALSE(readable(report_frame(
      42, PartDoneReport{0, 1, 0, "", EvaluationCounts{0, true, {1}, {1.0}}, std::nullopt})));
  // A rank no job has.
  CHECK_FALSE(readable(report_frame(42, AttachedReport{4096})));
  CHECK_FALSE(readable(report_frame(42, FailedReport{-2, "e", "", false})));
  ResultReport far = sample_result();
  far.rank = 1u << 31;  // would read as a negative rank in the job record
  CHECK_FALSE(readable(report_frame(42, far)));
  // ROC scores of a diverged model: NaN breaks the ROC's sort.
  PartDoneReport nan_scores{0, 1, 0, "", EvaluationCounts{}, PartScores{1, 2, {NAN, 0.5f}, {1}}};
  CHECK_FALSE(readable(report_frame(42, nan_scores)));
  // Stats rows that are not whole rows.
  StatsReport short_rows;
  CHECK(readable(report_frame(42, short_rows)));
  CHECK_FALSE(readable(forged(
      JobKind::Stats,
      [](auto& fbb) {
        return control::CreateStatsReport(fbb, fbb.CreateVector(std::vector<double>{1, 2, 3}));
      },
      [](auto& m, auto t) { m.add_stats(t); })));
}

TEST_CASE("a list no real node sends reaches the controller as an error it can name",
          "[reports]") {
  // The controller stops the job naming it; a dropped report would leave it waiting.
  auto error_of = [](const ShardsReport& list) {
    JobMessageIn in;
    REQUIRE(read_job_message(report_frame(42, list), in));
    const auto& read = std::get<ShardsReport>(in.report);
    CHECK(read.files.empty() == !read.error.empty());
    return read.error;
  };
  CHECK(error_of(ShardsReport{{{"/d/a.dtb", 5, 9, 1}}, ""}).empty());
  CHECK(error_of(ShardsReport{{{"", 5, 9, 1}}, ""}) == "a file entry with an impossible path");
  CHECK(error_of(ShardsReport{{{"/d/", 5, 9, 1}}, ""}) == "a file entry with an impossible path");
  CHECK(error_of(ShardsReport{{{"/d/a.dtb", -5, 9, 1}}, ""}) ==
        "a file entry with counts out of range");
}

TEST_CASE("shared strings cannot make a small report allocate more than it carries",
          "[reports]") {
  // A verified frame may point every entry of a list at one string: 10,000 file entries
  // naming one 4 KiB path would copy 40 MB out of a frame of about 150 KB.
  const std::string path = "/d/" + std::string(4000, 'p') + ".dtb";
  const std::vector<uint8_t> shards = forged(
      JobKind::Shards,
      [&](flatbuffers::FlatBufferBuilder& fbb) {
        const auto file = control::CreateShardFile(fbb, fbb.CreateString(path), 5, 9, 1);
        return control::CreateShardsReport(
            fbb, fbb.CreateVector(std::vector<flatbuffers::Offset<control::ShardFile>>(10000, file)));
      },
      [](auto& m, auto t) { m.add_shards(t); });
  REQUIRE(shards.size() < 200000);
  JobMessageIn in;
  REQUIRE(read_job_message(shards, in));
  const auto& list = std::get<ShardsReport>(in.report);
  CHECK(list.files.empty());
  CHECK(list.error == "a list whose paths are larger than the report that carried them");
  // The same for a result's lost nodes: refused.
  const std::vector<uint8_t> lost = forged(
      JobKind::Result,
      [&](flatbuffers::FlatBufferBuilder& fbb) {
        const auto name = fbb.CreateString(std::string(60000, 'n'));
        const auto names = fbb.CreateVector(std::vector<flatbuffers::Offset<flatbuffers::String>>(4000, name));
        control::ResultReportBuilder r(fbb);
        r.add_lost_nodes(names);
        return r.Finish();
      },
      [](auto& m, auto t) { m.add_result(t); });
  CHECK_FALSE(readable(lost));
}

TEST_CASE("texts that are not UTF-8 are read with '?' for each stray byte", "[reports]") {
  // They end in JSON (records, replies), whose writer throws on anything else.
  const auto log = std::get<LogReport>(round_trip(LogReport{"bad \xff\xfe byte, cut \xe2\x82"}).report);
  CHECK(log.line == "bad ?? byte, cut ??");
  CHECK(std::get<LogReport>(round_trip(LogReport{"caf\xc3\xa9 \xe2\x82\xac"}).report).line ==
        "caf\xc3\xa9 \xe2\x82\xac");  // well-formed: kept
  CHECK(valid_utf8("\xc0\xaf") == "??");          // overlong
  CHECK(valid_utf8("\xed\xa0\x80") == "???");    // a surrogate
  CHECK(valid_utf8("\xf4\x90\x80\x80") == "????");  // above U+10FFFF
  CHECK(Json(valid_utf8("\xff")).dump() == "\"?\"");
}

TEST_CASE("the controller keeps the JSON status --json always printed", "[reports]") {
  const Json r = result_json(sample_result());
  CHECK(r.at("samples_per_sec") == 19200 / 4.0);
  CHECK(r.at("applied_updates").at("digest") == "feedbeef12345678");
  CHECK(r.at("applied_updates").at("deviation") == 2e-7);
  CHECK(r.at("evaluation_part").at("examples") == 5);
  CHECK(r.at("evaluation_part").at("counts").size() == 8);
  CHECK_FALSE(r.at("evaluation_part").contains("regression_sums"));
  CHECK(r.at("classes") == 10);
  CHECK_FALSE(r.contains("overflow_skipped_steps"));  // not fp16
  CHECK_FALSE(r.contains("gpu_sharing"));
  ResultReport regression = sample_result();
  regression.classes = -1;
  regression.applied.reset();
  regression.evaluation.reset();
  const Json plain = result_json(regression);
  CHECK_FALSE(plain.contains("classes"));
  CHECK_FALSE(plain.contains("applied_updates"));
  CHECK_FALSE(plain.contains("evaluation_part"));

  ProgressReport p;
  p.accuracy = -1;
  CHECK_FALSE(progress_json(p).contains("accuracy"));  // none yet
  CHECK_FALSE(progress_json(p).contains("tau"));       // not sharing
  p.sharing = true;
  CHECK(progress_json(p).contains("tau"));

  const Json part = part_done_json(
      PartDoneReport{2, 3, 6, "", EvaluationCounts{1.5, true, {}, {1, 2, 3}}, std::nullopt});
  CHECK(part.at("part_index") == 2);
  CHECK(part.at("regression_sums").size() == 3);
  CHECK_FALSE(part.contains("counts"));
  CHECK(failed_json(FailedReport{1, "e", "f", true}).at("cancelled") == true);
  CHECK(with_part(progress_json(p), 77).at("part") == 77);  // which run of the job sent it
  CHECK_FALSE(with_part(progress_json(p), 0).contains("part"));
}
