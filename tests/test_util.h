#pragma once
// Helpers shared by the unit tests: temporary directories and spec snippets.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/spec/job_spec_parser.h"

namespace dtrain::testing {

// A fresh directory under TEST_TMPDIR (Bazel) or /tmp, removed by the OS/Bazel afterwards.
inline std::string temp_dir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/dtrain-test-XXXXXX";
  char* made = mkdtemp(templ.data());
  if (!made) std::abort();
  return made;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// dir/train.csv: 512 rows of 4 features (seeded), two classes separated by the features' sum.
inline std::string write_separable_csv(const std::string& dir) {
  const std::string path = dir + "/train.csv";
  std::ofstream out(path);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.f, 1.f);
  for (int i = 0; i < 512; ++i) {
    float x[4], sum = 0;
    for (float& v : x) sum += v = noise(rng);
    out << x[0] << "," << x[1] << "," << x[2] << "," << x[3] << "," << (sum > 0 ? 1 : 0) << "\n";
  }
  return path;
}

// ||a - b|| / ||b||: how far one replica (or result) is from another.
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Parses a model section (YAML) wrapped into a minimal job; data files are not checked.
inline core::JobSpec job_with_model(const std::string& model_yaml, const std::string& extra = "") {
  std::string text = "name: t\nmodel:\n" + model_yaml +
                     "data:\n  train: {format: csv, path: none.csv}\n" + extra;
  core::SpecParseOptions options;
  options.check_files = false;
  return core::parse_job_spec_text(text, "test.yaml", options);
}

}  // namespace dtrain::testing
