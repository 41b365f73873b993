// A node's data_roots (core/util/data_roots.h, core/util/input_file.h): paths are checked by
// their resolved place, a pattern's folder may not have wildcards, and every reader of job data
// checks the file it opened, as the kernel resolved it, so a link inside the roots that leads
// out (planted after any earlier check of the name) is refused by name and nothing of the file
// it leads to is read or repeated in the error; the parser gives the spec's sources and
// init_from the node's roots, so a swap after the spec was checked is caught when training
// reads them.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <filesystem>

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/image_decode.h"
#include "core/data/image_folder.h"
#include "core/data/packed_file.h"
#include "core/infer/keyed_examples.h"
#include "core/io/model_file.h"
#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/init_from.h"
#include "core/train/training_data.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "tests/test_util.h"

using namespace dtrain;
namespace fs = std::filesystem;

namespace {

const std::string kOutside = "is outside the folders the nodes read job data from";

// A folder of data roots with a file inside and a secret outside, each linked from inside.
struct Roots {
  std::string dir = testing::temp_dir();
  std::string data = dir + "/data", secret_dir = dir + "/secret";
  core::DataRoots roots;
  Roots() {
    fs::create_directories(data);
    fs::create_directories(secret_dir);
    roots.allowed = {data};
    testing::write_text(data + "/fine.csv", "1,2,0\n3,4,1\n");
    testing::write_text(secret_dir + "/shadow.csv", "root-password-hash,2,0\n");
    fs::create_symlink(secret_dir + "/shadow.csv", data + "/linked.csv");
    fs::create_symlink(secret_dir, data + "/linked-folder");  // a folder leading out
  }
  std::string error_of(const std::function<void()>& read) const {
    try {
      read();
    } catch (const core::UserError& e) {
      return e.what();
    }
    return "(read)";
  }
};

// Raw IDX bytes: unsigned bytes of `dims`, all zero.
std::string idx_bytes(const std::vector<uint32_t>& dims) {
  std::string b{0, 0, 8, char(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(char((d >> s) & 0xFF));
    n *= d;
  }
  return b + std::string(n, '\0');
}

}  // namespace

TEST_CASE("paths and patterns are checked by where they lead") {
  Roots r;
  CHECK_NOTHROW(r.roots.require({r.data + "/fine.csv", ""}));
  CHECK_THAT(r.error_of([&] { r.roots.require({r.data + "/fine.csv", r.data + "/linked.csv"}); }),
             Catch::Contains("'" + r.data + "/linked.csv' " + kOutside));
  CHECK_THAT(r.error_of([&] { r.roots.require(r.data + "/../secret/shadow.csv"); }),
             Catch::Contains(kOutside));
  CHECK(core::pattern_folder(r.data + "/part-*.dtb") == r.data);
  CHECK_THAT(r.error_of([&] { core::pattern_folder(r.data + "/*/part-*.dtb"); }),
             Catch::Contains("has wildcards in its folder"));
  CHECK_NOTHROW(core::DataRoots{}.require("/etc/passwd"));  // no roots: a run on one machine
}

TEST_CASE("the file opened is what is checked, wherever a link along its path leads") {
  Roots r;
  for (const std::string& name : {"/fine.csv", "/linked.csv", "/linked-folder/shadow.csv"}) {
    const int fd = ::open((r.data + name).c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(r.roots.allows_opened(fd) == (name == std::string("/fine.csv")));
    ::close(fd);
  }
  CHECK(core::open_input(r.data + "/missing.csv", &r.roots) == -1);  // errno for the caller
  CHECK_THAT(r.error_of([&] { core::open_input(r.data + "/linked-folder/shadow.csv", &r.roots); }),
             Catch::Contains(kOutside));
}

TEST_CASE("roots pinned for one folder's files check as the roots do, and still confine") {
  Roots r;
  fs::create_symlink(r.data, r.dir + "/data-link");  // a root given through a link
  fs::create_symlink(r.dir + "/loop-b", r.dir + "/loop-a");  // a root that cannot resolve
  fs::create_symlink(r.dir + "/loop-a", r.dir + "/loop-b");
  core::DataRoots through_link;
  // A link, a folder not made yet (it stays as written) and a loop (it holds nothing).
  through_link.allowed = {r.dir + "/data-link", r.dir + "/later", r.dir + "/loop-a"};
  const core::DataRoots pinned = through_link.pinned();
  CHECK(pinned.resolved);
  CHECK(pinned.allowed == std::vector<std::string>{fs::canonical(r.data).string(),
                                                   fs::weakly_canonical(r.dir + "/later").string()});
  for (const std::string& name : {"/fine.csv", "/linked.csv", "/linked-folder/shadow.csv"}) {
    const int fd = ::open((r.data + name).c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(pinned.allows_opened(fd) == through_link.allows_opened(fd));
    CHECK(pinned.allows_opened(fd) == (name == std::string("/fine.csv")));
    ::close(fd);
  }
  // Refusals name the roots as configured, not where their links lead.
  CHECK_THAT(pinned.refusal("/etc/passwd").first, Catch::Contains(r.dir + "/data-link"));
  // Pinned roots of which none resolves still confine: nothing is allowed.
  core::DataRoots loop_only;
  loop_only.allowed = {r.dir + "/loop-a"};
  const core::DataRoots none = loop_only.pinned();
  CHECK(none.allowed.empty());
  CHECK(none.confines());
  CHECK_FALSE(none.allows(r.data + "/fine.csv"));
}

TEST_CASE("every reader of job data refuses a file that leads out of the roots, unread") {
  Roots r;
  core::CsvOptions csv;
  csv.num_classes = 2;
  csv.roots = &r.roots;
  CHECK(core::read_csv_dataset(r.data + "/fine.csv", csv).size() == 2);
  for (const std::string& name : {"/linked.csv", "/linked-folder/shadow.csv"}) {
    const std::string e = r.error_of([&] { core::read_csv_dataset(r.data + name, csv); });
    CHECK_THAT(e, Catch::Contains("'" + r.data + name + "' " + kOutside));
    CHECK_THAT(e, !Catch::Contains("not a finite number"));  // nothing of it was read
  }
  // Without roots (one machine) the same file is read: its first cell is what is wrong.
  csv.roots = nullptr;
  CHECK_THAT(r.error_of([&] { core::read_csv_dataset(r.data + "/linked.csv", csv); }),
             Catch::Contains("column 0 is not a finite number"));

  core::KeyedInputSpec keyed{r.data + "/linked.csv", -1, false,
                             std::make_shared<const core::DataRoots>(r.roots)};
  CHECK_THAT(r.error_of([&] { core::read_keyed_examples(keyed, {3}); }), Catch::Contains(kOutside));

  testing::write_text(r.secret_dir + "/images-idx3", idx_bytes({2, 2, 2}));
  testing::write_text(r.data + "/labels-idx1", idx_bytes({2}));
  const std::string idx = r.data + "/linked-folder/images-idx3";
  CHECK_THAT(r.error_of([&] { core::load_idx_dataset(idx, r.data + "/labels-idx1", 2, &r.roots); }),
             Catch::Contains("'" + idx + "' " + kOutside));
  CHECK_THAT(r.error_of([&] { core::read_idx_dims(idx, &r.roots); }), Catch::Contains(kOutside));
  CHECK(core::load_idx_dataset(idx, r.data + "/labels-idx1", 2).size() == 2);  // no roots

  testing::write_text(r.secret_dir + "/part-0.dtb", "not a packed file");
  const std::string packed = r.data + "/linked-folder/part-0.dtb";
  const std::string e = r.error_of(
      [&] { core::PackedSource(std::vector<std::string>{packed}, core::PackedCoverage::kPart, &r.roots); });
  CHECK_THAT(e, Catch::Contains(kOutside));
  CHECK_THAT(e, !Catch::Contains("not a packed batch file"));
}

// The attack the opened-file check is for: the spec's paths pass the parser's check by name;
// then, before the node reads them, a folder on the path is swapped for a link leading out.
TEST_CASE("a folder swapped for a link after the spec was checked: training data and init_from "
          "are refused, unread") {
  Roots r;
  fs::create_directories(r.data + "/job");
  testing::write_text(r.data + "/job/train.csv", "1,2,0\n3,4,1\n");
  core::ModelFile saved;
  saved.spec_yaml = "name: t\nmodel:\n  input: [2]\n  layers:\n"
                    "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
                    "data:\n  train: {format: csv, path: none.csv}\n";
  saved.params.assign(6, 0.5f);
  core::write_model_file(r.data + "/job/start.dtm", saved);
  core::SpecParseOptions options;
  options.base_dir = r.data;
  options.data_roots = r.roots;
  const core::JobSpec job = core::parse_job_spec_text(
      "name: t\nmodel:\n  input: [2]\n  init_from: job/start.dtm\n  layers:\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "data:\n  train: {format: csv, path: job/train.csv}\n",
      "job.yaml", options);
  REQUIRE(job.data.train.roots);
  REQUIRE(job.model.init_from_roots);
  CHECK(core::load_training_data(job).train.size() == 2);  // as checked: read
  // Swapped: the same names now lead to the secret folder, which holds files of those names.
  fs::rename(r.data + "/job", r.data + "/job-was");
  fs::create_symlink(r.secret_dir, r.data + "/job");
  fs::copy_file(r.secret_dir + "/shadow.csv", r.secret_dir + "/train.csv");
  fs::copy_file(r.data + "/job-was/start.dtm", r.secret_dir + "/start.dtm");
  const std::string e = r.error_of([&] { core::load_training_data(job); });
  CHECK_THAT(e, Catch::Contains("'" + r.data + "/job/train.csv' " + kOutside));
  CHECK_THAT(e, !Catch::Contains("not a finite number"));
  core::Model model(job.model);
  CHECK_THAT(r.error_of([&] { core::init_from_model(job, model); }),
             Catch::Contains("'" + r.data + "/job/start.dtm' " + kOutside));
  // A FIFO planted where a file was checked is never opened (opening one for reading would
  // wait for a writer for ever).
  fs::remove(r.data + "/job");
  fs::create_directories(r.data + "/job");
  REQUIRE(::mkfifo((r.data + "/job/train.csv").c_str(), 0600) == 0);
  CHECK(core::open_input(r.data + "/job/train.csv", &r.roots) == -1);
  CHECK(errno == EINVAL);
}

TEST_CASE("an image folder that leads out of the roots is refused before it is listed") {
  Roots r;
  for (const char* image : {"/imgs/a/secret-name.png", "/imgs/b/other-secret.png"}) {
    fs::create_directories(fs::path(r.secret_dir + image).parent_path());
    core::Image img;
    img.width = img.height = 4;
    img.channels = 1;
    img.pixels.assign(16, 128);
    const std::vector<uint8_t> png = core::encode_png(img);
    testing::write_text(r.secret_dir + image, std::string(png.begin(), png.end()));
  }
  fs::create_symlink(r.secret_dir + "/imgs", r.data + "/imgs");  // or swapped in after a check
  const std::string folder = r.data + "/imgs";
  for (const std::string& e :
       {r.error_of([&] { core::read_image_folder(folder, {{1, 4, 4}, 2, false, &r.roots}); }),
        r.error_of([&] { core::read_image_files(folder, {1, 4, 4}, &r.roots); })}) {
    CHECK_THAT(e, Catch::Contains("'" + folder + "' " + kOutside));
    CHECK_THAT(e, !Catch::Contains("secret"));  // no name from inside it
  }
  CHECK(core::read_image_folder(folder, {{1, 4, 4}, 2, false, nullptr}).size() == 2);  // no roots
}
