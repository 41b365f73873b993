#!/usr/bin/env bash
# Evaluation and inference as cluster jobs (docs/user-guide.md, "Evaluation and inference on the
# cluster"), over three daemons:
# - `eval --cluster` of a saved model equals the one-machine `eval` exactly (examples, accuracy,
#   top-N, macro F1, the confusion matrix; with roc in the same job every class's AUC and the
#   curves' CSV);
# - `infer --cluster` of 10,000 rows writes one CSV byte-identical to the one-machine `infer`,
#   also when one node's parts finish last (held until the others are done); keys from a
#   key column stay with their rows; with --parts the part files, joined, are that file too;
# - a node lost mid-evaluation (paused past the peer timeout as the job starts) has its parts
#   redone by the others, and the counts are still exact;
# - a node-local evaluation (--shards: packed test files spread over the nodes, with copies)
#   equals this machine's; files short of the export fail the job saying how many are missing;
# - a running task is cancelled (exit 1); refusals exit 2 naming the fix.
# Every wait has a deadline.
# Arguments: lib.sh's four, then make_regression_csv.py and configs/regression-mlp.yaml.
set -u
GENERATE=$(cd "$(dirname "$5")" && pwd)/$(basename "$5")
CONFIG=$(cd "$(dirname "$6")" && pwd)/$(basename "$6")
source "$(dirname "$0")/lib.sh" cluster_eval "$1" "$2" "$3" "$4"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300 TASK_OUTPUTS="$WORK"
# node-2 takes its parts only while $RELEASE exists (DTRAIN_TEST_HOLD_PARTS): the test holds
# them back, without silencing its heartbeats, where its parts must come last or wait.
RELEASE="$WORK/release-node-2"
touch "$RELEASE"
export NODE_ENV_2="DTRAIN_TEST_HOLD_PARTS=$RELEASE"
FASHION=/usr/share/datasets/fashion-mnist
pid_of() { awk -v n="$1" '$2 == n { print $1 }' "$WORK/c/pids"; }

# Two models trained here: a classifier (one epoch of Fashion-MNIST's test set: quick, and
# its accuracy does not matter) and the regression example.
cat > mlp.yaml <<YAML
name: mlp
model:
  input: [784]
  layers:
    - dense: {units: 64, activation: relu}
    - output: {units: 10, activation: softmax, loss: mcxent}
  updater: {type: adam, learning_rate: 0.003}
data:
  train: {format: idx, images: $FASHION/t10k-images-idx3-ubyte.gz, labels: $FASHION/t10k-labels-idx1-ubyte.gz}
  test: {format: idx, images: $FASHION/t10k-images-idx3-ubyte.gz, labels: $FASHION/t10k-labels-idx1-ubyte.gz}
  normalize: scale
training: {epochs: 1, batch_size: 64, workers_per_node: 1, sync: bsp}
evaluation: {top_n: 3}
output: {model: mlp.dtm}
YAML
timeout 120 "$SUBMIT" --local mlp.yaml --quiet > mlp.out 2>&1 || { echo "FAIL: training the classifier: $(tail -n 3 mlp.out)"; exit 1; }
python3 "$GENERATE" regression-data > /dev/null || { echo "FAIL: the generator"; exit 1; }
cp "$CONFIG" regression.yaml
sed -i 's/epochs: 10/epochs: 2/' regression.yaml
timeout 120 "$SUBMIT" --local regression.yaml --quiet > regression.out 2>&1 || { echo "FAIL: training the regression model: $(tail -n 3 regression.out)"; exit 1; }
# 10,000 rows keyed by a shuffled id column (key_column 0), the model's 8 features after it.
python3 - > keyed.csv <<'PY'
import random
rng = random.Random(3)
ids = [f"id-{i:05d}-{rng.randrange(10**6)}" for i in range(10000)]
rng.shuffle(ids)
for k in ids:
    print(",".join([k] + [f"{rng.uniform(-1, 1):.5f}" for _ in range(8)]))
PY

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

