#pragma once
// CSV datasets: numeric columns, one of them the class label, or (regression) one or more of
// them the target values.
#include <string>

#include "core/data/dataset.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

struct CsvOptions {
  int64_t label_column = -1;  // -1 = last column
  bool header = false;        // skip the first line
  int64_t num_classes = 0;    // > 0: classification with one-hot targets
  // > 0: regression: this many target columns from label_column on (-1: the last ones)
  int64_t target_columns = 0;
  const DataRoots* roots = nullptr;  // a node's data_roots: the file is checked as it is opened
};

// Throws UserError naming the file, line and column of the first bad value.
Dataset read_csv_dataset(const std::string& path, const CsvOptions& options);

// A file name ending in .csv: what inference reads as CSV (the rest as IDX).
bool is_csv_name(const std::string& path);

// Splits one CSV line on commas (no quoting: the data is numeric).
std::vector<std::string> split_csv_line(const std::string& line);

}  // namespace dtrain::core
