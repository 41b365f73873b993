#include "core/io/saved_model.h"

#include <cstring>

#include "core/model/model_builder.h"
#include "core/spec/job_spec_parser.h"
#include "core/util/error.h"

namespace dtrain::core {

SavedModel load_saved_model(const std::string& path, const DataRoots* roots) {
  SavedModel s;
  s.file = read_model_file(path, roots);
  s.spec = parse_job_spec_text(s.file.spec_yaml, path + " (embedded spec)", stored_spec_options());
  // Sizes first: nothing is allocated for a spec the file's contents do not match.
  const ModelCounts need = count_model(s.spec.model);
  if (static_cast<int64_t>(s.file.params.size()) != need.params ||
      static_cast<int64_t>(s.file.state.size()) != need.state)
    throw UserError("model file '" + path + "' holds " + std::to_string(s.file.params.size()) +
                        " parameters but its spec needs " + std::to_string(need.params),
                    "the file is inconsistent; retrain the model");
  s.model = std::make_unique<Model>(s.spec.model);
  std::memcpy(s.model->params(), s.file.params.data(), sizeof(float) * s.file.params.size());
  if (!s.file.state.empty())
    std::memcpy(s.model->state(), s.file.state.data(), sizeof(float) * s.file.state.size());
  s.normalizer = s.file.normalizer;
  return s;
}

}  // namespace dtrain::core
