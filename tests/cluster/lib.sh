# Shared by the cluster tests. A test starts with
#   source "$(dirname "$0")/lib.sh" NAME DTRAIND SUBMIT CLUSTER_TOOL
# which sets DTRAIND, SUBMIT and CLUSTER_TOOL (absolute paths), makes WORK (a fresh NAME folder
# under TEST_TMPDIR) the current directory, exports what tools/local_cluster.sh reads, and stops
# the test's cluster in WORK/c on exit, also when the test fails or is killed by its deadline.
# Checks call fail; the test ends with `finish NAME`. Make other arguments absolute before.
abs_path() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
DTRAIND=$(abs_path "$2")
SUBMIT=$(abs_path "$3")
CLUSTER_TOOL=$(abs_path "$4")
WORK="${TEST_TMPDIR:-$(mktemp -d)}/$1"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export DTRAIND DTRAIN_SUBMIT="$SUBMIT"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
json() {  # json FILE PYTHON-EXPRESSION-ON-j
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}
fetch() {  # fetch URL: the body, or a failure status
  python3 -c "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$1"
}
http_port() {  # http_port NODE (node-1, ...): that daemon's status port
  sed -nE 's/^http: .*port: ([0-9]+).*/\1/p' "$WORK/c/$1.yaml"
}
# wait_job_end ID FILE SECONDS: polls until job ID has ended, for at most SECONDS; its status
# JSON is left in FILE and its state (or the last state seen) printed.
wait_job_end() {
  local state=""
  for _ in $(seq 1 $(($3 * 10))); do
    "$DTRAIN_SUBMIT" status "$1" --json > "$2" 2> /dev/null
    state=$(json "$2" "j['state']" 2> /dev/null)
    [[ $state == succeeded || $state == failed || $state == cancelled ]] && break
    sleep 0.1
  done
  echo "$state"
}
# checkpointing_spec SPEC EPOCHS NAME: the MLP example (SPEC) as job NAME writing NAME.dtm, with
# EPOCHS epochs, 64 examples per worker and a checkpoint at every epoch end, on stdout.
checkpointing_spec() {
  sed -e "s/epochs: 5/epochs: $2/" -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
      -e 's/checkpoint_every: 1000/checkpoint_every: 1/' -e "s/name: fashion-mnist-mlp/name: $3/" \
      -e "s/model: fashion-mnist-mlp.dtm/model: $3.dtm/" "$1"
}
# wait_checkpoint ID EPOCH SECONDS: polls until job ID's consistent checkpoint has at least EPOCH
# epochs done, for at most SECONDS; prints the epoch seen (empty or smaller on a timeout).
wait_checkpoint() {
  local at=""
  for _ in $(seq 1 $(($3 * 10))); do
    "$DTRAIN_SUBMIT" status "$1" --json > checkpoint.json 2> /dev/null
    at=$(json checkpoint.json "j.get('checkpoint', {}).get('epoch', 0)" 2> /dev/null)
    [[ ${at:-0} -ge $2 ]] && break
    sleep 0.1
  done
  echo "$at"
}
# wait_epoch ID EPOCH SECONDS: polls until some node of job ID reports EPOCH (1-based) or later,
# for at most SECONDS, and sets `epoch` to the epoch seen. On a timeout the test fails, naming
# what it waited for, and the status is 1. (Not in $(...): fail must count in this shell.)
wait_epoch() {
  epoch=0
  for _ in $(seq 1 $(($3 * 10))); do
    "$DTRAIN_SUBMIT" status "$1" --json > progress.json 2> /dev/null
    epoch=$(json progress.json "max([p.get('epoch', 0) for p in j['progress'].values()] or [0])" 2> /dev/null)
    [[ ${epoch:-0} -ge $2 ]] && return 0
    sleep 0.1
  done
  fail "waited $3 s for job $1 to reach epoch $2; it is at '${epoch:-none}'"
  return 1
}
# await_fault_exit NODE SECONDS: waits until the daemon of NODE has ended itself where its
# DTRAIN_TEST_FAULT=exit_in_epoch:E put it (core/train/test_fault.h; set it with NODE_ENV_K before
# the cluster starts), for at most SECONDS, and prints where that was. A test loses the node at
# a known point of an epoch however fast the job runs. Fails the test, naming what it waited for,
# when the daemon never said so (status 1; not in $(...): fail must count in this shell).
await_fault_exit() {
  local said
  for _ in $(seq 1 $(($2 * 10))); do
    said=$(grep -o "ends itself with SIGKILL at .*" "$WORK/c/$1.log" | tail -n 1)
    [[ -n $said ]] && { echo "$1 $said"; return 0; }
    sleep 0.1
  done
  fail "waited $2 s for $1 to end itself where DTRAIN_TEST_FAULT says: $(tail -n 3 "$WORK/c/$1.log")"
  return 1
}
# check_trained FILE [PREFIX]: the job in status JSON FILE reached 0.85 test accuracy and its
# replicas agree within 1e-5 (failures start with PREFIX); sets acc and diff for the summary.
check_trained() {
  acc=$(json "$1" "j['result'].get('accuracy', 0)")
  diff=$(json "$1" "j['result'].get('replica_max_relative_difference', 1)")
  python3 -c "import sys; sys.exit(0 if $acc >= 0.85 else 1)" || fail "${2:-}accuracy $acc < 0.85"
  python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "${2:-}replicas differ by $diff"
}
# restart_daemon NODE SIGNAL: sends the daemon of NODE (node-1, ...) SIGNAL, waits up to 10 s
# for it to end, and starts it again with its config and log, keeping $WORK/c/pids true.
restart_daemon() {
  local pid
  pid=$(awk -v n="$1" '$2 == n { print $1 }' "$WORK/c/pids")
  kill "-$2" "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  "$DTRAIND" --config "$WORK/c/$1.yaml" >> "$WORK/c/$1.log" 2>&1 &
  sed -i "/ $1\$/d" "$WORK/c/pids"
  echo "$! $1" >> "$WORK/c/pids"
  echo "restarted $1 after SIG$2 (pid $pid, now $!)"
}
# lose_and_restart NODE ID FILE: SIGKILLs the daemon of NODE (unless it has ended itself), waits
# up to 10 s until job ID names it lost (its status JSON in FILE), then starts it again with its
# config and log (without its NODE_ENV_K), keeping $WORK/c/pids true; fails the test if the job
# never named it.
lose_and_restart() {
  local pid
  pid=$(awk -v n="$1" '$2 == n { print $1 }' "$WORK/c/pids")
  kill -KILL "$pid" 2> /dev/null && echo "killed $1 (pid $pid)"
  for _ in $(seq 1 100); do
    "$DTRAIN_SUBMIT" status "$2" --json > "$3" 2> /dev/null
    json "$3" "j['lost_nodes']" | grep -q "$1" && break
    sleep 0.1
  done
  json "$3" "j['lost_nodes']" | grep -q "$1" || fail "the job does not name $1 as lost"
  "$DTRAIND" --config "$WORK/c/$1.yaml" >> "$WORK/c/$1.log" 2>&1 &
  sed -i "/ $1\$/d" "$WORK/c/pids"
  echo "$! $1" >> "$WORK/c/pids"
  echo "restarted $1 (pid $!)"
}
# answered OUT ARGS...: runs `dtrain-submit ARGS` (output in OUT) until it succeeds, for at most
# 10 s (a restarted controller); the status is 1 if it never did.
answered() {
  local out=$1
  shift
  for _ in $(seq 1 100); do
    "$DTRAIN_SUBMIT" "$@" > "$out" 2> /dev/null && return 0
    sleep 0.1
  done
  return 1
}
cluster_cleanup() { "$CLUSTER_TOOL" stop "$WORK/c" > /dev/null 2>&1 || true; }
trap cluster_cleanup EXIT
finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$1: $failures check(s) failed"
    exit 1
  fi
  echo "$1: all checks passed"
}
