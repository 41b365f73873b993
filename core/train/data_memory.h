#pragma once
// What a job's data will hold in memory once loaded, judged before anything is read past the
// files' headers (docs/operations.md, dtraind.yaml's `job_memory_mb`): jobs run inside the
// daemon, so a data file bigger than the node can hold must fail its job by name, not end the
// daemon. Features and targets are held as float32; packed files a job streams (data.train in
// packed form, node-local shards) hold only their read-ahead and are not counted.
#include <cstdint>
#include <memory>
#include <string>

#include "core/spec/job_spec.h"

namespace dtrain::core {

// Bytes `source` takes in memory for a model with `outputs` outputs and input `input`:
// IDX from its header's dimensions, CSV from its size and first line, an image folder from its
// count of files, packed files from their headers' record counts. Throws UserError as the
// readers would for a missing or damaged file.
int64_t source_memory_bytes(const DataSourceSpec& source, int64_t outputs, const Shape& input);

// Bytes inference inputs (core/infer/keyed_examples.h) take as floats for input `input`: a
// folder from its images, a .csv as a source of no outputs (its key column counted as a value's
// two floats: a floor), anything else as IDX from its header.
// roots: a cluster node's data_roots (null: none), checked against each file as it is opened.
int64_t keyed_memory_bytes(const std::string& path, bool header, const Shape& input,
                           const std::shared_ptr<const DataRoots>& roots = nullptr);

// Throws UserError naming `what` (the data), `bytes` and `budget_bytes` when bytes exceed it
// (budget_bytes <= 0: no budget).
void check_memory(int64_t bytes, int64_t budget_bytes, const std::string& what);

// Throws UserError naming the data, its size and `budget_bytes` (what one job may hold, the
// node's job_memory_mb) when the job's in-memory data (train and test) would take more.
// budget_bytes <= 0: no budget.
void check_data_memory(const JobSpec& job, int64_t budget_bytes);

}  // namespace dtrain::core
