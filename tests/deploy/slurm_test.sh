#!/usr/bin/env bash
# configs/slurm/dtrain.sbatch on a real Slurm (Debian's slurmctld, slurmd and munge, 22.05) of
# three namespaced hosts (tools/local_slurm.sh; docs/operations.md, "Slurm"): the example MLP
# trains to 0.85 through sbatch, the job's exit code is 0, the fetched model evaluates to the
# same accuracy here, the daemons were stopped with SIGTERM and left nothing behind; a job that
# fails on the nodes returns 1, a spec that does not parse 2, a job stopped mid-way by
# `scancel --batch --signal=USR1` 5 with its daemons stopped by SIGTERM, one killed outright
# (SIGKILL) leaves no node with the key; one GPU a node from
# the allocation (a gres of two stand-in devices a node, emulated GPUs behind it) is what each
# daemon offers; outside an allocation the script says so. Needs root and Slurm: SKIPPED with the reason
# where either is missing. Every wait has a deadline and says what it waited for.
#   slurm_test.sh DTRAIND SUBMIT SPEC SBATCH SLURM_TOOL
set -u
abs_path() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
DTRAIND=$(abs_path "$1") SUBMIT=$(abs_path "$2") SPEC=$(abs_path "$3")
SBATCH_SCRIPT=$(abs_path "$4") SLURM_TOOL=$(abs_path "$5")
WORK="${TEST_TMPDIR:-$(mktemp -d)}/slurm"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
tag="sl$$"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
finish() {
  if [[ $failures -ne 0 ]]; then echo "slurm_test: $failures check(s) failed"; exit 1; fi
  echo "slurm_test: all checks passed"
}
cleanup() { "$SLURM_TOOL" down "$tag" 3 "$WORK/slurm" > /dev/null 2>&1; }
trap cleanup EXIT

echo "== outside an allocation"
out=$(env -u SLURM_JOB_ID bash "$SBATCH_SCRIPT" job.yaml 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"not inside a Slurm allocation"* ]] ||
  fail "outside an allocation: exit $rc, '$out'"
bash "$SBATCH_SCRIPT" --help | grep -q "sbatch --nodes=4" || fail "--help does not show the sbatch line"
# A step given GPUs 2 and 3 of a node sees them as CUDA's 0 and 1 (the allocation below can
# only hand out GPU 0 to a one-GPU step, which cannot tell renumbering from passing through).
conf=$(source "$SBATCH_SCRIPT"; CUDA_VISIBLE_DEVICES=2,3 DTRAIN_SLURM_CONTROLLER_NODE=x \
       DTRAIN_DATA_NETWORK=10.0.0.0/8 DTRAIN_SLURM_DATA_ROOTS='/srv/a b, /srv/"c"' \
       DTRAIN_SLURM_CONTROLLER=10.0.0.1 DTRAIN_SLURM_PORT=7070 dtrain_slurm_config h9 /tmp/x 2> /dev/null)
grep -qx "gpus: \[0, 1\]" <<< "$conf" || fail "CUDA_VISIBLE_DEVICES=2,3 gave '$(grep gpus <<< "$conf")'"
grep -qx 'data_roots: \["/srv/a b", "/srv/\\"c\\""\]' <<< "$conf" || fail "data_roots written as '$(grep data_roots <<< "$conf")'"
grep -qx 'data: {network: "10.0.0.0/8", port: 0}' <<< "$conf" || fail "DTRAIN_DATA_NETWORK gave '$(grep "^data:" <<< "$conf")'"

mkdir -p slurm
"$SLURM_TOOL" up "$tag" 3 "$WORK/slurm" 1 > slurm.out 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then echo "SKIPPED: $(tail -n 1 slurm.out)"; exit 0; fi
[[ $rc -eq 0 ]] || { echo "FAIL: the local Slurm did not start:"; cat slurm.out; exit 1; }
cat slurm.out
slurm() { "$SLURM_TOOL" run "$tag" "$WORK/slurm" "$@"; }

