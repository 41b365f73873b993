#pragma once
// Typed access to YAML nodes that turns every problem into a SpecError naming the file, line,
// column, the key's dotted path, what was found and what is allowed.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace dtrain::core {

class SpecError : public UserError {
 public:
  SpecError(const std::string& location, const std::string& what_happened, const std::string& fix)
      : UserError(location + ": " + what_happened, fix), location_(location) {}
  const std::string& location() const { return location_; }

 private:
  std::string location_;
};

class SpecReader {
 public:
  // refuse_repeated_keys: expect_map refuses a key set twice (yaml-cpp keeps both entries).
  explicit SpecReader(std::string source_name, bool refuse_repeated_keys = true)
      : source_name_(std::move(source_name)), refuse_repeated_keys_(refuse_repeated_keys) {}

  std::string location(const YAML::Node& node) const;
  [[noreturn]] void fail(const YAML::Node& at, const std::string& path, const std::string& what,
                         const std::string& fix) const;

  // `node` must be a map whose keys are all in `allowed` (a typo gets a "did you mean").
  void expect_map(const YAML::Node& node, const std::string& path,
                  const std::vector<std::string>& allowed) const;
  // The single key of a one-entry map such as `- dense: {...}`.
  std::string single_key(const YAML::Node& node, const std::string& path,
                         const std::vector<std::string>& allowed) const;

  int64_t integer(const YAML::Node& map, const std::string& key, const std::string& path,
                  std::optional<int64_t> fallback, int64_t min, int64_t max) const;
  double number(const YAML::Node& map, const std::string& key, const std::string& path,
                std::optional<double> fallback, double min, double max, bool min_exclusive) const;
  std::string choice(const YAML::Node& map, const std::string& key, const std::string& path,
                     std::optional<std::string> fallback,
                     const std::vector<std::string>& allowed) const;
  std::string text(const YAML::Node& map, const std::string& key, const std::string& path,
                   std::optional<std::string> fallback) const;
  bool boolean(const YAML::Node& map, const std::string& key, const std::string& path,
               bool fallback) const;
  // A list of `count` positive integers, or one integer repeated (kernel: 5 == [5, 5]).
  std::vector<int64_t> int_list(const YAML::Node& map, const std::string& key,
                                const std::string& path, std::vector<int64_t> fallback,
                                size_t count, int64_t min,
                                int64_t max = int64_t(1) << 24) const;

  const std::string& source_name() const { return source_name_; }

 private:
  std::string source_name_;
  bool refuse_repeated_keys_;
};

std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");
// The allowed name closest to `word` by edit distance, or "" if none is close.
std::string closest(const std::string& word, const std::vector<std::string>& allowed);

}  // namespace dtrain::core
