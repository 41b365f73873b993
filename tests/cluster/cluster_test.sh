#!/usr/bin/env bash
# Three dtraind processes on loopback (tools/local_cluster.sh) train Fashion-MNIST together
# with gradient sharing and with parameter averaging, driven by dtrain-submit as a user would:
# each job reaches 0.85 test accuracy, the replicas agree, `status --json` shows it, the model
# file evaluates to the same accuracy, /metrics and /status answer; bad submissions (wrong key,
# output outside the data directory, malformed spec) are refused before any node is touched; a node
# SIGKILLed mid-job is named and the job finishes on the others (they cover its minibatches), and
# once restarted it rejoins with a live node's parameters. Every wait has a deadline and says what
# it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" cluster "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300

# Node ids fixed in advance so that ranks (by id) are known: node-2 is rank 0 (the root of the
# plain mesh and the first node), node-1 (also the controller) is rank 2.
for i in 1 2 3; do mkdir -p "$WORK/c/data-$i"; done
echo 30 > "$WORK/c/data-1/node_id"
echo 10 > "$WORK/c/data-2/node_id"
echo 20 > "$WORK/c/data-3/node_id"
"$CLUSTER_TOOL" start 3 "$WORK/c" || { echo "FAIL: the cluster did not start"; exit 1; }
source "$WORK/c/env"

# 8 epochs: each node's epoch is a third of the data, so this is 8 passes over it in all.
# A batch of 64 per worker (not the default split batch of 64 over the six workers, scale_test's
# subject): six times fewer steps, so the 40-epoch rejoin job below fits its deadline.
sed -e 's/epochs: 5/epochs: 8/' -e 's/name: fashion-mnist-mlp/name: cluster-test/' \
    -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    -e 's/model: fashion-mnist-mlp.dtm/model: cluster-test.dtm/' "$SPEC" > job.yaml

echo "== gradient sharing on 3 nodes"
timeout 300 "$SUBMIT" job.yaml > submit.out 2> submit.err
rc=$?
cat submit.out
[[ $rc -eq 0 ]] || { fail "submit exited $rc"; cat submit.err; tail -n 20 "$WORK"/c/node-*.log; }
grep -q "replicas agree" submit.out || fail "no replica agreement line"
"$SUBMIT" status --json > jobs.json || fail "status --json"
id=$(json jobs.json "j['jobs'][-1]['id']")
"$SUBMIT" status "$id" --json > job.json || fail "status JOB --json"
[[ $(json job.json "j['state']") == succeeded ]] || fail "state $(json job.json "j['state']")"
[[ $(json job.json "len(j['nodes'])") == 3 ]] || fail "the job did not run on 3 nodes"
acc=$(json job.json "j['result']['accuracy']")
python3 -c "import sys; sys.exit(0 if $acc >= 0.85 else 1)" || fail "accuracy $acc < 0.85"
[[ $(json job.json "j['result']['evaluation_nodes']") == 3 ]] ||
  fail "the evaluation was not spread over the 3 nodes: $(json job.json "j['result']")"
[[ $(json job.json "j['result']['evaluated_examples']") == 10000 ]] ||
  fail "the merged evaluation covers $(json job.json "j['result']['evaluated_examples']") of 10000 test examples"
diff=$(json job.json "j['result']['replica_max_relative_difference']")
python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "replicas differ by $diff"
model=$(json job.json "j['result']['model_path']")
[[ -f $model ]] || fail "model file $model missing"
"$SUBMIT" eval "$model" --json > eval.json || fail "eval of the cluster's model"
eval_acc=$(json eval.json "j['accuracy']")
# Each node evaluated its part on its own replica (equal to float rounding, 1e-8 apart), the
# file holds the first node's: an example on a decision boundary may fall either way.
python3 -c "import sys; sys.exit(0 if abs($eval_acc - $acc) <= 3e-4 else 1)" ||
  fail "eval gives $eval_acc, the job reported $acc"
