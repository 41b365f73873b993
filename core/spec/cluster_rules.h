#pragma once
// What a cluster asks of a job spec beyond what `--local` asks: the controller refuses a spec
// that breaks these at submit, and `dtrain-submit validate` warns of them before anyone submits.
#include "core/spec/job_spec.h"

namespace dtrain::core {

// Throws UserError (what is wrong and the fix) when a cluster cannot run `spec` whatever nodes it
// has: output.model must stay inside the job's folder on the nodes, data_dir/jobs/<job id>/
// (`--local` writes it where the path says).
void check_cluster_rules(const JobSpec& spec);

}  // namespace dtrain::core
