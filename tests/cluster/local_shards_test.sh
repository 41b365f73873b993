#!/usr/bin/env bash
# Node-local data (docs/user-guide.md, "Node-local data"): the MLP example exported once into 7
# packed files, which three daemons hold in folders of their own (data.train.shards with
# {node}): node-1 files 0-2 and a copy of 3, node-2 files 3-4, node-3 files 5-6 and a copy of 0.
# The controller gives each file to one holder; the job trains to the example's accuracy with
# its replicas in agreement and every update applied once, and while it runs each daemon has
# open only the files of its own folder, each of the 7 files open on exactly one node: no
# example is read from another node's path, none twice. A node paused past the peer timeout
# is taken back and trains from its files again (what is left of its minibatches while it was
# away is skipped and the log says so). The same files train under mode allreduce, every replica
# the same bits. A layout where a node holds nothing is refused by name.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"  # before lib.sh changes directory
source "$(dirname "$0")/lib.sh" shards "$1" "$2" "$3"
export PEER_TIMEOUT_MS=2000 HEARTBEAT_MS=300

"$SUBMIT" export "$SPEC" --out "$WORK/export" --files 7 > export.out 2>&1 ||
  { fail "export: $(cat export.out)"; finish local_shards_test; }
layout() {  # layout DIR NODE FILE-NUMBERS...: copies those train files into DIR/NODE/
  local dir=$1 node=$2
  shift 2
  mkdir -p "$dir/$node"
  for k in "$@"; do cp "$WORK/export/train-0000$k.dtb" "$dir/$node/"; done
}
layout "$WORK/shards" node-1 0 1 2 3
layout "$WORK/shards" node-2 3 4
layout "$WORK/shards" node-3 5 6 0
# shard_spec PATTERN NAME: the example training from PATTERN's files as job NAME.
shard_spec() {
  python3 - "$SPEC" "$1" "$2" <<'PY'
import sys
text, pattern, name = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
head, rest = text.split("  train:\n", 1)
rest = rest[rest.index("  test:"):]
print((head + "  train: {format: packed, shards: \"%s\"}\n" % pattern + rest)
      .replace("fashion-mnist-mlp", name), end="")
PY
}
shard_spec "$WORK/shards/{node}/train-*.dtb" local-shards > job.yaml

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { fail "the cluster did not start: $(cat start.out)"; finish local_shards_test; }
source "$WORK/c/env"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"
if wait_epoch "$id" 2 120; then
  # Every daemon's open packed files, while it trains.
  while read -r pid node; do
    for fd in /proc/"$pid"/fd/*; do readlink "$fd"; done 2> /dev/null |
      grep '\.dtb$' | sed "s|^|$node |"
  done < "$WORK/c/pids" > open.txt
  python3 - open.txt "$WORK/shards" <<'PY' || fail "the daemons' open packed files: $(cat open.txt)"
import collections, os, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
foreign = [(n, p) for n, p in rows if not p.startswith(os.path.join(sys.argv[2], n) + "/")]
names = collections.Counter(os.path.basename(p) for _, p in rows)
print("open:", sorted((n, os.path.basename(p)) for n, p in rows))
sys.exit(0 if not foreign and len(names) == 7 and set(names.values()) == {1} else 1)
PY
fi
state=$(wait_job_end "$id" job.json 300)
[[ $state == succeeded ]] || { fail "job $id ended '$state': $(json job.json "j.get('error')")"; "$SUBMIT" logs "$id" | tail -n 20; }
check_trained job.json
"$SUBMIT" logs "$id" > job.log
grep -q "node-local data: 7 files, 60000 of the export's 60000 examples" job.log ||
  fail "the log does not give the data plan: $(grep -m3 -E 'node-local|trains from' job.log)"
[[ $(grep -c "trains from .* of its data.train.shards files" job.log) -eq 3 ]] ||
  fail "not every node said what it trains from"
python3 - job.json <<'PY' || fail "every node applied the same updates once"
import json, sys
r = json.load(open(sys.argv[1]))["result"]
sets = {(a["messages"], a["digest"]) for a in r["applied_updates"].values()}
sys.exit(0 if len(r["applied_updates"]) == 3 and len(sets) == 1 else 1)
PY
echo "node-local shards: accuracy $acc, replicas within $diff"
grep -E "node-local|trains from" job.log | cut -c1-200

# The same files under mode allreduce: trained, with every replica the same bits.
shard_spec "$WORK/shards/{node}/train-*.dtb" local-shards-allreduce |
  sed -e '/^  sync: bsp$/d' -e 's/^  mode: gradient_sharing$/  mode: allreduce/' \
      -e '/^  threshold:/d' -e '/^  residual:/d' > allreduce.yaml
grep -q "^  mode: allreduce$" allreduce.yaml || fail "the allreduce job's spec was not made"
id=$("$SUBMIT" allreduce.yaml --detach) || fail "detached submit of the allreduce job"
state=$(wait_job_end "$id" allreduce.json 300)
[[ $state == succeeded ]] ||
  { fail "allreduce job $id ended '$state': $(json allreduce.json "j.get('error')")"; "$SUBMIT" logs "$id" | tail -n 20; }
check_trained allreduce.json "allreduce: "
[[ $diff == 0.0 ]] || fail "allreduce: the replicas differ by $diff, not the same bits"
[[ $(json allreduce.json "j['result']['mode']") == allreduce ]] || fail "the job did not train allreduce"
echo "node-local shards under allreduce: accuracy $acc, replicas differ by $diff"

# node-3 paused past the peer timeout: the others skip what is left of its minibatches; it is
# taken back and trains from its files again. Taken back means admitted at an epoch end some
# seconds after it resumes (it re-registers, reads its data plan, rejoins the mesh): with the
# example's 5 epochs that came at the last epoch end, or after the job had ended on a busy
# machine; 10 epochs leave it room.
pid=$(awk '$2 == "node-3" { print $1 }' "$WORK/c/pids")
shard_spec "$WORK/shards/{node}/train-*.dtb" local-shards-paused | sed 's/epochs: 5$/epochs: 10/' > paused.yaml
grep -q "epochs: 10$" paused.yaml || fail "the paused job's spec was not made"
id=$("$SUBMIT" paused.yaml --detach) || fail "detached submit of the paused job"
if wait_epoch "$id" 2 120; then
  kill -STOP "$pid"
  sleep 3  # 1.5x the peer timeout, and until the controller has named it lost (12 s more at most)
  for _ in $(seq 1 120); do
    "$SUBMIT" status "$id" --json > lost.json 2> /dev/null
    json lost.json "j['lost_nodes']" 2> /dev/null | grep -q node-3 && break
    sleep 0.1
  done
  kill -CONT "$pid"
fi
state=$(wait_job_end "$id" paused.json 300)
[[ $state == succeeded ]] || { fail "paused job $id ended '$state': $(json paused.json "j.get('error')")"; "$SUBMIT" logs "$id" | tail -n 20; }
"$SUBMIT" logs "$id" > paused.log
json paused.json "j['rejoined_nodes']" | grep -q node-3 || fail "node-3 was not taken back: $(grep -m3 node-3 paused.log)"
grep -q "skipped .* minibatches of lost nodes" paused.log || fail "the log does not say what was skipped"
pdiff=$(json paused.json "j['result'].get('replica_max_relative_difference', 1)")
python3 -c "import sys; sys.exit(0 if $pdiff <= 1e-5 else 1)" || fail "paused job: replicas differ by $pdiff"
echo "paused node-3: replicas within $pdiff; $(grep -m1 -o 'skipped [0-9]* minibatches[^,]*' paused.log)"

# A node that holds none of the files: the job is refused by the controller, naming it.
layout "$WORK/bare" node-1 0 1 2 3
layout "$WORK/bare" node-2 4 5 6
shard_spec "$WORK/bare/{node}/train-*.dtb" bare > bare.yaml
id=$("$SUBMIT" bare.yaml --detach) || fail "detached submit of the bare job"
state=$(wait_job_end "$id" bare.json 120)
error=$(json bare.json "j.get('error')")
[[ $state == failed && $error == *"node-3 holds none of the files data.train.shards matches"* ]] ||
  fail "a node without files: the job ended '$state': $error"
echo "a node without files: $error"
finish local_shards_test
