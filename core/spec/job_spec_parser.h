#pragma once
// Parses and validates a job spec (docs/architecture/core.md, "Spec, data and files"). Every
// problem throws SpecError naming the file, line, column, the key and the fix; nothing
// is started for an invalid spec.
#include <string>

#include "core/spec/job_spec.h"
#include "core/spec/spec_reader.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

struct SpecParseOptions {
  // Require data files to exist (off when reading the spec stored inside a model file).
  bool check_files = true;
  // Relative data paths are resolved against this directory (the spec file's directory).
  std::string base_dir = ".";
  // A key set twice in one map is refused. Off for specs stored before that check (inside model
  // files, in job records, and the controller's copy sent to its nodes), which read as they
  // always did: the first entry counts.
  bool refuse_repeated_keys = true;
  // A cluster node's: the folders its jobs may read inputs from (data paths, model.init_from);
  // a path outside them is refused before it is looked at. Empty: any path.
  DataRoots data_roots;
};
// The options for a spec the project stored itself (a model file's or checkpoint's embedded
// spec, a job record, the controller's copy sent to its nodes): its data files need not exist
// here, and a key set twice reads as it did when stored. One meaning changed since such specs
// were stored: without training.sync, gradient sharing is `auto` (it was bsp before
// 2026-11-29), so a job stored then measures and chooses when it is resumed.
SpecParseOptions stored_spec_options(const std::string& base_dir = ".");

JobSpec parse_job_spec_file(const std::string& path);
JobSpec parse_job_spec_text(const std::string& text, const std::string& source_name,
                            const SpecParseOptions& options);

}  // namespace dtrain::core
