#include "daemon/controller/result_checks.h"

#include <cmath>

#include "core/eval/evaluation.h"
#include "core/train/divergence_monitor.h"

namespace dtrain::daemon {

double replica_difference(const std::map<std::string, Json>& results) {
  const std::vector<float>* first = nullptr;
  std::vector<std::vector<float>> samples;
  for (const auto& [node, r] : results)
    if (r.contains("params_sample")) samples.push_back(r["params_sample"].get<std::vector<float>>());
  if (samples.size() < 2) return 0.0;
  first = &samples[0];
  double norm = 0.0;
  for (float v : *first) norm += double(v) * v;
  norm = std::sqrt(norm);
  double worst = 0.0;
  for (size_t s = 1; s < samples.size(); ++s) {
    if (samples[s].size() != first->size()) return INFINITY;
    double d = 0.0;
    for (size_t i = 0; i < first->size(); ++i) {
      const double x = double(samples[s][i]) - (*first)[i];
      if (!std::isfinite(x)) return INFINITY;  // NaN in a replica agrees with nothing
      d += x * x;
    }
    worst = std::max(worst, std::sqrt(d) / std::max(norm, 1e-30));
  }
  return worst;
}

std::optional<core::Evaluation> evaluation_part(const Json& p, const core::Evaluation* like) {
  if (!p.is_object()) return std::nullopt;
  const double loss_sum = p.value("loss_sum", 0.0);
  std::optional<core::Evaluation> e;
  if (p.contains("regression_sums")) {
    if (auto sums = core::RegressionEvaluation::from_sums(
            p.value("regression_sums", std::vector<double>{})))
      e = core::Evaluation::from_regression(*sums, loss_sum);
  } else {
    const auto counts = p.value("counts", std::vector<int64_t>{});
    if (counts.size() >= 4 && counts[0] > 0 && counts[0] <= 100000 &&
        counts.size() == 4 + size_t(counts[0] * counts[0]))
      e = core::Evaluation::from_counts(counts, loss_sum);
  }
  if (e && like &&
      (e->is_regression() != like->is_regression() ||
       e->num_classes() != like->num_classes() || e->top_n() != like->top_n() ||
       e->regression_metrics().columns() != like->regression_metrics().columns()))
    e.reset();
  return e;
}

namespace {

void put_classification(const core::Evaluation& merged, Json& result) {
  result["accuracy"] = merged.accuracy();
  result["top_n_accuracy"] = merged.top_n_accuracy();
  result["top_n"] = merged.top_n();
  Json confusion = Json::array();  // [actual][predicted], for the dashboard's heat map
  for (int64_t a = 0; a < merged.num_classes(); ++a) {
    Json row = Json::array();
    for (int64_t p = 0; p < merged.num_classes(); ++p) row.push_back(merged.confusion(a, p));
    confusion.push_back(std::move(row));
  }
  result["confusion"] = std::move(confusion);
}

// Per target column; R² is null where the targets do not vary (it is undefined there).
void put_regression(const core::RegressionEvaluation& r, Json& result) {
  Json mse = Json::array(), mae = Json::array(), rmse = Json::array(), r2 = Json::array();
  for (int64_t c = 0; c < r.columns(); ++c) {
    mse.push_back(r.mse(c));
    mae.push_back(r.mae(c));
    rmse.push_back(r.rmse(c));
    r2.push_back(std::isnan(r.r2(c)) ? Json(nullptr) : Json(r.r2(c)));
  }
  result["regression"] = {{"mse", mse}, {"mae", mae}, {"rmse", rmse}, {"r2", r2}};
}

}  // namespace

void put_evaluation(const core::Evaluation& merged, Json& result) {
  if (merged.is_regression()) put_regression(merged.regression_metrics(), result);
  else put_classification(merged, result);
  result["test_loss"] = merged.mean_loss();
  result["evaluated_examples"] = merged.count();
}

void merge_evaluation(const std::map<std::string, Json>& results, Json& result,
                      JobRecord& job) {
  std::optional<core::Evaluation> merged;
  int parts = 0;
  int64_t test_examples = 0;
  for (const auto& [node, r] : results) {
    if (!r.contains("evaluation_part")) continue;
    const Json& p = r["evaluation_part"];
    std::optional<core::Evaluation> e = evaluation_part(p, merged ? &*merged : nullptr);
    if (!e) {
      job.add_log(node + ": its evaluation part is malformed; left out");
      continue;
    }
    if (parts++ == 0) merged = std::move(e);
    else merged->merge(*e);
    test_examples = p.value("test_examples", int64_t(0));
  }
  if (parts == 0) return;
  put_evaluation(*merged, result);
  result["evaluation_nodes"] = parts;
  job.add_log("evaluation over " + std::to_string(parts) + " nodes, " +
              std::to_string(merged->count()) + " of " + std::to_string(test_examples) +
              " test examples: " +
              (merged->is_regression() ? "loss " + std::to_string(merged->mean_loss())
                                       : "accuracy " + std::to_string(merged->accuracy())));
  if (merged->count() != test_examples)
    job.add_log("the evaluation misses " + std::to_string(test_examples - merged->count()) +
                " test examples: a node was lost before it reported its part");
}

namespace {

// A node's applied updates as the audit counts them: how many, and the digest of their ids.
struct Applied {
  int64_t messages = 0;
  std::string digest;
  bool operator<(const Applied& o) const {
    return messages != o.messages ? messages < o.messages : digest < o.digest;
  }
  std::string text() const {
    return std::to_string(messages) + " updates (digest " + digest + ")";
  }
};

// "node-1 applied 501 updates (digest ...)" for each node in `nodes`, joined with "and".
std::string applied_by(const std::vector<std::pair<std::string, Applied>>& nodes) {
  std::string out;
  for (const auto& [node, a] : nodes) out += (out.empty() ? "" : " and ") + node + " applied " + a.text();
  return out;
}

// Exactly once across nodes: every node that trained from the start (or continued an audited
// replica) applied the same count and digest of message ids. The nodes outside the majority are
// named; with no majority (two nodes that differ), every node is.
std::optional<JobFailure> check_applied(const std::map<std::string, Json>& results) {
  std::map<Applied, std::vector<std::string>> groups;
  size_t audited = 0;
  for (const auto& [node, r] : results) {
    if (!r.contains("applied_updates")) continue;
    const Json& a = r["applied_updates"];
    if (a.value("deviation", 0.0) > 1e-4)
      return JobFailure{node + "'s replica is " + std::to_string(a.value("deviation", 0.0)) +
                            " (relative) away from its initial parameters minus the updates it "
                            "applied: an update was applied wrongly", ""};
    groups[{a.value("messages", int64_t(0)), a.value("digest", "")}].push_back(node);
    ++audited;
  }
  if (groups.size() <= 1) return std::nullopt;
  auto most = groups.begin();
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it->second.size() > most->second.size()) most = it;
  std::vector<std::pair<std::string, Applied>> odd;
  for (const auto& [applied, nodes] : groups)
    for (const std::string& n : nodes)
      if (2 * most->second.size() <= audited || &nodes != &most->second) odd.push_back({n, applied});
  if (2 * most->second.size() <= audited)
    return JobFailure{applied_by(odd) + ": an update was lost or applied twice", ""};
  return JobFailure{applied_by(odd) + ", the other " + std::to_string(most->second.size()) +
                        " nodes " + most->first.text() + ": " +
                        (odd.size() == 1 ? odd[0].first + " lost an update or applied one twice"
                                         : "those nodes lost updates or applied some twice"),
                    ""};
}

// The node whose parameter sample is farthest from the others' (the largest sum of relative
// differences); "" with fewer than three samples, where no node is the odd one out.
std::string farthest_replica(const std::map<std::string, Json>& results) {
  std::vector<std::pair<std::string, std::vector<float>>> samples;
  for (const auto& [node, r] : results)
    if (r.contains("params_sample"))
      samples.push_back({node, r["params_sample"].get<std::vector<float>>()});
  if (samples.size() < 3) return "";
  std::string worst;
  double worst_sum = -1.0;
  for (const auto& [node, mine] : samples) {
    double sum = 0.0;
    for (const auto& [other, theirs] : samples) {
      if (other == node) continue;
      const double d = replica_difference({{node, {{"params_sample", mine}}},
                                           {other, {{"params_sample", theirs}}}});
      sum += std::isfinite(d) ? d : 1e300;
    }
    if (sum > worst_sum) worst_sum = sum, worst = node;
  }
  return worst;
}

}  // namespace

std::optional<JobFailure> check_result(const std::map<std::string, Json>& results,
                                       const Json& result, double diff) {
  // The audit first: it names the node that lost or repeated an update.
  if (std::optional<JobFailure> applied = check_applied(results)) return applied;
  if (diff > 1e-5) {
    const std::string odd = farthest_replica(results);
    return JobFailure{"the replicas disagree (max relative difference " + std::to_string(diff) +
                          (odd.empty() ? "" : "; " + odd + "'s is farthest from the others") +
                          "): an update was lost or applied twice", ""};
  }
  // A model at chance after training has diverged, whatever the replicas say.
  if (result.value("stop_on_divergence", true))
    if (auto chance = core::DivergenceMonitor::at_chance(result.value("accuracy", -1.0),
                                                         result.value("classes", int64_t(0))))
      return JobFailure{"training diverged: at the end " + *chance,
                        "lower model.updater.learning_rate, use training.sync: bsp, or use "
                        "fewer workers (training.workers_per_node, training.nodes)"};
  return std::nullopt;
}

}  // namespace dtrain::daemon
