#!/usr/bin/env bash
# `dtrain-submit resume JOB` (docs/architecture/daemon.md, "Resume"): a cancelled job with a
# consistent checkpoint goes on from it, by hand, on the nodes that hold it and are back. Here
# node-3 is SIGKILLed after the cancel, so the job resumes on node-1 and node-2 only; each starts
# from exactly the parameters it wrote into its checkpoint (their SHA-256 as written, as read back
# and at the first step), and the job still reaches the accuracy of an uninterrupted run
# (>= 0.85) with their replicas agreeing. Every wait has a deadline and says what it waited for.
# With a fifth argument "local" the job takes local steps (training.sync: {local: {steps: 20}}):
# each node also starts from the outer momentum and residual its checkpoint holds, bit for bit.
# With "allreduce" it is a job of mode allreduce (its replicas, updater state included, must
# still be the same bits at the end). With "auto" it is a job of mode auto whose first node
# takes allreduce (DTRAIN_TEST_FAULT=auto_allreduce:1): resumed, it keeps allreduce, the mode its
# checkpoint was trained in, without measuring.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
SYNC=${5:-bsp}
[[ $SYNC == bsp || $SYNC == local || $SYNC == allreduce || $SYNC == auto ]] ||
  { echo "FAIL: the fifth argument is 'local', 'allreduce', 'auto' or none, not '$SYNC'"; exit 1; }
source "$(dirname "$0")/lib.sh" "resume_$SYNC" "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300

checkpointing_spec "$SPEC" 10 resumable > job.yaml
grep -q "checkpoint_every: 1" job.yaml || fail "job.yaml does not checkpoint"
if [[ $SYNC == local ]]; then
  sed -i 's/^  sync: bsp$/  sync: {local: {steps: 20}}/' job.yaml
  grep -q "sync: {local" job.yaml || fail "job.yaml does not take local steps"
fi
if [[ $SYNC == auto ]]; then
  sed -i -e 's/^  mode: gradient_sharing$/  mode: auto/' -e '/^  sync: bsp$/d' job.yaml
  grep -q "^  mode: auto$" job.yaml || fail "job.yaml is not of mode auto"
  export NODE_ENV_1="DTRAIN_TEST_FAULT=auto_allreduce:1" NODE_ENV_2="DTRAIN_TEST_FAULT=auto_allreduce:1" \
         NODE_ENV_3="DTRAIN_TEST_FAULT=auto_allreduce:1"
fi
if [[ $SYNC == allreduce ]]; then
  sed -i 's/^  mode: gradient_sharing$/  mode: allreduce/' job.yaml
  grep -q "^  mode: allreduce$" job.yaml || fail "job.yaml is not of mode allreduce"
fi

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"

# Refused while it runs, with the reason.
"$SUBMIT" resume "$id" > refused.out 2>&1 && fail "resume of a running job was accepted"
grep -q "only a failed or cancelled job can be resumed" refused.out ||
  fail "resume of a running job: $(cat refused.out)"

at=$(wait_checkpoint "$id" 2 60)
[[ ${at:-0} -ge 2 ]] || fail "waited 60 s for job $id's consistent checkpoint of epoch 2; it is '${at:-none}'"
"$SUBMIT" cancel "$id" > /dev/null || fail "cancel"
state=$(wait_job_end "$id" job.json 60)
[[ $state == cancelled ]] || fail "after the cancel job $id is '$state' (waited 60 s)"
json job.json "j['fix']" | grep -q "dtrain-submit resume $id" ||
  fail "the cancelled job's fix does not name the resume: $(json job.json "j['fix']")"
at=$(json job.json "j.get('checkpoint', {}).get('epoch', -1)")

pid3=$(awk '$2 == "node-3" {print $1}' "$WORK/c/pids")
kill -KILL "$pid3"
lost=""
for _ in $(seq 1 200); do  # 20 s for the controller to see node-3 gone
  "$SUBMIT" nodes --json > nodes.json 2> /dev/null
  lost=$(json nodes.json "[n['state'] for n in j['nodes'] if n['name'] == 'node-3'][0]" 2> /dev/null)
  [[ $lost == lost ]] && break
  sleep 0.1
done
[[ $lost == lost ]] || fail "waited 20 s for node-3 to be lost after its SIGKILL; it is '$lost'"

timeout 240 "$SUBMIT" resume "$id" > resume.out 2>&1
rc=$?
"$SUBMIT" status "$id" --json > job.json
"$SUBMIT" logs "$id" > job.log
[[ $rc == 0 ]] || { fail "resume exited $rc (124: still running after 240 s)"; tail -n 20 resume.out; }
grep -q "resuming job $id" resume.out || fail "resume did not say what it resumes"
grep -q "resumes from its checkpoint at the end of epoch $at on 2 nodes (without node-3" resume.out ||
  fail "resume's output does not say it went on from epoch $at without node-3"
