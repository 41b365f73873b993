#!/usr/bin/env bash
# Standby controllers on etcd (docs/architecture/daemon.md, "Standby controllers") with real
# daemons: three controller candidates (cand-1..3, roles [controller], 3 s leases) and three
# nodes (node-1..3) that name all three, on loopback in a network namespace of the test's own,
# against Debian's etcd-server.
#   (a) One leader is elected; a long MLP job is submitted; the leader is killed (SIGKILL) after
#       two epochs: a standby leads within two lease periods and adopts the job.
#   (b) That leader is paused (SIGSTOP) past its lease: another leads; resumed (SIGCONT), the
#       paused one says it stopped leading, its /status says standby, and it does not lead
#       again while the other does.
#   (c) etcd is paused for three lease periods: the leader stops leading, nobody leads, the
#       nodes train on (their own /status); etcd back, a leader within two lease periods
#       adopts the job.
#   (d) The job succeeds, accuracy >= 0.85, its replicas agreeing.
#   (e) Its record in etcd has exactly one start line and exactly one end line.
# Throughout, `dtrain-submit status ID --json` is polled every 0.2 s: no run of failed polls
# lasts longer than two lease periods and an allowance (ALLOW_MS below), the etcd pause of (c)
# aside (nobody may lead then). Every wait has a wall-clock deadline and says what it waits
# for; a failure prints the logs' tails. SKIPPED without etcd or network namespaces.
# About 80 to 120 s.
#   controller_failover_test.sh DTRAIND DTRAIN_SUBMIT MLP_SPEC
set -u
[[ $# -eq 3 ]] || { echo "usage: $0 DTRAIND DTRAIN_SUBMIT MLP_SPEC"; exit 2; }
abs_path() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
DTRAIND=$(abs_path "$1")
SUBMIT=$(abs_path "$2")
SPEC=$(abs_path "$3")
WORK="${TEST_TMPDIR:-$(mktemp -d)}/controller_failover"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
extra_cleanup() { touch "$WORK/poll.stop"; }  # the status poller ends itself
# shellcheck source=tests/deploy/etcd_lib.sh
source "$(dirname "$0")/etcd_lib.sh" dtfo  # ns, pid[], in_ns, the cleanup; etcd up
now_ms() { date +%s%3N; }
sleep_ms() { (( $1 > 0 )) && sleep "$(($1 / 1000)).$(printf %03d $(($1 % 1000)))"; }
# until_at END_MS CMD...: runs CMD every 0.1 s until it succeeds or the wall clock passes END_MS
# (status 1). By the clock, not by tries: each try starts programs, python3 among them, which
# on a loaded machine take long enough to stretch a count of tries well past its deadline.
until_at() {
  local end=$1
  shift
  until "$@"; do
    (( $(now_ms) < end )) || return 1
    sleep 0.1
  done
}
in_s() { echo $(( $(now_ms) + $1 * 1000 )); }  # in_s SECONDS: that far from now, in ms
t_start=$(now_ms)

LEASE=3                    # controller_election.lease_s: etcd_election_test.sh's 3 s
LEASE_MS=$((LEASE * 1000))
HEARTBEAT_MS=500           # a node hears from its controller at least this often...
PEER_TIMEOUT_MS=3000       # ...and after twice this much silence (a paused leader) tries others
# An adoption ends when every node has registered again, at the latest 2 x peer timeout + 5 s
# after the new leader took the job over (docs/architecture/daemon.md, "Controller restart");
# a lease more for the record's write to etcd and the test's own reading of it.
ADOPT_S=$((2 * PEER_TIMEOUT_MS / 1000 + 5 + LEASE))
# The job outlives the phases (about 45 s after two epochs) however fast the machine: each step
# of a node's worker takes SLOW_STEP_MS more (DTRAIN_TEST_FAULT=slow_steps, core/train/
# test_fault.h), about 313 steps an epoch, so an epoch takes 2 s or more and the phases pass
# within about 23 epochs.
SLOW_STEP_MS=6
EPOCHS=${FAILOVER_EPOCHS:-32}
JOB_END_S=240              # the job's hard deadline (the whole test aims at under 120 s)
# The status poller: a poll every POLL_MS; dtrain-submit gives up on an address after
# CONNECT_MS (a paused controller's kernel accepts the TCP connection, but it never answers the
# handshake), and `timeout` ends any poll after POLL_MAX_S, whatever it waits for (a request
# sent just before its leader was paused).
POLL_MS=200
CONNECT_MS=1000
POLL_MAX_S=2
# A run of failed polls counts from the end of its first failed poll (the outage had begun by
# then) to the start of the next good poll. That one starts at most POLL_MS after the end of
# the poll in progress when the outage ended, which may have failed and lasts at most
# POLL_MAX_S: an outage of D ms counts at most D + POLL_MS + POLL_MAX_S * 1000.
ALLOW_MS=$((POLL_MS + POLL_MAX_S * 1000))
LIMIT_MS=$((2 * LEASE_MS + ALLOW_MS))
CANDS=(cand-1 cand-2 cand-3)
# Every client names all three candidates: it tries each, and follows a standby's answer naming
# the leader.
export DTRAIN_CONTROLLER=127.0.0.1:7071,127.0.0.1:7072,127.0.0.1:7073
export DTRAIN_KEY_FILE=$WORK/cluster.key

json() {  # json FILE PYTHON-EXPRESSION-ON-j (as tests/cluster/lib.sh)
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}
# tails: the end of every log, for a failure's reader.
tails() {
  local f
  for f in etcd.log cand-*.log node-*.log; do
    [[ -f $f ]] && { echo "--- tail of $f"; tail -n 12 "$f"; }
  done
  [[ -s poll_errors.txt ]] &&
    { echo "--- the last failed status polls"; tail -n 5 poll_errors.txt; }
}
# die MESSAGE: a failure after which the rest cannot run.
die() {
  fail "$*"
  tails
  echo "controller_failover_test: stopped at a fatal failure ($failures check(s) failed)"
  exit 1
}
# mark NAME: when a phase began (ms), for the report on the status polls.
mark() { echo "$1 $(now_ms)" >> phases.txt; }

# --- the election, as the candidates log it (stderr, spdlog) ---------------------------------
n_leading() {
  local n
  n=$(grep -c "controller election: leading" "$1.log" 2> /dev/null)
  echo "${n:-0}"
}
n_stopped() {
  local n
  n=$(grep -c "controller election: stopped leading" "$1.log" 2> /dev/null)
  echo "${n:-0}"
}
# leads C: whether C's last word on the election is that it leads.
leads() {
  [[ $(grep -o "controller election: \(stopped \)\?leading" "$1.log" 2> /dev/null |
       tail -n 1) == "controller election: leading" ]]
}
# snapshot: each candidate's count of "leading" lines now, for leads_anew.
declare -A led0=()
snapshot() { local c; for c in "${CANDS[@]}"; do led0[$c]=$(n_leading "$c"); done; }
# leads_anew C...: one of them began leading since the snapshot and still leads; sets newl to
# it and seen_ms to when the test saw it.
leads_anew() {
  local c
  for c in "$@"; do
    if (( $(n_leading "$c") > ${led0[$c]:-0} )) && leads "$c"; then
      newl=$c
      seen_ms=$(now_ms)
      return 0
    fi
  done
  return 1
}
stood_down() { (( $(n_stopped "$1") > $2 )); }  # stood_down C N: more than N "stopped" lines
# stamp_ms FILE TEXT: the spdlog time ([%Y-%m-%d %H:%M:%S.%e], local) of FILE's last line
# holding TEXT, in ms; nothing when there is none or it does not parse.
stamp_ms() {
  python3 - "$1" "$2" <<'PY'
import datetime, sys
t = None
for line in open(sys.argv[1], errors="replace"):
    if sys.argv[2] in line and line.startswith("["):
        try:
            t = datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()
        except ValueError:
            pass
if t is not None:
    print(int(t * 1000))
PY
}
# took_ms FROM_MS C SEEN_MS: how long after FROM_MS candidate C logged that it leads, by its
# log's own stamp, or by when the test saw it (SEEN_MS, up to a check's time late) when the
# stamp is missing or off.
took_ms() {
  local t
  t=$(stamp_ms "$2.log" "controller election: leading")
  [[ -n $t ]] && (( t >= $1 - 1000 && t <= $3 + 1000 )) || t=$3
  echo $((t - $1))
}
# election_is C ROLE LEADER: whether cand C's /status says controller.election.role ROLE with
# LEADER's name first in its leader field ("<name> <host:port>"); sets said to what it said.
election_is() {
  said=$(in_ns python3 -c '
import json, sys, urllib.request
e = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))["controller"]["election"]
print(e.get("role"), e.get("leader", ""), e.get("error", ""), sep="|")' \
    "http://127.0.0.1:708${1#cand-}/status" 2> /dev/null || echo unreadable)
  [[ ${said%%|*} == "$2" && $(cut -d'|' -f2 <<< "$said") == "$3 "* ]]
}
# clients_match_is C WANT: whether cand C's /status says controller.election.clients_match_leader
# WANT (True or False); sets said to what it said.
clients_match_is() {
  said=$(in_ns python3 -c '
import json, sys, urllib.request
e = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))["controller"]["election"]
print(e.get("clients_match_leader"))' "http://127.0.0.1:708${1#cand-}/status" 2> /dev/null ||
    echo unreadable)
  [[ $said == "$2" ]]
}
# wait_election C ROLE LEADER SECONDS: until election_is; fails naming what it saw.
wait_election() {
  local t0 said=""
  t0=$(now_ms)
  if until_at "$(in_s "$4")" election_is "$1" "$2" "$3"; then
    echo "$1's /status: $2, leader $3 (seen after $(( $(now_ms) - t0 )) ms)"
  else
    fail "waited $4 s for $1's /status to say $2 with leader $3; it says '$said'"
  fi
}

