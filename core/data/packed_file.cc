#include "core/data/packed_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/util/durable_file.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'B', '\0'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxClasses = int64_t(1) << 24;

void put_bytes(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <typename T>
void put(std::string& out, T v) { put_bytes(out, &v, sizeof v); }

// Reads the header of an open file; every field checked before it sizes anything.
class HeaderReader {
 public:
  HeaderReader(int fd, const std::string& path) : fd_(fd), path_(path) {}
  template <typename T>
  T get() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  void bytes(void* p, size_t n) {
    if (pread(fd_, p, n, off_t(pos_)) != ssize_t(n)) fail("the header is cut short");
    seen_.append(static_cast<const char*>(p), n);
    pos_ += n;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError("packed file '" + path_ + "' is damaged: " + why,
                    "export the data again (dtrain-submit export SPEC --out DIR)");
  }
  uint64_t pos() const { return pos_; }
  const std::string& seen() const { return seen_; }

 private:
  int fd_;
  const std::string& path_;
  uint64_t pos_ = 0;
  std::string seen_;
};

}  // namespace

PackedEncoding smallest_encoding(const Dataset& data) {
  for (int64_t i = 0; i < data.features.size(); ++i) {
    const float v = data.features[i];
    if (!(v >= 0.0f && v <= 255.0f) || v != std::floor(v)) return PackedEncoding::kFloat32;
  }
  return PackedEncoding::kUint8;
}

void write_packed_file(const std::string& path, const Dataset& data,
                       const std::vector<int64_t>& order, int64_t first, int64_t count,
                       PackedEncoding encoding, const Normalizer& normalizer,
                       uint32_t export_nonce) {
  const Shape shape = data.example_shape();
  std::string out;
  put_bytes(out, kMagic, sizeof kMagic);
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, uint32_t(encoding));
  put<uint32_t>(out, uint32_t(shape.size()));
  put<uint32_t>(out, export_nonce);
  for (int64_t d : shape) put<int64_t>(out, d);
  put<int64_t>(out, data.targets.row_size());
  put<int64_t>(out, data.size());
  put<int64_t>(out, count);
  put<uint32_t>(out, uint32_t(normalizer.kind()));
  put<uint64_t>(out, normalizer.values().size());
  put_bytes(out, normalizer.values().data(), normalizer.values().size() * sizeof(float));
  put<uint32_t>(out, uint32_t(data.class_names.size()));
  for (const std::string& n : data.class_names) {
    put<uint64_t>(out, n.size());
    put_bytes(out, n.data(), n.size());
  }
  put<uint32_t>(out, uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(out.data()), uInt(out.size()))));
  const int64_t row = data.features.row_size();
  for (int64_t i = first; i < first + count; ++i) {
    const int64_t src = order[size_t(i)];
    put<int64_t>(out, src);
    put<int32_t>(out, data.labels[size_t(src)]);
    const float* x = data.features.row(src);
    if (encoding == PackedEncoding::kUint8)
      for (int64_t j = 0; j < row; ++j) put<uint8_t>(out, uint8_t(x[j]));
    else
      put_bytes(out, x, sizeof(float) * size_t(row));
  }
  std::string error;
  if (!write_file_durably(path, out, &error))
    throw UserError(error, "check that the folder exists, is writable and has free space");
}

struct PackedSource::File {
  std::string path;
  int fd = -1;
  PackedHeader header;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
};

