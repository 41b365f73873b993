// dtrain-submit export job.yaml --out DIR [--files N] [--test-files N]: the spec's data written once as packed,
// shuffled batch files (core/data/packed_file.h): DIR/train-00000.dtb... and DIR/test-00000.dtb.
// The normaliser is fitted on the whole training set here and stored in every file; training
// from them (`format: packed`) makes the same minibatches as training from the original data.
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/data/packed_file.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/training_data.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "submit/commands.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {
namespace {

std::string file_name(const std::string& dir, const char* split, long i) {
  char name[32];
  std::snprintf(name, sizeof name, "%s-%05ld.dtb", split, i);
  return (std::filesystem::path(dir) / name).string();
}

// Writes `data` cut into `files` files of a seeded shuffle; returns the bytes written.
int64_t write_split(const core::Dataset& data, const core::Normalizer& normalizer,
                    const std::string& dir, const char* split, long files, uint64_t seed,
                    uint32_t nonce) {
  std::vector<int64_t> order(static_cast<size_t>(data.size()));
  std::iota(order.begin(), order.end(), 0);
  core::Rng rng = core::Rng::derive(seed, 0xe4b0e7ULL);
  std::shuffle(order.begin(), order.end(), rng.engine());
  const core::PackedEncoding encoding = core::smallest_encoding(data);
  int64_t bytes = 0;
  for (long f = 0; f < files; ++f) {
    const int64_t first = data.size() * f / files, end = data.size() * (f + 1) / files;
    const std::string path = file_name(dir, split, f);
    core::write_packed_file(path, data, order, first, end - first, encoding, normalizer, nonce);
    bytes += int64_t(std::filesystem::file_size(path));
  }
  std::printf("%s: %lld examples in %ld file%s (%s, %.1f MB): %s\n", split,
              (long long)data.size(), files, files == 1 ? "" : "s",
              encoding == core::PackedEncoding::kUint8 ? "8-bit" : "32-bit float", bytes / 1e6,
              (std::filesystem::path(dir) / (std::string(split) + "-*.dtb")).c_str());
  return bytes;
}

}  // namespace

int run_export(const ExportArgs& args) {
  try {
    const core::JobSpec job = core::parse_job_spec_file(args.job_path);
    if (job.data.train.format == "packed")
      throw core::UserError("the spec's training data is packed already",
                            "export from a spec whose data is idx, csv or images");
    if (job.regression())
      throw core::UserError("packed files hold class labels; this spec's labels are regression "
                                "values",
                            "train regression models from the CSV file (format: csv, labels: "
                            "regression)");
    std::error_code ec;
    std::filesystem::create_directories(args.out_dir, ec);
    if (ec)
      throw core::UserError("cannot create '" + args.out_dir + "': " + ec.message(),
                            "choose a folder you can write");
    const int64_t classes = job.model.layers.back().units;
    core::Dataset train = core::load_source(job.data.train, classes, job.model.input, "data.train");
    core::Normalizer normalizer = core::Normalizer::of(job.data.normalize);
    normalizer.fit(train.features);
    if (args.files > train.size())
      throw core::UserError(std::to_string(args.files) + " files for " +
                                std::to_string(train.size()) + " examples",
                            "use fewer --files");
    const bool test = job.data.test.present() && job.data.test.format != "packed";
    if (args.test_files > 1 && !test)
      throw core::UserError("--test-files for a spec without a test set to export",
                            "give data.test in the spec (idx, csv or images), or leave it out");
    // Read before any file is written, so that a bad --test-files writes nothing.
    core::Dataset test_data;
    if (test) {
      test_data = core::load_source(job.data.test, classes, job.model.input, "data.test");
      if (args.test_files > test_data.size())
        throw core::UserError(std::to_string(args.test_files) + " test files for " +
                                  std::to_string(test_data.size()) + " examples",
                              "use fewer --test-files");
    }
    // Drawn once: files of this export are told from another export of the same data.
    std::random_device entropy;
    uint32_t nonce = 0;
    while (nonce == 0) nonce = entropy();
    write_split(train, normalizer, args.out_dir, "train", args.files, job.seed, nonce);
    if (test)
      write_split(test_data, normalizer, args.out_dir, "test", args.test_files, job.seed, nonce);
    const std::filesystem::path dir(args.out_dir);
    std::printf("train from them with\n  data:\n    train: {format: packed, path: %s}\n",
                (dir / "train-*.dtb").c_str());
    if (job.data.test.present())
      std::printf("    test: {format: packed, path: %s}\n", (dir / "test-*.dtb").c_str());
    std::printf("    normalize: %s   # as exported\n", job.data.normalize.c_str());
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  return kExitSuccess;
}

}  // namespace dtrain::submit
