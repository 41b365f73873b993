#!/usr/bin/env bash
# The stats history (docs/architecture/daemon.md, "Stats history"): a 3-node MLP job's nodes
# record every step of every worker (a short job: stride 1) and every epoch; `dtrain-submit
# stats` prints them from the controller's SQLite store. `--csv` has one row per step per
# worker (each worker's iterations 1..N, none missing or twice), the loss falls over the job,
# and the history survives a restart of the controller. Every wait has a deadline.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" stats "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300

sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/epochs: 5/epochs: 2/' \
    -e 's/checkpoint_every: 1000/checkpoint_every: 0/' "$SPEC" > job.yaml
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"
state=$(wait_job_end "$id" job.json 180)
[[ $state == succeeded ]] || fail "job $id ended '$state' (waited 180 s)"

"$SUBMIT" stats "$id" --csv > stats.csv || fail "stats --csv exited $?"
# The steps, then an empty line, then the epochs.
python3 - stats.csv <<'PY' > check.out 2>&1 || fail "stats.csv: $(cat check.out)"
import csv, sys
text = open(sys.argv[1]).read().split("\n\n")
steps = list(csv.DictReader(text[0].splitlines()))
epochs = list(csv.DictReader(text[1].splitlines()))
head = text[0].splitlines()[0]
want = ("node,worker,iteration,epoch,loss,samples_per_sec,tau,density,encoding,message_bytes,"
        "residual_norm,compute_ms,encode_ms,apply_ms,wait_ms,start_ms,data_ms")
assert head == want, f"header {head!r}"
by = {}
for r in steps:
    by.setdefault((r["node"], r["worker"]), []).append(r)
assert sorted(by) == [("node-1", "0"), ("node-2", "0"), ("node-3", "0")], sorted(by)
for key, rows in by.items():
    its = [int(r["iteration"]) for r in rows]
    # One row per step: iterations 1..N in order, none missing or twice.
    assert its == list(range(1, len(its) + 1)), f"{key}: iterations {its[:5]}..{its[-5:]}"
    assert len(its) > 1000, f"{key}: only {len(its)} steps"
    assert {r["epoch"] for r in rows} == {"1", "2"}, key
    loss = [float(r["loss"]) for r in rows]
    first, last = sum(loss[:100]) / 100, sum(loss[-100:]) / 100
    assert last < 0.6 * first, f"{key}: loss {first:.3f} -> {last:.3f} does not fall"
    for col in ("tau", "density", "message_bytes", "compute_ms", "samples_per_sec"):
        assert all(float(r[col]) > 0 for r in rows), f"{key}: a step without {col}"
    assert all(r["encoding"] in ("0", "1") for r in rows), key
    print(f"{key[0]} worker {key[1]}: {len(its)} steps, loss {first:.3f} -> {last:.3f}")
assert len(epochs) == 6, f"{len(epochs)} epoch rows, not 2 per node"
links = list(csv.DictReader(text[2].splitlines()))
# Each node samples its links to the two others about once a second, cumulative.
for node in ("node-1", "node-2", "node-3"):
    mine = [r for r in links if r["node"] == node]
    assert len({r["peer"] for r in mine}) == 2, f"{node}: links to {sorted({r['peer'] for r in mine})}"
    out = [float(r["bytes_out"]) for r in mine if r["peer"] == mine[-1]["peer"]]
    assert out == sorted(out) and out[-1] > 0, f"{node}: bytes_out {out}"
evaluated = [r for r in epochs if float(r["accuracy"]) >= 0]
assert evaluated and all(float(r["accuracy"]) > 0.8 for r in evaluated), epochs
print(f"{len(steps)} step rows, {len(epochs)} epoch rows")
PY
cat check.out

# One node only; JSON; the table; a job that does not exist.
"$SUBMIT" stats "$id" --csv --node node-2 > node2.csv || fail "stats --node"
nodes=$(sed -n '/^$/q;p' node2.csv | awk -F, 'NR > 1 { print $1 }' | sort -u | tr '\n' ' ')
[[ $nodes == "node-2 " ]] || fail "stats --node node-2 lists the steps of: $nodes"
"$SUBMIT" stats "$id" --json > stats.json || fail "stats --json"
[[ $(json stats.json "len(j['steps'])") -eq $(($(sed -n '/^$/q;p' stats.csv | wc -l) - 1)) ]] ||
  fail "--json and --csv disagree on the number of steps"
"$SUBMIT" stats "$id" | head -n 3 > table.out
grep -q "^steps (" table.out || fail "the table has no title: $(cat table.out)"
# Every column name stands apart (samples_per_sec once ran into loss), and no figure is cut to
# six digits with an exponent (start_ms, Unix milliseconds, once printed as 1.79574e+12).
[[ $(sed -n 2p table.out | xargs -n 1 | paste -sd,) == "$(head -n 1 stats.csv)" ]] ||
  fail "the table's header is not the columns: $(sed -n 2p table.out)"
! sed -n 3p table.out | grep -q "e+" || fail "a figure in exponent form: $(sed -n 3p table.out)"
"$SUBMIT" stats 00000000deadbeef > missing.out 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "no job 00000000deadbeef" missing.out ||
  fail "stats of a missing job: exit $rc, $(cat missing.out)"

# The timeline: Chrome trace events, a process per node, a track per worker with the phases of
# its steps, and a transport track with a counter per peer.
"$SUBMIT" timeline "$id" > trace.json || fail "timeline exited $?"
python3 - trace.json <<'PY' > trace.out 2>&1 || fail "trace.json: $(cat trace.out)"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
for e in events:
    assert {"name", "ph", "pid"} <= e.keys(), e
procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
assert sorted(procs.values()) == ["node-1", "node-2", "node-3"], procs
tracks = {(procs[e["pid"]], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
for node in procs.values():
    assert (node, "worker 0") in tracks and (node, "transport") in tracks, tracks
spans = [e for e in events if e["ph"] == "X"]
for node_pid in procs:
    phases = {e["name"] for e in spans if e["pid"] == node_pid}
    assert {"compute", "encode"} <= phases, phases
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans), "a span without time"
counters = [e for e in events if e["ph"] == "C"]
assert any("with node-" in e["name"] for e in counters), "no transport counters"
print(f"{len(spans)} spans on {len(tracks)} tracks, {len(counters)} transport samples")
PY
cat trace.out

# A restarted controller has the same history.
restart_daemon node-1 TERM
answered after.csv stats "$id" --csv ||
  fail "the restarted controller did not answer stats within 10 s"
cmp -s stats.csv after.csv || fail "the history changed across the controller's restart ($(wc -l < stats.csv) -> $(wc -l < after.csv) lines)"
echo "the controller restarted: stats unchanged ($(wc -l < after.csv) lines)"
finish stats
