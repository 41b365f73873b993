#include "core/eval/evaluate.h"

#include <algorithm>
#include <cstring>

namespace dtrain::core {

Evaluation evaluate(Model& model, const Dataset& data, int64_t top_n, int64_t batch_size,
                    int64_t begin, int64_t end, RocOneVsAll* roc) {
  if (end < 0) end = data.size();
  const bool regression = data.num_classes == 0;
  Evaluation eval = regression ? Evaluation::regression(model.num_outputs())
                               : Evaluation(model.num_outputs(), top_n);
  if (roc) *roc = RocOneVsAll(model.num_outputs());
  Tensor x, y;
  const int64_t fx = data.features.row_size(), ty = data.targets.row_size();
  for (int64_t start = begin; start < end; start += batch_size) {
    const int64_t count = std::min(batch_size, end - start);
    x.resize(with_batch(count, data.example_shape()));
    y.resize({count, ty});
    std::memcpy(x.data(), data.features.row(start), sizeof(float) * fx * count);
    std::memcpy(y.data(), data.targets.row(start), sizeof(float) * ty * count);
    const Tensor& p = model.predict(x);
    if (regression) {
      eval.add_values(p, y);
    } else {
      eval.add(p, data.labels.data() + start);
      if (roc) roc->add(p.data(), data.labels.data() + start, count);
    }
    // predict() returns host memory whatever the model's device: the loss is the CPU's.
    eval.add_loss(loss_value(kernels::cpu_backend(), model.loss(), p, y), count);
  }
  return eval;
}

}  // namespace dtrain::core
