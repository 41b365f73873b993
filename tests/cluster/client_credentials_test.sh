#!/usr/bin/env bash
# Client credentials as an operator and a user meet them (docs/operations.md, "Client
# credentials"), on one daemon (node and controller) on loopback:
# - `dtraind keygen --client alice FILE` makes a credential of mode 0600;
# - before the controller lists it, `dtrain-submit --credential FILE` is refused (exit 2) with
#   the reason and the fix;
# - once its copy is in clients_dir and the controller got SIGHUP, alice submits a job (it
#   succeeds), lists nodes and jobs, reads its log, all without the cluster key;
# - bob, another client, sees alice's job and its owner but his logs, stats, fetch, resume and
#   cancel of it are refused (exit 2) naming the owner, and so is a job of his whose
#   model.init_from names her model's place on the nodes; carol, an operator (`keygen --operator`),
#   reads and fetches it, as alice does;
# - revoked (the copy removed, SIGHUP), the same credential is refused again.
# Every wait has a deadline and says what it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" clients "$1" "$2" "$3"

sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e 's/epochs: 5/epochs: 1/' "$SPEC" > job.yaml
"$CLUSTER_TOOL" start 1 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
unset DTRAIN_KEY_FILE  # the user below holds no cluster key
controller_pid=$(awk '$2 == "node-1" { print $1 }' "$WORK/c/pids")
as_alice() { "$SUBMIT" "$@" --credential "$WORK/alice.cred" --key-file /nonexistent; }

echo "== keygen --client"
"$DTRAIND" keygen --client alice "$WORK/alice.cred" > keygen.out || fail "keygen --client exited $?"
[[ $(stat -c %a "$WORK/alice.cred") == 600 ]] || fail "the credential's mode is $(stat -c %a "$WORK/alice.cred")"
grep -q "clients_dir" keygen.out || { fail "keygen does not say where the controller's copy goes"; cat keygen.out; }

echo "== not listed yet: refused"
as_alice status > refused.out 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "an unlisted credential: exit $rc (expected 2)"
grep -q "client 'alice' is not listed in the controller's clients_dir" refused.out &&
  grep -q "fix: ask the cluster's operator" refused.out || { fail "the refusal does not say why and what to do"; cat refused.out; }

echo "== listed (copy + SIGHUP): alice submits, queries, reads logs"
cp "$WORK/alice.cred" "$WORK/c/clients/alice.cred"
kill -HUP "$controller_pid"
listed=""
for _ in $(seq 1 100); do as_alice status > /dev/null 2>&1 && { listed=yes; break; }; sleep 0.1; done
[[ -n $listed ]] || fail "waited 10 s for the controller to let alice in after SIGHUP"
timeout 300 "$SUBMIT" job.yaml --credential "$WORK/alice.cred" --quiet > submit.out 2>&1 ||
  { fail "alice's job: submit exited $?"; tail -n 20 submit.out; }
as_alice status --json > jobs.json || fail "alice: status --json"
id=$(python3 -c "import json; print(json.load(open('jobs.json'))['jobs'][-1]['id'])")
state=$(python3 -c "import json; print(json.load(open('jobs.json'))['jobs'][-1]['state'])")
[[ $state == succeeded ]] || fail "alice's job is $state"
as_alice nodes --json > nodes.json || fail "alice: nodes --json"
as_alice logs "$id" > log.txt && grep -q "started on 1 nodes" log.txt || fail "alice: logs $id"

echo "== bob's credential: alice's job is not his; carol, an operator, may act on it"
"$DTRAIND" keygen --client bob "$WORK/bob.cred" > /dev/null || fail "keygen --client bob"
"$DTRAIND" keygen --client carol --operator "$WORK/carol.cred" > /dev/null || fail "keygen --operator"
head -n 1 "$WORK/carol.cred" | grep -qx "dtrain-client carol operator" || fail "carol's credential does not say operator"
cp "$WORK/bob.cred" "$WORK/carol.cred" "$WORK/c/clients/"
kill -HUP "$controller_pid"
as_bob() { "$SUBMIT" "$@" --credential "$WORK/bob.cred" --key-file /nonexistent; }
as_carol() { "$SUBMIT" "$@" --credential "$WORK/carol.cred" --key-file /nonexistent; }
listed=""
for _ in $(seq 1 100); do as_bob status > /dev/null 2>&1 && as_carol status > /dev/null 2>&1 && { listed=yes; break; }; sleep 0.1; done
[[ -n $listed ]] || fail "waited 10 s for the controller to let bob and carol in after SIGHUP"
as_bob status > bob-status.txt 2>&1 && grep -q "$id .* alice " bob-status.txt ||
  { fail "bob's status does not list alice's job with its owner"; cat bob-status.txt; }
for cmd in "logs $id" "stats $id" "fetch $id -o $WORK/bob.dtm" "resume $id" "cancel $id"; do
  as_bob $cmd > bob.out 2>&1
  rc=$?
  verb=${cmd%% *}
  [[ $rc -eq 2 ]] || fail "bob's $verb of alice's job: exit $rc (expected 2)"
  grep -q "client 'bob' may not .* job $id: it belongs to client 'alice'" bob.out &&
    grep -q "fix: ask its owner or an operator" bob.out || { fail "bob's $verb: the refusal"; cat bob.out; }
done
[[ ! -e $WORK/bob.dtm ]] || fail "bob's refused fetch left a model file"
# Nor may he start from her model by naming its place on the nodes (data_dir/jobs/<id>/).
alice_model=$(python3 -c "import json; print([x for x in json.load(open('jobs.json'))['jobs'] if x['id'] == '$id'][0]['result']['model_path'])")
sed -e "s|^model:$|model:\n  init_from: $alice_model|" job.yaml > bob-tune.yaml
as_bob bob-tune.yaml --detach > bob-tune.out 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "bob's job starting from alice's model: exit $rc (expected 2, refused at submit)"
grep -q "client 'bob' may not start from the model of job $id: it belongs to client 'alice'" bob-tune.out ||
  { fail "the refusal of bob's init_from"; cat bob-tune.out; }
as_carol logs "$id" > carol-log.txt && grep -q "submitted (.*) by client 'alice'" carol-log.txt ||
  { fail "carol (operator): logs $id, or the log does not say who submitted"; cat carol-log.txt; }
as_carol fetch "$id" -o "$WORK/carol.dtm" > carol-fetch.out 2>&1 && [[ -s $WORK/carol.dtm ]] ||
  { fail "carol (operator): fetch $id"; cat carol-fetch.out; }
as_alice fetch "$id" -o "$WORK/alice.dtm" > alice-fetch.out 2>&1 && cmp -s "$WORK/alice.dtm" "$WORK/carol.dtm" ||
  { fail "alice: fetch $id of her own job"; cat alice-fetch.out; }

echo "== revoked (removed + SIGHUP): refused again"
rm "$WORK/c/clients/alice.cred"
kill -HUP "$controller_pid"
revoked=""
for _ in $(seq 1 100); do
  as_alice status > revoked.out 2>&1 || { revoked=yes; break; }
  sleep 0.1
done
[[ -n $revoked ]] || fail "waited 10 s for the controller to refuse alice after SIGHUP"
grep -q "is not listed" revoked.out || { fail "the revoked credential's refusal"; cat revoked.out; }
grep -q "SIGHUP" "$WORK/c/node-1.log" || grep -q "client credentials in" "$WORK/c/node-1.log" ||
  fail "the controller's log does not show the reload"

echo "client credentials test: $failures failures"
[[ $failures -eq 0 ]]
