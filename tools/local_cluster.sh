#!/usr/bin/env bash
# A dtrain cluster of N daemons on this machine (loopback), for trying things and for tests.
#
#   tools/local_cluster.sh start N [DIR]   start N daemons; node-1 is also the controller
#   tools/local_cluster.sh stop [DIR]      SIGTERM them all (and wait)
#   tools/local_cluster.sh env [DIR]       print the exports that point dtrain-submit at it
#
# DIR (default /tmp/dtrain-cluster) holds the cluster key, the controller's clients/ (client
# credentials it lets in; SIGHUP node-1 after changing it), each daemon's config, data_dir and
# log. Every daemon binds port 0 (the kernel picks free ports); the ports they bound, read from
# their logs, are then written into their configs so that a restarted daemon comes back on them.
# Binaries: $DTRAIND and $DTRAIN_SUBMIT, by default the ones `bazel build //daemon:dtraind
# //submit:dtrain-submit` made. $PEER_TIMEOUT_MS and $HEARTBEAT_MS tune failure detection
# (defaults 10000 and 1000, as in production);
# $REASSEMBLY_MB sets each daemon's data.reassembly_mb (default 512); $TAG_THREADS its
# data.tag_threads (default 0); $LANES its data.lanes (default 1); $MTU its data.mtu (default
# 1500); $CREDIT_KB its data.credit_kb (default 512).
# $TASK_OUTPUTS: the folder under which eval/infer --cluster may write (task_outputs; default
# DIR). $LIMITS: the controller's per-user limits (dtraind.yaml's `limits`, e.g.
# "{users: {bob: {running_jobs: 1, nodes: 2}}}"; default none). $DATA_ROOTS: the folders the
# daemons let jobs read inputs from (data_roots; default the folder DIR is in, and
# /usr/share/datasets).
# $GPU_NODES=K: nodes 1..K offer their GPUs (gpus: all), the others none (gpus: none), e.g. one
# GPU node and two CPU nodes on one GPU machine; with $EMULATED_GPUS=G those K nodes get G
# emulated GPUs instead (tests on machines without one; CPU arithmetic, see kernels/emulated).
# Tests only, never production: $FAULTS (e.g. "drop: 0.05, duplicate: 0.01, reorder: 0.01") is
# every daemon's data.faults, seeded with its node number; $NODE_ENV_K (e.g.
# NODE_ENV_2="DTRAIN_TEST_FAULT=apply_twice:40") is added to node K's environment.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
DTRAIND="${DTRAIND:-$root/bazel-bin/daemon/dtraind}"
DTRAIN_SUBMIT="${DTRAIN_SUBMIT:-$root/bazel-bin/submit/dtrain-submit}"

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

# wait_for_log FILE REGEX: the first capture group of the first matching line (10 s at most).
wait_for_log() {
  local value=""
  for _ in $(seq 1 100); do
    value=$(sed -nE "s/$2/\1/p" "$1" 2>/dev/null | tail -n 1)
    [[ -n $value ]] && break
    sleep 0.1
  done
  echo "$value"
}

start() {
  local n=$1 dir=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 32 ]] || { echo "error: N must be 1..32" >&2; exit 2; }
  for bin in "$DTRAIND" "$DTRAIN_SUBMIT"; do
    [[ -x $bin ]] || { echo "error: $bin not found; fix: bazel build //daemon:dtraind //submit:dtrain-submit" >&2; exit 2; }
  done
  if [[ -f $dir/pids ]]; then
    echo "error: a cluster is already running in $dir; fix: $0 stop $dir" >&2
    exit 2
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)  # absolute: data_roots and the env file name it
  [[ -f $dir/cluster.key ]] || "$DTRAIND" keygen "$dir/cluster.key" > /dev/null
  local control_port="" threads
  # The daemons share this machine's cores: each gets its part (at least one thread).
  threads=$(( $(nproc) / n ))
  (( threads >= 1 )) || threads=1
  : > "$dir/pids"
  for i in $(seq 1 "$n"); do
    local roles="[node]" gpus=all emulated="" clients="" controller=""
    # The controller lets in the client credentials in DIR/clients (docs/operations.md, "Client
    # credentials"). It names no controller: its own node reaches the port it bound.
    if [[ $i -eq 1 ]]; then
      roles="[node, controller]"; clients="clients_dir: $dir/clients"; mkdir -p -m 700 "$dir/clients"
      [[ -n ${LIMITS:-} ]] && clients+=$'\n'"limits: $LIMITS"
    else
      controller="controller: 127.0.0.1:$control_port"
    fi
    if [[ -n ${GPU_NODES:-} ]]; then
      if [[ $i -le $GPU_NODES ]]; then emulated=${EMULATED_GPUS:-}; else gpus=none; fi
    fi
    local faults=""
    [[ -n ${FAULTS:-} ]] && faults=", faults: {$FAULTS, seed: $i}"
    cat > "$dir/node-$i.yaml" <<YAML
