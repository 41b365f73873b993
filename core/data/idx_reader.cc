#include "core/data/idx_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <memory>

#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// gzread reads raw files transparently, so one path serves .gz and uncompressed IDX.
void read_exact(gzFile f, void* buf, size_t n, const std::string& path, const char* what) {
  size_t got = 0;
  while (got < n) {
    int chunk = static_cast<int>(std::min<size_t>(n - got, 1 << 30));
    int r = gzread(f, static_cast<char*>(buf) + got, chunk);
    if (r <= 0)
      throw UserError("'" + path + "' is truncated or corrupt while reading " + what,
                      "re-download or regenerate the file (Debian: dataset-fashion-mnist)");
    got += static_cast<size_t>(r);
  }
}

}  // namespace

namespace {

// The header of an open IDX file: its dimensions, checked (unsigned bytes, at most 16 GiB).
std::vector<int64_t> read_header(gzFile f, const std::string& path) {
  uint8_t magic[4];
  read_exact(f, magic, 4, path, "the header");
  if (magic[0] != 0 || magic[1] != 0 || magic[3] < 1 || magic[3] > 4)
    throw UserError("'" + path + "' is not an IDX file (bad magic number)",
                    "pass IDX image/label files such as train-images-idx3-ubyte.gz");
  if (magic[2] != 0x08)
    throw UserError("'" + path + "' holds IDX type 0x" + std::to_string(magic[2]) +
                        ", only unsigned bytes (0x08) are supported",
                    "convert the data to unsigned-byte IDX or to CSV");
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int i = 0; i < magic[3]; ++i) {
    uint8_t b[4];
    read_exact(f, b, 4, path, "the dimensions");
    int64_t d = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | b[3];
    if (d <= 0 || d > (1LL << 31))
      throw UserError("'" + path + "' declares an invalid dimension " + std::to_string(d),
                      "the file is corrupt; regenerate it");
    dims.push_back(d);
    // Checked before multiplying: a product past 2^63 would wrap to a small count.
    if (total > (int64_t(1) << 34) / d)
      throw UserError("'" + path + "' declares more than 16 GiB of data", "the file is corrupt");
    total *= d;
  }
  return dims;
}

gzFile open_idx(const std::string& path, const DataRoots* roots) {
  const int fd = open_input(path, roots);
  gzFile f = fd < 0 ? nullptr : gzdopen(fd, "rb");
  if (!f) {
    if (fd >= 0) ::close(fd);
    throw UserError("cannot open IDX file '" + path + "'", "check the path");
  }
  return f;
}

}  // namespace

std::vector<int64_t> read_idx_dims(const std::string& path, const DataRoots* roots) {
  std::unique_ptr<gzFile_s, GzCloser> f(open_idx(path, roots));
  return read_header(f.get(), path);
}

IdxArray read_idx(const std::string& path, const DataRoots* roots) {
  std::unique_ptr<gzFile_s, GzCloser> f(open_idx(path, roots));
  IdxArray a;
  a.dims = read_header(f.get(), path);
  int64_t total = 1;
  for (int64_t d : a.dims) total *= d;
  // The values grow as they arrive: a header's dimensions are a claim, and a short file that
  // claims gigabytes must cost no more than what it holds.
  constexpr size_t kChunk = size_t(16) << 20;
  while (a.values.size() < size_t(total)) {
    const size_t at = a.values.size();
    a.values.resize(std::min(size_t(total), at + kChunk));
    read_exact(f.get(), a.values.data() + at, a.values.size() - at, path, "the values");
  }
  return a;
}

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int64_t num_classes, const DataRoots* roots) {
  IdxArray images = read_idx(images_path, roots);
  IdxArray labels = read_idx(labels_path, roots);
  if (labels.dims.size() != 1)
    throw UserError("'" + labels_path + "' is not a label file (expected 1 dimension, got " +
                        std::to_string(labels.dims.size()) + ")",
                    "data.*.labels must be the *-labels-idx1-ubyte file");
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    throw UserError("'" + images_path + "' has " + std::to_string(n) + " images but '" +
                        labels_path + "' has " + std::to_string(labels.dims[0]) + " labels",
                    "pair each images file with its own labels file");
  Dataset d;
  const int64_t row = static_cast<int64_t>(images.values.size()) / n;
  if (row < 1 || row * n != static_cast<int64_t>(images.values.size()))
    throw UserError("'" + images_path + "' holds " + std::to_string(images.values.size()) +
                        " values, not a whole row for each of its " + std::to_string(n) +
                        " images",
                    "the file is corrupt; regenerate it");
  d.features.resize({n, row});
  for (size_t i = 0; i < images.values.size(); ++i) d.features[i] = images.values[i];
  std::vector<int32_t> y(labels.values.begin(), labels.values.end());
  set_class_labels(d, std::move(y), num_classes, labels_path);
  return d;
}

}  // namespace dtrain::core