echo "accuracy $acc, replicas within $diff, eval $eval_acc"
# Epoch-end checkpoints (output.checkpoint_every in the example): every node keeps its newest 2,
# the controller shows the epoch every node has one for, and a node's last one is the model.
[[ $(json job.json "j.get('checkpoint', {}).get('epoch')") == 8 ]] ||
  fail "the job's consistent checkpoint is $(json job.json "j.get('checkpoint')"), not epoch 8"
for i in 1 2 3; do
  n=$(ls "$WORK/c/data-$i/jobs/$id/" | grep -c '^cluster-test\.ckpt-[0-9]*\.dtm$')
  [[ $n == 2 ]] || fail "node-$i keeps $n checkpoints, not 2: $(ls "$WORK/c/data-$i/jobs/$id/")"
done
last=$(ls "$WORK/c/data-2/jobs/$id" | sed -n 's/^cluster-test\.ckpt-\([0-9]*\)\.dtm$/\1/p' | sort -n | tail -n 1)
newest="$WORK/c/data-2/jobs/$id/cluster-test.ckpt-$last.dtm"
"$SUBMIT" eval "$newest" --json > ckpt.json || fail "eval of the checkpoint $newest"
python3 -c "import sys; sys.exit(0 if abs($(json ckpt.json "j['accuracy']") - $eval_acc) <= 3e-4 else 1)" ||
  fail "node-2's last checkpoint evaluates to $(json ckpt.json "j['accuracy']"), the model to $eval_acc"
"$SUBMIT" logs "$id" | grep -q "checkpoint: every live node has its replica at the end of epoch 8" ||
  fail "the log does not record the last consistent checkpoint"
"$SUBMIT" logs "$id" | grep -q "epoch 8" || fail "logs lack the epoch lines"
[[ $(json job.json "len(j['progress']) == 3 and not any('eta_seconds' in p for p in j['progress'].values())") == True ]] ||
  fail "the ended job's progress: $(json job.json "j['progress']")"
"$SUBMIT" cancel "$id" > cancel.out 2>&1 && grep -q "already succeeded, nothing to cancel" cancel.out ||
  fail "cancel of the succeeded job: $(cat cancel.out)"
"$SUBMIT" nodes --json > nodes.json
[[ $(json nodes.json "sum(n['state'] == 'alive' for n in j['nodes'])") == 3 ]] || fail "nodes --json"
# The port the controller bound, not the configured 0 (any free port).
[[ $(json nodes.json "j['protocol']['control_port']") == "${DTRAIN_CONTROLLER##*:}" ]] ||
  fail "nodes --json: control_port $(json nodes.json "j['protocol']['control_port']"), bound ${DTRAIN_CONTROLLER##*:}"
# The wire and control versions a node of another release would have to match, and each node's
# data port (docs/user-guide.md, "JSON output").
[[ $(json nodes.json "j['protocol']['wire_version']") == 5 ]] ||
  fail "nodes --json: wire_version $(json nodes.json "j['protocol'].get('wire_version')"), expected 5"
[[ $(json nodes.json "all(n['data_port'] > 0 for n in j['nodes'])") == True ]] ||
  fail "nodes --json: a node without its data port: $(cat nodes.json)"

echo "== fine-tuning: a job that starts from the cluster's model"
# One epoch at a learning rate too small to learn: with model.init_from it is at once at the
# saved model's accuracy (a fresh start would be near chance after such an epoch).
sed -e "s|^model:$|model:\n  init_from: $model|" -e 's/learning_rate: 0.05/learning_rate: 1.0e-7/' \
    -e 's/epochs: 8/epochs: 1/' -e 's/name: cluster-test/name: cluster-tune/' \
    -e 's/model: cluster-test.dtm/model: cluster-tune.dtm/' job.yaml > tune.yaml
timeout 120 "$SUBMIT" tune.yaml > tune.out 2> tune.err || { fail "fine-tuning job exited $?"; cat tune.err; }
tuned=$(sed -nE 's/^ +test accuracy ([0-9.]+),.*/\1/p' tune.out | tail -n 1)
echo "fine-tuned for one epoch at lr 1e-7: accuracy $tuned (saved model $eval_acc)"
python3 -c "import sys; sys.exit(0 if ${tuned:-0} >= $eval_acc - 0.01 else 1)" ||
  fail "fine-tuning did not start from the saved model: $tuned against $eval_acc"
