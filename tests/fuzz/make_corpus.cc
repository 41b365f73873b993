// Writes the starting corpora of the datagram, mesh payload, control and model input fuzzers: real
// messages of every kind as the daemons build them, the example specs and a real model file,
// so that the fuzzers start past the verifiers and the parsers' first checks.
//   bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz/corpus $PWD/configs
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/codec/reference_codec.h"
#include "core/io/model_file.h"
#include "core/model/model_builder.h"
#include "core/spec/job_spec_parser.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/mesh_payloads.h"
#include "transport/wire/datagram.h"

using namespace dtrain;

namespace {

void write(const std::filesystem::path& dir, const std::string& name,
           const std::vector<uint8_t>& bytes, int prefix = -1) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  if (prefix >= 0) out.put(char(prefix));
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

core::EncodedMessage update(int64_t n, int every) {
  std::vector<float> u(n, 0.f), r(n, 0.f);
  for (int64_t i = 0; i < n; i += every) u[i] = (i % 3 ? 1.f : -1.f);
  core::EncodedMessage m = core::reference_encode(r.data(), u.data(), n, 0.5f, 0.f, nullptr);
  m.epoch = 2;
  m.batch = 7;
  return m;
}

std::vector<uint8_t> hello(char role, const std::string& name) {
  std::vector<uint8_t> h{'D', 'T', 'C', transport::kControlVersion};
  h.resize(36, 0x42);
  h.push_back(uint8_t(role));
  h.push_back(uint8_t(name.size()));
  h.insert(h.end(), name.begin(), name.end());
  return h;
}

}  // namespace

std::vector<uint8_t> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A small model file: its spec, and parameters and state of the sizes the spec needs.
std::vector<uint8_t> small_model_file(const std::filesystem::path& scratch) {
  core::ModelFile f;
  f.spec_yaml =
      "name: small\nmodel:\n  input: [6]\n  layers:\n    - dense: {units: 4, activation: relu}\n"
      "    - batch_norm: {}\n    - output: {units: 3, activation: softmax, loss: mcxent}\n"
      "data:\n  train: {format: csv, path: train.csv, label_column: 0}\n";
  core::SpecParseOptions options;
  options.check_files = false;
  const core::JobSpec spec = core::parse_job_spec_text(f.spec_yaml, "small", options);
  const core::ModelCounts counts = core::count_model(spec.model);
  f.params.assign(size_t(counts.params), 0.25f);
  f.state.assign(size_t(counts.state), 1.0f);
  f.epoch = 2;
  const auto path = scratch / "small.dtm";
  core::write_model_file(path.string(), f);
  std::vector<uint8_t> bytes = file_bytes(path);
  std::filesystem::remove(path);
  return bytes;
}

