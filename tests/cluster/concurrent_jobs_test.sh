#!/usr/bin/env bash
# Several jobs at once on one cluster (docs/user-guide.md, "dtrain-submit";
# docs/operations.md, "Limits per user"), four daemons on loopback:
# - three 2-node jobs submitted together: the first two run side by side (their running
#   intervals overlap, each on nodes of its own), the third waits, saying it waits for busy
#   nodes, and starts once one of them has ended; all three succeed with their replicas agreeing;
#   `nodes` shows which job holds each node meanwhile;
# - two 2-node jobs that ask for one core of each node (training.cores_per_node: 1; the nodes
#   have two) run at once on the same two nodes, `nodes` showing both on each, while a job of
#   all four whole nodes waits for them, saying so, and starts once both have ended;
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
job_spec share-x 2 1
job_spec share-y 2 1
job_spec whole 4 1
sed -i 's/^  workers_per_node: 1$/  workers_per_node: 1\n  cores_per_node: 1/' share-x.yaml share-y.yaml
job_spec bob-first 1 2
job_spec bob-second 1 1
job_spec bob-wide 3 1

LIMITS="{users: {bob: {running_jobs: 1, nodes: 2}}}" "$CLUSTER_TOOL" start 4 "$WORK/c" > start.out ||
  { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

# nodes_show FILE EXPR: polls `nodes --json` (into FILE) for at most 30 s until the Python
# expression EXPR on it (j) is true; status 1 if it never was.
nodes_show() {
  for _ in $(seq 1 300); do
    "$SUBMIT" nodes --json > "$1" 2> /dev/null
    [[ $(json "$1" "$2" 2> /dev/null) == True ]] && return 0
    sleep 0.1
  done
  return 1
}
# ends_agreeing ID...: each job ends (300 s at most) succeeded, its replicas agreeing; its
# status JSON is left in end-ID.json.
ends_agreeing() {
  local id state diff
  for id in "$@"; do
    state=$(wait_job_end "$id" "end-$id.json" 300)
    [[ $state == succeeded ]] || fail "job $id ended $state: $(json "end-$id.json" "j.get('error')")"
    diff=$(json "end-$id.json" "j['result'].get('replica_max_relative_difference', 1)")
    python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "job $id's replicas differ by $diff"
  done
}

echo "== three 2-node jobs on four nodes"
a=$("$SUBMIT" side-a.yaml --detach) || fail "submit side-a"
b=$("$SUBMIT" side-b.yaml --detach) || fail "submit side-b"
c=$("$SUBMIT" behind.yaml --detach) || fail "submit behind"
# While the first two run: every node is held, each by one of them.
nodes_show nodes.json "sorted(n['running_job'] for n in j['nodes']) == sorted(['$a', '$a', '$b', '$b'])" ||
  fail "waited 30 s for side-a and side-b to hold two nodes each; nodes show $(json nodes.json "[n['running_job'] for n in j['nodes']]")"
"$SUBMIT" status "$c" --json > behind-queued.json
[[ $(json behind-queued.json "j['state']") == queued ]] ||
  fail "the third job is $(json behind-queued.json "j['state']") while the others hold every node"
"$SUBMIT" logs "$c" 2>&1 | grep -q "waiting for 2 nodes (4 registered, 4 of them busy with other jobs)" ||
  fail "the third job's log does not say it waits for busy nodes: $("$SUBMIT" logs "$c" 2>&1 | tail -n 3)"
ends_agreeing "$a" "$b" "$c"
t() { json "end-$1.json" "j['$2']"; }
# side_by_side NAME A NAME B: jobs A and B (their end-ID.json) ran at the same time.
side_by_side() {
  python3 -c "import sys; a0, a1, b0, b1 = map(float, sys.argv[1:]); sys.exit(0 if a0 < b1 and b0 < a1 else 1)" \
    "$(t "$2" started_at)" "$(t "$2" finished_at)" "$(t "$4" started_at)" "$(t "$4" finished_at)" ||
    fail "$1 ran $(t "$2" started_at)..$(t "$2" finished_at) and $3 $(t "$4" started_at)..$(t "$4" finished_at): they did not overlap"
}
# started_after NAME C WHEN: job C started at Unix time WHEN or later.
started_after() {
  python3 -c "import sys; sys.exit(0 if $(t "$2" started_at) >= $3 else 1)" ||
    fail "$1 started at $(t "$2" started_at), before $3"
}
side_by_side side-a "$a" side-b "$b"
started_after behind "$c" "$(python3 -c "print(min($(t "$a" finished_at), $(t "$b" finished_at)))")"
nodes_of() { json "end-$1.json" "sorted(j['nodes'])"; }
[[ $(nodes_of "$a") != "$(nodes_of "$b")" ]] || fail "side-a and side-b ran on the same nodes: $(nodes_of "$a")"

echo "== shares of nodes: two jobs of one core a node on the same nodes, a whole-node job behind"
[[ $(json nodes.json "min(n['cores'] for n in j['nodes'])") -ge 2 ]] ||
  fail "a node offers fewer than 2 cores: two 1-core shares cannot fit on one"
x=$("$SUBMIT" share-x.yaml --detach) || fail "submit share-x"
y=$("$SUBMIT" share-y.yaml --detach) || fail "submit share-y"
w=$("$SUBMIT" whole.yaml --detach) || fail "submit whole"
nodes_show shared.json "sum(sorted(h['id'] for h in n['jobs']) == sorted(['$x', '$y']) for n in j['nodes']) == 2" ||
  fail "waited 30 s for two nodes to run share-x and share-y both; nodes show $(json shared.json "[n['jobs'] for n in j['nodes']]")"
"$SUBMIT" nodes > shared.txt
grep -q "$x (1 core), $y (1 core)\|$y (1 core), $x (1 core)" shared.txt ||
  { fail "dtrain-submit nodes does not show both shares on a node"; cat shared.txt; }
"$SUBMIT" logs "$w" 2>&1 | grep -q "waiting for 4 nodes (4 registered, 2 of them busy with other jobs)" ||
  fail "the whole-node job's log does not say it waits for busy nodes: $("$SUBMIT" logs "$w" 2>&1 | tail -n 3)"
ends_agreeing "$x" "$y" "$w"
[[ $(nodes_of "$x") == "$(nodes_of "$y")" ]] ||
  fail "share-x ran on $(nodes_of "$x") and share-y on $(nodes_of "$y"): not side by side"
side_by_side share-x "$x" share-y "$y"
started_after whole "$w" "$(python3 -c "print(max($(t "$x" finished_at), $(t "$y" finished_at)))")"
echo "share-x and share-y ran side by side on $(nodes_of "$x"); whole took the four nodes after them"

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
started_after "bob's second job" "$second" "$(t "$first" finished_at)"
as_bob status --json > bob-jobs.json
[[ $(json bob-jobs.json "sum(x['owner'] == 'bob' for x in j['jobs'])") == 2 ]] ||
  fail "bob's status does not list his two jobs as his"
finish concurrent