sed 's/units: 256, activation: relu/units: 200, activation: relu/' tune.yaml > wider.yaml
"$SUBMIT" wider.yaml > wider.out 2> wider.err
[[ $? -eq 2 ]] || fail "fine-tuning into another shape: exit code not 2"
grep -q "model.layers\[0\] is dense with" wider.err || fail "no shape mismatch message: $(cat wider.err)"

echo "== parameter averaging on 3 nodes"
sed -e 's/mode: gradient_sharing/mode: parameter_averaging/' -e 's/epochs: 8/epochs: 5/' \
    -e 's/  mesh: plain/  mesh: plain\n  average_updater_state: true/' \
    -e 's/model: cluster-test.dtm/model: cluster-pa.dtm/' job.yaml > pa.yaml
grep -q "average_updater_state: true" pa.yaml || fail "pa.yaml lacks average_updater_state"
timeout 300 "$SUBMIT" pa.yaml > pa.out 2> pa.err
rc=$?
tail -n 5 pa.out
[[ $rc -eq 0 ]] || { fail "parameter averaging: submit exited $rc"; cat pa.err; }
"$SUBMIT" status --json > jobs.json
[[ $(json jobs.json "j['jobs'][-1]['mode']") == parameter_averaging ]] || fail "mode not recorded"
acc=$(json jobs.json "j['jobs'][-1]['result']['accuracy']")
python3 -c "import sys; sys.exit(0 if $acc >= 0.85 else 1)" || fail "parameter averaging accuracy $acc < 0.85"
diff=$(json jobs.json "j['jobs'][-1]['result']['replica_max_relative_difference']")
python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "parameter averaging replicas differ by $diff"
"$SUBMIT" logs "$(json jobs.json "j['jobs'][-1]['id']")" | grep -q "updater state included" ||
  fail "the parameter-averaging job did not average the updater state"

echo "== status and metrics over HTTP"
fetch "http://127.0.0.1:$(http_port node-1)/metrics" > metrics.txt || fail "GET /metrics"
grep -q '^dtrain_jobs{state="succeeded"} 3$' metrics.txt || { fail "/metrics lacks the succeeded jobs"; head -n 30 metrics.txt; }
grep -q '^dtrain_nodes{state="alive"} 3$' metrics.txt || fail "/metrics lacks 3 alive nodes"
grep -q '^dtrain_transport_datagrams_in_total{peer=' metrics.txt || fail "/metrics lacks transport counters"
fetch "http://127.0.0.1:$(http_port node-1)/status" > status.json || fail "GET /status"
[[ $(json status.json "j['node']['name']") == node-1 ]] || fail "/status node name"

echo "== refused before any node is touched"
jobs_before=$(json jobs.json "len(j['jobs'])")
"$DTRAIND" keygen other.key > /dev/null
"$SUBMIT" job.yaml --key-file other.key > out.txt 2> err.txt
[[ $? -eq 2 ]] || fail "wrong key: exit code"
grep -q "does not use this cluster key" err.txt || { fail "wrong key message"; cat err.txt; }
sed 's/model: cluster-test.dtm/model: ..\/..\/escape.dtm/' job.yaml > escape.yaml
"$SUBMIT" escape.yaml > out.txt 2> err.txt
[[ $? -eq 2 ]] || fail "escaping output: exit code"
grep -q "is not a file path inside the daemon's data directory" err.txt || { fail "escaping output message"; cat err.txt; }
printf 'name: [broken\n' > broken.yaml
"$SUBMIT" broken.yaml > out.txt 2> err.txt
[[ $? -eq 2 ]] || fail "malformed spec: exit code"
"$SUBMIT" status --json > jobs2.json
[[ $(json jobs2.json "len(j['jobs'])") == "$jobs_before" ]] || fail "a refused job reached the controller"

