#include "core/train/data_memory.h"

#include <filesystem>
#include <fstream>

#include "core/data/idx_reader.h"
#include "core/data/packed_file.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFloat = 4;

int64_t idx_bytes(const DataSourceSpec& s, int64_t outputs) {
  const std::vector<int64_t> dims = read_idx_dims(s.images);
  int64_t per_example = 1;
  for (size_t i = 1; i < dims.size(); ++i) per_example *= dims[i];
  // The raw bytes while they are read, then the features as floats, and the targets.
  return dims[0] * (per_example * (1 + kFloat) + outputs * kFloat);
}

// Rows judged by the first line's length: its columns as floats, the targets beside them.
int64_t csv_bytes(const DataSourceSpec& s, int64_t outputs) {
  std::error_code ec;
  const int64_t size = int64_t(fs::file_size(s.path, ec));
  if (ec) throw UserError("cannot read the size of '" + s.path + "'", "check the path");
  std::ifstream in(s.path);
  std::string first;
  std::getline(in, first);
  int64_t columns = 1;
  for (char c : first) columns += c == ',';
  const int64_t rows = size / int64_t(first.size() + 1) + 1;
  return rows * (columns + outputs) * kFloat;
}

int64_t image_folder_bytes(const DataSourceSpec& s, int64_t outputs, const Shape& input) {
  int64_t files = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(s.path, ec), end; !ec && it != end; it.increment(ec))
    files += it->is_regular_file(ec);
  return files * (shape_size(input) + outputs) * kFloat;
}

int64_t packed_bytes(const DataSourceSpec& s, int64_t outputs, const Shape& input) {
  int64_t records = 0;
  for (const std::string& file : packed_files(s.path)) records += read_packed_header(file).records;
  return records * (shape_size(input) + outputs) * kFloat;
}

std::string megabytes(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20); }

}  // namespace

int64_t source_memory_bytes(const DataSourceSpec& source, int64_t outputs, const Shape& input) {
  if (source.format == "idx") return idx_bytes(source, outputs);
  if (source.format == "csv") return csv_bytes(source, outputs);
  if (source.format == "images") return image_folder_bytes(source, outputs, input);
  if (source.format == "packed") return packed_bytes(source, outputs, input);
  return 0;
}

void check_memory(int64_t bytes, int64_t budget_bytes, const std::string& what) {
  if (budget_bytes <= 0 || bytes <= budget_bytes) return;
  throw UserError(what + " would take about " + megabytes(bytes) + " MB in memory, more than the " +
                      megabytes(budget_bytes) + " MB a job may hold on this node",
                  "export the data to packed files (dtrain-submit export), which training and "
                  "--shards evaluations stream; or raise job_memory_mb in the node's dtraind.yaml");
}

void check_data_memory(const JobSpec& job, int64_t budget_bytes) {
  if (budget_bytes <= 0) return;
  const int64_t outputs = job.model.layers.empty() ? 0 : job.model.layers.back().units;
  int64_t bytes = 0;
  std::string what;
  // A packed training set, or node-local shards, is streamed: only its test set is held.
  if (job.data.train.shards.empty() && job.data.train.format != "packed") {
    bytes += source_memory_bytes(job.data.train, outputs, job.model.input);
    what = "data.train";
  }
  if (job.data.test.present()) {
    bytes += source_memory_bytes(job.data.test, outputs, job.model.input);
    what += what.empty() ? "data.test" : " and data.test";
  }
  check_memory(bytes, budget_bytes, what);
}

}  // namespace dtrain::core
