#include "core/train/training_data.h"

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/image_folder.h"

#include <cstdio>

namespace dtrain::core {

Dataset load_source(const DataSourceSpec& source, int64_t num_classes, const Shape& input) {
  if (source.format == "idx") return load_idx_dataset(source.images, source.labels, num_classes);
  if (source.format == "images") {
    ImageFolderReport report;
    Dataset d = read_image_folder(source.path, {input, num_classes, source.skip_corrupt}, &report);
    for (const std::string& why : report.skipped)
      std::fprintf(stderr, "skipped a corrupt image (corrupt: skip): %s\n", why.c_str());
    return d;
  }
  CsvOptions options;
  options.label_column = source.label_column;
  options.header = source.header;
  options.num_classes = num_classes;
  return read_csv_dataset(source.path, options);
}

TrainingData load_training_data(const JobSpec& job) {
  TrainingData d;
  const int64_t classes = job.model.layers.back().units;
  d.train = load_source(job.data.train, classes, job.model.input);
  reshape_features(d.train, job.model.input, "data.train");
  d.normalizer = Normalizer::of(job.data.normalize);
  d.normalizer.fit(d.train.features);
  d.normalizer.apply(d.train.features);
  if (job.data.test.present()) {
    d.test = load_source(job.data.test, classes, job.model.input);
    if (!d.train.class_names.empty() && !d.test.class_names.empty() &&
        d.test.class_names != d.train.class_names)
      throw UserError("data.test's class folders are not data.train's",
                      "give both folders the same class subfolders");
    reshape_features(d.test, job.model.input, "data.test");
    d.normalizer.apply(d.test.features);
  }
  return d;
}

}  // namespace dtrain::core