# run_batch NAME SECONDS SBATCH-ARGS...: submits the script as job NAME (with the variables in
# $extra_env, NAME=VALUE,..., added to its environment), polls until it ends (SECONDS at most),
# and sets `state` and `code` (its exit code).
run_batch() {
  local name=$1 seconds=$2 id end
  shift 2
  id=$(slurm sbatch --parsable --time=5 --job-name="$name" -o "$name.out" \
         --export="ALL,DTRAIND=$DTRAIND,DTRAIN_SUBMIT=$SUBMIT${extra_env:+,$extra_env}" "$@") ||
    { fail "$name: sbatch refused it"; state=""; code=""; return 1; }
  end=$((SECONDS + seconds))
  while ((SECONDS < end)); do
    slurm scontrol show job "$id" > "$name.job" 2> /dev/null
    state=$(sed -nE 's/.*JobState=([A-Z_]+).*/\1/p' "$name.job")
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT ]] && break
    sleep 0.2
  done
  code=$(sed -nE 's/.* ExitCode=([0-9]+):.*/\1/p' "$name.job")
  slurm_id=$id
  echo "$name: Slurm job $id $state, exit code ${code:-?} ($((seconds - end + SECONDS)) s)"
  if [[ $state != COMPLETED && $state != FAILED ]]; then
    fail "$name: waited $seconds s for Slurm job $id to end; it is '$state' ($(grep -o "Reason=[^ ]*" "$name.job"))"
    slurm scancel "$id"  # the later jobs would wait for its nodes
  fi
  no_leftovers "$name"
}

# no_leftovers NAME: no daemon of the job runs, and no folder of a node or of the submitter is
# left in TMPDIR (the daemons and the script remove theirs, a killed daemon its key at least).
no_leftovers() {
  local left
  left=$(compgen -G "${TMPDIR:-/tmp}/dtrain-$slurm_id-*.*")
  [[ -z $left ]] || fail "$1: folders left: $left"
  pgrep -f "dtrain-$slurm_id-h" > /dev/null && fail "$1: a daemon of Slurm job $slurm_id still runs"
}

echo "== the example MLP on three Slurm nodes"
sed -e 's/epochs: 5/epochs: 3/' "$SPEC" > job.yaml
run_batch mlp 180 --nodes=3 "$SBATCH_SCRIPT" job.yaml mlp.dtm
[[ $state == COMPLETED && $code == 0 ]] || { fail "mlp: $state, exit code $code"; tail -n 20 mlp.out; }
acc=$(sed -nE 's/.*test accuracy ([0-9.]+).*/\1/p' mlp.out | tail -n 1)
python3 -c "import sys; sys.exit(0 if ${acc:-0} >= 0.85 else 1)" || fail "mlp: accuracy '${acc:-none}' < 0.85"
grep -q "replicas agree.* over 3 nodes" mlp.out || fail "mlp: the job did not run on the 3 Slurm nodes"
here=$("$SUBMIT" eval mlp.dtm 2>&1 | sed -nE 's/^examples: [0-9]+ +accuracy: ([0-9.]+).*/\1/p')
python3 -c "import sys; sys.exit(0 if abs(${here:-9} - ${acc:-0}) < 1e-4 else 1)" || fail "mlp: the fetched model evaluates to '${here:-nothing}' here, the job said $acc"
for n in h1 h2 h3; do
  grep -q "dtraind $n: stopped" "dtrain-$slurm_id-$n.log" 2> /dev/null || fail "mlp: $n's daemon did not stop on SIGTERM"
done
echo "mlp: accuracy $acc; evaluated here: $here"

echo "== a job that fails on the nodes: exit code 1"
# The daemons let jobs read only the submission folder: the spec's /usr/share/datasets is refused.
extra_env="DTRAIN_DATA_ROOTS=$WORK" run_batch refused 120 --nodes=3 "$SBATCH_SCRIPT" job.yaml
[[ $state == FAILED && $code == 1 ]] || fail "refused: $state, exit code $code (want FAILED, 1)"
grep -q "data_roots" refused.out || fail "refused: the output does not name data_roots: $(grep -i error refused.out | head -n 2)"
grep -q "dtrain: exit code 1" refused.out || fail "refused: the script did not end with exit code 1"

echo "== a spec that does not parse: exit code 2, no daemon started"
sed -e 's/epochs: 5/epochs: many/' "$SPEC" > bad.yaml
run_batch bad 60 --nodes=3 "$SBATCH_SCRIPT" bad.yaml
[[ $state == FAILED && $code == 2 ]] || fail "bad: $state, exit code $code (want FAILED, 2)"
grep -q "epochs" bad.out || fail "bad: the output does not name the key: $(head -n 3 bad.out)"
[[ -n $slurm_id ]] || fail "bad: no Slurm job id"
compgen -G "dtrain-$slurm_id-*.log" > /dev/null && fail "bad: daemons were started"

echo "== stopped mid-job by a signal (scancel --batch --signal=USR1): SIGTERM to the daemons, exit code 5"
sed -e 's/epochs: 5/epochs: 50/' "$SPEC" > long.yaml
id=$(slurm sbatch --parsable --time=5 --job-name=long -o long.out \
       --export="ALL,DTRAIND=$DTRAIND,DTRAIN_SUBMIT=$SUBMIT" --nodes=3 "$SBATCH_SCRIPT" long.yaml)
