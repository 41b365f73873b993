// IDX and CSV readers on small files the test writes; what data takes in memory, judged from
// headers; normalizers; shard iteration.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/minibatch_iterator.h"
#include "core/data/normalizer.h"
#include "core/train/data_memory.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

std::string idx_bytes(const std::vector<int>& dims, const std::vector<uint8_t>& values) {
  std::string b = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (int d : dims) {
    b.push_back(static_cast<char>((d >> 24) & 0xff));
    b.push_back(static_cast<char>((d >> 16) & 0xff));
    b.push_back(static_cast<char>((d >> 8) & 0xff));
    b.push_back(static_cast<char>(d & 0xff));
  }
  b.append(values.begin(), values.end());
  return b;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

}  // namespace

TEST_CASE("IDX images and labels, raw and gzip") {
  const std::string dir = testing::temp_dir();
  std::vector<uint8_t> pixels;
  for (int i = 0; i < 3 * 2 * 2; ++i) pixels.push_back(static_cast<uint8_t>(i * 10));
  const std::string images = idx_bytes({3, 2, 2}, pixels);
  const std::string labels = idx_bytes({3}, {2, 0, 1});
  write_raw(dir + "/img", images);
  write_raw(dir + "/lab", labels);
  write_gz(dir + "/img.gz", images);
  write_gz(dir + "/lab.gz", labels);
  for (auto suffix : {"", ".gz"}) {
    core::Dataset d = core::load_idx_dataset(dir + "/img" + suffix, dir + "/lab" + suffix, 3);
    REQUIRE(d.size() == 3);
    CHECK(d.features.row_size() == 4);
    CHECK(d.features[5] == 50.0f);
    CHECK(d.labels == std::vector<int32_t>{2, 0, 1});
    CHECK(d.targets[0 * 3 + 2] == 1.0f);
    CHECK(d.targets[1 * 3 + 0] == 1.0f);
    CHECK(d.targets[1 * 3 + 1] == 0.0f);
  }
}

TEST_CASE("IDX errors name the problem") {
  const std::string dir = testing::temp_dir();
  write_raw(dir + "/trunc", idx_bytes({3, 2, 2}, {1, 2, 3}));
  CHECK_THROWS_WITH(core::read_idx(dir + "/trunc"), Catch::Contains("truncated"));
  write_raw(dir + "/text", "hello world, not idx");
  CHECK_THROWS_WITH(core::read_idx(dir + "/text"), Catch::Contains("not an IDX file"));
  CHECK_THROWS_WITH(core::read_idx(dir + "/missing"), Catch::Contains("cannot open"));
  // A short file whose header claims 2 GiB costs what it holds, not what it claims: the read
  // fails as truncated, and the process's peak memory grew by less than 64 MiB.
  write_raw(dir + "/liar", idx_bytes({2, 32768, 32768}, std::vector<uint8_t>(100, 7)));
  struct rusage before {}, after {};
  getrusage(RUSAGE_SELF, &before);
  CHECK_THROWS_WITH(core::read_idx(dir + "/liar"), Catch::Contains("truncated"));
  getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // kilobytes
  // Dimensions whose product passes 2^64 (and would wrap to 4) are refused, not multiplied.
  write_raw(dir + "/wrap", idx_bytes({5, 1718039348, 2147418113}, {}));
  CHECK_THROWS_WITH(core::read_idx(dir + "/wrap"), Catch::Contains("more than 16 GiB"));
  write_raw(dir + "/img", idx_bytes({2, 1, 1}, {1, 2}));
  write_raw(dir + "/lab", idx_bytes({3}, {0, 1, 1}));
  CHECK_THROWS_WITH(core::load_idx_dataset(dir + "/img", dir + "/lab", 2),
                    Catch::Contains("2 images") && Catch::Contains("3 labels"));
  write_raw(dir + "/lab9", idx_bytes({2}, {0, 9}));
  CHECK_THROWS_WITH(core::load_idx_dataset(dir + "/img", dir + "/lab9", 2),
                    Catch::Contains("label 9 in row 1"));
}

