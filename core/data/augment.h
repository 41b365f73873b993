#pragma once
// Training-time augmentation of image examples (`data.augment`; docs/user-guide.md, "Image data"):
// a random crop of the image padded by `crop_padding` zeros on every side (the same as shifting it
// by up to that many pixels, zeros coming in), then a horizontal flip with probability 1/2. It runs
// on the normalised features, so the padding is the per-channel mean after `per_channel` and black
// after `scale`. Test data is never augmented.
//
// What an example gets depends only on the job's seed, the epoch and the example's index, so
// every worker, and a survivor taking over a lost node's minibatches, sees the same thing.
#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace dtrain::core {

struct Augmentation {
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  bool active() const { return crop_padding > 0 || horizontal_flip; }
};

// In place on one example of `shape` [channels, height, width]; `scratch` is reused memory.
void augment_example(const Augmentation& a, const Shape& shape, uint64_t seed, int64_t epoch,
                     int64_t example, float* features, std::vector<float>& scratch);

}  // namespace dtrain::core