# Evaluation: the same figures as here.
"$SUBMIT" eval mlp.dtm --json > local_eval.json || fail "local eval"
timeout 60 "$SUBMIT" eval mlp.dtm --cluster --json > cluster_eval.json 2> cluster_eval.err || fail "eval --cluster: $(cat cluster_eval.err)"
"$SUBMIT" eval mlp.dtm > local_eval.txt
timeout 60 "$SUBMIT" eval mlp.dtm --cluster > cluster_eval.txt 2>&1 || fail "eval --cluster (text)"
python3 - local_eval.json cluster_eval.json <<'PY' || fail "the cluster evaluation differs: $(cat local_eval.json cluster_eval.json)"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
print("local", a, "\ncluster", b)
sys.exit(0 if all(a[k] == b[k] for k in ("examples", "accuracy", "top_n", "top_n_accuracy", "macro_f1"))
         and abs(a["loss"] - b["loss"]) <= 2e-6 else 1)
PY
# The report's per-class figures and confusion matrix, line for line (the loss line aside).
diff <(grep -v "loss:" local_eval.txt) <(sed -n '/^model /,$p' cluster_eval.txt | grep -v "loss:") > report.diff ||
  fail "the cluster report differs: $(head -n 5 report.diff)"
grep -q "started on 3 nodes, 12 parts" cluster_eval.txt || fail "the evaluation did not use the 3 nodes: $(head -n 3 cluster_eval.txt)"
# Classification and ROC in one job (the data read once): the same AUCs and curves.
"$SUBMIT" eval mlp.dtm --metrics classification,roc --roc-csv local_roc.csv --json > local_roc.json || fail "local roc"
timeout 60 "$SUBMIT" eval mlp.dtm --cluster --metrics classification,roc --roc-csv "$WORK/cluster_roc.csv" --json > cluster_roc.json 2> roc.err ||
  fail "eval --cluster --metrics classification,roc: $(cat roc.err)"
python3 - local_roc.json cluster_roc.json <<'PY' || fail "the cluster ROC differs: $(cat local_roc.json cluster_roc.json)"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
print("auc here", a["auc"], a["macro_auc"], "cluster", b["auc"], b["macro_auc"])
sys.exit(0 if a["auc"] == b["auc"] and a["macro_auc"] == b["macro_auc"] and a["accuracy"] == b["accuracy"] else 1)
PY
# Written into a folder of the job's own beside the file named: WORK/<job id>/cluster_roc.csv.
roc_csv=$(json cluster_roc.json "j.get('roc_csv', '')")
[[ $roc_csv =~ ^$WORK/[0-9a-f]{16}/cluster_roc.csv$ && ! -e $WORK/cluster_roc.csv ]] ||
  fail "the ROC curves went to '$roc_csv', not to a folder of the job's own"
cmp -s local_roc.csv "$roc_csv" && [[ $(wc -l < "$roc_csv") -gt 1000 ]] ||
  fail "the cluster's ROC curves differ from this machine's ($(wc -l < "$roc_csv") lines)"

# Node-local evaluation (--shards): the test set exported as 6 packed files spread over the
# nodes' own folders, node-1 holding 0-2, node-2 2-4, node-3 5 and a copy of 0. Every file is
# evaluated once, by one holder: the same counts as here (on the export, and on the IDX files).
"$SUBMIT" export mlp.yaml --out "$WORK/export" --test-files 6 > export.out 2>&1 || fail "export: $(cat export.out)"
for n in 1 2 3; do mkdir -p "$WORK/shards/node-$n"; done
cp "$WORK"/export/test-0000[012].dtb "$WORK/shards/node-1/"
cp "$WORK"/export/test-0000[234].dtb "$WORK/shards/node-2/"
cp "$WORK"/export/test-0000[05].dtb "$WORK/shards/node-3/"
"$SUBMIT" eval mlp.dtm --data "$WORK/export/test-*.dtb" > packed_eval.txt || fail "local eval of the packed files"
diff <(grep -v "loss:" local_eval.txt) <(grep -v "loss:" packed_eval.txt) > packed.diff ||
  fail "eval of the packed export differs from eval of the IDX files: $(head -n 5 packed.diff)"
timeout 60 "$SUBMIT" eval mlp.dtm --cluster --shards "$WORK/shards/{node}/test-*.dtb" > shards_eval.txt 2>&1 ||
  fail "eval --cluster --shards: $(tail -n 5 shards_eval.txt)"
diff <(grep -v "loss:" local_eval.txt) <(sed -n '/^model /,$p' shards_eval.txt | grep -v "loss:") > shards.diff ||
  fail "the node-local evaluation differs from this machine's: $(head -n 5 shards.diff)"
