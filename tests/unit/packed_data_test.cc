// Packed batch files (core/data/packed_file.h): an export read back through PackedSource makes
// exactly the minibatches the same data makes in memory (every shard, epoch and takeover, with
// augmentation and a normaliser), streamed by the read-ahead thread; damaged or mismatched
// files are refused naming the file.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <zlib.h>

#include "core/data/minibatch_iterator.h"
#include "core/data/packed_file.h"
#include "core/train/training_data.h"
#include "core/util/rng.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

// 103 examples [2, 3, 4] of whole numbers 0..255 (so stored as 8 bits), 5 classes.
core::Dataset pixels() {
  core::Dataset d;
  d.features.resize({103, 2, 3, 4});
  core::Rng rng(4);
  for (int64_t i = 0; i < d.features.size(); ++i) d.features[i] = float(rng.next() % 256);
  std::vector<int32_t> labels;
  for (int i = 0; i < 103; ++i) labels.push_back(int32_t((i * 7) % 5));
  core::set_class_labels(d, labels, 5, "test");
  d.class_names = {"a", "b", "c", "d", "e"};
  return d;
}

// Exports `raw` into `files` files of a shuffled order; returns their paths.
std::vector<std::string> export_files(const core::Dataset& raw, const core::Normalizer& norm,
                                      const std::string& dir, int files) {
  std::vector<int64_t> order(static_cast<size_t>(raw.size()));
  std::iota(order.begin(), order.end(), 0);
  core::Rng rng(99);
  std::shuffle(order.begin(), order.end(), rng.engine());
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    const int64_t first = raw.size() * f / files, end = raw.size() * (f + 1) / files;
    paths.push_back(dir + "/train-" + std::to_string(f) + ".dtb");
    core::write_packed_file(paths.back(), raw, order, first, end - first,
                            core::smallest_encoding(raw), norm);
  }
  return paths;
}

bool same(const core::Tensor& a, const core::Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.data(), a.data() + a.size(), b.data());
}

