#pragma once
// What the one-worker benchmarks (train_bench, gpu_bench) share: reading a job spec whose data
// may be replaced, and the replacement, random examples of the model's input shape (ResNet-20's
// CIFAR-10-sized data; nothing to download).
#include <string>

#include "core/data/dataset.h"
#include "core/spec/job_spec.h"

namespace dtrain::bench {

// The spec at `path`; with `generated` its data files need not exist.
core::JobSpec read_bench_spec(const std::string& path, bool generated);

// n examples of uniform noise in [0, 1) with random labels, shaped as the model's input.
core::Dataset generated_dataset(const core::JobSpec& job, int64_t n);

}  // namespace dtrain::bench
