#pragma once
// How a cluster eval/infer job splits its data (docs/architecture/daemon.md, "Evaluation and
// inference jobs"): part i of P takes whole batches, [B*i/P, B*(i+1)/P) of the B = ceil(n/batch)
// batches of `batch` examples. Each part's forward passes are then the very batches one machine
// runs over all the data, so its predictions are the same bits; the parts cover every example once.
#include <algorithm>
#include <cstdint>

namespace dtrain::core {

struct ExampleRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

inline ExampleRange part_range(int64_t examples, int64_t batch, int64_t part, int64_t parts) {
  const int64_t batches = (examples + batch - 1) / batch;
  const int64_t first = batches * part / parts, last = batches * (part + 1) / parts;
  return {std::min(examples, first * batch), std::min(examples, last * batch)};
}

}  // namespace dtrain::core