std::string error_of(const std::vector<std::string>& files) {
  try {
    core::PackedSource s(files);
    return "";
  } catch (const core::UserError& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("training from an export makes the same minibatches as training from memory") {
  const std::string dir = testing::temp_dir();
  const core::Dataset raw = pixels();
  CHECK(core::smallest_encoding(raw) == core::PackedEncoding::kUint8);
  core::Normalizer norm = core::Normalizer::of("per_channel");
  norm.fit(raw.features);
  core::Dataset memory = raw;
  norm.apply(memory.features);
  const core::PackedSource packed(export_files(raw, norm, dir, 3));
  CHECK(packed.size() == 103);
  CHECK(packed.class_names() == raw.class_names);
  CHECK(packed.normalizer().values() == norm.values());

  const core::Augmentation augment{1, true};
  for (int64_t shard = 0; shard < 2; ++shard) {
    core::MinibatchIterator a(memory, 8, 1234, shard, 2, augment);
    core::MinibatchIterator b(packed, 8, 1234, shard, 2, augment);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      a.start_epoch(epoch);
      b.start_epoch(epoch);
      if (epoch == 1) {  // a resumed run skips ahead
        a.skip(2);
        b.skip(2);
      }
      core::Tensor xa, ya, xb, yb;
      int batches = 0;
      for (;;) {
        const bool more = a.next(xa, ya);
        REQUIRE(more == b.next(xb, yb));
        if (!more) break;
        ++batches;
        INFO("shard " << shard << " epoch " << epoch << " batch " << batches);
        CHECK(same(xa, xb));
        CHECK(same(ya, yb));
      }
      CHECK(batches == (epoch == 1 ? 7 - 2 : 7));  // 51 or 52 examples in 8s
      // A takeover of the other shard's minibatch 3 reads the same too.
      REQUIRE(a.batch_of_shard(1 - shard, 2, 3, xa, ya));
      REQUIRE(b.batch_of_shard(1 - shard, 2, 3, xb, yb));
      CHECK(same(xa, xb));
    }
  }
}

TEST_CASE("float data is stored as 32 bits and read back exactly") {
  core::Dataset raw = pixels();
  raw.features[5] = 0.125f;
  raw.features[6] = -3.5f;
  CHECK(core::smallest_encoding(raw) == core::PackedEncoding::kFloat32);
  const core::PackedSource packed(export_files(raw, core::Normalizer(), testing::temp_dir(), 1));
  std::vector<float> x(24), y(5);
  for (int64_t i : {0, 50, 102}) {
    packed.read(i, x.data(), y.data());
    CHECK(std::equal(x.begin(), x.end(), raw.features.row(i)));
    CHECK(y[size_t(raw.labels[size_t(i)])] == 1.0f);
  }
}

TEST_CASE("an export read whole for evaluation is the original data, before its normaliser") {
  const core::Dataset raw = pixels();
  core::Normalizer norm = core::Normalizer::of("per_channel");
  norm.fit(raw.features);  // stored in the files; evaluation applies the model's own instead
  const std::string dir = testing::temp_dir();
  const std::vector<std::string> files = export_files(raw, norm, dir, 3);
  const core::Dataset whole = core::read_packed_dataset(files, core::PackedCoverage::kWholeExport);
  CHECK(same(whole.features, raw.features));  // in the original order, raw
  CHECK(same(whole.targets, raw.targets));
  CHECK(whole.labels == raw.labels);
  CHECK(whole.class_names == raw.class_names);
  // Through load_source (what `eval --data 'DIR/*.dtb'` and a packed test set use).
  core::DataSourceSpec source;
  source.format = "packed";
  source.path = dir + "/train-*.dtb";
  const core::Dataset loaded = core::load_source(source, 5, {2, 3, 4}, "--data");
  CHECK(same(loaded.features, raw.features));
  CHECK_THROWS_WITH(core::load_source(source, 4, {2, 3, 4}, "--data"),
                    Catch::Contains("the packed data has 5 classes, the model 4 classes"));
  // One file of a node's shards: its own examples, in record order.
  const core::Dataset part = core::read_packed_dataset({files[1]}, core::PackedCoverage::kPart);
  CHECK(part.size() == 34);
  int64_t found = 0;
  for (int64_t i = 0; i < part.size(); ++i)
    for (int64_t j = 0; j < raw.size(); ++j)
      if (std::equal(part.features.row(i), part.features.row(i) + 24, raw.features.row(j)) &&
          part.labels[size_t(i)] == raw.labels[size_t(j)]) {
        ++found;
        break;
      }
  CHECK(found == part.size());
}

TEST_CASE("damaged, incomplete or mixed exports are refused naming the file") {
  const std::string dir = testing::temp_dir();
  const core::Dataset raw = pixels();
  const auto files = export_files(raw, core::Normalizer(), dir, 2);
  REQUIRE(error_of(files).empty());
  SECTION("a file missing: the examples it held are in none of the others") {
    CHECK_THAT(error_of({files[0]}), Catch::Contains("examples are in none of the 1 files given"));
  }
  SECTION("a header claiming 2^40 examples: refused from the files' records, nothing allocated") {
    // total (after magic, version, encoding, rank, nonce, the shape and the classes), then the
    // header's checksum made anew: a well-formed header that lies.
    const core::PackedHeader h = core::read_packed_header(files[0]);
    std::string bytes(size_t(h.data_start), '\0');
    {
      std::ifstream in(files[0], std::ios::binary);
      in.read(bytes.data(), std::streamsize(bytes.size()));
    }
    const int64_t huge = int64_t(1) << 40;
    std::memcpy(bytes.data() + 24 + 8 * h.shape.size() + 8, &huge, sizeof huge);
    const uint32_t crc = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()),
                                        uInt(bytes.size() - 4)));
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    {
      std::fstream out(files[0], std::ios::in | std::ios::out | std::ios::binary);
      out.write(bytes.data(), std::streamsize(bytes.size()));
    }
    REQUIRE(core::read_packed_header(files[0]).total == huge);
    CHECK_THAT(error_of({files[0]}),
               Catch::Contains(std::to_string(huge - h.records) + " of the export's " +
                               std::to_string(huge) + " examples are in none of the 1 files"));
  }
  SECTION("a file given twice") {
    CHECK_THAT(error_of({files[0], files[1], files[0]}), Catch::Contains("a file given twice?"));
  }
  SECTION("a truncated file") {
    std::filesystem::resize_file(files[1], std::filesystem::file_size(files[1]) - 7);
    const std::string message = error_of(files);
    CHECK_THAT(message, Catch::Contains(files[1]));
    CHECK_THAT(message, Catch::Contains("not as long as its"));
    CHECK_THAT(message, Catch::Contains("export the data again"));
  }
  SECTION("a flipped header byte") {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(60);
    f.put('\x7f');
    f.close();
    CHECK_THAT(error_of(files), Catch::Contains(files[0] + "' is damaged"));
  }
  SECTION("files of two exports") {
    core::Dataset other = pixels();
    other.class_names[0] = "z";
    const auto theirs = export_files(other, core::Normalizer(), testing::temp_dir(), 2);
    CHECK_THAT(error_of({files[0], theirs[1]}), Catch::Contains("is from another export"));
  }
  SECTION("not a packed file, and no match") {
    testing::write_text(dir + "/x.dtb", "hello");
    CHECK_THAT(error_of({dir + "/x.dtb"}), Catch::Contains("is not a packed batch file"));
    CHECK_THROWS_WITH(core::packed_files(dir + "/none-*.dtb"), Catch::Contains("no file matches"));
    CHECK(core::packed_files(dir + "/train-*.dtb") == files);
  }
}

