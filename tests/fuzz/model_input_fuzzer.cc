// libFuzzer target for what a user or a file hands dtrain before any training:
//   first byte even: the rest is a job spec (YAML), parsed as `dtrain-submit` parses one;
//   first byte odd: the rest is a .dtm model file, loaded as `dtrain-submit eval/infer` loads
//     one (the file's checks, its embedded spec, the sizes, then the model).
// Both must refuse bad input with a UserError and nothing else: any other exception, crash,
// sanitizer report, or an allocation beyond libFuzzer's memory limit fails the run.
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/io/saved_model.h"
#include "core/spec/job_spec_parser.h"
#include "core/util/error.h"
#include "tests/fuzz/two_targets.h"

using namespace dtrain;

namespace {

void spec(const uint8_t* data, size_t size) {
  core::SpecParseOptions options;
  options.check_files = false;  // the data files named need not exist
  try {
    core::parse_job_spec_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml",
                              options);
  } catch (const core::UserError&) {
  }
}

void model_file(const uint8_t* data, size_t size) {
  static const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fuzz-" +
      std::to_string(getpid()) + ".dtm";
  // The total size and the CRC-32 trailer made to match, so that mutated files get past them
  // into the sections and the embedded spec (a file with a wrong CRC is refused first).
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 24 + 4) {
    const uint64_t total = bytes.size();
    std::memcpy(bytes.data() + 16, &total, sizeof total);
    const uint32_t crc = uint32_t(crc32(0L, bytes.data(), uInt(bytes.size() - 4)));
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  try {
    core::load_saved_model(path);
  } catch (const core::UserError&) {
  }
  std::remove(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::two_targets(data, size, spec, model_file);
}