static PackedHeader read_packed_header(int fd, const std::string& path) {
  HeaderReader h(fd, path);
  char magic[8] = {0};
  if (pread(fd, magic, 8, 0) != 8 || std::memcmp(magic, kMagic, 8) != 0)
    throw UserError("'" + path + "' is not a packed batch file (.dtb)",
                    "give data.train (path or shards) only files written by dtrain-submit export");
  h.bytes(magic, 8);
  if (h.get<uint32_t>() != kVersion) h.fail("an unknown version");
  PackedHeader out;
  const uint32_t encoding = h.get<uint32_t>();
  const uint32_t rank = h.get<uint32_t>();
  h.get<uint32_t>();  // the export nonce: part of export_id below
  if (encoding > 1 || (rank != 1 && rank != 3)) h.fail("an unknown encoding or shape");
  out.encoding = PackedEncoding(encoding);
  out.shape.resize(rank);
  for (auto& d : out.shape) d = h.get<int64_t>();
  out.classes = h.get<int64_t>();
  out.total = h.get<int64_t>();
  const size_t records_at = h.pos();
  out.records = h.get<int64_t>();
  int64_t features = 1;  // checked before each multiply: no product may wrap
  for (int64_t d : out.shape) {
    if (d < 1 || d > (int64_t(1) << 24) || features > (int64_t(1) << 28) / d)
      h.fail("a shape of " + shape_string(out.shape));
    features *= d;
  }
  if (out.classes < 1 || out.classes > kMaxClasses || out.total < 1 ||
      out.total > (int64_t(1) << 40) || out.records < 0 || out.records > out.total)
    h.fail("impossible counts");
  const uint32_t kind = h.get<uint32_t>();
  const uint64_t nvalues = h.get<uint64_t>();
  if (kind > 3 || nvalues > uint64_t(2 * shape_size(out.shape) + 2)) h.fail("a damaged normaliser");
  std::vector<float> values(nvalues);
  h.bytes(values.data(), nvalues * sizeof(float));
  const uint32_t nnames = h.get<uint32_t>();
  if (nnames > uint64_t(out.classes)) h.fail("more class names than classes");
  for (uint32_t i = 0; i < nnames; ++i) {
    const uint64_t len = h.get<uint64_t>();
    if (len > 4096) h.fail("a class name of " + std::to_string(len) + " bytes");
    std::string n(len, '\0');
    h.bytes(n.data(), len);
    out.names.push_back(std::move(n));
  }
  const uint32_t crc = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(h.seen().data()),
                                      uInt(h.seen().size())));
  if (h.get<uint32_t>() != crc) h.fail("its header's checksum does not match");
  // The export: every field but this file's record count, the same in each of its files.
  std::string shared = h.seen().substr(0, h.seen().size() - 4);
  std::memset(shared.data() + records_at, 0, sizeof(int64_t));
  out.export_id =
      uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(shared.data()), uInt(shared.size())));
  out.data_start = h.pos();
  out.record_bytes = 12 + shape_size(out.shape) * (encoding == 1 ? 1 : 4);
  struct stat st;
  uint64_t data_bytes = 0, length = 0;
  if (__builtin_mul_overflow(uint64_t(out.records), uint64_t(out.record_bytes), &data_bytes) ||
      __builtin_add_overflow(uint64_t(out.data_start), data_bytes, &length) ||
      fstat(fd, &st) != 0 || uint64_t(st.st_size) != length)
    h.fail("it is not as long as its " + std::to_string(out.records) + " records");
  out.normalizer = Normalizer::restore(Normalizer::Kind(kind), values);
  return out;
}

static int open_packed_file(const std::string& path, const DataRoots* roots = nullptr) {
  const int fd = open_input(path, roots);
  if (fd < 0)
    throw UserError("cannot open packed file '" + path + "'", "check the path and permissions");
  return fd;
}

