#!/usr/bin/env bash
# Several jobs at once on one cluster (docs/user-guide.md, "dtrain-submit";
# docs/operations.md, "Limits per user"), four daemons on loopback:
# - three 2-node jobs submitted together: the first two run side by side (their running
#   intervals overlap, each on nodes of its own), the third waits, saying it waits for busy
#   nodes, and starts once one of them has ended; all three succeed with their replicas agreeing;
#   `nodes` shows which job holds each node meanwhile;
# - bob, whose limit (dtraind.yaml `limits`) is one running job and two nodes: his second job
#   waits in the queue until his first has ended although nodes are free, and a job asking for
#   three nodes is refused at submit (exit 2) naming the limit and the fix.
# The order is checked on the records' own times (started_at, finished_at), not by sampling.
# Every wait has a deadline and says what it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" concurrent "$1" "$2" "$3"

# job.yaml NAME NODES EPOCHS: the MLP example on NODES nodes with one worker each.
job_spec() {
  sed -e "s/name: fashion-mnist-mlp/name: $1/" -e "s/nodes: all/nodes: $2/" \
      -e 's/workers_per_node: auto/workers_per_node: 1/' -e "s/epochs: 5/epochs: $3/" \
      -e 's/checkpoint_every: 1000/checkpoint_every: 0/' "$SPEC" > "$1.yaml"
}
job_spec side-a 2 2
job_spec side-b 2 2
job_spec behind 2 1
job_spec bob-first 1 2
job_spec bob-second 1 1
job_spec bob-wide 3 1

LIMITS="{users: {bob: {running_jobs: 1, nodes: 2}}}" "$CLUSTER_TOOL" start 4 "$WORK/c" > start.out ||
  { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

echo "== three 2-node jobs on four nodes"
a=$("$SUBMIT" side-a.yaml --detach) || fail "submit side-a"
b=$("$SUBMIT" side-b.yaml --detach) || fail "submit side-b"
c=$("$SUBMIT" behind.yaml --detach) || fail "submit behind"
# While the first two run: every node is held, each by one of them.
held=""
for _ in $(seq 1 300); do
  "$SUBMIT" nodes --json > nodes.json 2> /dev/null
  held=$(json nodes.json "sorted(n['running_job'] for n in j['nodes'])" 2> /dev/null)
  [[ $held == "['$a', '$a', '$b', '$b']" || $held == "['$b', '$b', '$a', '$a']" ]] && break
  sleep 0.1
done
[[ $held == *"'$a', '$a'"* && $held == *"'$b', '$b'"* ]] ||
  fail "waited 30 s for side-a and side-b to hold two nodes each; nodes show $held"
"$SUBMIT" status "$c" --json > behind-queued.json
[[ $(json behind-queued.json "j['state']") == queued ]] ||
  fail "the third job is $(json behind-queued.json "j['state']") while the others hold every node"
"$SUBMIT" logs "$c" 2>&1 | grep -q "waiting for 2 nodes (4 registered, 4 of them busy with other jobs)" ||
  fail "the third job's log does not say it waits for busy nodes: $("$SUBMIT" logs "$c" 2>&1 | tail -n 3)"
for id in "$a" "$b" "$c"; do
  state=$(wait_job_end "$id" "end-$id.json" 300)
  [[ $state == succeeded ]] || fail "job $id ended $state: $(json "end-$id.json" "j.get('error')")"
  diff=$(json "end-$id.json" "j['result'].get('replica_max_relative_difference', 1)")
  python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "job $id's replicas differ by $diff"
done
t() { json "end-$1.json" "j['$2']"; }
python3 - "$(t "$a" started_at)" "$(t "$a" finished_at)" "$(t "$b" started_at)" "$(t "$b" finished_at)" \
  "$(t "$c" started_at)" <<'EOF' || fail "the jobs' running times are not as expected (see above)"
import sys
a0, a1, b0, b1, c0 = map(float, sys.argv[1:])
ok = True
if not (a0 < b1 and b0 < a1):
    print(f"side-a ran {a0}..{a1} and side-b {b0}..{b1}: they did not overlap"); ok = False
if c0 < min(a1, b1):
    print(f"behind started at {c0}, before either of the others ended ({a1}, {b1})"); ok = False
sys.exit(0 if ok else 1)
EOF
nodes_of() { json "end-$1.json" "sorted(j['nodes'])"; }
[[ $(nodes_of "$a") != "$(nodes_of "$b")" ]] || fail "side-a and side-b ran on the same nodes: $(nodes_of "$a")"

echo "== bob: one running job at a time, two nodes at most"
"$DTRAIND" keygen --client bob "$WORK/bob.cred" > /dev/null || fail "keygen --client bob"
cp "$WORK/bob.cred" "$WORK/c/clients/"
kill -HUP "$(awk '$2 == "node-1" { print $1 }' "$WORK/c/pids")"
# bob holds no cluster key (the waits below use it: they see every job, as an operator would).
as_bob() { "$SUBMIT" "$@" --credential "$WORK/bob.cred" --key-file /nonexistent; }
listed=""
for _ in $(seq 1 100); do as_bob status > /dev/null 2>&1 && { listed=yes; break; }; sleep 0.1; done
[[ -n $listed ]] || fail "waited 10 s for the controller to let bob in after SIGHUP"
as_bob bob-wide.yaml --detach > wide.out 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "bob's 3-node job: exit $rc (expected 2, refused)"
grep -q "the job needs 3 nodes; bob's jobs may hold 2 at once" wide.out && grep -q "fix: ask for at most 2" wide.out ||
  { fail "the refusal of bob's 3-node job does not name the limit and the fix"; cat wide.out; }
first=$(as_bob bob-first.yaml --detach) || fail "bob's first job"
second=$(as_bob bob-second.yaml --detach) || fail "bob's second job"
for id in "$first" "$second"; do
  state=$(wait_job_end "$id" "end-$id.json" 300)
  [[ $state == succeeded ]] || fail "bob's job $id ended $state: $(json "end-$id.json" "j.get('error')")"
done
python3 -c "import sys; sys.exit(0 if $(t "$second" started_at) >= $(t "$first" finished_at) else 1)" ||
  fail "bob's second job started at $(t "$second" started_at), before his first ended at $(t "$first" finished_at)"
as_bob status --json > bob-jobs.json
[[ $(json bob-jobs.json "sum(x['owner'] == 'bob' for x in j['jobs'])") == 2 ]] ||
  fail "bob's status does not list his two jobs as his"
finish concurrent
