#!/usr/bin/env bash
# training.mode: auto (core/train/mode_choice.h) on 3 daemons x 2 workers: the nodes rehearse
# both modes, allreduce's with real ring all-reduces of a step's values over the three, and the
# first node announces the mode; every node trains that way. On these loopback hosts gradient
# sharing's steps are the faster (docs/performance.md), so the daemons run with
# DTRAIN_TEST_FAULT=auto_allreduce:1, which has the chooser take allreduce after weighing both:
# the job then trains allreduce after the rehearsal's ring rounds (whose ids precede the
# training's), to 0.85 with every replica the same bits.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" mode_auto "$1" "$2" "$3"
export NODE_ENV_1="DTRAIN_TEST_FAULT=auto_allreduce:1" NODE_ENV_2="DTRAIN_TEST_FAULT=auto_allreduce:1" \
       NODE_ENV_3="DTRAIN_TEST_FAULT=auto_allreduce:1"

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

sed -e "s/workers_per_node: auto/workers_per_node: 2/" -e "/^  sync: bsp$/d" \
    -e "s/^  mode: gradient_sharing$/  mode: auto/" -e "s/epochs: 5/epochs: 3/" \
    -e 's/  batch_size: 64/  batch_size_per_worker: 16/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e "s/name: fashion-mnist-mlp/name: mode-auto/" -e "s/model: fashion-mnist-mlp.dtm/model: mode-auto.dtm/" \
    "$SPEC" > auto.yaml
grep -q "^  mode: auto$" auto.yaml || fail "the spec was not made: $(cat auto.yaml)"
id=$("$SUBMIT" auto.yaml --detach) || fail "submit"
state=$(wait_job_end "$id" auto.json 180)
"$SUBMIT" logs "$id" > auto.log
[[ $state == succeeded ]] || fail "job $id ended '$state': $(json auto.json "j.get('error')")"
check_trained auto.json
echo "mode auto: accuracy $acc, replicas differ by $diff"

# The choice, as the job's log has it: both modes weighed, allreduce's from its ring steps.
choice=$(grep -m 1 "training.mode auto: " auto.log)
echo "the choice: $choice"
[[ $choice =~ allreduce\ takes\ [0-9.]+\ ms\ a\ step\ \(rehearsed\ over\ [0-9]+\ ring\ steps\),\ gradient\ sharing\ as\ chosen\ [0-9.]+\ ms ]] ||
  fail "the choice does not weigh a rehearsed allreduce against gradient sharing: '$choice'"
[[ $choice == *"DTRAIN_TEST_FAULT takes allreduce" ]] || fail "the test's override is not in the choice: '$choice'"
for n in 1 2 3; do
  grep -q "training.mode auto: .*DTRAIN_TEST_FAULT takes allreduce" "$WORK/c/node-$n.log" ||
    fail "node-$n's log does not have the choice: $(grep -i "auto" "$WORK/c/node-$n.log" | tail -n 3)"
done
[[ $(json auto.json "j['result']['mode']") == allreduce ]] ||
  fail "the job trained as '$(json auto.json "j['result'].get('mode')")', not allreduce"
[[ $(json auto.json "j['mode']") == auto ]] || fail "the job's spec mode reads $(json auto.json "j['mode']")"
# Allreduce's replicas are the same bits at every epoch end.
for e in 1 2; do
  distinct=$(grep "node-[123]: epoch $e: " auto.log | sed -nE 's/.*replica ([^,]*),.*/\1/p' | sort -u | wc -l)
  [[ $distinct -eq 1 ]] || fail "epoch $e: $distinct different replicas: $(grep "epoch $e: " auto.log)"
done
finish mode_auto
