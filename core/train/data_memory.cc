#include "core/train/data_memory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string_view>
#include <utility>

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/image_folder.h"
#include "core/data/packed_file.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFloat = 4;

// A figure past what any machine holds reads as the most an int64 can say.
int64_t saturated(double bytes) {
  return bytes >= 9.0e18 ? std::numeric_limits<int64_t>::max() : int64_t(bytes);
}

int64_t idx_bytes(const DataSourceSpec& s, int64_t outputs) {
  const std::vector<int64_t> dims = read_idx_dims(s.images, s.roots.get());
  int64_t per_example = 1;
  for (size_t i = 1; i < dims.size(); ++i) per_example *= dims[i];
  // The raw bytes while they are read, then the features as floats, and the targets.
  return saturated(double(dims[0]) * double(per_example * (1 + kFloat) + outputs * kFloat));
}

// Rows judged by the lines in the file's first MiB (blank ones and the header left out): their
// mean length gives the rows, the first one the columns; the reader holds its values and then
// the features (twice the floats), and the targets. Nothing past that MiB is read.
int64_t csv_bytes(const DataSourceSpec& s, int64_t outputs) {
  const int fd = open_input(s.path, s.roots.get());
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) ::close(fd);
    throw UserError("cannot read the size of '" + s.path + "'", "check the path");
  }
  const int64_t size = int64_t(st.st_size);
  std::string sample(size_t(std::min<int64_t>(size, 1 << 20)), '\0');
  size_t got = 0;
  for (ssize_t n; got < sample.size() && (n = ::read(fd, &sample[got], sample.size() - got)) > 0;)
    got += size_t(n);
  ::close(fd);
  sample.resize(got);
  int64_t columns = 0, lines = 0, line_bytes = 0;
  bool skip_header = s.header;
  for (size_t at = 0; at < sample.size();) {
    size_t end = sample.find('\n', at);
    if (end == std::string::npos) end = sample.size();
    const std::string_view line(sample.data() + at, end - at);
    at = end + 1;
    if (std::exchange(skip_header, false) || line.find_first_not_of(" \r\t") == line.npos)
      continue;
    if (lines++ == 0) columns = 1 + int64_t(std::count(line.begin(), line.end(), ','));
    line_bytes += int64_t(line.size()) + 1;
  }
  if (lines == 0) return 0;  // nothing to judge by: the reader says what is wrong
  const double rows = std::floor(double(size) / (double(line_bytes) / double(lines))) + 1;
  return saturated(rows * double(2 * columns + outputs) * kFloat);
}

// The images read_image_folder reads: class folders' .png and .jpg files (an entry that cannot
// be looked at is passed over here; the reader names it).
int64_t image_folder_bytes(const DataSourceSpec& s, int64_t outputs, const Shape& input) {
  const InputFolder folder(s.path, s.roots.get());  // listed where it was checked
  int64_t files = 0;
  std::error_code ec;
  for (const auto& c : fs::directory_iterator(folder.listing_path(), ec)) {
    std::error_code entry;
    if ((s.roots && c.is_symlink(entry)) || !c.is_directory(entry)) continue;  // the reader refuses it
    for (const auto& f : fs::directory_iterator(c.path(), entry))
      files += is_image_name(f.path().string());
  }
  return saturated(double(files) * double(shape_size(input) + outputs) * kFloat);
}

int64_t packed_bytes(const DataSourceSpec& s, int64_t outputs, const Shape& input) {
  int64_t records = 0;
  for (const std::string& file : packed_files(s.path))
    records += read_packed_header(file, s.roots.get()).records;
  return saturated(double(records) * double(shape_size(input) + outputs) * kFloat);
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

int64_t keyed_memory_bytes(const std::string& path, bool header, const Shape& input,
                           const std::shared_ptr<const DataRoots>& roots) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const InputFolder folder(path, roots.get());  // listed where it was checked
    int64_t files = 0;
    for (fs::recursive_directory_iterator it(folder.listing_path(), ec), end; !ec && it != end;
         it.increment(ec))
      files += is_image_name(it->path().string());
    return saturated(double(files) * double(shape_size(input)) * kFloat);
  }
  DataSourceSpec s;
  s.path = s.images = path;
  s.header = header;
  s.roots = roots;
  return is_csv_name(path) ? csv_bytes(s, 0) : idx_bytes(s, 0);
}

void check_memory(int64_t bytes, int64_t budget_bytes, const std::string& what) {
  if (budget_bytes <= 0 || bytes <= budget_bytes) return;
  throw UserError(what + " would take about " + megabytes(bytes) + " MB in memory, more than the " +
                      megabytes(budget_bytes) + " MB a job may hold on this node",
                  "export the training data to packed files (dtrain-submit export), which "
                  "training streams; evaluate a smaller test set, or a packed one with eval "
                  "--cluster --shards; or raise job_memory_mb in the node's dtraind.yaml");
}

void check_data_memory(const JobSpec& job, int64_t budget_bytes) {
  if (budget_bytes <= 0) return;
  const int64_t outputs = job.model.layers.empty() ? 0 : job.model.layers.back().units;
  int64_t bytes = 0;
  std::string what;
  // A packed training set, or node-local shards, is streamed: only its test set is held.
  if (job.data.train.shards.empty() && job.data.train.format != "packed") {
    bytes = source_memory_bytes(job.data.train, outputs, job.model.input);
    what = "data.train";
  }
  if (job.data.test.present()) {
    bytes = saturated(double(bytes) +
                      double(source_memory_bytes(job.data.test, outputs, job.model.input)));
    what += what.empty() ? "data.test" : " and data.test";
  }
  check_memory(bytes, budget_bytes, what);
}

}  // namespace dtrain::core
