#include "core/train/training_data.h"

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"

namespace dtrain::core {

Dataset load_source(const DataSourceSpec& source, int64_t num_classes) {
  if (source.format == "idx") return load_idx_dataset(source.images, source.labels, num_classes);
  CsvOptions options;
  options.label_column = source.label_column;
  options.header = source.header;
  options.num_classes = num_classes;
  return read_csv_dataset(source.path, options);
}

TrainingData load_training_data(const JobSpec& job) {
  TrainingData d;
  const int64_t classes = job.model.layers.back().units;
  d.train = load_source(job.data.train, classes);
  reshape_features(d.train, job.model.input, "data.train");
  d.normalizer = Normalizer::of(job.data.normalize);
  d.normalizer.fit(d.train.features);
  d.normalizer.apply(d.train.features);
  if (job.data.test.present()) {
    d.test = load_source(job.data.test, classes);
    reshape_features(d.test, job.model.input, "data.test");
    d.normalizer.apply(d.test.features);
  }
  return d;
}

}  // namespace dtrain::core
