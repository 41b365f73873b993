// Image-folder data (core/data/image_folder.h): generated PNG and JPEG files round-trip
// (pixels, labels, class names, also through a model file), and bad folders or files are
// refused naming the file and the fix, or skipped when the source says so.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/data/image_decode.h"
#include "core/data/image_folder.h"
#include "core/io/model_file.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

core::Image pattern(int64_t w, int64_t h, int64_t channels, int seed) {
  core::Image img{w, h, channels, {}};
  for (int64_t i = 0; i < w * h * channels; ++i) img.pixels.push_back(uint8_t((i * 37 + seed * 11) % 251));
  return img;
}

// A smooth gradient: what JPEG keeps well (a high-frequency pattern loses its colour to chroma
// subsampling).
core::Image gradient(int64_t w, int64_t h, int seed) {
  core::Image img{w, h, 3, {}};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) img.pixels.push_back(uint8_t(40 + 10 * x + 12 * y + 30 * c + seed));
  return img;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              std::streamsize(bytes.size()));
}

std::string error_of(const std::string& dir, const core::ImageFolderOptions& options) {
  try {
    core::read_image_folder(dir, options);
    return "";
  } catch (const core::UserError& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("an image folder of PNG and JPEG files round-trips pixels, labels and class names") {
  const std::string dir = testing::temp_dir() + "/images";
  // Three classes, written out of order; RGB 5x4 images (width 5, height 4).
  write_bytes(dir + "/dog/b.png", core::encode_png(pattern(5, 4, 3, 1)));
  write_bytes(dir + "/cat/a.png", core::encode_png(pattern(5, 4, 3, 2)));
  write_bytes(dir + "/cat/z.jpg", core::encode_jpeg(gradient(5, 4, 3), 100));
  write_bytes(dir + "/bird/c.JPEG", core::encode_jpeg(gradient(5, 4, 4), 100));
  write_bytes(dir + "/bird/notes.txt", {'h', 'i'});  // not an image: ignored
  const core::Dataset d = core::read_image_folder(dir, {{3, 4, 5}, 3, false});
  CHECK(d.class_names == std::vector<std::string>{"bird", "cat", "dog"});
  REQUIRE(d.size() == 4);
  CHECK(d.labels == std::vector<int32_t>{0, 1, 1, 2});  // classes sorted, then files sorted
  CHECK(d.example_shape() == core::Shape{3, 4, 5});
  CHECK(d.targets[1 * 3 + 1] == 1.0f);  // one-hot
  // cat/a.png: exact, channels first (CHW) from interleaved RGB.
  const core::Image a = pattern(5, 4, 3, 2);
  const float* row = d.features.row(1);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 20; ++i) CHECK(row[c * 20 + i] == float(a.pixels[size_t(i * 3 + c)]));
  // cat/z.jpg: lossy, but close at quality 100.
  const core::Image z = gradient(5, 4, 3);
  double err = 0;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < 20; ++i)
      err = std::max(err, std::abs(double(d.features.row(2)[c * 20 + i]) - z.pixels[size_t(i * 3 + c)]));
  CHECK(err <= 4);  // a swapped channel or row would be off by 30 or more

  SECTION("gray: colour converted by luminance, one channel") {
    const core::Dataset g = core::read_image_folder(dir, {{1, 4, 5}, 3, false});
    CHECK(g.example_shape() == core::Shape{1, 4, 5});
    CHECK(g.size() == 4);
  }
  SECTION("the class names ride in the model file") {
    core::ModelFile f;
    f.spec_yaml = "name: x";
    f.params = {1, 2};
    f.class_names = d.class_names;
    const std::string path = testing::temp_dir() + "/m.dtm";
    core::write_model_file(path, f);
    CHECK(core::read_model_file(path).class_names == d.class_names);
  }
}