# --- the job --------------------------------------------------------------------------------
# record ID FILE: job ID's record, read from etcd (/dtrain/jobs/ID, through etcd's JSON gateway:
# etcdctl is Debian's etcd-client, not always there), into FILE; prints "STATE STARTS ENDS
# ADOPTIONS", the counts of its log's lines of each kind; status 1 without a record. An end is
# also "cancelled: the controller was stopped", a controller's stop: a candidate that stood
# down must not end the job that way either.
record() {
  in_ns python3 - "$1" "$2" 2> /dev/null <<'PY'
import base64, json, sys, urllib.request
key = base64.b64encode(("/dtrain/jobs/" + sys.argv[1]).encode()).decode()
req = urllib.request.Request("http://127.0.0.1:2379/v3/kv/range",
                             json.dumps({"key": key}).encode(),
                             {"Content-Type": "application/json"})
kvs = json.load(urllib.request.urlopen(req, timeout=2)).get("kvs", [])
if not kvs:
    sys.exit(1)
text = base64.b64decode(kvs[0]["value"]).decode()
open(sys.argv[2], "w").write(text)
j = json.loads(text)
count = lambda *ts: sum(any(t in l for t in ts) for l in j.get("log", []))
ends = ("job succeeded", "job failed", "job cancelled", "cancelled: the controller was stopped")
print(j.get("state", "none"), count("started on "), count(*ends), count("adopted by"))
PY
}
# record_keys: the keys under /dtrain/jobs/ (range_end: the prefix with its last byte + 1).
record_keys() {
  in_ns python3 - <<'PY' 2>&1
import base64, json, urllib.request
b64 = lambda s: base64.b64encode(s.encode()).decode()
req = urllib.request.Request(
    "http://127.0.0.1:2379/v3/kv/range",
    json.dumps({"key": b64("/dtrain/jobs/"), "range_end": b64("/dtrain/jobs0"),
                "keys_only": True}).encode(), {"Content-Type": "application/json"})
kvs = json.load(urllib.request.urlopen(req, timeout=2)).get("kvs", [])
print(" ".join(base64.b64decode(kv["key"]).decode() for kv in kvs) or "none")
PY
}
# read_record ID: record into rec.json, and rec_state, rec_starts, rec_ends, rec_adopted.
read_record() {
  local s
  s=$(record "$1" rec.json) || return 1
  read -r rec_state rec_starts rec_ends rec_adopted <<< "$s"
}
# last_log_line FILE TEXT: the last line of the record's log (FILE) holding TEXT, cut short.
last_log_line() {
  python3 -c '
import json, sys
lines = [l for l in json.load(open(sys.argv[1])).get("log", []) if sys.argv[2] in l]
print((lines or [""])[-1][:140])' "$1" "$2"
}
adopted_past() { read_record "$1" && (( rec_adopted > $2 )); }
# wait_adopted ID BEFORE WHO FROM_MS: until job ID's record has more than BEFORE "adopted by"
# lines (ADOPT_S after FROM_MS, when WHO began leading, at most), then that it still runs.
wait_adopted() {
  if until_at $(($4 + ADOPT_S * 1000)) adopted_past "$1" "$2"; then
    echo "$3 adopted job $1 (seen $(( $(now_ms) - $4 )) ms after it led):" \
      "$(last_log_line rec.json "adopted by")"
    [[ $rec_state == running ]] || fail "job $1 is '$rec_state' in etcd after $3's adoption"
  else
    fail "waited $ADOPT_S s from $3's leading for it to adopt job $1 (an 'adopted by' line" \
      "past the $2 before)"
  fi
}
# status_of ID FILE: `dtrain-submit status ID --json` (any candidate) into FILE; sets st and
# epoch (the furthest node's), status 1 when nobody answered with a state.
status_of() {
  in_ns "$SUBMIT" status "$1" --json > "$2" 2> /dev/null || return 1
  st=$(json "$2" "j['state']" 2> /dev/null)
  epoch=$(json "$2" "max([p.get('epoch', 0) for p in j.get('progress', {}).values()] or [0])" \
    2> /dev/null)
  [[ -n $st ]]
}
# require_running ID PHASE LEFT: the job must run, LEFT epochs or more to go, before PHASE, or
# what follows would test nothing: a clear failure instead.
require_running() {
  st="" epoch=""
  until_at "$(in_s 10)" status_of "$1" running.json ||
    die "nobody answered the status of job $1 for 10 s before $2"
  [[ $st == running && ${epoch:-0} -le $((EPOCHS - $3)) ]] ||
    die "job $1 is '$st' at epoch ${epoch:-?} of $EPOCHS before $2, which needs $3 epochs" \
      "more: it runs too fast here (raise FAILOVER_EPOCHS, now $EPOCHS)"
  echo "job $1 runs before $2: epoch $epoch of $EPOCHS"
}
# node_jobs ID: for node-1..3, a line each: "EPOCH ITERATION" of job ID by the node's own
# /status, "none" when it does not train it, "unreadable" when the status cannot be read (a
# node that does not answer never passes for one that stopped).
node_jobs() {
  in_ns python3 - "$1" <<'PY'
import json, sys, urllib.request
for port in (7091, 7092, 7093):
    try:
        url = f"http://127.0.0.1:{port}/status"
        jobs = json.load(urllib.request.urlopen(url, timeout=2))["node"]["jobs"]
    except Exception:
        print("unreadable")
        continue
    p = [j.get("progress") or {} for j in jobs if j.get("id") == sys.argv[1]]
    print(*([p[0].get("epoch", 0), p[0].get("iteration", 0)] if p else ["none"]))
PY
}

