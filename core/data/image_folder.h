#pragma once
// Image-folder data (`format: images`; docs/user-guide.md, "Image data"): one subfolder per class
// holding its images (class_name/*.png, *.jpg, *.jpeg), as torchvision's ImageFolder and DL4J's
// ParentPathLabelGenerator read them. The classes are the subfolders' names in sorted order (the
// model file keeps them, so `infer` prints names); examples are in sorted path order. Pixels
// become features in [0, 255], channels first (CHW), the model's input shape.
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

struct ImageFolderOptions {
  Shape example_shape;        // [channels (1 or 3), height, width]: every image must be this size
  int64_t num_classes = 0;    // the model's outputs: the folder must have that many classes
  bool skip_corrupt = false;  // false: an unreadable image fails the load, naming the file
  // A cluster node's data_roots (null: none): a symbolic link among the class folders or
  // images is refused, and each image is checked against them as it is opened.
  const DataRoots* roots = nullptr;
};

struct ImageFolderReport {
  std::vector<std::string> skipped;  // files skipped as corrupt (with skip_corrupt), with why
};

// Throws UserError naming the folder or file and the fix.
Dataset read_image_folder(const std::string& dir, const ImageFolderOptions& options,
                          ImageFolderReport* report = nullptr);

// Every image under `dir` (at any depth), in order of its path relative to `dir`: inference
// input, keyed by those paths. Throws UserError naming a file that cannot be used.
struct ImageFiles {
  Tensor features;
  std::vector<std::string> paths;
};
ImageFiles read_image_files(const std::string& dir, const Shape& example_shape,
                            const DataRoots* roots = nullptr);
// A .png, .jpg or .jpeg file name (any case): what an image folder's readers take.
bool is_image_name(const std::string& path);

}  // namespace dtrain::core
