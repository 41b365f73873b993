#include "tools/bench/generated_data.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "core/spec/job_spec_parser.h"
#include "core/util/rng.h"

namespace dtrain::bench {

core::JobSpec read_bench_spec(const std::string& path, bool generated) {
  core::SpecParseOptions options;
  options.check_files = !generated;
  options.base_dir = std::filesystem::path(path).parent_path().string();
  if (options.base_dir.empty()) options.base_dir = ".";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  core::JobSpec job = core::parse_job_spec_text(text, path, options);
  if (generated) job.data.augment = core::Augmentation{};
  return job;
}

core::Dataset generated_dataset(const core::JobSpec& job, int64_t n) {
  using namespace dtrain::core;
  const int64_t classes = job.model.layers.back().units;
  Dataset d;
  d.features = Tensor(with_batch(n, job.model.input));
  d.targets = Tensor({n, classes});
  d.targets.zero();  // tensors are not zeroed on allocation
  d.num_classes = classes;
  Rng rng(job.seed);
  for (int64_t i = 0; i < d.features.size(); ++i) d.features[i] = rng.uniform(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = int32_t(rng.next() % uint64_t(classes));
    d.labels.push_back(label);
    d.targets[i * classes + label] = 1.f;
  }
  return d;
}

}  // namespace dtrain::bench
