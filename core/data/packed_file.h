#pragma once
// Packed batch files (.dtb), written once by `dtrain-submit export` (DL4J's export approach;
// docs/user-guide.md, "Packed data") and read by training as it makes minibatches.
//
// An export shuffles the data set once and cuts it into files; each record keeps its example's
// index in the original data, so training from the files makes exactly the minibatches it
// would make from memory with the same seed. A file holds the raw features and the normaliser
// fitted on the whole training set, which training applies as it reads.
//
// Layout (little-endian): "DTRAINB\0" | u32 version | u32 encoding (0 f32, 1 u8) | u32 rank |
//   u32 export nonce (drawn once per export, so two exports of the same data differ; 0 in
//   files written before it was) | i64 dims[rank] | i64 classes | i64 total examples | i64 records
// |
//   u32 normaliser kind | u64 n | f32 values[n] | u32 class names | (u64 len, bytes)... |
//   u32 CRC-32 of the header so far | records: (i64 index, i32 label, features)...
// The file's size must be exactly the header plus its records.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/example_source.h"
#include "core/data/normalizer.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

enum class PackedEncoding : uint32_t { kFloat32 = 0, kUint8 = 1 };

// u8 when every feature is a whole number in [0, 255] (pixels), else f32.
PackedEncoding smallest_encoding(const Dataset& data);

// Writes data's examples order[first, first + count) to `path` (raw features; `normalizer` is
// stored). `export_nonce`: the same in every file of one export. Throws UserError when the file
// cannot be written.
void write_packed_file(const std::string& path, const Dataset& data,
                       const std::vector<int64_t>& order, int64_t first, int64_t count,
                       PackedEncoding encoding, const Normalizer& normalizer,
                       uint32_t export_nonce = 0);

// A packed file's header, checked: what the file holds and which export it is from.
struct PackedHeader {
  Shape shape;
  int64_t classes = 0, total = 0, records = 0;  // total: the export's examples
  PackedEncoding encoding = PackedEncoding::kFloat32;
  Normalizer normalizer;
  std::vector<std::string> names;
  uint32_t export_id = 0;  // the same in every file of one export (CRC-32 of the shared fields)
  uint64_t data_start = 0;
  int64_t record_bytes = 0;
};
// Throws UserError naming the file when it is missing or damaged. roots: a cluster node's
// data_roots (null: none), checked against the file as it is opened.
PackedHeader read_packed_header(const std::string& path, const DataRoots* roots = nullptr);

// kWholeExport: the files must hold every example of their export, each under its index in the
// original data (the same minibatches as in memory). kPart: any of an export's files (a node's
// local shards), their examples numbered in file and record order.
enum class PackedCoverage { kWholeExport, kPart };

// The examples of one export, over its files (any order; a glob's matches). Each read is one
// pread of one record, so several threads may read at once.
class PackedSource : public ExampleSource {
 public:
  // Throws UserError naming the file when one is missing, damaged or from another export.
  // roots: a cluster node's data_roots (null: none), checked against each file as it is opened.
  explicit PackedSource(const std::vector<std::string>& files,
                        PackedCoverage coverage = PackedCoverage::kWholeExport,
                        const DataRoots* roots = nullptr);
  ~PackedSource() override;

  int64_t size() const override { return total_; }
  Shape example_shape() const override { return shape_; }
  int64_t num_classes() const override { return classes_; }
  const std::vector<std::string>& class_names() const override { return names_; }
  void read(int64_t index, float* features, float* target) const override;
  // The example as written: features before the normaliser, and its class.
  void read_raw(int64_t index, float* features, int32_t& label) const;
  bool streams() const override { return true; }
  const Normalizer& normalizer() const { return normalizer_; }

 private:
  struct File;
  void index_part();
  void index_whole_export(int64_t held);  // `held`: the records of the files given
  std::vector<std::unique_ptr<File>> files_;
  Shape shape_;
  int64_t classes_ = 0, total_ = 0, row_ = 0;
  int64_t record_bytes_ = 0;  // i64 index, i32 label, row_ features
  PackedEncoding encoding_ = PackedEncoding::kFloat32;
  Normalizer normalizer_;
  std::vector<std::string> names_;
  uint32_t export_id_ = 0;
  // Example index -> (file, record): where each example of the original data was written.
  std::vector<uint32_t> file_of_;
  std::vector<int64_t> record_of_;
};

// The files a `path` glob matches, sorted; throws UserError when none does.
std::vector<std::string> packed_files(const std::string& pattern);

// Every example of `files` in memory, as written (not normalised: evaluation applies the
// model's normaliser, as for every other format), in the source's example order.
Dataset read_packed_dataset(const std::vector<std::string>& files, PackedCoverage coverage,
                            const DataRoots* roots = nullptr);

}  // namespace dtrain::core
