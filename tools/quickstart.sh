#!/usr/bin/env bash
# The README's first command: installs what is missing, builds dtrain, and trains the MLP of
# configs/fashion-mnist-mlp.yaml on Fashion-MNIST with per-epoch progress and a final
# evaluation. The model lands in ./fashion-mnist-mlp.dtm.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
echo "== building dtrain-submit"
bazel build //submit:dtrain-submit
echo "== training configs/fashion-mnist-mlp.yaml"
./bazel-bin/submit/dtrain-submit --local configs/fashion-mnist-mlp.yaml "$@"
