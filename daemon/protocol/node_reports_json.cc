#include "daemon/protocol/node_reports_json.h"

#include <cstdio>
#include <cstring>

#include "transport/security/base64.h"

namespace dtrain::daemon {
namespace {

using transport::to_base64;

// The evaluation's counts into `out` (the keys core/eval's readers expect).
void put_counts(const EvaluationCounts& c, Json& out) {
  out["loss_sum"] = c.loss_sum;
  if (c.regression) out["regression_sums"] = c.regression_sums;
  else out["counts"] = c.counts;
}

}  // namespace

Json with_part(Json report, uint64_t part) {
  if (part != 0) report["part"] = part;
  return report;
}

Json progress_json(const ProgressReport& p) {
  Json j = {{"rank", p.rank},
            {"epoch", p.epoch},
            {"epochs", p.epochs},
            {"iteration", p.iteration},
            {"iteration_in_epoch", p.iteration_in_epoch},
            {"iterations_per_epoch", p.iterations_per_epoch},
            {"loss", p.loss},
            {"samples_per_sec", p.samples_per_sec},
            {"eta_seconds", p.eta_seconds},
            {"workers", p.workers}};
  if (p.sharing) {
    j["tau"] = p.tau;
    j["density"] = p.density;
    j["encoding"] = p.encoding;
    j["message_kb"] = p.message_kb;
  }
  if (p.accuracy >= 0) j["accuracy"] = p.accuracy;
  j["diverging"] = p.diverging;
  return j;
}

Json failed_json(const FailedReport& f) {
  return {{"rank", f.rank}, {"error", f.error}, {"fix", f.fix}, {"cancelled", f.cancelled}};
}

Json result_json(const ResultReport& r) {
  Json j = {{"rank", r.rank},
            {"iterations", r.iterations},
            {"samples", r.samples},
            {"train_seconds", r.train_seconds},
            {"samples_per_sec", r.train_seconds > 0 ? r.samples / r.train_seconds : 0.0},
            {"messages", r.messages},
            {"message_bytes", r.message_bytes},
            {"params", r.params},
            {"workers", r.workers},
            {"codec_kernel", r.codec_kernel},
            {"device", r.device},
            {"mesh_messages_sent", r.mesh_messages_sent},
            {"mesh_bytes_sent", r.mesh_bytes_sent},
            {"lost_nodes", r.lost_nodes},
            {"mode", r.mode},
            {"sync", r.sync},
            {"sync_bound", r.sync_bound},
            {"max_steps_ahead", r.max_steps_ahead},
            {"stop_on_divergence", r.stop_on_divergence}};
  if (r.fp16) j["overflow_skipped_steps"] = r.overflow_skipped_steps;
  if (!r.gpu_sharing.empty()) {
    j["gpu_sharing"] = r.gpu_sharing;
    j["messages_from_gpus"] = r.messages_from_gpus;
  }
  if (r.classes >= 0) j["classes"] = r.classes;
  if (const auto& a = r.applied) {
    char digest[17];
    std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(a->digest));
    j["applied_updates"] = {{"messages", a->messages}, {"digest", digest}};
    if (a->deviation >= 0) j["applied_updates"]["deviation"] = a->deviation;
  }
  if (const auto& e = r.evaluation) {
    Json part = {{"part", e->part},
                 {"parts", e->parts},
                 {"examples", e->examples},
                 {"test_examples", e->test_examples}};
    put_counts(e->counts, part);
    j["evaluation_part"] = part;
  }
  if (!r.model_path.empty()) {
    j["model_path"] = r.model_path;
    j["model_sha256"] = r.model_sha256;
  }
  if (!r.stopped_early.empty()) j["stopped_early"] = r.stopped_early;
  j["params_sample"] = r.params_sample;
  return j;
}

Json part_done_json(const PartDoneReport& p) {
  Json j = {{"part_index", p.part_index}, {"examples", p.examples}, {"begin", p.begin}};
  if (!p.file.empty()) j["file"] = p.file;
  if (p.counts) put_counts(*p.counts, j);
  if (p.roc) j["roc"] = part_scores_json(*p.roc);
  return j;
}

Json part_scores_json(const PartScores& s) {
  return {{"rows", s.rows},
          {"classes", s.classes},
          {"probabilities",
           to_base64(s.probabilities.data(), s.probabilities.size() * sizeof(float))},
          {"labels", to_base64(s.labels.data(), s.labels.size() * sizeof(int32_t))}};
}

}  // namespace dtrain::daemon
