#pragma once
// Feature normalisers, fitted on the training data and stored in the model file so evaluation
// and inference see inputs the way training did.
//  scale:       (x - min) / (max - min) with one min/max over all features (pixels -> [0, 1])
//  standardize: per-feature (x - mean) / std
//  per_channel: (x - mean) / std per image channel (images [N, C, H, W]; features for vectors),
//               the usual normalisation of image data
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace dtrain::core {

class Normalizer {
 public:
  enum class Kind { kNone = 0, kScale = 1, kStandardize = 2, kPerChannel = 3 };

  Normalizer() = default;
  static Normalizer of(const std::string& name);  // none | scale | standardize | per_channel
  Kind kind() const { return kind_; }
  std::string name() const;

  void fit(const Tensor& features);
  void apply(Tensor& features) const {
    const int64_t cols = features.row_size();
    apply_rows(features.data(), cols ? features.size() / cols : 0, cols);
  }
  // The same on `rows` examples of `cols` values each (a minibatch being read, one example).
  void apply_rows(float* x, int64_t rows, int64_t cols) const;

  // Fitted values, for model files.
  const std::vector<float>& values() const { return values_; }
  static Normalizer restore(Kind kind, std::vector<float> values);

 private:
  Kind kind_ = Kind::kNone;
  // scale: {min, max}; standardize: means then stds per feature; per_channel: per channel
  std::vector<float> values_;
};

}  // namespace dtrain::core