# new_leader_after FROM_MS WHAT C...: waits up to three leases from FROM_MS (when WHAT happened)
# for one of the candidates C to lead anew, and fails unless it did within two; sets l_new to
# it and l_took to the milliseconds it took. A standby sees the lease gone within a third of a
# lease after etcd expires it; the third lease is the margin that tells "late" from "never".
new_leader_after() {
  local from=$1 what=$2
  shift 2
  newl=""
  until_at $((from + 3 * LEASE_MS)) leads_anew "$@" ||
    die "no standby led within $((3 * LEASE)) s of $what"
  l_new=$newl
  l_took=$(took_ms "$from" "$l_new" "$seen_ms")
  echo "$l_new leads $l_took ms after $what (lease $LEASE s: at most $((2 * LEASE_MS)) ms)"
  (( l_took <= 2 * LEASE_MS )) || fail "leading after $what took $l_took ms, over two leases"
}

# --- the candidates, the nodes (etcd is up: etcd_lib.sh) -------------------------------------
"$DTRAIND" keygen "$WORK/cluster.key" > keygen.out 2>&1 ||
  die "dtraind keygen: $(cat keygen.out)"
# Each daemon is started with ip netns exec itself (it becomes the program): $! is its own pid,
# the one SIGSTOP and SIGKILL must reach.

