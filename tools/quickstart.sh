#!/usr/bin/env bash
# The README's first command: installs what is missing, builds dtrain, starts a cluster of
# three dtraind daemons on this machine (loopback, free ports, a fresh cluster key), submits
# configs/fashion-mnist-mlp.yaml to it (printing the dashboard's URL) and follows the job to the
# end, fetches the model the cluster wrote (dtrain-submit fetch), prints its evaluation, and
# stops the daemons. `--local` instead trains in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
echo "== building dtraind and dtrain-submit"
bazel build //daemon:dtraind //submit:dtrain-submit
if [[ ${1:-} == --local ]]; then
  shift
  echo "== training configs/fashion-mnist-mlp.yaml in this process"
  exec ./bazel-bin/submit/dtrain-submit --local configs/fashion-mnist-mlp.yaml "$@"
fi
dir=$(mktemp -d /tmp/dtrain-quickstart.XXXXXX)
trap 'tools/local_cluster.sh stop "$dir" > /dev/null' EXIT
echo "== starting three daemons (tools/local_cluster.sh start 3 $dir)"
tools/local_cluster.sh start 3 "$dir"
source "$dir/env"
./bazel-bin/submit/dtrain-submit nodes
port=$(sed -nE 's/^http: .*port: ([0-9]+).*/\1/p' "$dir/node-1.yaml")
echo "== the dashboard: http://127.0.0.1:$port/ (open it now to watch the job train;"
echo "   the daemons stop when it ends. From another machine: ssh -L $port:127.0.0.1:$port THIS-HOST)"
echo "== submitting configs/fashion-mnist-mlp.yaml"
./bazel-bin/submit/dtrain-submit configs/fashion-mnist-mlp.yaml
id=$(./bazel-bin/submit/dtrain-submit status --json | python3 -c \
       'import json,sys; print(json.load(sys.stdin)["jobs"][-1]["id"])')
echo "== fetching the cluster's model (dtrain-submit fetch $id)"
./bazel-bin/submit/dtrain-submit fetch "$id" -o ./fashion-mnist-mlp.dtm
echo "== evaluating it"
./bazel-bin/submit/dtrain-submit eval ./fashion-mnist-mlp.dtm
echo "== the model is ./fashion-mnist-mlp.dtm; stopping the daemons"
