#!/usr/bin/env bash
# Every daemon SIGKILLed mid-job (a power loss) and started again (docs/architecture/daemon.md,
# "Controller restart"): the restarted controller finds the job running, every node comes back
# as a new process with its part gone, and the job resumes from its consistent checkpoint (the
# epoch every node has a checkpoint for), each node from its own copy. The job succeeds at the
# accuracy of an uninterrupted one (>= 0.85) with replicas agreeing, and its log says which
# checkpoint it resumed from. Every wait has a deadline and says what it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" cluster_restart "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300

EPOCHS=12
checkpointing_spec "$SPEC" $EPOCHS power-loss > job.yaml
grep -q "checkpoint_every: 1" job.yaml || fail "job.yaml does not checkpoint"

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"

at=$(wait_checkpoint "$id" 2 60)
[[ ${at:-0} -ge 2 ]] || fail "waited 60 s for job $id's consistent checkpoint of epoch 2; it is '${at:-none}'"

while read -r pid name; do kill -KILL "$pid"; done < "$WORK/c/pids"
echo "killed every daemon (the job had a consistent checkpoint of epoch $at)"
sleep 1
: > "$WORK/c/pids.new"
for i in 1 2 3; do
  "$DTRAIND" --config "$WORK/c/node-$i.yaml" >> "$WORK/c/node-$i.log" 2>&1 &
  echo "$! node-$i" >> "$WORK/c/pids.new"
done
mv "$WORK/c/pids.new" "$WORK/c/pids"
echo "restarted the three daemons"

state=$(wait_job_end "$id" job.json 240)
"$SUBMIT" logs "$id" > job.log
[[ $state == succeeded ]] ||
  { fail "after the restart of every daemon job $id ended '$state' (waited 240 s): $(json job.json "j.get('error')")"
    tail -n 20 job.log; tail -n 5 "$WORK"/c/node-*.log; }
resumed=$(grep -o "the job resumes from its checkpoint at the end of epoch [0-9]*" job.log | grep -o "[0-9]*$")
[[ -n $resumed ]] || fail "the log does not say the job resumed from a checkpoint"
[[ -z $resumed || $resumed -ge $at ]] || fail "resumed from epoch $resumed, older than the $at seen before the kill"
# Each node starts from exactly the parameters its checkpoint file holds (their SHA-256 as read
# back and at the first step after the restart).
for i in 1 2 3; do
  line=$(grep -E "node-$i: resuming from .*power-loss.ckpt-[0-9]*.dtm \($resumed epochs done" job.log)
  [[ -n $line ]] || { fail "node-$i did not say which checkpoint it resumed from"; continue; }
  read_sha=$(sed -nE 's/.*parameters sha256 ([0-9a-f]{64})\).*/\1/p' <<< "$line")
  start_sha=$(sed -nE "s/.*node-$i: epoch $((resumed + 1)) starts from parameters sha256 ([0-9a-f]{64}).*/\1/p" job.log | tail -n 1)
  [[ -n $read_sha && $read_sha == "$start_sha" ]] ||
    fail "node-$i did not start from its checkpoint's parameters (read '$read_sha', started from '$start_sha')"
done
# Only the epochs after the checkpoint ran again: epoch $((resumed + 1)) is in the log twice
# at most (before the kill and after), the first epoch once.
[[ $(grep -c "node-2: epoch 1:" job.log) == 1 ]] || fail "epoch 1 ran again"
check_trained job.json
grep -E "restarted|resum|lost" job.log | cut -c1-150 | head -n 8
echo "job $state after every daemon was killed at a checkpoint of epoch $at: resumed from epoch" \
  "${resumed:-?}, accuracy $acc, replicas within $diff"
finish cluster_restart_test
