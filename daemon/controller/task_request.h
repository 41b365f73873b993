#pragma once
// A client's request for a cluster evaluation or inference job (docs/architecture/daemon.md,
// "Evaluation and inference jobs"), checked field by field before anything is queued: bounds, known
// metrics, absolute data paths, and output places (infer's folder, the ROC curves' file) that
// lie inside one of the daemon's `task_outputs` folders and outside its data_dir. The checked
// request holds only those fields; it is what the job record keeps and the Task frames carry.
#include <string>
#include <vector>

#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

struct TaskLimits {
  std::vector<std::string> output_roots;  // dtraind.yaml task_outputs
  std::string data_dir;                   // never written into by a task
  size_t alive_nodes = 0;                 // a request for more nodes is refused
};

// The request as the job record keeps it. Throws core::UserError naming the field and the fix.
Json checked_task_request(const TaskRequest& request, const TaskLimits& limits);

// The checked request with its output places (infer's folder, the ROC curves' file) moved into
// a folder of this job's own, `job_folder_name`, made now inside the one the client named: two
// tasks naming the same place never replace each other's files. Throws core::UserError when that
// folder exists already or cannot be made.
Json with_task_folder(const Json& checked, const std::string& job_folder_name);

// The Task frame's fields of a checked request (no model, no parts yet).
TaskMessage task_fields(const Json& checked);

}  // namespace dtrain::daemon
