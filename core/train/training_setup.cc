#include "core/train/training_setup.h"

#include "core/data/minibatch_iterator.h"
#include "core/train/memory_budget.h"
#include "core/util/error.h"
#include "kernels/gpu_devices.h"
#include "kernels/precision.h"

namespace dtrain::core {

void check_memory(const JobSpec& job, int64_t params, int workers, const std::vector<int>& gpus) {
  const int vectors = kernels::updater_state_vectors(updater_rule(job.model.updater.type));
  if (gpus.empty()) {
    check_parameter_memory(params, workers, vectors, available_host_memory(),
                           "this node's memory");
    return;
  }
  for (const kernels::GpuInfo& g : kernels::list_gpus()) {
    int on_it = 0;
    for (int w = 0; w < workers; ++w) on_it += gpus[size_t(w) % gpus.size()] == g.index;
    if (on_it > 0)
      check_parameter_memory(params, on_it, vectors, g.memory_bytes - g.memory_used_bytes,
                             "GPU " + std::to_string(g.index));
  }
}

std::vector<std::unique_ptr<kernels::Backend>> make_gpu_backends(const std::vector<int>& gpus,
                                                                 int workers,
                                                                 kernels::Precision precision) {
  std::vector<std::unique_ptr<kernels::Backend>> out;
  if (gpus.empty()) return out;
  for (int w = 0; w < workers; ++w) {
    const int gpu = gpus[size_t(w) % gpus.size()];
    std::string why;
    out.push_back(kernels::make_gpu_backend(gpu, &why));
    if (!out.back())
      throw UserError("worker " + std::to_string(w) + " cannot use GPU " + std::to_string(gpu) +
                          ": " + why,
                      "check the GPU with nvidia-smi, or run the job with training.device: cpu");
    // Before the worker's model is built: its layers' kernels are made for the precision.
    if (!out.back()->set_precision(precision))
      throw UserError("GPU " + std::to_string(gpu) + " (" + out.back()->name() +
                          ") cannot compute in training.precision " +
                          kernels::precision_name(precision),
                      "use precision fp32, or bf16/fp16 on a GPU with tensor cores (sm_80 or "
                      "newer for bf16)");
  }
  return out;
}

std::vector<int64_t> even_shard_batches(int64_t examples, int64_t batch, int shards) {
  std::vector<int64_t> out;
  for (int s = 0; s < shards; ++s)
    out.push_back(MinibatchIterator::shard_batches(examples, batch, s, shards));
  return out;
}

std::vector<int64_t> local_shard_batches(const NodeLocalData& plan, int64_t examples,
                                         int64_t batch, int shards) {
  if (plan.self < 0 || size_t(plan.self) >= plan.member_examples.size() ||
      plan.member_examples[size_t(plan.self)] != examples)
    throw UserError("this node's data.train.shards files hold " + std::to_string(examples) +
                        " examples, not what they held when it listed them",
                    "leave the files alone while a job reads them, and submit it again");
  std::vector<int64_t> out;
  for (size_t k = 0; k < plan.member_examples.size() && k < plan.member_workers.size(); ++k) {
    const int workers = plan.member_workers[k];
    for (int j = 0; j < workers; ++j)
      out.push_back(MinibatchIterator::shard_batches(plan.member_examples[k], batch, j, workers));
  }
  if (int(out.size()) != shards)
    throw UserError("the data plan names " + std::to_string(out.size()) + " workers, the job has " +
                        std::to_string(shards),
                    "run the same dtrain release on every node");
  return out;
}

}  // namespace dtrain::core
