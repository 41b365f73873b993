#pragma once
// Loads a job's train/test data, fits the normaliser on the training set and shapes the
// features to the model's input.
#include "core/data/dataset.h"
#include "core/data/normalizer.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

struct TrainingData {
  Dataset train;
  Dataset test;  // empty when the spec has no test set
  Normalizer normalizer;
};

// Reads one source as classification data with `num_classes` classes (no normalisation).
// `input` is the model's input shape (image folders decode to it).
Dataset load_source(const DataSourceSpec& source, int64_t num_classes, const Shape& input);

TrainingData load_training_data(const JobSpec& job);

}  // namespace dtrain::core
