#!/usr/bin/env bash
# dtrain-submit as a user runs it: train --local on a small CSV problem, eval, infer, and the
# documented exit codes for bad input (2) and no controller (3).
set -u
SUBMIT="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"  # absolute: the test changes directory
WORK="${TEST_TMPDIR:-$(mktemp -d)}/cli"
mkdir -p "$WORK"
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_rc() {  # expect_rc CODE DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  "$@" > out.txt 2> err.txt
  local rc=$?
  if [[ $rc -ne $want ]]; then fail "$what: exit $rc, wanted $want"; cat out.txt err.txt; fi
}

# Two well separated classes in 4 features; label in the last column.
awk 'BEGIN { srand(7); for (i = 0; i < 400; i++) { c = i % 2; s = c ? 1 : -1;
  printf "%.3f,%.3f,%.3f,%.3f,%d\n", s + rand() - 0.5, s * 0.5 + rand() - 0.5, rand(), rand(), c } }' > train.csv
head -n 100 train.csv > test.csv
cat > job.yaml <<YAML
name: csv-demo
seed: 3
model:
  input: [4]
  layers:
    - dense: {units: 8, activation: tanh}
    - output: {units: 2, activation: softmax, loss: mcxent}
  updater: {type: adam, learning_rate: 0.01}
data:
  train: {format: csv, path: train.csv}
  test: {format: csv, path: test.csv}
training: {epochs: 3, batch_size_per_worker: 16}
output: {model: demo.dtm}
YAML

expect_rc 0 "train --local" -- "$SUBMIT" --local job.yaml
grep -q "epoch 3 done" out.txt || fail "no per-epoch progress line"
grep -q "final evaluation" out.txt || fail "no final evaluation"
[[ -s demo.dtm ]] || fail "model file not written"