grep "node-local evaluation: 6 files, 10000 examples" shards_eval.txt ||
  fail "no plan of 6 files: $(grep -i 'node-local\|holds' shards_eval.txt)"
# Files that do not hold the whole test set: the job fails saying how much is missing.
timeout 60 "$SUBMIT" eval mlp.dtm --cluster --shards "$WORK/shards/{node}/test-0000[01].dtb" > partial.out 2>&1
rc=$?
[[ $rc -eq 1 ]] && grep -q "the nodes hold 3333 of the export's 10000 examples" partial.out ||
  fail "node-local files short of the export: exit $rc, $(tail -n 3 partial.out)"
"$SUBMIT" eval mlp.dtm --shards "$WORK/shards/{node}/test-*.dtb" > noncluster.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "add --cluster" noncluster.out || fail "--shards without --cluster: exit $rc, $(cat noncluster.out)"

# Inference of 10,000 IDX rows, node-2's parts held back until the others have done theirs
# (node-1 is the controller): one CSV identical to this machine's.
"$SUBMIT" infer mlp.dtm --input $FASHION/t10k-images-idx3-ubyte.gz --output local_preds.csv 2> /dev/null || fail "local infer"
rm -f "$RELEASE"
timeout 60 "$SUBMIT" infer mlp.dtm --cluster --input $FASHION/t10k-images-idx3-ubyte.gz --output "$WORK/preds" > infer.out 2>&1 &
infer_pid=$!
# node-2 is held until the other two have done their 8 parts (at most 60 s).
done_parts=0
hold_end=$((SECONDS + 60))
while ((SECONDS < hold_end)); do
  sleep 0.1
  id=$(sed -nE 's/^submitted infer job ([0-9a-f]{16}).*/\1/p' infer.out)
  [[ -n $id ]] || continue
  "$SUBMIT" status "$id" --json > infer_status.json 2> /dev/null || continue
  done_parts=$(json infer_status.json "j.get('task_parts', {}).get('done', 0)")
  [[ $done_parts -ge 8 ]] && break
done
touch "$RELEASE"
[[ $done_parts -ge 8 ]] || fail "nodes 1 and 3 did $done_parts of their 8 parts within 60 s"
wait "$infer_pid" || fail "infer --cluster: $(tail -n 5 infer.out)"
preds="preds/$id/predictions.csv"  # a folder of the job's own inside --output
grep -q "10000 predictions in .*/$preds$" infer.out || fail "infer did not say where: $(tail -n 3 infer.out)"
cmp -s local_preds.csv "$preds" || fail "the cluster predictions differ from this machine's ($(wc -l < "$preds") lines)"
[[ $(wc -l < "$preds") -eq 10001 ]] || fail "predictions.csv has $(wc -l < "$preds") lines, want 10001"
order=$(sed -nE 's/.*node-[0-9]: part ([0-9]+) of 12 done.*/\1/p' infer.out | tr '\n' ' ')
last_node=$(sed -nE 's/.*(node-[0-9]): part [0-9]+ of 12 done.*/\1/p' infer.out | tail -n 1)
[[ $last_node == node-2 && $order != "1 2 3 4 5 6 7 8 9 10 11 12 " ]] ||
  fail "the parts were not finished out of order with node-2 last: order $order, last $last_node"
echo "parts finished in the order: $order"

# Keys from a key column, and --parts.
"$SUBMIT" infer regression-mlp.dtm --input keyed.csv --key-column 0 --output local_keyed.csv 2> /dev/null || fail "local keyed infer"
# Twice into the same --output: each job its own folder, neither replaces the other's.
for run in 1 2; do
  timeout 60 "$SUBMIT" infer regression-mlp.dtm --cluster --input keyed.csv --key-column 0 --output "$WORK/keyed" > keyed$run.out 2>&1 || fail "keyed infer --cluster: $(tail -n 3 keyed$run.out)"
done
keyed=()
for run in 1 2; do keyed+=("keyed/$(sed -nE 's/^submitted infer job ([0-9a-f]{16}).*/\1/p' keyed$run.out)/predictions.csv"); done
for f in "${keyed[@]}"; do
  cmp -s local_keyed.csv "$f" || fail "keyed predictions differ ($f)"
