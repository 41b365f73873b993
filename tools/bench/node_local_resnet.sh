#!/usr/bin/env bash
# ResNet-20 (configs/fashion-mnist-resnet20.yaml) trained from node-local packed files on three
# daemons of this machine, then evaluated node-locally (docs/user-guide.md, "Node-local data"):
#   - `export --files 6 --test-files 3`, the files spread with copies: node-1 holds train files
#     0-2, node-2 2-4, node-3 5 and a copy of 0 (and one test file each, node-3 two);
#   - one epoch, one worker per node, data.train.shards '{node}' folders;
#   - the fetched model evaluated by `eval --cluster --shards` and by `eval --data` here.
# Prints the plan, each node's epoch line, the job's accuracy and both evaluations.
# Usage: tools/bench/node_local_resnet.sh [WORK_DIR]   (default /tmp/dtrain-node-local-resnet)
# Binaries: the ones `bazel build //daemon:dtraind //submit:dtrain-submit` made. Every daemon it
# starts is stopped on exit.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
W="${1:-/tmp/dtrain-node-local-resnet}"
SUBMIT="${DTRAIN_SUBMIT:-$root/bazel-bin/submit/dtrain-submit}"
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
trap '"$root/tools/local_cluster.sh" stop "$W/c" > /dev/null 2>&1' EXIT

"$SUBMIT" export "$root/configs/fashion-mnist-resnet20.yaml" --out "$W/export" --files 6 \
  --test-files 3 || exit 1
for n in 1 2 3; do mkdir -p "shards/node-$n"; done
cp export/train-0000[012].dtb export/test-00000.dtb shards/node-1/
cp export/train-0000[234].dtb export/test-00001.dtb shards/node-2/
cp export/train-0000[50].dtb export/test-0000[12].dtb shards/node-3/
python3 - "$root/configs/fashion-mnist-resnet20.yaml" "$W" > job.yaml <<'PY'
import sys
text, w = open(sys.argv[1]).read(), sys.argv[2]
head, rest = text.split("data:\n", 1)
tail = rest[rest.index("training:"):]
data = ("data:\n  train: {format: packed, shards: \"%s/shards/{node}/train-*.dtb\"}\n"
        "  test: {format: packed, path: \"%s/export/test-*.dtb\"}\n  normalize: scale\n" % (w, w))
tail = (tail.replace("epochs: 3", "epochs: 1").replace("workers_per_node: auto", "workers_per_node: 1")
        .replace("output: {model: fashion-mnist-resnet20.dtm, checkpoint_every: 500}",
                 "output: {model: resnet.dtm}"))
print(head + data + tail, end="")
PY
TASK_OUTPUTS="$W" "$root/tools/local_cluster.sh" start 3 "$W/c" > start.out || { cat start.out; exit 1; }
source "$W/c/env"
timeout 1800 "$SUBMIT" job.yaml > train.out 2>&1
echo "training: exit $?"
grep -E "node-local data|: epoch 1:|evaluation over|test accuracy" train.out | cut -c1-200
id=$(sed -nE 's/^submitted job ([0-9a-f]{16}).*/\1/p' train.out)
"$SUBMIT" fetch "$id" --output "$W/fetched.dtm" > /dev/null || exit 1
echo "eval --cluster --shards:"
timeout 600 "$SUBMIT" eval "$W/fetched.dtm" --cluster --shards "$W/shards/{node}/test-*.dtb" --json 2> /dev/null
echo "eval --data here:"
"$SUBMIT" eval "$W/fetched.dtm" --data "$W/export/test-*.dtb" --json