grep -q "epoch 1:" resume.out && fail "resume printed the run before it (epoch 1)"
# Resumed by parameters, not accuracy: each node's first step starts from exactly the
# parameters its checkpoint file holds, which are those it wrote there before the cancel.
for i in 1 2; do
  line=$(grep -E "node-$i: resuming from .*resumable.ckpt-[0-9]*.dtm \($at epochs done" job.log)
  [[ -n $line ]] || { fail "node-$i did not say which checkpoint it resumed from"; continue; }
  path=$(sed -nE 's/.*resuming from (.*\.dtm) \(.*/\1/p' <<< "$line")
  read_sha=$(sed -nE 's/.*parameters sha256 ([0-9a-f]{64})\).*/\1/p' <<< "$line")
  start_sha=$(sed -nE "s/.*node-$i: epoch $((at + 1)) starts from parameters sha256 ([0-9a-f]{64}).*/\1/p" job.log)
  written_sha=$(grep -F "checkpoint $path: parameters sha256" "$WORK/c/node-$i.log" | tail -n 1 |
                sed -nE 's/.*parameters sha256 ([0-9a-f]{64}).*/\1/p')
  echo "node-$i: wrote ${written_sha:0:16}.., read ${read_sha:0:16}.., started from ${start_sha:0:16}.."
  [[ -n $written_sha && $written_sha == "$read_sha" && $read_sha == "$start_sha" ]] ||
    fail "node-$i did not resume from its checkpoint's parameters bit for bit (wrote '$written_sha', read '$read_sha', started from '$start_sha')"
  [[ $SYNC == local ]] || continue
  # Local steps: the outer momentum and this node's residual too.
  state='outer momentum sha256 [0-9a-f]{64}, residual sha256 [0-9a-f]{64}'
  written_state=$(grep -F "checkpoint $path: parameters sha256" "$WORK/c/node-$i.log" | tail -n 1 |
                  sed -nE "s/.*($state).*/\1/p")
  start_state=$(sed -nE "s/.*node-$i: epoch $((at + 1)) starts from parameters sha256 [0-9a-f]{64}, ($state).*/\1/p" job.log)
  echo "node-$i: wrote ${written_state:0:40}.., started from ${start_state:0:40}.."
  [[ -n $written_state && $written_state == "$start_state" ]] ||
    fail "node-$i did not resume local steps' outer momentum and residual bit for bit (wrote '$written_state', started from '$start_state')"
done
[[ $(json job.json "j['state']") == succeeded ]] || fail "the resumed job ended $(json job.json "j['state']"): $(json job.json "j['error']")"
[[ $(json job.json "len(j['nodes'])") == 2 ]] || fail "the resumed job ran on $(json job.json "j['nodes']")"
check_trained job.json
"$SUBMIT" resume "$id" > again.out 2>&1 && fail "a succeeded job was resumed again"
grep -q "nothing to resume" again.out || fail "resume of a succeeded job: $(cat again.out)"

# dtrain-submit fetch: the model, from the node that speaks for the job (the lowest rank; the
# result names its file), without knowing where.
model=$(json job.json "j['result']['model_path']")
lead=$(echo "$model" | grep -o "data-[0-9]*/jobs" | sed -e 's/data-/node-/' -e 's|/jobs||')
"$SUBMIT" fetch "$id" -o got.dtm --chunk-kb 64 > fetch.out 2>&1 || fail "fetch: $(cat fetch.out)"
grep -q "fetched job $id's model from $lead: got.dtm" fetch.out || fail "fetch said: $(cat fetch.out)"
cmp -s got.dtm "$model" || fail "the fetched model differs from $lead's $model"
(( $(stat -c %s "$model") > 3 * 65536 )) || fail "the model fits one 64 KiB chunk: the test needs several"
"$SUBMIT" eval got.dtm --json > eval.json || fail "the fetched model does not evaluate"
python3 -c "import json,sys; sys.exit(0 if abs(json.load(open('eval.json'))['accuracy'] - $acc) < 0.002 else 1)" ||
  fail "the fetched model evaluates to $(json eval.json "j['accuracy']"), the job to $acc"
mkdir here && (cd here && "$SUBMIT" fetch "$id" > ../fetch2.out 2>&1) && [[ -f here/resumable.dtm ]] ||
  fail "fetch without -o did not write resumable.dtm here: $(cat fetch2.out)"
# The file on $lead replaced since the job wrote it (a later job of the same output.model):
# refused by its checksum, never taken for the job's model.
printf x >> "$model"
"$SUBMIT" fetch "$id" -o bad.dtm > bad.out 2>&1 && fail "a replaced model was fetched"
grep -q "does not match the checksum" bad.out || fail "fetch of a replaced model: $(cat bad.out)"
[[ -f bad.dtm ]] && fail "the replaced model was written as bad.dtm"
echo "job cancelled at a checkpoint of epoch $at, resumed on node-1 and node-2: accuracy $acc," \
  "replicas within $diff"
[[ $SYNC == local ]] && { grep -q "local steps: 20 inner steps a round" resume.out ||
  fail "the resumed job's log does not say it takes local steps"; }
[[ $SYNC == allreduce && $(json job.json "j['mode']") != allreduce ]] &&
  fail "the resumed job's mode is $(json job.json "j['mode']")"
if [[ $SYNC == auto ]]; then
  grep -q "training.mode auto: .*DTRAIN_TEST_FAULT takes allreduce" "$WORK/c/node-1.log" ||
    fail "the first run did not take allreduce: $(grep "training.mode auto" "$WORK/c/node-1.log")"
  grep -q "training.mode auto: resumed from a checkpoint of allreduce: allreduce" resume.out ||
    fail "the resumed job did not keep allreduce: $(grep "training.mode auto" resume.out)"
  [[ $(json job.json "j['result']['mode']") == allreduce ]] ||
    fail "the resumed job trained as $(json job.json "j['result'].get('mode')")"
fi
finish "resume_test ($SYNC)"