echo "== early stopping: every node stops at the same epoch and keeps the same best model"
# A min_delta no gain reaches: epoch 1 stays the best, patience 1 stops after epoch 2 of 8.
sed -e 's/  mesh: plain/  mesh: plain\n  early_stopping: {metric: loss, patience: 1, min_delta: 10}/' \
    -e 's/name: cluster-test/name: early-stop/' -e 's/model: cluster-test.dtm/model: early-stop.dtm/' \
    job.yaml > early.yaml
grep -q "early_stopping" early.yaml || fail "early.yaml has no early_stopping"
timeout 300 "$SUBMIT" early.yaml > early.out 2> early.err || { fail "early-stopping job exited $?"; cat early.err; }
"$SUBMIT" status --json > early.json
early_id=$(json early.json "j['jobs'][-1]['id']")
"$SUBMIT" status "$early_id" --json > early.json
[[ $(json early.json "j['state']") == succeeded ]] || fail "early-stopping job: $(json early.json "j['state']")"
json early.json "j['result'].get('stopped_early', '')" | grep -q "after epoch 2: .* the model kept is epoch 1's" ||
  fail "the result does not say why it stopped: $(json early.json "j['result'].get('stopped_early')")"
"$SUBMIT" logs "$early_id" | grep -q "epoch 3:" && fail "a node trained epoch 3 after early stopping"
diff=$(json early.json "j['result']['replica_max_relative_difference']")
python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "early stopping: replicas differ by $diff"
echo "early stopping: $(json early.json "j['result']['stopped_early']" | cut -c1-90), replicas within $diff"

echo "== cancel a running job"
sed 's/epochs: 8/epochs: 12/' job.yaml > long.yaml
id=$("$SUBMIT" long.yaml --detach 2> /dev/null) || fail "detached submit for cancel"
for _ in $(seq 1 300); do  # 30 s for it to start
  "$SUBMIT" status "$id" --json > cancel.json 2> /dev/null
  [[ $(json cancel.json "j['state']") == running ]] && break
  sleep 0.1
done
"$SUBMIT" cancel "$id" > /dev/null || fail "cancel exited $?"
state=$(wait_job_end "$id" cancel.json 30)  # for every node to stop
[[ $state == cancelled ]] || fail "a cancelled job ended '$state' (waited 30 s)"

echo "== SIGKILL of a node mid-job, then its restart: the survivors cover its data, it rejoins"
# Killed as epoch 3 begins; 14 more epochs (about 30 s here) leave room for the controller to
# see it gone (the 3 s peer timeout), its restart and its rejoin at an epoch end (a few seconds).
sed 's/epochs: 8/epochs: 16/' job.yaml > rejoin.yaml
id=$("$SUBMIT" rejoin.yaml --detach) || fail "detached submit"
# Rank 0: the root of the plain mesh, the first node (not the controller: see the ids). It is
# killed as its second epoch-end checkpoint is logged, so the whole next epoch of its shard is
# left for the survivors: a kill timed by polling the controller's status (each poll, Python
# reading the JSON included, took seconds on these two loaded cores) could land after it finished
# its shard, leaving the survivors nothing to take over.
victim="" checkpoints=0
for _ in $(seq 1 1200); do  # 60 s for the job to reach the end of its second epoch
  [[ -z $victim ]] &&
    victim=$(grep -l "$id.*rank 0 of 3" "$WORK"/c/node-2.log "$WORK"/c/node-3.log | head -n 1)
  [[ -n $victim ]] && checkpoints=$(grep -c "job $id: checkpoint" "$victim")
  [[ $checkpoints -ge 2 ]] && break
  sleep 0.05
done
name=$(basename "${victim:-none}" .log)
if [[ $checkpoints -lt 2 ]]; then
  fail "waited 60 s for job $id's rank 0 (on node-2 or node-3: '$name') to log its second" \
    "epoch-end checkpoint; it logged $checkpoints"
