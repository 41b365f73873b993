#pragma once
// Runs a model over a dataset (or a shard of it) in inference mode and collects an Evaluation.
#include "core/data/dataset.h"
#include "core/eval/evaluation.h"
#include "core/eval/roc.h"
#include "core/model/model.h"

namespace dtrain::core {

// Evaluates examples [begin, end) of `data` (the whole set by default) in batches. With `roc`,
// the same pass also adds each class's ROC, one against the rest (sized by the model). Data
// without classes (regression labels) gives a regression evaluation.
Evaluation evaluate(Model& model, const Dataset& data, int64_t top_n, int64_t batch_size = 256,
                    int64_t begin = 0, int64_t end = -1, RocOneVsAll* roc = nullptr);

}  // namespace dtrain::core
