#pragma once
// IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or raw.
#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;  // unsigned-byte payload (type 0x08)
};

// Throws UserError for a missing, truncated or non-IDX file.
// roots: a cluster node's data_roots (null: none), checked against the file as it is opened.
IdxArray read_idx(const std::string& path, const DataRoots* roots = nullptr);
// The dimensions its header declares (checked as read_idx checks them), nothing more read.
std::vector<int64_t> read_idx_dims(const std::string& path, const DataRoots* roots = nullptr);

// images [N, rows, cols] + labels [N] -> features [N, rows*cols] (raw 0..255), one-hot targets.
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int64_t num_classes, const DataRoots* roots = nullptr);

}  // namespace dtrain::core