name: node-$i
roles: $roles
data_dir: $dir/data-$i
key_file: $dir/cluster.key
$clients
$controller
control: {address: 127.0.0.1, port: ${control_port:-0}}
data: {interface: lo, port: 0${REASSEMBLY_MB:+, reassembly_mb: $REASSEMBLY_MB}${TAG_THREADS:+, tag_threads: $TAG_THREADS}${LANES:+, lanes: $LANES}${MTU:+, mtu: $MTU}${CREDIT_KB:+, credit_kb: $CREDIT_KB}$faults}
http: {address: 127.0.0.1, port: 0}
threads: $threads
gpus: $gpus
heartbeat_ms: ${HEARTBEAT_MS:-1000}
peer_timeout_ms: ${PEER_TIMEOUT_MS:-10000}
task_outputs: [${TASK_OUTPUTS:-$dir}]
data_roots: [${DATA_ROOTS:-$(dirname "$dir"), /usr/share/datasets}]
YAML
    local node_env="NODE_ENV_$i"
    # shellcheck disable=SC2086  # NAME=VALUE words, split on purpose
    env ${!node_env:-} DTRAIN_EMULATED_GPUS=$emulated "$DTRAIND" --config "$dir/node-$i.yaml" \
      > "$dir/node-$i.log" 2>&1 &
    echo "$! node-$i" >> "$dir/pids"
    if [[ $i -eq 1 ]]; then
      control_port=$(wait_for_log "$dir/node-1.log" '.*controller: control channel on [0-9.]+:([0-9]+).*')
      if [[ -z $control_port ]]; then
        echo "error: node-1 did not open its control channel within 10 s; its log:" >&2
        tail -n 5 "$dir/node-1.log" >&2
        exit 1
      fi
    fi
  done
  printf 'export DTRAIN_CONTROLLER=127.0.0.1:%s\nexport DTRAIN_KEY_FILE=%s\n' \
    "$control_port" "$dir/cluster.key" > "$dir/env"
  # Ready when every node has registered (at most 30 s).
  local alive=0
  for _ in $(seq 1 300); do
    alive=$(DTRAIN_CONTROLLER=127.0.0.1:$control_port "$DTRAIN_SUBMIT" nodes --json \
              --key-file "$dir/cluster.key" 2>/dev/null | grep -c '"state": "alive"' || true)
    [[ $alive -ge $n ]] && break
    sleep 0.1
  done
  if [[ $alive -lt $n ]]; then
    echo "error: only $alive of $n nodes registered within 30 s; logs in $dir/node-*.log" >&2
    tail -n 5 "$dir"/node-*.log >&2
    exit 1
  fi
  # Each daemon's bound ports into its config, for restarts and for the tests that read them.
  for i in $(seq 1 "$n"); do
    local data_port http_port
    data_port=$(wait_for_log "$dir/node-$i.log" '.*data channel on interface .*:([0-9]+)\).*')
    http_port=$(wait_for_log "$dir/node-$i.log" '.*status: http:\/\/[0-9.]+:([0-9]+)\/status.*')
    if [[ -z $data_port || -z $http_port ]]; then
      echo "error: node-$i did not log its data and status ports; logs in $dir/node-$i.log" >&2
      exit 1
    fi
    sed -i -E -e "s/^(data: \{interface: lo, port: )0/\1$data_port/" \
        -e "s/^(http: \{address: 127.0.0.1, port: )0/\1$http_port/" \
        -e "s/^(control: \{address: 127.0.0.1, port: )0/\1$control_port/" "$dir/node-$i.yaml"
  done
  echo "started $n daemons in $dir (controller 127.0.0.1:$control_port; status pages:"
  grep -h "^http:" "$dir"/node-*.yaml | sed -E 's/.*port: ([0-9]+).*/  http:\/\/127.0.0.1:\1\/metrics/'
  echo "); use it with:"
  echo "  source $dir/env"
}

stop() {
  local dir=$1
  [[ -f $dir/pids ]] || { echo "no cluster in $dir"; return 0; }
  while read -r pid name; do kill -TERM "$pid" 2>/dev/null || true; done < "$dir/pids"
  while read -r pid name; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done < "$dir/pids"
  rm -f "$dir/pids"
  echo "stopped the daemons in $dir"
}

case "${1:-}" in
  start) [[ $# -ge 2 ]] || usage; start "$2" "${3:-/tmp/dtrain-cluster}" ;;
  stop) stop "${2:-/tmp/dtrain-cluster}" ;;
  env) cat "${2:-/tmp/dtrain-cluster}/env" ;;
  *) usage ;;
esac
