# Shared by the tests that run daemons on namespaced hosts (tools/netns_hosts.sh). A test starts
#   source "$(dirname "$0")/lib.sh" NAME DTRAIND SUBMIT HOSTS_TOOL [DELAY_LINE]
# which sets DTRAIND, SUBMIT and HOSTS_TOOL (absolute paths), makes WORK (a fresh NAME folder
# under TEST_TMPDIR) the current directory and, on exit (also on a failure or a deadline), stops
# every daemon it started and deletes the hosts. Host I is 10.77.0.I; host 1 is the controller.
abs_path() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
DTRAIND=$(abs_path "$2")
SUBMIT=$(abs_path "$3")
HOSTS_TOOL=$(abs_path "$4")
[[ -n ${5:-} ]] && export DELAY_LINE=$(abs_path "$5")
WORK="${TEST_TMPDIR:-$(mktemp -d)}/$1"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
tag="dt$$"
hosts=0
declare -A host_pid=()
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
json() {  # json FILE PYTHON-EXPRESSION-ON-j
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

hosts_cleanup() {
  for pid in "${host_pid[@]}"; do kill -TERM "$pid" 2> /dev/null; done
  for pid in "${host_pid[@]}"; do  # 5 s each to end, then SIGKILL
    for _ in $(seq 1 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null
  done
  [[ $hosts -gt 0 ]] && "$HOSTS_TOOL" down "$tag" "$hosts"
}
trap hosts_cleanup EXIT

# hosts_up N RATE [DELAY]: N hosts at RATE, DELAY apart one way; a machine that forbids network
# namespaces ends the test as SKIPPED with the reason, any other failure fails it.
hosts_up() {
  hosts=$1
  "$HOSTS_TOOL" up "$tag" "$@" 2> netns.err
  local rc=$?
  if [[ $rc -eq 77 ]]; then
    echo "SKIPPED: $(cat netns.err)"
    exit 0
  fi
  [[ $rc -eq 0 ]] || { echo "FAIL: setting up the namespaces: $(cat netns.err)"; exit 1; }
  "$DTRAIND" keygen cluster.key > /dev/null
}

# start_host I [NAME=VALUE...]: host I's daemon (config node-I.yaml, log node-I.log, appended),
# with the given variables in its environment only; $PEER_TIMEOUT_MS and $HEARTBEAT_MS as for
# tools/local_cluster.sh. A daemon still running there from before is SIGKILLed first, so that
# cleanup, which knows one pid a host, leaves none behind.
start_host() {
  local i=$1 roles="[node]" old=${host_pid[$1]:-}
  shift
  if [[ -n $old ]] && kill -0 "$old" 2> /dev/null; then
    kill -KILL "$old"
    for _ in $(seq 1 50); do kill -0 "$old" 2> /dev/null || break; sleep 0.1; done
  fi
  [[ $i -eq 1 ]] && roles="[node, controller]"
  cat > "node-$i.yaml" <<YAML
name: host-$i
roles: $roles
data_dir: $WORK/data-$i
key_file: $WORK/cluster.key
controller: 10.77.0.1:7070
control: {address: 10.77.0.1, port: 7070}
data: {network: 10.77.0.0/24, port: 40123}
http: {address: 127.0.0.1, port: 7080}
threads: 1
heartbeat_ms: ${HEARTBEAT_MS:-1000}
peer_timeout_ms: ${PEER_TIMEOUT_MS:-10000}
YAML
  ip netns exec "$tag-h$i" env "$@" "$DTRAIND" --config "node-$i.yaml" >> "node-$i.log" 2>&1 &
  host_pid[$i]=$!
}

# on_h1 COMMAND...: runs it on host 1. submit ARGS...: dtrain-submit there, at the controller
# (timeout takes the command itself: `timeout S ip netns exec "$tag-h1" "$SUBMIT" ARGS...`).
export DTRAIN_CONTROLLER=10.77.0.1:7070 DTRAIN_KEY_FILE=$WORK/cluster.key
on_h1() { ip netns exec "$tag-h1" "$@"; }
submit() { on_h1 "$SUBMIT" "$@"; }

# wait_alive N SECONDS: until N hosts are alive at the controller; fails the test and ends it
# (with the daemons' last lines) when they are not within SECONDS.
wait_alive() {
  local alive=0 end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    alive=$(submit nodes --json 2> /dev/null | grep -c '"state": "alive"')
    [[ $alive -ge $1 ]] && return 0
    sleep 0.1
  done
  echo "FAIL: only $alive of $1 hosts registered within $2 s"
  tail -n 5 node-*.log
  exit 1
}

# wait_job_end ID FILE SECONDS: polls until job ID has ended, for at most SECONDS; its status
# JSON is left in FILE and its state (or the last state seen) printed.
wait_job_end() {
  local state="" end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    submit status "$1" --json > "$2" 2> /dev/null
    state=$(json "$2" "j['state']" 2> /dev/null)
    [[ $state == succeeded || $state == failed || $state == cancelled ]] && break
    sleep 0.1
  done
  echo "$state"
}

finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$1: $failures check(s) failed"
    exit 1
  fi
  echo "$1: all checks passed"
}
