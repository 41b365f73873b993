#include "core/spec/spec_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

namespace dtrain::core {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  return "a map";
}

std::string dotted(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
}  // namespace

std::string closest(const std::string& word, const std::vector<std::string>& allowed) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : allowed) {
    size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string SpecReader::location(const YAML::Node& node) const {
  auto mark = node.Mark();
  if (mark.line < 0) return source_name_;
  return source_name_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

void SpecReader::fail(const YAML::Node& at, const std::string& path, const std::string& what,
                      const std::string& fix) const {
  throw SpecError(location(at), path.empty() ? what : path + ": " + what, fix);
}

void SpecReader::expect_map(const YAML::Node& node, const std::string& path,
                            const std::vector<std::string>& allowed) const {
  if (!node.IsMap())
    fail(node, path, "expected a map of settings, got " + describe(node),
         "write it as 'key: value' lines indented under '" + path + ":'; allowed keys: " +
             join(allowed));
  // yaml-cpp keeps both entries of a key written twice and lookups see only the first, so a
  // second 'sync:' line would be ignored without a word: refuse it instead.
  std::map<std::string, YAML::Mark> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (refuse_repeated_keys_) {
      const auto [first, fresh] = seen.emplace(key, it->first.Mark());
      if (!fresh)
        fail(it->first, path, "'" + key + "' is set twice (also at line " +
                                  std::to_string(first->second.line + 1) + ")",
             "keep one '" + key + ":' entry and delete the other");
    }
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string near = closest(key, allowed);
    fail(it->first, path, "unknown key '" + key + "'",
         (near.empty() ? "" : "did you mean '" + near + "'? ") + "allowed keys: " + join(allowed));
  }
}

std::string SpecReader::single_key(const YAML::Node& node, const std::string& path,
                                   const std::vector<std::string>& allowed) const {
  if (!node.IsMap() || node.size() != 1)
    fail(node, path, "expected one entry such as 'dense: {units: 128}', got " + describe(node),
         "start each list item with one of: " + join(allowed));
  const std::string key = node.begin()->first.Scalar();
  if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
    std::string near = closest(key, allowed);
    fail(node.begin()->first, path, "unknown layer type '" + key + "'",
         (near.empty() ? "" : "did you mean '" + near + "'? ") + "layer types: " + join(allowed));
  }
  return key;
}

int64_t SpecReader::integer(const YAML::Node& map, const std::string& key,
                            const std::string& path, std::optional<int64_t> fallback, int64_t min,
                            int64_t max) const {
  const YAML::Node node = map[key];
  const std::string where = dotted(path, key);
  const std::string range = "an integer in [" + std::to_string(min) + ", " +
                            (max == INT64_MAX ? std::string("...") : std::to_string(max)) + "]";
  if (!node.IsDefined() || node.IsNull()) {
    if (fallback) return *fallback;
    fail(map, where, "missing required setting", "add '" + key + ": <" + range + ">'");
  }
  if (!node.IsScalar()) fail(node, where, "expected " + range + ", got " + describe(node), "");
  const std::string& s = node.Scalar();
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    fail(node, where, "expected " + range + ", got " + describe(node),
         "write a whole number such as " + std::to_string(std::max<int64_t>(min, 1)));
  if (value < min || value > max)
    fail(node, where, "value " + s + " is out of range", "use " + range);
  return value;
}

double SpecReader::number(const YAML::Node& map, const std::string& key, const std::string& path,
                          std::optional<double> fallback, double min, double max,
                          bool min_exclusive) const {
  const YAML::Node node = map[key];
  const std::string where = dotted(path, key);
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const std::string range = std::string("a number ") + (min_exclusive ? "> " : ">= ") + fmt(min) +
                            (std::isinf(max) ? "" : " and <= " + fmt(max));
  if (!node.IsDefined() || node.IsNull()) {
    if (fallback) return *fallback;
    fail(map, where, "missing required setting", "add '" + key + ": <" + range + ">'");
  }
  if (!node.IsScalar()) fail(node, where, "expected " + range + ", got " + describe(node), "");
  const std::string& s = node.Scalar();
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(value))
    fail(node, where, "expected " + range + ", got " + describe(node),
         "write a number such as 0.001 or 1.0e-3");
  if (value < min || (min_exclusive && value == min) || value > max)
    fail(node, where, "value " + s + " is out of range", "use " + range);
  return value;
}

std::string SpecReader::choice(const YAML::Node& map, const std::string& key,
                               const std::string& path, std::optional<std::string> fallback,
                               const std::vector<std::string>& allowed) const {
  const YAML::Node node = map[key];
  const std::string where = dotted(path, key);
  if (!node.IsDefined() || node.IsNull()) {
    if (fallback) return *fallback;
    fail(map, where, "missing required setting", "add '" + key + ": " + allowed.front() +
                                                     "' (one of: " + join(allowed) + ")");
  }
  if (!node.IsScalar()) fail(node, where, "expected one of " + join(allowed) + ", got " +
                                              describe(node), "");
  const std::string value = node.Scalar();
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  std::string near = closest(value, allowed);
  fail(node, where, "unknown value '" + value + "'",
       (near.empty() ? "" : "did you mean '" + near + "'? ") + "use one of: " + join(allowed));
}

std::string SpecReader::text(const YAML::Node& map, const std::string& key,
                             const std::string& path, std::optional<std::string> fallback) const {
  const YAML::Node node = map[key];
  const std::string where = dotted(path, key);
  if (!node.IsDefined() || node.IsNull()) {
    if (fallback) return *fallback;
    fail(map, where, "missing required setting", "add '" + key + ": <text>'");
  }
  if (!node.IsScalar() || node.Scalar().empty())
    fail(node, where, "expected text, got " + describe(node), "");
  return node.Scalar();
}

bool SpecReader::boolean(const YAML::Node& map, const std::string& key, const std::string& path,
                         bool fallback) const {
  const YAML::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return fallback;
  const std::string s = node.IsScalar() ? node.Scalar() : "";
  if (s == "true" || s == "yes") return true;
  if (s == "false" || s == "no") return false;
  fail(node, dotted(path, key), "expected true or false, got " + describe(node), "");
}

std::vector<int64_t> SpecReader::int_list(const YAML::Node& map, const std::string& key,
                                          const std::string& path, std::vector<int64_t> fallback,
                                          size_t count, int64_t min, int64_t max) const {
  const YAML::Node node = map[key];
  const std::string where = dotted(path, key);
  if (!node.IsDefined() || node.IsNull()) return fallback;
  std::vector<int64_t> values;
  if (node.IsScalar()) {
    int64_t v = integer(map, key, path, std::nullopt, min, max);
    return std::vector<int64_t>(count, v);
  }
  if (!node.IsSequence() || node.size() != count)
    fail(node, where, "expected a list of " + std::to_string(count) + " integers, got " +
                          describe(node),
         "write e.g. [" + std::to_string(std::max<int64_t>(min, 1)) + ", " +
             std::to_string(std::max<int64_t>(min, 1)) + "]");
  for (size_t i = 0; i < count; ++i) {
    const YAML::Node item = node[i];
    if (!item.IsScalar()) fail(item, where, "expected integers, got " + describe(item), "");
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.Scalar().c_str(), &end, 10);
    if (item.Scalar().empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
      fail(item, where, "expected integers from " + std::to_string(min) + " to " +
                            std::to_string(max) + ", got " + describe(item), "");
    values.push_back(v);
  }
  return values;
}

}  // namespace dtrain::core
