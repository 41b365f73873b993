#include "core/data/csv_reader.h"

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/util/error.h"
#include "core/util/input_file.h"

namespace dtrain::core {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    std::string cell = line.substr(start, comma == std::string::npos ? std::string::npos
                                                                     : comma - start);
    while (!cell.empty() && (cell.back() == '\r' || cell.back() == ' ')) cell.pop_back();
    size_t lead = cell.find_first_not_of(' ');
    out.push_back(lead == std::string::npos ? "" : cell.substr(lead));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

// Where the labels are in a row of `columns`: [first, first + count).
struct LabelColumns {
  int64_t first = 0, count = 1;
  bool holds(int64_t c) const { return c >= first && c < first + count; }
};

LabelColumns label_columns(const std::string& path, int64_t columns, const CsvOptions& options) {
  LabelColumns l;
  l.count = options.target_columns > 0 ? options.target_columns : 1;
  if (columns < l.count + 1)
    throw UserError(path + ": rows have " + std::to_string(columns) + " columns, need at least " +
                        std::to_string(l.count + 1) + " (features and " +
                        std::to_string(l.count) + (l.count > 1 ? " labels)" : " label)"),
                    l.count > 1 ? "the output layer's units are the number of target columns"
                                : "separate values with commas");
  l.first = options.label_column < 0 ? columns - l.count : options.label_column;
  if (l.first + l.count > columns)
    throw UserError(path + ": label_column " + std::to_string(l.first) +
                        (l.count > 1 ? " and the " + std::to_string(l.count - 1) + " after it" : "") +
                        " but rows have " + std::to_string(columns) + " columns",
                    "label_column counts from 0; -1 means the last column(s)");
  return l;
}

}  // namespace

bool is_csv_name(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
}

Dataset read_csv_dataset(const std::string& path, const CsvOptions& options) {
  InputStream file(path, options.roots);
  if (!file.is_open()) throw UserError("cannot open CSV file '" + path + "'", "check the path");
  std::istream& in = file.stream();
  const bool regression = options.target_columns > 0;
  std::vector<float> values, targets;
  std::vector<int32_t> labels;
  int64_t columns = -1, line_no = 0, rows = 0;
  LabelColumns label;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 && options.header) continue;
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    auto cells = split_csv_line(line);
    const int64_t n = static_cast<int64_t>(cells.size());
    if (columns < 0) {
      columns = n;
      label = label_columns(path, columns, options);
    } else if (n != columns) {
      throw UserError(path + ":" + std::to_string(line_no) + ": " + std::to_string(n) +
                          " columns, earlier rows have " + std::to_string(columns),
                      "make every row the same width");
    }
    for (int64_t c = 0; c < columns; ++c) {
      char* end = nullptr;
      const std::string& cell = cells[c];
      double v = std::strtod(cell.c_str(), &end);
      if (cell.empty() || *end != '\0' || !std::isfinite(v))
        // The cell itself is not shown: a refusal must not read a file out to whoever named it
        // (docs/operations.md, "Who may do what").
        throw UserError(path + ":" + std::to_string(line_no) + ": column " + std::to_string(c) +
                            " is not a finite number",
                        options.header || line_no != 1
                            ? "fix or remove the row"
                            : "if the first line is a header, set 'header: true'");
      if (!label.holds(c)) {
        values.push_back(static_cast<float>(v));
      } else if (regression) {
        targets.push_back(static_cast<float>(v));
      } else {
        if (v != std::floor(v) || std::fabs(v) > 1e9)
          throw UserError(path + ":" + std::to_string(line_no) + ": the label in column " +
                              std::to_string(c) + " is not a class number",
                          "labels must be integers 0..classes-1; for values set "
                          "'labels: regression'");
        labels.push_back(static_cast<int32_t>(v));
      }
    }
    ++rows;
  }
  if (rows == 0) throw UserError("'" + path + "' has no data rows", "check the file");
  Dataset d;
  d.features.resize({rows, columns - label.count});
  std::copy(values.begin(), values.end(), d.features.data());
  if (!regression) {
    set_class_labels(d, std::move(labels), options.num_classes, path);
    return d;
  }
  d.targets.resize({rows, label.count});
  std::copy(targets.begin(), targets.end(), d.targets.data());
  return d;
}

}  // namespace dtrain::core