for _ in $(seq 1 600); do grep -q "h[123]: epoch 1:" long.out 2> /dev/null && break; sleep 0.1; done
grep -q "h[123]: epoch 1:" long.out || fail "long: waited 60 s for epoch 1: $(tail -n 3 long.out)"
slurm scancel --batch --signal=USR1 "$id"
for _ in $(seq 1 600); do
  slurm scontrol show job "$id" > long.job
  grep -qE "JobState=(COMPLETED|FAILED|CANCELLED)" long.job && break
  sleep 0.1
done
state=$(sed -nE 's/.*JobState=([A-Z_]+).*/\1/p' long.job); code=$(sed -nE 's/.* ExitCode=([0-9]+):.*/\1/p' long.job)
echo "long: Slurm job $id $state, exit code $code"
[[ $state == FAILED && $code == 5 ]] || { fail "long: $state, exit code $code (want FAILED, 5)"; slurm scancel "$id"; }
for n in h1 h2 h3; do
  grep -q "dtraind $n: stopped" "dtrain-$id-$n.log" 2> /dev/null || fail "long: $n's daemon did not stop on SIGTERM"
done
slurm_id=$id no_leftovers long

echo "== daemons killed outright (SIGKILL, as the OOM killer would): no node keeps the key"
id=$(slurm sbatch --parsable --time=5 --job-name=killed -o killed.out \
       --export="ALL,DTRAIND=$DTRAIND,DTRAIN_SUBMIT=$SUBMIT" --nodes=3 "$SBATCH_SCRIPT" long.yaml)
for _ in $(seq 1 600); do grep -q "h[123]: epoch 1:" killed.out 2> /dev/null && break; sleep 0.1; done
grep -q "h[123]: epoch 1:" killed.out || fail "killed: waited 60 s for epoch 1: $(tail -n 3 killed.out)"
daemon_pids=$(pgrep -f "dtrain-$id-h")
for pid in $daemon_pids; do  # each daemon and the task around it, which could clean up no more
  kill -KILL "$(ps -o ppid= -p "$pid" | tr -d ' ')" "$pid" 2> /dev/null
done
slurm scancel "$id"
for _ in $(seq 1 600); do
  slurm scontrol show job "$id" > killed.job
  grep -qE "JobState=(COMPLETED|FAILED|CANCELLED)" killed.job && break
  sleep 0.1
done
[[ $(wc -w <<< "$daemon_pids") -eq 3 ]] || fail "killed: found $(wc -w <<< "$daemon_pids") daemons to kill, not 3"
compgen -G "${TMPDIR:-/tmp}/dtrain-$id-h*/data" > /dev/null || fail "killed: no node folder is left: the daemons were not killed outright"
keys=$(compgen -G "${TMPDIR:-/tmp}/dtrain-$id-h*/cluster.key")
[[ -z $keys ]] || fail "killed: the key is left on the nodes: $keys"
echo "killed: 3 daemons and their tasks; $(grep -o "JobState=[A-Z]*" killed.job); keys left: ${keys:-none}"
rm -rf "${TMPDIR:-/tmp}/dtrain-$id-"*

echo "== GPUs from the allocation: --gpus-per-node=1 of a node's 2"
"$SLURM_TOOL" down "$tag" 3 "$WORK/slurm" > /dev/null 2>&1
rm -rf slurm && mkdir slurm
"$SLURM_TOOL" up "$tag" 3 "$WORK/slurm" 1 2 > slurm.out 2>&1 || { fail "the local Slurm with GPUs did not start: $(cat slurm.out)"; finish; }
sed -e 's/epochs: 5/epochs: 1/' "$SPEC" > gpu.yaml
# Behind the stand-in devices each daemon emulates two GPUs; it must offer only the one
# allocated (CUDA numbers a step's GPUs from 0).
extra_env="DTRAIN_EMULATED_GPUS=2" run_batch gpu 180 --nodes=3 --gpus-per-node=1 "$SBATCH_SCRIPT" gpu.yaml
[[ $state == COMPLETED && $code == 0 ]] || { fail "gpu: $state, exit code $code"; tail -n 20 gpu.out; }
gid=$(sed -nE 's/^JobId=([0-9]+).*/\1/p' gpu.job)
for n in h1 h2 h3; do
  grep -q "gpus: \[0\] (CUDA_VISIBLE_DEVICES=0)" "dtrain-$gid-$n.log" 2> /dev/null ||
    fail "gpu: $n's daemon was not given GPU [0]: $(head -n 1 "dtrain-$gid-$n.log" 2> /dev/null)"
  grep -q "node $n (id [0-9]*) registered .* 1 GPUs" "dtrain-$gid-h1.log" ||
    fail "gpu: the controller did not see $n offer 1 GPU: $(grep "node $n .*registered" "dtrain-$gid-h1.log")"
done

finish
