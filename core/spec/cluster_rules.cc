#include "core/spec/cluster_rules.h"

#include "core/util/error.h"
#include "core/util/relative_path.h"

namespace dtrain::core {

void check_cluster_rules(const JobSpec& spec) {
  if (!stays_inside(spec.output.model))
    throw UserError("output.model '" + spec.output.model +
                        "' is not a file path inside the daemon's data directory",
                    "give a relative file path without '..', e.g. runs/model.dtm (a cluster "
                    "writes it under each node's data_dir/jobs/<job id>/)");
}

}  // namespace dtrain::core
