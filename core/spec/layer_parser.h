#pragma once
// model.layers of a job spec: each entry's type and settings, its name and its inputs. Whether
// the entries form a valid graph with shapes that fit is the model builder's check
// (core/model/model_graph.h), which the job spec parser runs right after.
#include <yaml-cpp/yaml.h>

#include <vector>

#include "core/spec/job_spec.h"
#include "core/spec/spec_reader.h"

namespace dtrain::core {

// model["layers"]; throws SpecError naming the entry (model.layers[i]...) for anything malformed.
std::vector<LayerSpec> parse_layers(const SpecReader& reader, const YAML::Node& model);

}  // namespace dtrain::core
