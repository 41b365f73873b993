#pragma once
// What the controller checks in the nodes' results before it calls a job a success
// (docs/architecture/daemon.md, "The controller"): the replicas agree, every node applied the same
// set of updates (exactly once, at the cluster level), each replica is its initial parameters minus
// the updates it applied, and the merged model is better than chance.
#include <map>
#include <optional>
#include <string>

#include "core/eval/evaluation.h"
#include "daemon/controller/job_record.h"

namespace dtrain::daemon {

// The largest relative L2 difference between any node's parameter sample and the first's.
double replica_difference(const std::map<std::string, Json>& results);

// Every node evaluated a part of the test set (the live nodes at the end, in member order):
// adds their counts into the job's figures. Says so when the parts do not cover the set (a
// node lost between the last epoch and its result).
void merge_evaluation(const std::map<std::string, Json>& results, Json& result,
                      JobRecord& job);

// One evaluation part a node sent ({counts} or {regression_sums}, and loss_sum), or nullopt
// when it is malformed or (given `like`) not of the same kind and shape as `like`.
std::optional<core::Evaluation> evaluation_part(const Json& part,
                                                const core::Evaluation* like = nullptr);
// The merged figures into `result`: accuracy, top-N, confusion (classification) or
// "regression" {mse, mae, rmse, r2} per column; test_loss and evaluated_examples.
void put_evaluation(const core::Evaluation& merged, Json& result);

struct JobFailure {
  std::string error, fix;  // an empty fix: report it (a bug, not the user's doing)
};
// The first reason the finished job (per-node `results`, merged `result`, replica difference
// `diff`) is not a success.
std::optional<JobFailure> check_result(const std::map<std::string, Json>& results,
                                       const Json& result, double diff);

}  // namespace dtrain::daemon
