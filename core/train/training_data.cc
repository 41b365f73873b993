#include "core/train/training_data.h"

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/image_folder.h"
#include "core/data/packed_file.h"
#include "core/layers/layer.h"

#include <algorithm>
#include <cstdio>

namespace dtrain::core {

namespace {

Dataset read_source(const DataSourceSpec& source, int64_t outputs, const Shape& input) {
  const int64_t num_classes = source.regression ? 0 : outputs;
  const DataRoots* roots = source.roots.get();
  if (source.format == "idx")
    return load_idx_dataset(source.images, source.labels, num_classes, roots);
  if (source.format == "images") {
    ImageFolderReport report;
    Dataset d = read_image_folder(
        source.path, {input, num_classes, source.skip_corrupt, roots}, &report);
    for (const std::string& why : report.skipped)
      std::fprintf(stderr, "skipped a corrupt image (corrupt: skip): %s\n", why.c_str());
    return d;
  }
  CsvOptions options;
  options.label_column = source.label_column;
  options.header = source.header;
  options.num_classes = num_classes;
  options.target_columns = source.regression ? outputs : 0;
  options.roots = roots;
  return read_csv_dataset(source.path, options);
}

// The files of an export, checked against the job: input shape, classes and normaliser.
std::shared_ptr<PackedSource> open_packed(const std::vector<std::string>& files,
                                          PackedCoverage coverage, const JobSpec& job,
                                          const DataSourceSpec& source, const std::string& where) {
  auto packed = std::make_shared<PackedSource>(files, coverage, source.roots.get());
  const int64_t classes = job.model.layers.back().units;
  const std::string fix = "export the data again with this spec (dtrain-submit export SPEC --out DIR)";
  if (shape_size(packed->example_shape()) != shape_size(job.model.input))
    throw UserError(where + ": the packed examples are " + shape_string(packed->example_shape()) +
                        ", the model's input is " + shape_string(job.model.input), fix);
  if (packed->num_classes() != classes)
    throw UserError(where + ": the packed data has " + std::to_string(packed->num_classes()) +
                        " classes, the output layer " + std::to_string(classes), fix);
  if (packed->normalizer().name() != job.data.normalize)
    throw UserError(where + ": the data was exported with normalize: " +
                        packed->normalizer().name() + ", the spec says " + job.data.normalize,
                    fix);
  return packed;
}

// Every example of a (small: a test set) packed export, in memory and normalised.
Dataset read_all(const ExampleSource& source, const Shape& input) {
  Dataset d;
  d.features.resize(with_batch(source.size(), input));
  d.targets.resize({source.size(), source.num_classes()});
  for (int64_t i = 0; i < source.size(); ++i) {
    source.read(i, d.features.row(i), d.targets.row(i));
    const float* t = d.targets.row(i);
    d.labels.push_back(int32_t(std::max_element(t, t + source.num_classes()) - t));
  }
  d.num_classes = source.num_classes();
  d.class_names = source.class_names();
  return d;
}

}  // namespace

Dataset load_packed(const std::vector<std::string>& files, PackedCoverage coverage,
                    int64_t outputs, bool regression, const Shape& input,
                    const std::string& where, const DataRoots* roots) {
  Dataset d = read_packed_dataset(files, coverage, roots);
  if (regression || d.num_classes != outputs)
    throw UserError(where + ": the packed data has " + std::to_string(d.num_classes) +
                        " classes, the model " + std::to_string(outputs) +
                        (regression ? " values" : " classes"),
                    "give data exported with the model's own spec (dtrain-submit export)");
  reshape_features(d, input, where);
  return d;
}

Dataset load_source(const DataSourceSpec& source, int64_t outputs, const Shape& input,
                    const std::string& where) {
  if (source.format == "packed")
    return load_packed(packed_files(source.path), PackedCoverage::kWholeExport, outputs,
                       source.regression, input, where, source.roots.get());
  Dataset d = read_source(source, outputs, input);
  reshape_features(d, input, where);
  return d;
}

const ExampleSource& TrainingData::train_source() const {
  if (packed) return *packed;
  if (!in_memory_ || bound_ != &train) {
    in_memory_ = std::make_unique<InMemorySource>(train);
    bound_ = &train;
  }
  return *in_memory_;
}

TrainingData load_training_data(const JobSpec& job, const std::vector<std::string>* shard_files) {
  TrainingData d;
  const int64_t classes = job.model.layers.back().units;
  if (!job.data.train.shards.empty()) {
    // Node-local: the files the controller gave this node, or alone every file that matches.
    const std::string& pattern = job.data.train.shards;
    if (!shard_files && pattern.find("{node}") != std::string::npos)
      throw UserError("data.train.shards names {node}, which only a cluster node fills in",
                      "train it with dtrain-submit on the cluster, or write the folder's name");
    auto packed = open_packed(shard_files ? *shard_files : packed_files(pattern),
                              PackedCoverage::kPart, job, job.data.train, "data.train.shards");
    d.normalizer = packed->normalizer();
    d.packed = packed;
  } else if (job.data.train.format == "packed") {
    auto packed = open_packed(packed_files(job.data.train.path), PackedCoverage::kWholeExport,
                              job, job.data.train, "data.train");
    d.normalizer = packed->normalizer();
    d.packed = packed;
  } else {
    d.train = load_source(job.data.train, classes, job.model.input, "data.train");
    d.normalizer = Normalizer::of(job.data.normalize);
    d.normalizer.fit(d.train.features);
    d.normalizer.apply(d.train.features);
  }
  if (!job.data.test.present()) return d;
  if (job.data.test.format == "packed") {
    d.test = read_all(*open_packed(packed_files(job.data.test.path), PackedCoverage::kWholeExport,
                                   job, job.data.test, "data.test"),
                      job.model.input);
  } else {
    d.test = load_source(job.data.test, classes, job.model.input, "data.test");
    d.normalizer.apply(d.test.features);
  }
  const auto& names = d.train_source().class_names();
  if (!names.empty() && !d.test.class_names.empty() && d.test.class_names != names)
    throw UserError("data.test's classes are not data.train's",
                    "give both the same class folders (or export both from one spec)");
  return d;
}

}  // namespace dtrain::core
