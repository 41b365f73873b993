#pragma once
// Loads a job's train/test data, fits the normaliser on the training set and shapes the
// features to the model's input.
#include <memory>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/example_source.h"
#include "core/data/normalizer.h"
#include "core/data/packed_file.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

struct TrainingData {
  Dataset train;  // empty when training streams packed files
  Dataset test;   // empty when the spec has no test set
  Normalizer normalizer;
  std::shared_ptr<ExampleSource> packed;  // format: packed: the export's files

  // The training examples: the packed files, or `train` in memory (bound where this object is
  // now: call it again after moving the object).
  const ExampleSource& train_source() const;

 private:
  mutable std::unique_ptr<ExampleSource> in_memory_;
  mutable const Dataset* bound_ = nullptr;
};

// Reads one source for a model with `outputs` outputs: classes, or values with the source's
// `labels: regression` (no normalisation; a packed export's examples as written, before its
// normaliser).
// Its features shaped as the model's input `input` (image folders decode to it), or a
// UserError naming `where` (e.g. "data.train") when they cannot be.
Dataset load_source(const DataSourceSpec& source, int64_t outputs, const Shape& input,
                    const std::string& where);

// Packed files read whole (as written, not normalised) for a model with `outputs` classes and
// input `input`: load_source's packed case, and a node's file of `eval --cluster --shards`.
// Refused naming `where` when the classes differ or the model predicts values (regression).
// roots: a cluster node's data_roots (null: none), checked against each file as it is opened.
Dataset load_packed(const std::vector<std::string>& files, PackedCoverage coverage,
                    int64_t outputs, bool regression, const Shape& input,
                    const std::string& where, const DataRoots* roots = nullptr);

// shard_files: with data.train.shards on a cluster node, the files the controller gave it
// (null: every file the pattern matches here).
TrainingData load_training_data(const JobSpec& job,
                                const std::vector<std::string>* shard_files = nullptr);

}  // namespace dtrain::core