TEST_CASE("what data will take in memory is judged from headers, and a job over budget refused") {
  const std::string dir = testing::temp_dir();
  // 1000 images of 28 x 28 claimed by a header that is all the file holds: nothing past it read.
  write_gz(dir + "/img.gz", idx_bytes({1000, 28, 28}, {}));
  write_gz(dir + "/lab.gz", idx_bytes({1000}, {}));
  core::DataSourceSpec idx;
  idx.format = "idx";
  idx.images = dir + "/img.gz";
  idx.labels = dir + "/lab.gz";
  // The raw bytes and the floats of 784 pixels, and 10 targets, for each of 1000 examples.
  CHECK(core::source_memory_bytes(idx, 10, {784}) == 1000 * (784 * 5 + 10 * 4));
  write_raw(dir + "/d.csv", "1.5,2.5,0\n3.5,4.5,1\n");
  core::DataSourceSpec csv;
  csv.format = "csv";
  csv.path = dir + "/d.csv";
  // 2 rows judged as 3; the reader holds the values and then the features, and the targets.
  CHECK(core::source_memory_bytes(csv, 2, {2}) == 3 * (2 * 3 + 2) * 4);
  // A header and a blank line are not rows: the rows' own length judges the rest.
  write_raw(dir + "/h.csv", "x,y,label\n\n1.5,2.5,0\n3.5,4.5,1\n");
  csv.path = dir + "/h.csv";
  csv.header = true;
  CHECK(core::source_memory_bytes(csv, 2, {2}) == 4 * (2 * 3 + 2) * 4);
  // An image folder: the class folders' images, as the reader takes them (not other files,
  // nor deeper ones).
  for (const char* f : {"/images/a/1.png", "/images/a/notes.txt", "/images/b/2.JPG",
                        "/images/b/sub/3.png"}) {
    std::filesystem::create_directories(std::filesystem::path(dir + f).parent_path());
    write_raw(dir + f, "x");
  }
  core::DataSourceSpec images;
  images.format = "images";
  images.path = dir + "/images";
  CHECK(core::source_memory_bytes(images, 2, {1, 4, 4}) == 2 * (16 + 2) * 4);

  core::JobSpec job = testing::job_with_model(
      "  input: [784]\n  layers:\n    - output: {units: 10, activation: softmax, loss: mcxent}\n");
  job.data.train = idx;
  core::check_data_memory(job, 4 << 20);  // 3.8 MB: fits
  core::check_data_memory(job, 0);        // no budget
  try {
    core::check_data_memory(job, 1 << 20);
    FAIL("a job over the budget was not refused");
  } catch (const core::UserError& e) {
    CHECK(std::string(e.what()).find("data.train would take about 4 MB in memory, more than the "
                                     "1 MB a job may hold on this node") != std::string::npos);
    CHECK(e.fix().find("job_memory_mb") != std::string::npos);
  }
  job.data.train.format = "packed";  // streamed: not held
  job.data.train.path = dir + "/none-*.dtb";
  core::check_data_memory(job, 1 << 20);
}

TEST_CASE("CSV datasets with a label column, header and errors") {
  const std::string dir = testing::temp_dir();
  testing::write_text(dir + "/a.csv", "f1,f2,label\n1.5,2,1\n-3,4e-1,0\n\n");
  core::CsvOptions options;
  options.header = true;
  options.num_classes = 2;
  core::Dataset d = core::read_csv_dataset(dir + "/a.csv", options);
  REQUIRE(d.size() == 2);
  CHECK(d.features[0] == 1.5f);
  CHECK(d.features[3] == Approx(0.4f));
  CHECK(d.labels == std::vector<int32_t>{1, 0});

  options.label_column = 0;
  testing::write_text(dir + "/b.csv", "2,0.5,0.25\n");
  options.header = false;
  options.num_classes = 3;
  d = core::read_csv_dataset(dir + "/b.csv", options);
  CHECK(d.labels[0] == 2);
  CHECK(d.features[0] == 0.5f);

  testing::write_text(dir + "/ragged.csv", "1,2,0\n1,0\n");
  options.label_column = -1;
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/ragged.csv", options),
                    Catch::Contains("ragged.csv:2") && Catch::Contains("columns"));
  testing::write_text(dir + "/bad.csv", "x,y,label\n1,2,0\n");
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/bad.csv", options),
                    Catch::Contains("header: true"));
  // A refusal names the place, never the cell: a file is not read out to whoever named it.
  testing::write_text(dir + "/secret.csv", "1,2,0\n3,hunter2,1\n");
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/secret.csv", options),
                    Catch::Contains("secret.csv:2: column 1 is not a finite number") &&
                        !Catch::Contains("hunter2"));
  testing::write_text(dir + "/label.csv", "1,2,0\n3,4,s3cret\n");
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/label.csv", options),
                    !Catch::Contains("s3cret"));
}