TEST_CASE("bad image folders and files are refused with the file named, or skipped") {
  const std::string dir = testing::temp_dir() + "/images";
  write_bytes(dir + "/a/1.png", core::encode_png(pattern(4, 4, 1, 1)));
  write_bytes(dir + "/b/2.png", core::encode_png(pattern(4, 4, 1, 2)));
  const core::ImageFolderOptions options{{1, 4, 4}, 2, false};
  REQUIRE(error_of(dir, options).empty());

  SECTION("a corrupt image: the load fails naming it, or skips it with corrupt: skip") {
    std::vector<uint8_t> broken = core::encode_png(pattern(4, 4, 1, 3));
    broken.resize(broken.size() / 2);  // truncated
    write_bytes(dir + "/b/3.png", broken);
    write_bytes(dir + "/b/4.jpg", {0xff, 0xd8, 0xff, 0x00, 0x01});
    const std::string message = error_of(dir, options);
    CHECK_THAT(message, Catch::Contains("b/3.png"));
    CHECK_THAT(message, Catch::Contains("corrupt: skip"));
    core::ImageFolderReport report;
    const core::Dataset d = core::read_image_folder(dir, {{1, 4, 4}, 2, true}, &report);
    CHECK(d.size() == 2);
    REQUIRE(report.skipped.size() == 2);
    CHECK_THAT(report.skipped[0], Catch::Contains("b/3.png"));
    CHECK_THAT(report.skipped[1], Catch::Contains("b/4.jpg: a damaged JPEG"));
  }
  SECTION("an image of another size, even when skipping corrupt ones") {
    write_bytes(dir + "/a/big.png", core::encode_png(pattern(6, 4, 1, 1)));
    for (bool skip : {false, true}) {
      const std::string message = error_of(dir, {{1, 4, 4}, 2, skip});
      CHECK_THAT(message, Catch::Contains("a/big.png' is 6x4, the model's input is 4x4"));
      CHECK_THAT(message, Catch::Contains("resize the images"));
    }
  }
  SECTION("a class count that is not the output layer's") {
    const std::string message = error_of(dir, {{1, 4, 4}, 10, false});
    CHECK_THAT(message, Catch::Contains("has 2 class folders, the output layer has 10 units"));
    CHECK_THAT(message, !Catch::Contains("(a, b)"));  // a refusal lists no folder's contents
  }
  SECTION("not a folder, and no images") {
    CHECK_THAT(error_of(dir + "/a/1.png", options), Catch::Contains("is not a folder"));
    const std::string empty = testing::temp_dir() + "/empty";
    fs::create_directories(empty + "/x");
    fs::create_directories(empty + "/y");
    CHECK_THAT(error_of(empty, options), Catch::Contains("holds no readable .png or .jpg images"));
  }
  SECTION("a link inside the folder, where links are refused (a cluster node's job)") {
    const std::string elsewhere = testing::temp_dir() + "/elsewhere";
    write_bytes(elsewhere + "/secret.png", core::encode_png(pattern(4, 4, 1, 5)));
    fs::create_symlink(elsewhere + "/secret.png", dir + "/a/linked.png");
    CHECK(error_of(dir, options).empty());  // on one machine a link is followed
    core::DataRoots roots;
    roots.allowed = {dir};
    const std::string message = error_of(dir, {{1, 4, 4}, 2, false, &roots});
    CHECK_THAT(message, Catch::Contains("a/linked.png' is a symbolic link"));
    fs::remove(dir + "/a/linked.png");
    fs::create_directory_symlink(elsewhere, dir + "/c");  // a class folder that is a link
    CHECK_THAT(error_of(dir, {{1, 4, 4}, 3, false, &roots}), Catch::Contains("/c' is a symbolic link"));
  }
  SECTION("an input shape images cannot have") {
    CHECK_THAT(error_of(dir, {{784}, 2, false}), Catch::Contains("[channels, height, width]"));
  }
}

TEST_CASE("image headers claiming a huge size are refused before any pixel is allocated") {
  // A PNG header saying 100000 x 100000 (10^10 pixels), and a JPEG of a real 64x64 image when
  // 8x8 is expected: both refused from the header.
  std::vector<uint8_t> png = core::encode_png(pattern(2, 2, 1, 0));
  const uint8_t big[8] = {0x00, 0x01, 0x86, 0xa0, 0x00, 0x01, 0x86, 0xa0};
  std::copy(big, big + 8, png.begin() + 16);  // IHDR width, height (the CRC is now wrong too)
  CHECK_THROWS_AS(core::decode_image(png, 1), core::ImageError);
  const std::vector<uint8_t> jpeg = core::encode_jpeg(pattern(64, 64, 3, 0), 90);
  CHECK_THROWS_AS(core::decode_image(jpeg, 3, {8, 8}), core::ImageSizeMismatch);
  CHECK(core::decode_image(jpeg, 3).width == 64);
}

}  // namespace dtrain
