// libFuzzer target for the data files a job names (docs/operations.md, "Who may do what": a file
// on shared storage is hostile until checked, and jobs run inside the daemon): the input's first
// byte picks the reader, the rest is the file.
//   0: an IDX file (raw), read as `format: idx` reads images or labels;
//   1: a packed export file (.dtb), its header, then read whole and as a node's local shard;
//   2: a CSV file, read as classes (last column) and as regression (two target columns).
// Each must refuse bad input with a UserError and nothing else: any other exception, crash,
// sanitizer report, or an allocation beyond libFuzzer's memory limit (a header's claim believed)
// fails the run.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/packed_file.h"
#include "core/util/error.h"

using namespace dtrain;

namespace {

// The bytes as a file of their own (the readers take paths), named for the reader.
std::string as_file(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                           "/fuzz-" + std::to_string(getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

template <class Read>
void refused_or_read(Read&& read) {
  try {
    read();
  } catch (const core::UserError&) {
  }
}

void idx(const uint8_t* data, size_t size) {
  const std::string path = as_file(data, size, "-images-idx3-ubyte");
  refused_or_read([&] {
    const core::IdxArray a = core::read_idx(path);
    int64_t values = 1;
    for (int64_t d : a.dims) values *= d;
    if (int64_t(a.values.size()) != values) __builtin_trap();  // what it read is what it says
  });
}

void packed(const uint8_t* data, size_t size) {
  const std::string path = as_file(data, size, ".dtb");
  refused_or_read([&] { core::read_packed_header(path); });
  for (core::PackedCoverage c : {core::PackedCoverage::kWholeExport, core::PackedCoverage::kPart})
    refused_or_read([&] {
      const core::Dataset d = core::read_packed_dataset({path}, c);
      if (d.size() < 0) __builtin_trap();
    });
}

void csv(const uint8_t* data, size_t size) {
  const std::string path = as_file(data, size, ".csv");
  core::CsvOptions classes;
  classes.num_classes = 10;
  refused_or_read([&] { core::read_csv_dataset(path, classes); });
  core::CsvOptions regression;
  regression.target_columns = 2;
  regression.header = true;
  refused_or_read([&] { core::read_csv_dataset(path, regression); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0: idx(data + 1, size - 1); break;
    case 1: packed(data + 1, size - 1); break;
    default: csv(data + 1, size - 1); break;
  }
  return 0;
}