PackedHeader read_packed_header(const std::string& path, const DataRoots* roots) {
  const int fd = open_packed_file(path, roots);
  try {
    PackedHeader h = read_packed_header(fd, path);
    ::close(fd);
    return h;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

PackedSource::PackedSource(const std::vector<std::string>& paths, PackedCoverage coverage,
                           const DataRoots* roots) {
  // Every header first: what the files hold bounds what is allocated for them (a header's
  // counts are checked against the file's length, not trusted).
  int64_t held = 0;
  for (const std::string& path : paths) {
    auto f = std::make_unique<File>();
    f->path = path;
    f->fd = open_packed_file(path, roots);
    f->header = read_packed_header(f->fd, path);
    const PackedHeader& h = f->header;
    if (files_.empty()) {
      shape_ = h.shape, classes_ = h.classes, row_ = shape_size(h.shape);
      record_bytes_ = h.record_bytes;
      encoding_ = h.encoding;
      normalizer_ = h.normalizer;
      names_ = h.names;
      export_id_ = h.export_id;
    } else if (h.export_id != export_id_) {
      throw UserError("'" + path + "' is from another export than '" + files_[0]->path + "'",
                      "give the files of one export (data.train.path, data.test.path, --data)");
    }
    held += h.records;
    files_.push_back(std::move(f));
  }
  if (files_.empty()) throw UserError("no packed files were given", "check the data's path");
  if (held == 0) throw UserError("the packed files given hold no examples", "export the data again");
  if (coverage == PackedCoverage::kPart)
    index_part();
  else
    index_whole_export(held);
}

// Some files of an export (a node's local shards): its examples in file and record order,
// numbered from 0; the minibatches shuffle them each epoch.
void PackedSource::index_part() {
  for (uint32_t f = 0; f < files_.size(); ++f)
    for (int64_t r = 0; r < files_[f]->header.records; ++r) {
      file_of_.push_back(f);
      record_of_.push_back(r);
    }
  total_ = int64_t(file_of_.size());
}

// Every file of an export: which example each record holds (one read of the indices).
void PackedSource::index_whole_export(int64_t held) {
  total_ = files_[0]->header.total;
  const std::string give = "give every file of the export, once (data.train.path, "
                           "data.test.path, --data)";
  if (held < total_)
    throw UserError(std::to_string(total_ - held) + " of the export's " +
                        std::to_string(total_) + " examples are in none of the " +
                        std::to_string(files_.size()) + " files given",
                    give);
  if (held > total_)
    throw UserError("the " + std::to_string(files_.size()) + " packed files given hold " +
                        std::to_string(held) + " records, more than their export's " +
                        std::to_string(total_) + " examples (a file given twice?)",
                    give);
  file_of_.assign(size_t(total_), UINT32_MAX);
  record_of_.assign(size_t(total_), -1);
  for (uint32_t f = 0; f < files_.size(); ++f) {
    const File& file = *files_[f];
    const PackedHeader& h = file.header;
    for (int64_t r = 0; r < h.records; ++r) {
      int64_t index = -1;
      const off_t at = off_t(h.data_start + uint64_t(r * h.record_bytes));
      if (pread(file.fd, &index, sizeof index, at) != 8 || index < 0 || index >= total_ ||
          file_of_[size_t(index)] != UINT32_MAX)
        throw UserError("packed file '" + file.path + "' is damaged: record " +
                            std::to_string(r) + " has a bad or repeated example index",
                        "export the data again (dtrain-submit export SPEC --out DIR)");
      file_of_[size_t(index)] = f;
      record_of_[size_t(index)] = r;
    }
  }
}

PackedSource::~PackedSource() = default;

void PackedSource::read_raw(int64_t index, float* features, int32_t& label) const {
  const File& f = *files_[file_of_[size_t(index)]];
  const int64_t record = record_bytes_;
  thread_local std::vector<uint8_t> buffer;
  buffer.resize(size_t(record));
  const off_t at = off_t(f.header.data_start + uint64_t(record_of_[size_t(index)] * record));
  if (pread(f.fd, buffer.data(), size_t(record), at) != ssize_t(record))
    throw UserError("cannot read packed file '" + f.path + "'", "check the disk");
  std::memcpy(&label, buffer.data() + 8, 4);
  if (label < 0 || label >= classes_)
    throw UserError("packed file '" + f.path + "' is damaged: example " + std::to_string(index) +
                        " has label " + std::to_string(label),
                    "export the data again");
  if (encoding_ == PackedEncoding::kUint8)
    for (int64_t j = 0; j < row_; ++j) features[j] = float(buffer[size_t(12 + j)]);
  else
    std::memcpy(features, buffer.data() + 12, sizeof(float) * size_t(row_));
}

void PackedSource::read(int64_t index, float* features, float* target) const {
  int32_t label = 0;
  read_raw(index, features, label);
  normalizer_.apply_rows(features, 1, row_);
  std::fill(target, target + classes_, 0.0f);
  target[label] = 1.0f;
}

Dataset read_packed_dataset(const std::vector<std::string>& files, PackedCoverage coverage,
                            const DataRoots* roots) {
  const PackedSource source(files, coverage, roots);
  Dataset d;
  Shape shape{source.size()};
  for (int64_t dim : source.example_shape()) shape.push_back(dim);
  d.features.resize(shape);
  d.targets.resize({source.size(), source.num_classes()});
  d.labels.resize(size_t(source.size()));
  for (int64_t i = 0; i < source.size(); ++i) {
    source.read_raw(i, d.features.row(i), d.labels[size_t(i)]);
    float* target = d.targets.row(i);
    std::fill(target, target + source.num_classes(), 0.0f);
    target[d.labels[size_t(i)]] = 1.0f;
  }
  d.num_classes = source.num_classes();
  d.class_names = source.class_names();
  return d;
}

std::vector<std::string> packed_files(const std::string& pattern) {
  glob_t g;
  std::vector<std::string> out;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  if (out.empty())
    throw UserError("no file matches '" + pattern + "'",
                    "export the data first (dtrain-submit export SPEC --out DIR) and point the "
                    "path at DIR/train-*.dtb (a test set: DIR/test-*.dtb)");
  return out;  // glob sorts
}

}  // namespace dtrain::core