// One datagram of each frame kind as the endpoint seals them (the fuzzer runs without
// authentication, so any tag passes and the frames behind it get exercised).
void write_datagrams(const std::filesystem::path& dir) {
  using namespace transport;
  const Authenticator insecure(ClusterKey{}, /*insecure=*/true);
  auto seal_body = [&](const std::string& name, const uint8_t* body, size_t size, Aead aead,
                       bool chunk) {
    DatagramHeader h{3, 1, 99, 17, aead};
    h.chunk = chunk;
    std::vector<uint8_t> out;
    seal_datagram(h, body, size, insecure, out);
    // The insecure sealer never flags AES-256-GCM itself; the flag lets the fuzzer start from
    // both header forms.
    out[3] = uint8_t((aead == Aead::kAes256Gcm ? kFlagAes256Gcm : 0) | (chunk ? kFlagChunk : 0));
    write(dir, name, out);
  };
  auto seal = [&](const std::string& name, flatbuffers::FlatBufferBuilder& fbb, Aead aead) {
    seal_body(name, fbb.GetBufferPointer(), fbb.GetSize(), aead, false);
  };
  for (Aead aead : {Aead::kXChaCha20Poly1305, Aead::kAes256Gcm}) {
    const std::string suffix = aead == Aead::kAes256Gcm ? "_gcm" : "";
    // Job 7, link sequence 12, message 42, link epoch 1, from node 3: chunk 1 of 4 of 2,400.
    const ChunkFields f{7, 12, 42, 1, 3, 1, 4, 2400, 600};
    std::vector<uint8_t> chunk(kChunkFieldBytes + 600, 0x5A);
    put_chunk_fields(f, chunk.data());
    seal_body("chunk" + suffix, chunk.data(), chunk.size(), aead, true);
    flatbuffers::FlatBufferBuilder fbb;
    const std::vector<uint64_t> ranges{14, 20, 22, 30};
    const auto ack = wire::CreateAck(fbb, 12, 131072, 1, fbb.CreateVector(ranges), 2, 1800, 600);
    fbb.Finish(wire::CreateEnvelope(fbb, wire::Frame::Ack, ack.Union(), 1));
    seal("ack" + suffix, fbb, aead);
    fbb.Clear();
    const std::vector<uint64_t> missing{13, 21};
    const auto nak = wire::CreateNak(fbb, fbb.CreateVector(missing), 1);
    fbb.Finish(wire::CreateEnvelope(fbb, wire::Frame::Nak, nak.Union(), 1));
    seal("nak" + suffix, fbb, aead);
    fbb.Clear();
    const auto hb = wire::CreateHeartbeat(fbb, 2, 1000000, 999000, 500, true);
    fbb.Finish(wire::CreateEnvelope(fbb, wire::Frame::Heartbeat, hb.Union(), 1));
    seal("heartbeat" + suffix, fbb, aead);
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_corpus CORPUS_DIR CONFIGS_DIR (tests/fuzz/corpus configs)\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];
  write_datagrams(root / "datagram_fuzzer");
  const auto mesh = root / "mesh_payload_fuzzer";
  write(mesh, "update_sparse", *daemon::update_payload(update(200, 20)));
  write(mesh, "update_bitmap", *daemon::update_payload(update(100, 1)));
  write(mesh, "epoch_end", *daemon::epoch_end_payload({3, 1, 40, 1.5, 2, {4, 5}}));
  write(mesh, "epoch_end_heard",
        *daemon::epoch_end_payload({3, 0, 40, 1.5, 2, {}, {}, 0, {-1, 7}, {0, 9}}));
  const auto lost = std::make_shared<const core::EncodedMessage>(update(200, 20));
  write(mesh, "forwarded", *daemon::forwarded_payload({2, 3, 1, 8, true, {}}, {lost}));
  const std::vector<float> params{1.f, 2.f, 3.f, 4.f}, state{0.5f};
  write(mesh, "snapshot",
        *daemon::snapshot_payload(2, 1, 0.25f, params.data(), 4, state.data(), 1));
  write(mesh, "parameters", *daemon::parameters_payload(9, params.data(), 4));
  write(mesh, "sync_choice", *daemon::sync_choice_payload({20, "RTT 50 ms"}));
  write(mesh, "sync_choice_allreduce", *daemon::sync_choice_payload({0, "10 Gbit/s", true}));
  write(mesh, "rehearsal_plan", *daemon::rehearsal_plan_payload({40, 9400, 177000, 24}));
  write(mesh, "rehearsal_mark", *daemon::rehearsal_mark_payload({true, 1}, 64));
  // {1, 2, 3, 4} are bf16 values: sent as bf16; 1.1 is not: fp32.
  write(mesh, "ring_segment", *daemon::ring_segment_payload(5, {1, 2, 3}, 2, params.data(), 4));
  write(mesh, "ring_result", *daemon::ring_result_payload(5, {1, 2}, params.data(), 4));
  const std::vector<float> fp32{1.1f, 2.f, 3.f, 4.f};
  write(mesh, "ring_segment_fp32", *daemon::ring_segment_payload(5, {1, 2, 3}, 2, fp32.data(), 4));

  const auto control = root / "control_fuzzer";
  daemon::NodeRegistration node;
  node.name = "node-1";
  node.address = "10.0.0.5";
  node.data_port = 7100;
  node.gpus.push_back({0, "NVIDIA H100", 80ull << 30});
  node.running_jobs = {0x1234};
  write(control, "register", daemon::register_frame(node), 1);
  daemon::StartMessage start;
  start.spec = "name: x";
  start.name = "x";
  start.members = {{1, "node-1", "10.0.0.5", 7100, 2, true, {0}, 99},
                   {2, "node-2", "10.0.0.6", 7100, 1, false, {}, 98}};
  start.rejoin = true;
  start.lost = {2};
  write(control, "job_start", daemon::start_frame(7, start), 1);
  write(control, "job_rejoin", daemon::rejoin_frame(7, {2, 97}), 1);
  write(control, "job_cancel", daemon::cancel_frame(7), 1);
  daemon::TaskMessage task;
  task.kind = daemon::TaskKind::Eval;
  task.model = {1, 2, 3, 4};
  task.format = "csv";
  task.path = "/data/test.csv";
  task.metrics = {"classification"};
  task.parts = {0, 3};
  task.part_count = 6;
  write(control, "job_task", daemon::task_frame(7, task), 1);
  task.format = "packed";
  task.path.clear();
  task.shards = "/data/{node}/test-*.dtb";
  task.part_files = {"/data/node-1/test-00000.dtb", "/data/node-1/test-00003.dtb"};
  write(control, "job_task_shards", daemon::task_frame(7, task), 1);
  write(control, "job_data_plan",
        daemon::data_plan_frame(7, {{"/data/node-1/train-00001.dtb"}, {8571, 17143}}), 1);
  // Every report kind, each with its vectors and nested tables set.
  daemon::PartDoneReport done{3, 2, 10, "", daemon::EvaluationCounts{0.5, false, {1, 1, 2, 2, 2}, {}},
                              daemon::PartScores{2, 2, {0.25f, 0.75f, 0.5f, 0.5f}, {1, 0}}};
  write(control, "job_part_done", daemon::report_frame(7, done, 5), 1);
  write(control, "job_shards",
        daemon::report_frame(7, daemon::ShardsReport{{{"/d/a.dtb", 5, 9, 77}}}, 5), 1);
  daemon::ResultReport result;
  result.rank = 1;
  result.lost_nodes = {"node-3"};
  result.classes = 10;
  result.applied = daemon::ResultReport::Applied{120, 0x1234abcd, 1e-7};
  result.evaluation = daemon::ResultReport::Evaluation{
      0, 2, 5, 10, daemon::EvaluationCounts{1.5, false, {1, 1, 2, 2, 2}, {}}};
  result.model_path = "m.dtm";
  result.params_sample = {0.5f, -0.25f, 1.0f};
  write(control, "job_result", daemon::report_frame(7, result, 5), 1);
  daemon::ProgressReport progress;
  progress.epoch = 2;
  progress.sharing = true;
  progress.encoding = "sparse";
  write(control, "job_progress", daemon::report_frame(7, progress, 5), 1);
  daemon::StatsReport stats;
  stats.steps.push_back({});
  stats.epochs.push_back({});
  stats.links.push_back({});
  write(control, "job_stats", daemon::report_frame(7, stats, 5), 1);
  write(control, "job_log", daemon::report_frame(7, daemon::LogReport{"epoch 1: done"}, 5), 1);
  write(control, "job_checkpoint", daemon::report_frame(7, daemon::CheckpointReport{3, "m.ckpt"}), 1);
  write(control, "job_failed", daemon::report_frame(7, daemon::FailedReport{0, "e", "f", false}), 1);
  write(control, "job_rejoined", daemon::report_frame(7, daemon::RejoinedReport{4, "node-1"}), 1);
  write(control, "job_attached", daemon::report_frame(7, daemon::AttachedReport{2}), 1);
  write(control, "job_heartbeat", daemon::heartbeat_frame(), 1);
  write(control, "job_fetch", daemon::fetch_frame(7, {3, "m.dtm", 0, 1 << 20}), 1);
  write(control, "job_chunk", daemon::chunk_frame(7, {3, 0, 4, {1, 2, 3, 4}, ""}), 1);
  daemon::ClientRequest status = daemon::client_request(daemon::RequestKind::Status, 7);
  status.log_from = 12;
  write(control, "request", daemon::request_frame(status), 1);
  daemon::ClientRequest submit = daemon::client_request(daemon::RequestKind::Submit);
  submit.spec = "name: x\n";
  submit.source = "x.yaml";
  write(control, "request_submit", daemon::request_frame(submit), 1);
  daemon::ClientRequest task_request = daemon::client_request(daemon::RequestKind::Task);
  daemon::TaskRequest eval;
  eval.task = daemon::TaskKind::Eval;
  eval.path = "/data/test.csv";
  eval.metrics = {"classification", "roc"};
  eval.roc_classes = {"a", "b"};
  task_request.task = eval;
  task_request.data = daemon::shared_bytes({1, 2, 3});
  write(control, "request_task", daemon::request_frame(task_request), 1);
  write(control, "request_data", daemon::request_data_frame(*task_request.data), 1);
  write(control, "reply_ok", daemon::reply_ok({{"jobs", daemon::Json::array()}}), 1);
  write(control, "reply_error", daemon::reply_error("no such job", "check the id"), 1);
  write(control, "hello_daemon", hello('D', ""), 0);
  write(control, "hello_client", hello('C', "alice"), 0);
  std::vector<uint8_t> proof = hello('D', "");
  proof.insert(proof.end(), {0, 0, 0, 1});  // a key proof announcing 16 MB
  write(control, "hello_then_proof", proof, 0);
  const auto model = root / "model_input_fuzzer";
  for (const char* name :
       {"fashion-mnist-mlp.yaml", "fashion-mnist-lenet.yaml", "fashion-mnist-resnet20.yaml"})
    write(model, name, file_bytes(std::filesystem::path(argv[2]) / name), 0);
  write(model, "small.dtm", small_model_file(std::filesystem::temp_directory_path()), 1);
  std::printf("wrote the corpora under %s\n", root.c_str());
  return 0;
}