TEST_CASE("CSV regression labels: as many value columns as the outputs, where label_column says") {
  const std::string dir = testing::temp_dir();
  testing::write_text(dir + "/r.csv", "x0,x1,y0,y1\n1,2,0.5,-1.25\n3,4,2.5,7\n");
  core::CsvOptions options;
  options.header = true;
  options.target_columns = 2;
  core::Dataset d = core::read_csv_dataset(dir + "/r.csv", options);
  REQUIRE(d.size() == 2);
  CHECK(d.num_classes == 0);
  CHECK(d.labels.empty());
  CHECK(d.features.shape() == core::Shape{2, 2});
  CHECK(d.targets.shape() == core::Shape{2, 2});
  CHECK(std::vector<float>(d.targets.data(), d.targets.data() + 4) ==
        std::vector<float>{0.5f, -1.25f, 2.5f, 7.0f});
  CHECK(std::vector<float>(d.features.data(), d.features.data() + 4) ==
        std::vector<float>{1, 2, 3, 4});

  options.label_column = 0;  // the targets first: columns 0 and 1
  d = core::read_csv_dataset(dir + "/r.csv", options);
  CHECK(std::vector<float>(d.targets.data(), d.targets.data() + 4) ==
        std::vector<float>{1, 2, 3, 4});
  CHECK(d.features[0] == 0.5f);

  options.label_column = 3;  // 3 and 4: past the row
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/r.csv", options),
                    Catch::Contains("label_column 3 and the 1 after it") &&
                        Catch::Contains("4 columns"));
  options.label_column = -1;
  options.target_columns = 4;  // no feature left
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/r.csv", options),
                    Catch::Contains("need at least 5") && Catch::Contains("units"));

  // A value where a class number belongs names the regression setting.
  core::CsvOptions classes;
  classes.header = true;
  classes.num_classes = 2;
  CHECK_THROWS_WITH(core::read_csv_dataset(dir + "/r.csv", classes),
                    Catch::Contains("not a class number") && Catch::Contains("labels: regression"));
}

TEST_CASE("scale and standardize normalizers") {
  core::Tensor x({2, 2});
  x[0] = 0;
  x[1] = 255;
  x[2] = 51;
  x[3] = 102;
  core::Normalizer scale = core::Normalizer::of("scale");
  scale.fit(x);
  core::Tensor y = x;
  scale.apply(y);
  CHECK(y[1] == 1.0f);
  CHECK(y[2] == Approx(0.2f));
  core::Normalizer st = core::Normalizer::of("standardize");
  st.fit(x);
  y = x;
  st.apply(y);
  CHECK(y[0] == Approx(-1.0f));  // column 0: values 0 and 51
  CHECK(y[2] == Approx(1.0f));
  CHECK_THROWS_WITH(core::Normalizer::of("minmax"), Catch::Contains("none, scale, standardize or per_channel"));
}

TEST_CASE("shards of one epoch are disjoint and cover the data; epochs reshuffle") {
  core::Dataset d;
  d.features.resize({103, 1});
  for (int i = 0; i < 103; ++i) d.features[i] = static_cast<float>(i);
  std::vector<int32_t> labels(103, 0);
  core::set_class_labels(d, labels, 1, "test");
  std::multiset<int> seen;
  std::vector<int> first_order;
  for (int shard = 0; shard < 3; ++shard) {
    core::MinibatchIterator it(d, 8, 42, shard, 3);
    it.start_epoch(0);
    core::Tensor x, y;
    while (it.next(x, y))
      for (int64_t i = 0; i < x.dim(0); ++i) {
        seen.insert(static_cast<int>(x[i]));
        if (shard == 0) first_order.push_back(static_cast<int>(x[i]));
      }
  }
  REQUIRE(seen.size() == 103);
  CHECK(std::set<int>(seen.begin(), seen.end()).size() == 103);
  core::MinibatchIterator it(d, 8, 42, 0, 3);
  it.start_epoch(1);
  core::Tensor x, y;
  std::vector<int> second_order;
  while (it.next(x, y))
    for (int64_t i = 0; i < x.dim(0); ++i) second_order.push_back(static_cast<int>(x[i]));
  CHECK(second_order.size() == first_order.size());
  CHECK(second_order != first_order);
  it.start_epoch(0);  // same epoch, same seed: same order
  std::vector<int> again;
  while (it.next(x, y))
    for (int64_t i = 0; i < x.dim(0); ++i) again.push_back(static_cast<int>(x[i]));
  CHECK(again == first_order);
}

}  // namespace dtrain