# The client lists: cand-1 and cand-2 hold the same one (alice), cand-3 another (bob): the
# standbys whose list differs from the leader's say so (controller.election in /status).
mkdir -p clients-12 clients-3
for who in alice bob; do
  "$DTRAIND" keygen --client "$who" "$who.cred" > /dev/null 2>&1 || die "dtraind keygen --client"
done
cp -p alice.cred clients-12/ && cp -p bob.cred clients-3/
clients_of() { if [[ $1 == cand-3 ]]; then echo clients-3; else echo clients-12; fi; }

for i in 1 2 3; do
  cat > "cand-$i.yaml" <<YAML
name: cand-$i
roles: [controller]
data_dir: $WORK/data-cand-$i
key_file: $WORK/cluster.key
control: {address: 127.0.0.1, port: 707$i}
http: {address: 127.0.0.1, port: 708$i}
controller_election: {etcd: [http://127.0.0.1:2379], lease_s: $LEASE}
clients_dir: $WORK/$(clients_of "cand-$i")
heartbeat_ms: $HEARTBEAT_MS
peer_timeout_ms: $PEER_TIMEOUT_MS
task_outputs: [$WORK]
data_roots: [$WORK, /usr/share/datasets]
YAML
  ip netns exec "$ns" "$DTRAIND" --config "$WORK/cand-$i.yaml" > "cand-$i.log" 2>&1 &
  pid[cand-$i]=$!
done
# The nodes share the cores, as tools/local_cluster.sh splits them (the candidates and etcd
# take little).
threads=$(( $(nproc) / 3 ))
(( threads >= 1 )) || threads=1
for i in 1 2 3; do
  # As tools/local_cluster.sh writes a node's config, but naming every candidate, with fixed
  # ports (the namespace is the test's own) and fast failure detection. No control key: only a
  # controller listens on it. interface: lo names loopback, so no allow_loopback is needed.
  cat > "node-$i.yaml" <<YAML
name: node-$i
roles: [node]
data_dir: $WORK/data-node-$i
key_file: $WORK/cluster.key
controller: [127.0.0.1:7071, 127.0.0.1:7072, 127.0.0.1:7073]
data: {interface: lo, port: 710$i}
http: {address: 127.0.0.1, port: 709$i}
threads: $threads
gpus: all
heartbeat_ms: $HEARTBEAT_MS
peer_timeout_ms: $PEER_TIMEOUT_MS
task_outputs: [$WORK]
data_roots: [$WORK, /usr/share/datasets]
YAML
  # env execs dtraind: $! is still the daemon's own pid.
  ip netns exec "$ns" env DTRAIN_TEST_FAULT="slow_steps:$SLOW_STEP_MS" "$DTRAIND" \
    --config "$WORK/node-$i.yaml" > "node-$i.log" 2>&1 &
  pid[node-$i]=$!
done

# The long job: one worker per node, 64 examples per worker, no checkpoints (an adoption needs
# none: the nodes keep training), EPOCHS epochs.
sed -e 's/workers_per_node: auto/workers_per_node: 1/' \
    -e 's/checkpoint_every: 1000/checkpoint_every: 0/' -e "s/epochs: 5/epochs: $EPOCHS/" \
    -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    -e 's/name: fashion-mnist-mlp/name: failover/' "$SPEC" > long.yaml
if ! grep -q "epochs: $EPOCHS" long.yaml || ! grep -q "workers_per_node: 1" long.yaml; then
  die "$SPEC no longer has the lines this test edits (epochs: 5, workers_per_node: auto)"
fi

# === (a) ====================================================================================
echo "== (a) three candidates elect one leader; a job; the leader killed (SIGKILL)"
mark elect
# No snapshot yet: led0 is empty, so any "leading" line counts (one may have led already).
echo "waiting up to 15 s for a candidate to log 'controller election: leading'"
newl=""
until_at "$(in_s 15)" leads_anew "${CANDS[@]}" || die "no candidate led within 15 s of starting"
l1=$newl
sleep 1  # a second leader would have campaigned by now (standbys look every lease / 3)
n=0
for c in "${CANDS[@]}"; do leads "$c" && n=$((n + 1)); done
[[ $n -eq 1 ]] || fail "$n candidates say they lead"
echo "leader: $l1"
wait_election "$l1" leader "$l1" 5
for c in "${CANDS[@]}"; do [[ $c != "$l1" ]] && wait_election "$c" standby "$l1" 5; done
# Each standby compares its client list with the leader's within a step (a third of a lease).
for c in "${CANDS[@]}"; do
  [[ $c == "$l1" ]] && continue
  want=False
  [[ $(clients_of "$c") == "$(clients_of "$l1")" ]] && want=True
  if until_at "$(in_s 3)" clients_match_is "$c" "$want"; then
    echo "$c's /status: its client list matches the leader's: $want"
  else
    fail "$c's /status says clients_match_leader '$said', not $want (its list is" \
      "$(clients_of "$c"), the leader's $(clients_of "$l1"))"
  fi
done
if [[ $(clients_of "$l1") != clients-3 ]]; then
  grep -q "clients_dir .* differs from the leader's" cand-3.log ||
    fail "cand-3 did not log that its clients_dir differs from the leader's"
  # alice is not in cand-3's list: its handshake refuses her, and dtrain-submit goes on to the
  # next listed controller (nothing was asked yet) and so to the leader.
  in_ns "$SUBMIT" nodes --credential alice.cred --connect-timeout-ms 2000 \
    --controller 127.0.0.1:7073,127.0.0.1:7071,127.0.0.1:7072 > alice.out 2>&1 ||
    fail "alice, refused by cand-3's handshake, did not reach the leader: $(tail -n 2 alice.out)"
fi

nodes_alive() {
  alive=$(in_ns "$SUBMIT" nodes --json 2> /dev/null | grep -c '"state": "alive"')
  (( alive >= 3 ))
}
echo "waiting up to 30 s for the three nodes to register"
alive=0
until_at "$(in_s 30)" nodes_alive || die "only $alive of 3 nodes registered within 30 s"

id=$(in_ns "$SUBMIT" "$WORK/long.yaml" --detach 2> submit.err) ||
  die "the submit failed: $(cat submit.err)"
[[ $id =~ ^[0-9a-f]{16}$ ]] || die "the submit printed '$id', not a job id"
echo "job $id: $EPOCHS epochs"

# The poller, a background subshell until poll.stop: each poll's start, end and whether it
# answered with the job (exit status 0 and the job's id in the JSON: no python3 here, which
# would take longer than a poll), for the report at the end; a failed poll's error too.
poller() {
  local t0 t1 rc ok
  while [[ ! -e poll.stop ]]; do
    t0=$(now_ms)
    ip netns exec "$ns" timeout "$POLL_MAX_S" "$SUBMIT" status "$id" --json \
      --connect-timeout-ms "$CONNECT_MS" > poll.json 2> poll.err
    rc=$?
    t1=$(now_ms)
    ok=0
    [[ $rc -eq 0 ]] && grep -q "$id" poll.json && ok=1
    echo "$t0 $t1 $rc $ok" >> polls.txt
    [[ $ok -eq 1 ]] || echo "$t0 rc $rc: $(head -c 300 poll.err | tr '\n' ' ')" >> poll_errors.txt
    sleep_ms "$POLL_MS"
  done
}
poller &
pid[poller]=$!
mark job

job_at_epoch() {  # job_at_epoch ID E: it is at epoch E or later, or it ended
  status_of "$1" progress.json &&
    [[ ${epoch:-0} -ge $2 || $st == succeeded || $st == failed || $st == cancelled ]]
}
echo "waiting up to 90 s for job $id to reach epoch 3 (two epochs done; data loading included)"
st="" epoch=""
until_at "$(in_s 90)" job_at_epoch "$id" 3 ||
  die "waited 90 s for job $id to reach epoch 3; it is '$st' at epoch '${epoch:-none}'"
read_record "$id" || die "job $id has no record in etcd at /dtrain/jobs/$id: $(record_keys)"
before=$rec_adopted
require_running "$id" "the leader's kill" 25

alive_cands=()
for c in "${CANDS[@]}"; do [[ $c != "$l1" ]] && alive_cands+=("$c"); done
snapshot
mark "kill-$l1"
killed_at=$(now_ms)
kill -KILL "${pid[$l1]}"
unset "pid[$l1]"
echo "killed $l1; waiting up to $((3 * LEASE)) s for one of ${alive_cands[*]} to lead"
new_leader_after "$killed_at" "$l1's kill" "${alive_cands[@]}"
l2=$l_new
wait_adopted "$id" "$before" "$l2" $((killed_at + l_took))

# === (b) ====================================================================================
echo "== (b) the leader paused (SIGSTOP) past its lease; another leads; resumed, it stands by"
require_running "$id" "the leader's pause" 20
l3_from=()
for c in "${alive_cands[@]}"; do [[ $c != "$l2" ]] && l3_from+=("$c"); done
read_record "$id" && before=$rec_adopted
snapshot
stopped_n=$(n_stopped "$l2")
mark "stop-$l2"
stopped_at=$(now_ms)
kill -STOP "${pid[$l2]}"
# Paused 2.5 lease periods: its lease runs out in etcd within one, a standby sees that within a
# third of one more; the rest is margin, and the pause ends at this length whatever happened.
pause_ms=$((5 * LEASE_MS / 2))
echo "paused $l2 for $pause_ms ms; waiting for ${l3_from[*]} to lead meanwhile"
newl=""
until_at $((stopped_at + pause_ms)) leads_anew "${l3_from[@]}"
l3=$newl
sleep_ms $((stopped_at + pause_ms - $(now_ms)))
mark "cont-$l2"
cont_at=$(now_ms)
kill -CONT "${pid[$l2]}"
[[ -n $l3 ]] || die "no standby led while $l2 was paused for $pause_ms ms"
took=$(took_ms "$stopped_at" "$l3" "$seen_ms")
echo "$l3 leads $took ms after $l2 was paused"
(( took <= 2 * LEASE_MS )) || fail "the takeover after the pause took $took ms, over two leases"
l3_led_at=$((stopped_at + took))
led_l2=${led0[$l2]}  # its "leading" lines before the pause: none may follow while $l3 leads
echo "resumed $l2; waiting up to $((2 * LEASE)) s for it to log" \
  "'controller election: stopped leading'"
if until_at $((cont_at + 2 * LEASE_MS)) stood_down "$l2" "$stopped_n"; then
  echo "$l2 stood down $(( $(now_ms) - cont_at )) ms after SIGCONT:" \
    "$(grep "controller election: stopped leading" "$l2.log" | tail -n 1 | cut -c1-140)"
else
  fail "$l2 did not log 'controller election: stopped leading' within $((2 * LEASE)) s of" \
    "SIGCONT"
fi
leads "$l2" && fail "$l2 still says it leads after SIGCONT, while $l3 does"
wait_election "$l2" standby "$l3" 5
wait_election "$l3" leader "$l3" 5
wait_adopted "$id" "$before" "$l3" "$l3_led_at"

# === (c) ====================================================================================
echo "== (c) etcd paused (SIGSTOP) for three lease periods; nobody leads; the nodes train on"
require_running "$id" "etcd's pause" 14
# The resumed candidate has not led since its pause, and the other still leads: the window of
# (b) ends here (after etcd's return either may lead).
(( $(n_leading "$l2") == led_l2 )) || fail "$l2 logged 'leading' again while $l3 led"
leads "$l3" || fail "$l3 no longer leads before etcd's pause: $(tail -n 2 "$l3.log")"
read_record "$id" && before=$rec_adopted
mapfile -t at_pause < <(node_jobs "$id")
snapshot
stopped_n=$(n_stopped "$l3")
mark etcd-stop
estop=$(now_ms)
kill -STOP "${pid[etcd]}"
echo "paused etcd; waiting up to $((2 * LEASE)) s for $l3 to stop leading"
if until_at $((estop + 2 * LEASE_MS)) stood_down "$l3" "$stopped_n"; then
  line=$(grep "controller election: stopped leading" "$l3.log" | tail -n 1)
  echo "$l3 stopped leading $(( $(now_ms) - estop )) ms after etcd's pause: ${line:0:160}"
  reason=${line#*controller election: stopped leading}
  [[ $reason =~ [[:alnum:]] ]] || fail "$l3 stopped leading without saying why: '$line'"
else
  fail "$l3 did not log 'controller election: stopped leading' within $((2 * LEASE)) s of" \
    "etcd's pause"
fi
# The nodes' own /status, once nobody leads and again a second before etcd comes back: they
# still train the job, further each time, and at a later epoch than when etcd stopped.
mapfile -t leaderless < <(node_jobs "$id")
sleep_ms $((estop + 3 * LEASE_MS - 1000 - $(now_ms)))
mapfile -t later < <(node_jobs "$id")
num='^[0-9]+ [0-9]+$'
for i in 0 1 2; do
  a=${at_pause[i]:-none} b=${leaderless[i]:-none} c=${later[i]:-none}
  echo "node-$((i + 1)) (epoch iteration): at etcd's pause $a, leaderless $b, later $c"
  if [[ ! $a =~ $num || ! $b =~ $num || ! $c =~ $num ]]; then
    fail "node-$((i + 1))'s /status does not show job $id throughout etcd's pause"
  else
    (( ${c#* } > ${b#* } )) || fail "node-$((i + 1)) made no step while nobody led"
    (( ${c% *} > ${a% *} )) || fail "node-$((i + 1))'s epoch did not advance during the pause"
  fi
done
sleep_ms $((estop + 3 * LEASE_MS - $(now_ms)))
# Nobody began leading during the whole pause (checked just before etcd's return).
for c in "${alive_cands[@]}"; do
  (( $(n_leading "$c") == ${led0[$c]} )) || fail "$c logged 'leading' while etcd was paused"
done
mark etcd-cont
econt=$(now_ms)
kill -CONT "${pid[etcd]}"
echo "resumed etcd after $((econt - estop)) ms; waiting up to $((3 * LEASE)) s for a leader"
new_leader_after "$econt" "etcd's return" "${alive_cands[@]}"
l4=$l_new
wait_adopted "$id" "$before" "$l4" $((econt + l_took))

# === (d) ====================================================================================
echo "== (d) the job succeeds"
mark end
job_ended() {
  status_of "$1" job.json && [[ $st == succeeded || $st == failed || $st == cancelled ]]
}
echo "waiting up to $JOB_END_S s for job $id to end"
st=""
until_at "$(in_s "$JOB_END_S")" job_ended "$id"
if [[ $st == succeeded ]]; then
  acc=$(json job.json "j['result'].get('accuracy', 0)")
  diff=$(json job.json "j['result'].get('replica_max_relative_difference', 1)")
  echo "job $id succeeded: accuracy $acc, replicas within $diff"
  python3 -c "import sys; sys.exit(0 if $acc >= 0.85 else 1)" || fail "accuracy $acc < 0.85"
  python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "replicas differ by $diff"
else
  fail "job $id is '$st' (waited $JOB_END_S s): $(json job.json "j.get('error')" 2> /dev/null)"
  in_ns "$SUBMIT" logs "$id" 2>&1 | tail -n 20
fi
touch poll.stop
poller_ended() { ! kill -0 "${pid[poller]}" 2> /dev/null; }
# It ends within its poll in progress (POLL_MAX_S) and its pause.
until_at "$(in_s $((POLL_MAX_S + 1)))" poller_ended || fail "the status poller did not stop"

# === (e) ====================================================================================
echo "== (e) the record in etcd: one start, one end"
if read_record "$id"; then
  echo "record: state $rec_state, $rec_starts start line(s), $rec_ends end line(s)," \
    "$rec_adopted adoption(s); its lines of those kinds:"
  python3 -c '
import json, sys
for l in json.load(open(sys.argv[1]))["log"]:
    if any(t in l for t in ("started on ", "adopted by", "job ", "cancelled")):
        print("  " + l[:150])' rec.json
  [[ $rec_starts -eq 1 ]] || fail "the record has $rec_starts start lines, not one"
  [[ $rec_ends -eq 1 ]] || fail "the record has $rec_ends end lines, not one"
  [[ $rec_state == succeeded ]] || fail "the record's state is '$rec_state', not succeeded"
else
  fail "no record of job $id in etcd at the end; keys there: $(record_keys)"
fi

# The status polls: no run of failures longer than two leases and the allowance, except while
# etcd was paused (from its SIGSTOP to its SIGCONT nobody may lead; what follows counts).
echo "== the status polls (every $POLL_MS ms; limit $LIMIT_MS ms: two leases + $ALLOW_MS ms)"
python3 - polls.txt phases.txt "$LIMIT_MS" > polls.out <<'PY'
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 4]
phases = sorted((int(t), name) for name, t in (l.split() for l in open(sys.argv[2])))
at = {name: t for t, name in phases}
p0, p1, limit = at.get("etcd-stop", 0), at.get("etcd-cont", 0), int(sys.argv[3])
if not rows:
    print("no status polls were recorded")
    sys.exit(1)
origin = rows[0][0]
phase = lambda t: max([(pt, n) for pt, n in phases if pt <= t] or [(0, "start")])[1]
runs, first = [], None  # first: the (start, end) of the run's first failed poll
for start, end, rc, ok in rows:
    if not ok and first is None:
        first = (start, end)
    elif ok and first is not None:
        runs.append((first, start, True))
        first = None
if first is not None:
    runs.append((first, rows[-1][1], False))
worst, out = 0, []
for (f_start, f_end), back, answered in runs:
    counted_from = f_end
    if p0 and f_start < p1 and back > p0:  # overlaps etcd's pause: only what follows counts
        counted_from = max(f_end, p1)
    length = max(0, back - counted_from)
    worst = max(worst, length)
    out.append(f"  failing from {(f_start - origin) / 1000:.1f} s (in {phase(f_start)}), "
               f"{'answered again' if answered else 'never answered again'} at "
               f"{(back - origin) / 1000:.1f} s: {length} ms counted")
print(f"{len(rows)} polls, {sum(1 for r in rows if not r[3])} failed, {len(runs)} run(s) of"
      f" failures; the longest counted {worst} ms (limit {limit} ms)")
print("\n".join(out))
sys.exit(1 if worst > limit or any(not r[2] for r in runs) else 0)
PY
polls_rc=$?
cat polls.out
[[ $polls_rc -eq 0 ]] || fail "the status polls failed for longer than $LIMIT_MS ms (above)"

echo "took $(( ($(now_ms) - t_start) / 1000 )) s"
if [[ $failures -ne 0 ]]; then
  tails
  echo "controller_failover_test: $failures check(s) failed"
  exit 1
fi
echo "controller_failover_test: all checks passed"
