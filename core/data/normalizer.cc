#include "core/data/normalizer.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace dtrain::core {

Normalizer Normalizer::of(const std::string& name) {
  Normalizer n;
  if (name == "scale") n.kind_ = Kind::kScale;
  else if (name == "standardize") n.kind_ = Kind::kStandardize;
  else if (name == "per_channel") n.kind_ = Kind::kPerChannel;
  else if (name != "none")
    throw UserError("unknown normalizer '" + name + "'",
                    "use none, scale, standardize or per_channel");
  return n;
}

std::string Normalizer::name() const {
  switch (kind_) {
    case Kind::kScale: return "scale";
    case Kind::kStandardize: return "standardize";
    case Kind::kPerChannel: return "per_channel";
    default: return "none";
  }
}

Normalizer Normalizer::restore(Kind kind, std::vector<float> values) {
  Normalizer n;
  n.kind_ = kind;
  n.values_ = std::move(values);
  return n;
}

namespace {

// Channels of the examples in x: C of [N, C, H, W], else every feature is its own.
int64_t channels_of(const Tensor& x) { return x.rank() == 4 ? x.dim(1) : x.row_size(); }

}  // namespace

void Normalizer::fit(const Tensor& x) {
  const int64_t rows = x.dim(0), cols = x.row_size();
  if (kind_ == Kind::kPerChannel) {
    const int64_t channels = channels_of(x), plane = cols / channels;
    std::vector<double> sum(size_t(channels), 0.0), sq(size_t(channels), 0.0);
    for (int64_t i = 0; i < x.size(); ++i) {
      const size_t c = size_t((i % cols) / plane);
      sum[c] += x[i];
      sq[c] += double(x[i]) * x[i];
    }
    values_.assign(size_t(2 * channels), 0.0f);
    const double count = double(rows) * double(plane);
    for (int64_t c = 0; c < channels; ++c) {
      const double mean = sum[size_t(c)] / count;
      values_[size_t(c)] = float(mean);
      values_[size_t(channels + c)] =
          float(std::sqrt(std::max(0.0, sq[size_t(c)] / count - mean * mean)));
    }
    return;
  }
  if (kind_ == Kind::kScale) {
    auto [lo, hi] = std::minmax_element(x.data(), x.data() + x.size());
    values_ = {*lo, *hi};
  } else if (kind_ == Kind::kStandardize) {
    std::vector<double> sum(cols, 0.0), sq(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        double v = x[r * cols + c];
        sum[c] += v;
        sq[c] += v * v;
      }
    values_.assign(2 * cols, 0.0f);
    for (int64_t c = 0; c < cols; ++c) {
      double mean = sum[c] / rows;
      double var = std::max(0.0, sq[c] / rows - mean * mean);
      values_[c] = static_cast<float>(mean);
      values_[cols + c] = static_cast<float>(std::sqrt(var));
    }
  }
}

void Normalizer::apply_rows(float* x, int64_t rows, int64_t cols) const {
  const int64_t size = rows * cols;
  if (kind_ == Kind::kScale) {
    const float lo = values_.at(0), range = values_.at(1) - values_.at(0);
    const float inv = range > 0.0f ? 1.0f / range : 1.0f;
    for (int64_t i = 0; i < size; ++i) x[i] = (x[i] - lo) * inv;
  } else if (kind_ == Kind::kPerChannel) {
    const int64_t channels = int64_t(values_.size() / 2);
    if (channels == 0 || cols % channels != 0)
      throw UserError("the per_channel normalizer was fitted on " + std::to_string(channels) +
                          " channels, which do not divide the data's " + std::to_string(cols) +
                          " values per example",
                      "use data shaped like the training data");
    const int64_t plane = cols / channels;
    for (int64_t i = 0; i < size; ++i) {
      const int64_t c = (i % cols) / plane;
      const float sd = values_[size_t(channels + c)];
      x[i] = (x[i] - values_[size_t(c)]) / (sd > 1e-8f ? sd : 1.0f);
    }
  } else if (kind_ == Kind::kStandardize) {
    if (static_cast<int64_t>(values_.size()) != 2 * cols)
      throw UserError("the standardize normalizer was fitted on " +
                          std::to_string(values_.size() / 2) + " features, the data has " +
                          std::to_string(cols),
                      "use data with the same columns as the training data");
    for (int64_t i = 0; i < size; ++i) {
      const int64_t c = i % cols;
      const float sd = values_[cols + c];
      x[i] = (x[i] - values_[c]) / (sd > 1e-8f ? sd : 1.0f);
    }
  }
}

}  // namespace dtrain::core