done
[[ $(ls keyed | wc -l) -eq 2 && ${keyed[0]} != "${keyed[1]}" ]] || fail "two jobs into one --output left: $(ls keyed | tr '\n' ' ')"
[[ $(cut -d, -f1 "${keyed[0]}" | tail -n +2) == $(cut -d, -f1 keyed.csv) ]] || fail "the keys are not the input's, in its order"
timeout 60 "$SUBMIT" infer regression-mlp.dtm --cluster --parts --input keyed.csv --key-column 0 --output "$WORK/parts" > parts.out 2>&1 || fail "infer --parts"
parts="parts/$(sed -nE 's/^submitted infer job ([0-9a-f]{16}).*/\1/p' parts.out)"
[[ $(ls "$parts" | wc -l) -eq 12 && ! -e $parts/predictions.csv ]] || fail "--parts left $(ls "$parts" | tr '\n' ' ')"
{ head -n 1 "$parts/part-00000.csv"; for f in "$parts"/part-*.csv; do tail -n +2 "$f"; done; } > joined.csv
cmp -s local_keyed.csv joined.csv || fail "the part files, joined, differ from one machine's predictions"

# A node lost mid-evaluation: node-3 stops as the job starts and stays silent past the peer
# timeout (3 s); its parts are redone on the others.
kill -STOP "$(pid_of node-3)"
timeout 60 "$SUBMIT" eval mlp.dtm --cluster > lost.out 2>&1
rc=$?
kill -KILL "$(pid_of node-3)"
[[ $rc -eq 0 ]] || fail "eval with node-3 lost: exit $rc, $(tail -n 5 lost.out)"
grep -q "node node-3 lost" lost.out && grep -Eq "of node-3's parts go to node-[12]" lost.out ||
  fail "node-3's parts were not handed on: $(grep -E 'lost|go to' lost.out)"
diff <(grep -v "loss:" local_eval.txt) <(sed -n '/^model /,$p' lost.out | grep -v "loss:") > lost.diff ||
  fail "with a lost node the report differs: $(head -n 5 lost.diff)"
lost_id=$(sed -nE 's/^submitted eval job ([0-9a-f]{16}).*/\1/p' lost.out)
"$SUBMIT" status "$lost_id" > lost_status.out 2>&1
grep -q "parts: 12 of 12 done" lost_status.out && grep -q "lost during the job: node-3" lost_status.out ||
  fail "status of the evaluation that lost node-3: $(cat lost_status.out)"

# Cancel: node-2's parts held back, so the job cannot end; it is cancelled meanwhile; exit 1.
rm -f "$RELEASE"
timeout 60 "$SUBMIT" infer mlp.dtm --cluster --input $FASHION/t10k-images-idx3-ubyte.gz --output "$WORK/cancelled" > cancel.out 2>&1 &
infer_pid=$!
id=""
for _ in $(seq 1 50); do
  id=$(sed -nE 's/^submitted infer job ([0-9a-f]{16}).*/\1/p' cancel.out)
  [[ -n $id ]] && break
  sleep 0.1
done
[[ -n $id ]] && "$SUBMIT" cancel "$id" > /dev/null || fail "cancel of '$id'"
touch "$RELEASE"
wait "$infer_pid"
rc=$?
[[ $rc -eq 1 ]] && grep -q cancelled cancel.out || fail "the cancelled infer exited $rc: $(tail -n 3 cancel.out)"

# Refusals, exit 2 with the fix.
"$SUBMIT" eval mlp.dtm --cluster --metrics regression > metric.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "use --metrics classification or roc" metric.out || fail "regression metrics on a classifier: exit $rc, $(cat metric.out)"
"$SUBMIT" infer mlp.dtm --cluster --input nowhere.csv --output "$WORK/x" > missing.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "cannot read 'nowhere.csv'" missing.out || fail "missing input: exit $rc, $(cat missing.out)"
# Outside the controller's task_outputs ($WORK): refused naming the folder it allows, and the
# empty folder made for the check is gone again.
outside=$(mktemp -u /tmp/dtrain-outside-XXXXXX)
"$SUBMIT" infer mlp.dtm --cluster --input $FASHION/t10k-images-idx3-ubyte.gz --output "$outside" > outside.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "not inside a task_outputs folder" outside.out && grep -qF "($WORK)" outside.out ||
  fail "output outside task_outputs: exit $rc, $(cat outside.out)"
[[ ! -e $outside ]] || { rmdir "$outside"; fail "the refused infer left the folder $outside behind"; }
finish "cluster eval test"