else
  pid=$(awk -v n="$name" '$2 == n { print $1 }' "$WORK/c/pids")
  kill -KILL "$pid"
  echo "killed $name (pid $pid)"
  for _ in $(seq 1 100); do  # 10 s for the controller to see it gone
    "$SUBMIT" status "$id" --json > long.json 2> /dev/null
    json long.json "j['lost_nodes']" | grep -q "$name" && break
    sleep 0.1
  done
  json long.json "j['lost_nodes']" | grep -q "$name" || fail "the job does not name $name as lost"
  # Restarted at once, as systemd does (RestartSec=5 against the default 10 s peer timeout): the
  # controller has seen it go, the survivors' mesh has not timed it out yet. DTRAIN_REJOIN_DELAY
  # (seconds) waits longer, past the 3 s peer timeout, for the other order.
  sleep "${DTRAIN_REJOIN_DELAY:-0.5}"
  "$DTRAIND" --config "$WORK/c/$name.yaml" >> "$WORK/c/$name.log" 2>&1 &
  sed -i "/ $name\$/d" "$WORK/c/pids"
  echo "$! $name" >> "$WORK/c/pids"
  echo "restarted $name (pid $!)"
  state=$(wait_job_end "$id" long.json 180)
  "$SUBMIT" logs "$id" > long.log
  [[ $state == succeeded ]] ||
    { fail "after losing and restarting $name the job ended '$state' (waited 180 s)"; tail -n 20 long.log; }
  json long.json "j['result']['lost_nodes']" | grep -q "$name" || fail "result.lost_nodes lacks $name"
  json long.json "j['result']['rejoined_nodes']" | grep -q "$name" ||
    fail "$name did not rejoin: $(grep -i "$name" long.log | tail -n 5)"
  grep -q "minibatches of lost nodes" long.log ||
    fail "no survivor did the lost node's minibatches (dtrain-submit logs $id)"
  grep -q "$name: rejoined at epoch" long.log || fail "the log does not say when $name rejoined"
  # The audit runs after the takeover and the rejoin: the rejoined node went on from its
  # snapshot's totals, so all three nodes report one set of applied updates.
  python3 -c "import json,sys; a=json.load(open('long.json'))['result']['applied_updates']; sys.exit(0 if len(a) == 3 and len({(v['messages'], v['digest']) for v in a.values()}) == 1 else 1)" ||
    fail "the nodes' applied updates after the rejoin: $(json long.json "j['result'].get('applied_updates')")"
  # The rejoined node's replica is in the agreement check, and it evaluated its part.
  grep -q "evaluation over 3 nodes" long.log || fail "the evaluation was not spread over the 3 nodes"
  [[ -f $(json long.json "j['result']['model_path']") ]] || fail "no model file"
  grep -E "lost|minibatches of lost|rejoin|evaluation over" long.log | cut -c1-160 | head -n 12
  echo "job $state; $name lost, $(grep -o "$name: rejoined at epoch [0-9]*" long.log);" \
    "replicas within $(json long.json "j['result']['replica_max_relative_difference']")," \
    "accuracy $(json long.json "j['result'].get('accuracy')")"
fi

echo "== SIGTERM, and a restarted controller lists the past jobs"
"$SUBMIT" status --json > before.json
"$CLUSTER_TOOL" stop "$WORK/c" > /dev/null
grep -q "dtraind node-1: stopped" "$WORK/c/node-1.log" || fail "node-1 did not log a clean stop"
"$DTRAIND" --config "$WORK/c/node-1.yaml" > restart.log 2>&1 &
restarted=$!
listed=""
for _ in $(seq 1 100); do
  if "$SUBMIT" status --json > after.json 2> /dev/null; then listed=yes; break; fi
  sleep 0.1
done
[[ -n $listed ]] || fail "the restarted controller did not answer within 10 s"
[[ $(json after.json "len(j['jobs'])") == $(json before.json "len(j['jobs'])") ]] ||
  fail "the restarted controller lists $(json after.json "len(j['jobs'])") jobs, not $(json before.json "len(j['jobs'])")"
kill -TERM $restarted
wait $restarted || fail "dtraind exited $? on SIGTERM"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all cluster checks passed"