expect_rc 0 "eval --json" -- "$SUBMIT" eval demo.dtm --json
acc=$(sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' out.txt)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || fail "eval accuracy '$acc' below 0.95"

# Fine-tuning: one epoch at a learning rate too small to learn anything keeps the saved
# model's accuracy with model.init_from, and stays near chance without it.
accuracy_of() { "$SUBMIT" eval "$1" --json | sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p'; }
sed -e 's/learning_rate: 0.01/learning_rate: 1.0e-6/' -e 's/epochs: 3/epochs: 1/' \
    -e 's/model: demo.dtm/model: scratch.dtm/' job.yaml > scratch.yaml
sed -e 's/^model:$/model:\n  init_from: demo.dtm/' -e 's/model: scratch.dtm/model: tuned.dtm/' \
    scratch.yaml > tuned.yaml
expect_rc 0 "train from scratch, tiny learning rate" -- "$SUBMIT" --local scratch.yaml
expect_rc 0 "fine-tune from demo.dtm, tiny learning rate" -- "$SUBMIT" --local tuned.yaml
scratch=$(accuracy_of scratch.dtm); tuned=$(accuracy_of tuned.dtm)
echo "one epoch at lr 1e-6: from scratch $scratch, from demo.dtm $tuned (saved $acc)"
awk -v t="$tuned" -v a="$acc" 'BEGIN { exit !(t >= a - 0.02) }' ||
  fail "fine-tuned accuracy $tuned is not the saved model's $acc"
awk -v s="$scratch" 'BEGIN { exit !(s < 0.9) }' || fail "the control from scratch reached $scratch"
sed 's/units: 8, activation: tanh/units: 9, activation: tanh/' tuned.yaml > wider.yaml
expect_rc 2 "fine-tune into another shape" -- "$SUBMIT" --local wider.yaml
grep -q "model.layers\[0\] is dense with 45 parameters" err.txt || fail "shape mismatch message: $(cat err.txt)"
grep -q "drop model.init_from" err.txt || fail "shape mismatch fix"

# Checkpoints and resume: one worker, a checkpoint every 5 of the 100 minibatches, 3 kept. A run
# resumed from a checkpoint ends with the very model the uninterrupted run wrote; a checkpoint
# cut short by a crash is skipped for the one before it.
sed -e 's/epochs: 3, batch_size_per_worker: 16/epochs: 4, batch_size_per_worker: 16, workers_per_node: 1/' \
    -e 's/output: {model: demo.dtm}/output: {model: ck.dtm, checkpoint_every: 5, keep_checkpoints: 3}/' \
    job.yaml > ck.yaml
expect_rc 0 "train with checkpoints" -- "$SUBMIT" --local ck.yaml
[[ $(ls ck.ckpt-*.dtm | sort | tr '\n' ' ') == "ck.ckpt-100.dtm ck.ckpt-90.dtm ck.ckpt-95.dtm " ]] ||
  fail "checkpoints kept: $(ls ck.ckpt-*.dtm | tr '\n' ' ') (wanted the newest 3 of every 5th of 100)"
cp ck.dtm uninterrupted.dtm
expect_rc 0 "resume from a checkpoint" -- "$SUBMIT" --local ck.yaml --resume ck.ckpt-90.dtm
grep -q "resuming from ck.ckpt-90.dtm: epoch 4, after minibatch 90" out.txt || fail "resume line: $(head -n 2 out.txt)"
cmp -s ck.dtm uninterrupted.dtm || fail "the resumed run's model differs from the uninterrupted run's"
size=$(stat -c %s ck.ckpt-100.dtm)
head -c $((size / 2)) ck.ckpt-100.dtm > cut.dtm && mv cut.dtm ck.ckpt-100.dtm
expect_rc 0 "resume a model's newest whole checkpoint (its own spec)" -- "$SUBMIT" --local --resume ck.dtm
grep -q "skipped a damaged checkpoint: ck.ckpt-100.dtm.*truncated" err.txt || fail "no word of the damaged checkpoint: $(cat err.txt)"
grep -q "resuming from ck.ckpt-95.dtm" out.txt || fail "did not resume from the previous checkpoint: $(head -n 1 out.txt)"
cmp -s ck.dtm uninterrupted.dtm || fail "resumed from ck.ckpt-95.dtm, the model differs from the uninterrupted run's"
# A fresh run of the same model starts a new series: an earlier run's checkpoints are gone.
expect_rc 0 "train ck.yaml again from the start" -- "$SUBMIT" --local ck.yaml
[[ $(ls ck.ckpt-*.dtm | sort | tr '\n' ' ') == "ck.ckpt-100.dtm ck.ckpt-90.dtm ck.ckpt-95.dtm " ]] ||
  fail "after a fresh run: $(ls ck.ckpt-*.dtm | tr '\n' ' ')"
cmp -s ck.dtm uninterrupted.dtm || fail "a fresh run of ck.yaml differs from the first"
# Local steps (a round every 7 minibatches, momentum in the outer optimizer, a residual): resumed
# from a checkpoint between two rounds, the run ends with the uninterrupted run's model, byte
# for byte, so the checkpoint held the global parameters, the outer momentum and the residual.
sed -e 's/epochs: 3, batch_size_per_worker: 16/epochs: 4, batch_size_per_worker: 16, workers_per_node: 1, sync: {local: {steps: 7, density: 0.2, levels: 2}}/' \
    -e 's/output: {model: demo.dtm}/output: {model: ls.dtm, checkpoint_every: 5, keep_checkpoints: 3}/' \
    job.yaml > ls.yaml
expect_rc 0 "train local steps with checkpoints" -- "$SUBMIT" --local ls.yaml
cp ls.dtm ls-uninterrupted.dtm
expect_rc 0 "resume local steps between rounds" -- "$SUBMIT" --local ls.yaml --resume ls.ckpt-90.dtm
grep -q "resuming from ls.ckpt-90.dtm: epoch 4, after minibatch 90" out.txt || fail "local steps resume line: $(head -n 2 out.txt)"
cmp -s ls.dtm ls-uninterrupted.dtm || fail "resumed local steps: the model differs from the uninterrupted run's"
# Two workers under bsp, resumed in the middle of an epoch: the minibatches before the
# checkpoint are not waited for again (this once hung until the 10-minute step deadline).
sed -e 's/epochs: 3, batch_size_per_worker: 16/epochs: 3, batch_size_per_worker: 16, workers_per_node: 2, sync: bsp/' \
    -e 's/output: {model: demo.dtm}/output: {model: two.dtm, checkpoint_every: 5, keep_checkpoints: 10}/' \
    job.yaml > two.yaml
expect_rc 0 "train two workers with checkpoints" -- "$SUBMIT" --local two.yaml
mid=$(ls two.ckpt-*.dtm | sed -nE 's/two\.ckpt-([0-9]+)\.dtm/\1/p' | awk '$1 % 13 != 0' | sort -n | head -n 1)
[[ -n $mid ]] || fail "no checkpoint inside an epoch among $(ls two.ckpt-*.dtm | tr '\n' ' ')"
expect_rc 0 "resume two bsp workers mid-epoch" -- timeout 20 "$SUBMIT" --local two.yaml --resume "two.ckpt-$mid.dtm"
grep -q "resuming from two.ckpt-$mid.dtm" out.txt || fail "resume line: $(head -n 2 out.txt)"
grep -q "final evaluation" out.txt || fail "the resumed two-worker run did not finish: $(tail -n 3 out.txt err.txt)"
expect_rc 0 "validate a good spec" -- "$SUBMIT" validate job.yaml
grep -q "valid job 'csv-demo'" out.txt && [[ ! -s err.txt ]] || fail "validate: $(cat out.txt err.txt)"
sed 's#model: demo.dtm#model: ../../x.dtm#' job.yaml > outside.yaml
expect_rc 0 "validate a spec only --local can run" -- "$SUBMIT" validate outside.yaml
grep -q "a cluster refuses it: output.model '../../x.dtm' is not a file path inside" err.txt ||
  fail "validate did not warn of the cluster's refusal: $(cat err.txt)"
sed 's#training: {#training: {mode: parameter_averaging, workers_per_node: 2, #' job.yaml > avg.yaml
expect_rc 2 "validate averaging over two workers" -- "$SUBMIT" validate avg.yaml
grep -q "training.workers_per_node" err.txt && grep -q "one worker per node" err.txt ||
  fail "averaging with two workers: $(cat err.txt)"
sed 's#training: {#training: {mode: parameter_averaging, workers_per_node: auto, #' job.yaml | sed 's#model: demo.dtm#model: avg.dtm#' > avg_auto.yaml
expect_rc 0 "parameter averaging with workers_per_node: auto (one worker) --local" -- "$SUBMIT" --local avg_auto.yaml
grep -q "final evaluation" out.txt || fail "averaging under auto did not train: $(tail -n 3 out.txt err.txt)"
expect_rc 2 "a mistyped command" -- "$SUBMIT" logz
grep -q "'logz' is neither a command nor a job spec file" err.txt && grep -q 'did you mean `dtrain-submit logs`' err.txt ||
  fail "mistyped command: $(cat err.txt)"
expect_rc 2 "a model into a folder that does not exist" -- "$SUBMIT" --local job.yaml --output nowhere/x.dtm
grep -q "the folder nowhere does not exist" err.txt && grep -q "mkdir -p nowhere" err.txt ||
  fail "missing output folder: $(cat err.txt)"
expect_rc 2 "resume without checkpoints" -- "$SUBMIT" --local --resume demo.dtm
grep -q "no checkpoint of demo.dtm" err.txt || fail "no-checkpoint message: $(cat err.txt)"
expect_rc 2 "resume without --local" -- "$SUBMIT" job.yaml --resume ck.dtm
grep -q "fix: add --local" err.txt || fail "resume-without-local message: $(cat err.txt)"

# Early stopping on a crafted case: a min_delta no gain reaches means the first evaluation stays
# the best, so with patience 1 training stops after epoch 2 of 4 and keeps epoch 1's model: it
# evaluates exactly like a run of one epoch (one worker: the same steps).
sed -e 's/epochs: 3, batch_size_per_worker: 16/epochs: 4, batch_size_per_worker: 16, workers_per_node: 1,\n    early_stopping: {metric: loss, patience: 1, min_delta: 10}/' \
    -e 's/output: {model: demo.dtm}/output: {model: early.dtm}/' job.yaml > early.yaml
sed -e 's/epochs: 3, batch_size_per_worker: 16/epochs: 1, batch_size_per_worker: 16, workers_per_node: 1/' \
    -e 's/output: {model: demo.dtm}/output: {model: one.dtm}/' job.yaml > one.yaml
expect_rc 0 "train with early stopping" -- "$SUBMIT" --local early.yaml
grep -q "early stopping after epoch 2: the test loss did not improve by more than 10 in 1 evaluations; the model kept is epoch 1's" out.txt ||
  fail "early stopping line: $(grep -i early out.txt)"
grep -q "epoch 3" out.txt && fail "training went on after early stopping"
expect_rc 0 "train one epoch" -- "$SUBMIT" --local one.yaml
"$SUBMIT" eval early.dtm --json > early.json; "$SUBMIT" eval one.dtm --json > one.json
cmp -s early.json one.json || fail "the kept model is not epoch 1's: $(cat early.json) vs $(cat one.json)"

expect_rc 0 "eval on an explicit CSV" -- "$SUBMIT" eval demo.dtm --data test.csv
grep -q "confusion matrix" out.txt || fail "eval report lacks the confusion matrix"

cut -d, -f1-4 test.csv | awk '{ print "row" NR "," $0 }' > keyed.csv
expect_rc 0 "infer with keys" -- "$SUBMIT" infer demo.dtm --input keyed.csv --key-column 0 --output preds.csv
[[ $(wc -l < preds.csv) -eq 101 ]] || fail "infer wrote $(wc -l < preds.csv) lines, wanted 101"
head -n 2 preds.csv | tail -n 1 | grep -q "^row1," || fail "first prediction is not keyed row1"

expect_rc 2 "malformed spec" -- "$SUBMIT" --local <(echo "name: [oops")
grep -q "malformed YAML" err.txt || fail "malformed spec message"
expect_rc 2 "missing spec" -- "$SUBMIT" --local nowhere.yaml
grep -q "cannot read job spec" err.txt || fail "missing spec message"
expect_rc 2 "unknown option" -- "$SUBMIT" --frobnicate
expect_rc 2 "not a model file" -- "$SUBMIT" eval job.yaml
grep -q "not a dtrain model file" err.txt || fail "not-a-model message"
# A real model file with one byte flipped in the middle, and one cut short.
cp demo.dtm flipped.dtm
size=$(stat -c %s demo.dtm)
printf '\xff' | dd of=flipped.dtm bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_rc 2 "corrupt model (a flipped byte)" -- "$SUBMIT" eval flipped.dtm
grep -q "checksum mismatch" err.txt || { fail "corrupt model message"; cat err.txt; }
head -c $((size - 10)) demo.dtm > short.dtm
expect_rc 2 "truncated model" -- "$SUBMIT" eval short.dtm
grep -q "truncated" err.txt || { fail "truncated model message"; cat err.txt; }
expect_rc 2 "infer with the wrong width" -- "$SUBMIT" infer demo.dtm --input train.csv --output x.csv
grep -q "columns, the model needs 4" err.txt || fail "width mismatch message"
printf '%064x\n' 7 > cluster.key && chmod 600 cluster.key
expect_rc 3 "no controller" -- "$SUBMIT" job.yaml --key-file cluster.key --controller 127.0.0.1:1 --connect-timeout-ms 3000
grep -q "cannot connect to the controller at 127.0.0.1:1" err.txt || fail "no-controller message"
# Standby controllers (docs/operations.md, "Standby controllers"): every listed one is tried;
# none answering is "no controller" too, naming the list; a malformed list is bad input.
expect_rc 3 "no controller of a list" -- "$SUBMIT" status --key-file cluster.key \
  --controller 127.0.0.1:1,127.0.0.1:2 --connect-timeout-ms 3000
grep -q "no controller of 127.0.0.1:1,127.0.0.1:2 leads now" err.txt ||
  { fail "no-controller-of-a-list message"; cat err.txt; }
expect_rc 2 "a malformed controller list" -- "$SUBMIT" status --key-file cluster.key \
  --controller 127.0.0.1:1,:7070
grep -q "is not host:port (or a list of them)" err.txt ||
  { fail "malformed controller list message"; cat err.txt; }
expect_rc 2 "missing key file" -- "$SUBMIT" job.yaml --key-file nowhere.key --controller 127.0.0.1:1
grep -q "nowhere.key" err.txt || fail "missing key message"
chmod 644 cluster.key
expect_rc 2 "key file readable by others" -- "$SUBMIT" status --key-file cluster.key --controller 127.0.0.1:1
grep -q "chmod 600" err.txt || fail "key permission message"
chmod 600 cluster.key  # a usable key: the refusal below must be about the job id
expect_rc 2 "bad job id" -- "$SUBMIT" cancel not-a-job --key-file cluster.key --controller 127.0.0.1:1
grep -q "not-a-job" err.txt || { fail "bad job id message"; cat err.txt; }
expect_rc 0 "help" -- "$SUBMIT" --help
grep -q "Exit codes" out.txt || fail "--help does not document exit codes"

if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all CLI checks passed"