TEST_CASE("some files of an export (a node's local shards) are read as their own data set") {
  const std::string dir = testing::temp_dir();
  const core::Dataset raw = pixels();
  const auto files = export_files(raw, core::Normalizer(), dir, 4);
  const core::PackedHeader h0 = core::read_packed_header(files[0]);
  const core::PackedHeader h2 = core::read_packed_header(files[2]);
  CHECK(h0.total == 103);
  CHECK(h0.records == 25);  // 103 * 1 / 4
  CHECK(h2.records == 26);
  CHECK(h0.export_id == h2.export_id);  // every file of one export
  const core::PackedSource part({files[0], files[2]}, core::PackedCoverage::kPart);
  CHECK(part.size() == 51);
  // Its examples, in file and record order, are exactly those two files' records.
  std::vector<int64_t> order(103);
  std::iota(order.begin(), order.end(), 0);
  core::Rng rng(99);
  std::shuffle(order.begin(), order.end(), rng.engine());
  std::vector<int64_t> held(order.begin(), order.begin() + 25);
  held.insert(held.end(), order.begin() + 51, order.begin() + 77);
  std::vector<float> x(24), y(5);
  for (int64_t i = 0; i < part.size(); ++i) {
    part.read(i, x.data(), y.data());
    const int64_t src = held[size_t(i)];
    INFO("local example " << i << " is example " << src);
    CHECK(std::equal(x.begin(), x.end(), raw.features.row(src)));
    CHECK(y[size_t(raw.labels[size_t(src)])] == 1.0f);
  }
  // Shards of it cover each of its examples once per epoch.
  core::MinibatchIterator it(part, 8, 7, 0, 1);
  it.start_epoch(0);
  core::Tensor xb, yb;
  int64_t seen = 0;
  while (it.next(xb, yb)) seen += xb.dim(0);
  CHECK(seen == 51);
  // Still one export: another's file is refused.
  core::Dataset other = pixels();
  other.class_names[0] = "z";
  const auto theirs = export_files(other, core::Normalizer(), testing::temp_dir(), 2);
  CHECK_THROWS_WITH(core::PackedSource({files[0], theirs[1]}, core::PackedCoverage::kPart),
                    Catch::Contains("is from another export"));
  CHECK(core::read_packed_header(theirs[0]).export_id != h0.export_id);
  // Two exports of the same data differ by their nonce (dtrain-submit export draws one).
  std::vector<int64_t> all(103);
  std::iota(all.begin(), all.end(), 0);
  const std::string again = testing::temp_dir() + "/again.dtb";
  core::write_packed_file(again, raw, all, 0, 25, core::smallest_encoding(raw), core::Normalizer(),
                          /*export_nonce=*/12345);
  CHECK(core::read_packed_header(again).export_id != h0.export_id);
  CHECK_THROWS_WITH(core::PackedSource({files[0], again}, core::PackedCoverage::kPart),
                    Catch::Contains("is from another export"));
}

}  // namespace dtrain
