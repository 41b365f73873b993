#pragma once
// A trained model brought back from a .dtm file: its spec, parameters and normalizer.
#include <memory>
#include <string>

#include "core/data/normalizer.h"
#include "core/io/model_file.h"
#include "core/model/model.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

struct SavedModel {
  JobSpec spec;
  std::unique_ptr<Model> model;
  Normalizer normalizer;
  ModelFile file;
};

// Throws UserError if the file is unreadable or its parameters do not fit its spec.
// roots: a cluster node's data_roots (null: none), checked against the file as it is opened.
SavedModel load_saved_model(const std::string& path, const DataRoots* roots = nullptr);

}  // namespace dtrain::core
