#include "core/infer/keyed_examples.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/image_folder.h"
#include "core/layers/layer.h"
#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {
namespace {

void read_csv(const KeyedInputSpec& input, int64_t width, std::vector<float>& values,
              std::vector<std::string>& keys) {
  InputStream opened(input.path, input.roots.get());
  if (!opened.is_open()) throw UserError("cannot open '" + input.path + "'", "check the path");
  std::istream& file = opened.stream();
  std::string line;
  int64_t line_no = 0, row = 0;
  const int64_t expected = width + (input.key_column >= 0 ? 1 : 0);
  while (std::getline(file, line)) {
    ++line_no;
    if ((line_no == 1 && input.header) || line.find_first_not_of(" \r\t") == std::string::npos)
      continue;
    auto cells = split_csv_line(line);
    if (static_cast<int64_t>(cells.size()) != expected)
      throw UserError(input.path + ":" + std::to_string(line_no) + ": " +
                          std::to_string(cells.size()) + " columns, the model needs " +
                          std::to_string(expected),
                      input.key_column >= 0
                          ? "give one key column plus one column per input value"
                          : "give one column per input value (or --key-column N)");
    std::string key = std::to_string(row);
    for (int64_t c = 0; c < expected; ++c) {
      if (c == input.key_column) {
        key = cells[c];
        continue;
      }
      char* end = nullptr;
      float v = std::strtof(cells[c].c_str(), &end);
      if (cells[c].empty() || *end != '\0')
        throw UserError(input.path + ":" + std::to_string(line_no) + ": column " +
                            std::to_string(c) + " is '" + cells[c] + "', not a number",
                        input.header ? "fix the row" : "if line 1 is a header, pass --header");
      values.push_back(v);
    }
    keys.push_back(key);
    ++row;
  }
}

}  // namespace

KeyedExamples read_keyed_examples(const KeyedInputSpec& input, const Shape& example_shape) {
  KeyedExamples in;
  const int64_t width = shape_size(example_shape);
  if (std::filesystem::is_directory(input.path)) {
    ImageFiles files = read_image_files(input.path, example_shape, input.roots.get());
    in.features = std::move(files.features);
    in.keys = std::move(files.paths);
    return in;
  }
  std::vector<float> values;
  if (is_csv_name(input.path)) {
    read_csv(input, width, values, in.keys);
  } else {
    IdxArray idx = read_idx(input.path, input.roots.get());
    const int64_t n = idx.dims[0];
    if (static_cast<int64_t>(idx.values.size()) != n * width)
      throw UserError("'" + input.path + "' examples have " +
                          std::to_string(n ? int64_t(idx.values.size()) / n : 0) +
                          " values, the model needs " + std::to_string(width),
                      "pass inputs shaped like the training data");
    values.assign(idx.values.begin(), idx.values.end());
    for (int64_t i = 0; i < n; ++i) in.keys.push_back(std::to_string(i));
  }
  in.features.resize(with_batch(in.size(), example_shape));
  std::copy(values.begin(), values.end(), in.features.data());
  return in;
}

}  // namespace dtrain::core
