#include "core/data/image_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "core/data/image_decode.h"
#include "core/layers/layer.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {
namespace {

namespace fs = std::filesystem;

bool is_image_file(const fs::path& p) { return is_image_name(p.string()); }

// The entries of `dir` (listed there), named as under `shown` in errors.
std::vector<std::string> sorted_entries(const fs::path& dir, const fs::path& shown,
                                        bool directories, bool refuse_links) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (refuse_links && e.is_symlink(ec))
      throw UserError("'" + (shown / e.path().filename()).string() +
                          "' is a symbolic link; a cluster node reads no "
                          "links inside an image folder (they could lead outside its data_roots)",
                      "copy what it points at into the folder");
    const bool is_dir = e.is_directory(ec);
    if (directories ? is_dir : (!is_dir && is_image_file(e.path())))
      out.push_back(e.path().filename().string());
  }
  if (ec)
    throw UserError("cannot list '" + shown.string() + "': " + ec.message(),
                    "check the path and its permissions");
  std::sort(out.begin(), out.end());
  return out;
}

// With roots: a link put in the file's place after the folder was listed is not followed, and
// the file opened must lie inside them (a folder swapped for a link is caught so).
std::vector<uint8_t> file_bytes(const fs::path& path, const fs::path& shown,
                                const DataRoots* roots) {
  if (!roots) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ImageError("cannot be opened");
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }
  int fd = -1;
  try {
    fd = open_input(path.string(), roots, O_NOFOLLOW);
  } catch (const UserError&) {  // named as the caller knows the file, not by its descriptor
    const auto [what, fix] = roots->refusal(shown.string());
    throw UserError(what, fix);
  }
  if (fd < 0) throw ImageError(errno == ELOOP ? "is a symbolic link" : "cannot be opened");
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;)
    bytes.insert(bytes.end(), buffer, buffer + n);
  ::close(fd);
  return bytes;
}

// The roots resolved once for a whole folder's files; none where nothing confines.
std::optional<DataRoots> pin(const DataRoots* roots) {
  if (!roots || !roots->confines()) return std::nullopt;
  return roots->pinned();
}

// HWC bytes -> CHW floats of one example.
void to_features(const Image& img, float* out) {
  const int64_t plane = img.width * img.height;
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t i = 0; i < plane; ++i)
      out[c * plane + i] = img.pixels[size_t(i * img.channels + c)];
}

void check_shape(const Shape& shape) {
  if (shape.size() != 3 || (shape[0] != 1 && shape[0] != 3))
    throw UserError("image data needs model.input [channels, height, width] with 1 or 3 "
                    "channels, got " + shape_string(shape),
                    "set model.input to e.g. [3, 32, 32] (RGB) or [1, 28, 28] (gray)");
}

// One file into one example's features (`file` read, `shown` named in errors). An image of
// another size is the user's mistake, not damage: UserError. A damaged one: ImageError.
void read_example(const fs::path& file, const fs::path& shown, const Shape& shape, float* out,
                  const DataRoots* roots = nullptr) {
  try {
    to_features(decode_image(file_bytes(file, shown, roots), int(shape[0]), {shape[2], shape[1]}),
                out);
  } catch (const ImageSizeMismatch& e) {
    throw UserError("image '" + shown.string() + "' is " + std::to_string(e.width) + "x" +
                        std::to_string(e.height) + ", the model's input is " +
                        std::to_string(shape[2]) + "x" + std::to_string(shape[1]),
                    "resize the images to the model's input, or change model.input");
  }
}

}  // namespace

bool is_image_name(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

Dataset read_image_folder(const std::string& dir, const ImageFolderOptions& options,
                          ImageFolderReport* report) {
  const Shape& shape = options.example_shape;
  check_shape(shape);
  const std::optional<DataRoots> pinned = pin(options.roots);  // once for every file
  const DataRoots* roots = pinned ? &*pinned : nullptr;
  const InputFolder folder(dir, roots);
  const fs::path listed = folder.listing_path();
  std::error_code ec;
  if (!fs::is_directory(listed, ec))
    throw UserError("'" + dir + "' is not a folder",
                    "point path at a folder with one subfolder of images per class");
  const bool refuse_links = roots != nullptr;
  const std::vector<std::string> classes = sorted_entries(listed, dir, true, refuse_links);
  if (int64_t(classes.size()) != options.num_classes)
    throw UserError("'" + dir + "' has " + std::to_string(classes.size()) +
                        " class folders, the output layer has " +
                        std::to_string(options.num_classes) + " units",
                    "make the output layer's units the number of classes, or fix the folder");
  // Every file first, so the features are decoded straight into their tensor (one copy of the
  // data in memory, not two).
  std::vector<std::pair<fs::path, int32_t>> files;  // relative to the folder
  for (size_t c = 0; c < classes.size(); ++c)
    for (const std::string& name :
         sorted_entries(listed / classes[c], fs::path(dir) / classes[c], false, refuse_links))
      files.push_back({fs::path(classes[c]) / name, int32_t(c)});
  Dataset data;
  data.features.resize(with_batch(int64_t(files.size()), shape));
  std::vector<int32_t> labels;
  for (const auto& [relative, label] : files) {
    const fs::path file = fs::path(dir) / relative;
    try {
      read_example(listed / relative, file, shape, data.features.row(int64_t(labels.size())),
                   roots);
    } catch (const ImageError& e) {
      if (!options.skip_corrupt)
        throw UserError("image '" + file.string() + "': " + e.what(),
                        "replace or remove the file, or set 'corrupt: skip' on the data source");
      if (report) report->skipped.push_back(file.string() + ": " + e.what());
      continue;
    }
    labels.push_back(label);
  }
  if (labels.empty())
    throw UserError("'" + dir + "' holds no readable .png or .jpg images",
                    "put each class's images in its own subfolder");
  data.features.resize(with_batch(int64_t(labels.size()), shape));  // without the skipped ones
  set_class_labels(data, std::move(labels), options.num_classes, dir);
  data.class_names = classes;
  return data;
}

ImageFiles read_image_files(const std::string& dir, const Shape& example_shape,
                            const DataRoots* given_roots) {
  check_shape(example_shape);
  const std::optional<DataRoots> pinned = pin(given_roots);  // once for every file
  const DataRoots* roots = pinned ? &*pinned : nullptr;
  const InputFolder folder(dir, roots);
  const fs::path listed = folder.listing_path();
  std::vector<std::string> paths;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(listed, ec), end; !ec && it != end; it.increment(ec))
    if (!it->is_directory(ec) && is_image_file(it->path()))
      paths.push_back(it->path().lexically_relative(listed).string());
  if (ec)
    throw UserError("cannot list '" + dir + "': " + ec.message(), "check the path and its permissions");
  if (paths.empty())
    throw UserError("'" + dir + "' holds no .png or .jpg images", "check the folder");
  std::sort(paths.begin(), paths.end());
  ImageFiles out;
  out.features.resize(with_batch(int64_t(paths.size()), example_shape));
  const int64_t row = shape_size(example_shape);
  for (size_t i = 0; i < paths.size(); ++i) {
    const fs::path file = fs::path(dir) / paths[i];
    try {
      read_example(listed / paths[i], file, example_shape, out.features.data() + int64_t(i) * row,
                   roots);
    } catch (const ImageError& e) {
      throw UserError("image '" + file.string() + "': " + e.what(), "replace or remove the file");
    }
  }
  out.paths = std::move(paths);
  return out;
}

}  // namespace dtrain::core
