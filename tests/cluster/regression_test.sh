#!/usr/bin/env bash
# Regression end to end (docs/user-guide.md, "Regression"): tools/data/make_regression_csv.py writes
# the example's data, configs/regression-mlp.yaml (CSV with `labels: regression`, an identity
# output with mse) trains on this machine (--local) and across three daemons. Both reach R² of
# at least 0.9 on each target column; the job's replicas agree; the metrics `eval --json` prints
# equal ones this script computes from `infer`'s predictions and the CSV's targets, and the
# fetched cluster model evaluates here to the metrics the job reported, its parts merged: to
# 1e-6 relative, as each node evaluates its part with its own replica and those agree to ~1e-8.
# `eval JOB --cluster` evaluates the job's model (fetched, shipped) to the fetched model's
# figures. A classifier's metric on a regression model and exporting regression data are
# refused with the fix. Every wait has a deadline.
# Arguments: lib.sh's four, then make_regression_csv.py and configs/regression-mlp.yaml.
set -u
GENERATE=$(cd "$(dirname "$5")" && pwd)/$(basename "$5")
CONFIG=$(cd "$(dirname "$6")" && pwd)/$(basename "$6")
source "$(dirname "$0")/lib.sh" regression "$1" "$2" "$3" "$4"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300

python3 "$GENERATE" regression-data > generate.out || { echo "FAIL: the generator: $(cat generate.out)"; exit 1; }
cp "$CONFIG" job.yaml
# The targets are the last two columns: what the model sees is the first eight.
cut -d, -f1-8 regression-data/test.csv > features.csv

# metrics_match EVAL_JSON PREDICTIONS: eval's metrics against sums computed here, in Python
# with two passes (R² from the targets' mean), from infer's predictions and the CSV's targets
# (read as the float32 values the trainer reads).
metrics_match() {
  python3 - "$1" "$2" regression-data/test.csv <<'PY'
import json, math, struct, sys
ev = json.load(open(sys.argv[1]))
f32 = lambda s: struct.unpack("f", struct.pack("f", float(s)))[0]
pred = [list(map(float, l.split(",")[1:])) for l in open(sys.argv[2]).read().split("\n")[1:] if l]
rows = [l.split(",") for l in open(sys.argv[3]).read().split("\n")[1:] if l]
y = [[f32(r[8]), f32(r[9])] for r in rows]
assert len(pred) == len(y) == ev["examples"], (len(pred), len(y), ev["examples"])
ok = True
for c in range(2):
    n = len(y)
    mean = sum(t[c] for t in y) / n
    sse = sum((p[c] - t[c]) ** 2 for p, t in zip(pred, y))
    sae = sum(abs(p[c] - t[c]) for p, t in zip(pred, y))
    sst = sum((t[c] - mean) ** 2 for t in y)
    want = {"mse": sse / n, "mae": sae / n, "rmse": math.sqrt(sse / n), "r2": 1 - sse / sst}
    for k, v in want.items():
        if abs(ev[k][c] - v) > 1e-7 * max(1.0, abs(v)):
            ok = False
            print(f"column {c} {k}: eval says {ev[k][c]!r}, computed here {v!r}")
    if ev["r2"][c] < 0.9:
        ok = False
        print(f"column {c}: R² {ev['r2'][c]} < 0.9")
print("metrics:", {k: ev[k] for k in ("mse", "r2")})
sys.exit(0 if ok else 1)
PY
}

# On this machine.
timeout 120 "$SUBMIT" --local job.yaml > local.out 2>&1 || fail "local training: $(tail -n 3 local.out)"
"$SUBMIT" eval regression-mlp.dtm --json > local_eval.json 2> local_eval.err ||
  fail "eval: $(cat local_eval.err)"
"$SUBMIT" infer regression-mlp.dtm --input features.csv --header --output local_preds.csv 2> /dev/null ||
  fail "infer of the local model"
[[ $(head -n 1 local_preds.csv) == key,y0,y1 ]] || fail "infer's header is '$(head -n 1 local_preds.csv)'"
metrics_match local_eval.json local_preds.csv || fail "the local model's metrics"

"$SUBMIT" eval regression-mlp.dtm --metrics roc > roc.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "use --metrics regression" roc.out ||
  fail "--metrics roc on a regression model: exit $rc, $(cat roc.out)"
"$SUBMIT" export job.yaml --out packed > export.out 2>&1
rc=$?
[[ $rc -ne 0 ]] && grep -q "labels: regression" export.out ||
  fail "export of regression data: exit $rc, $(cat export.out)"

# Across three daemons.
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
sed -i 's/name: regression-mlp/name: regression-cluster/; s/model: regression-mlp.dtm/model: regression-cluster.dtm/' job.yaml
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"
state=$(wait_job_end "$id" job.json 120)
[[ $state == succeeded ]] || { fail "job $id ended '$state' (waited 120 s)"; "$SUBMIT" logs "$id" | tail -n 20; }
python3 - job.json <<'PY' || fail "the cluster job's result"
import json, sys
r = json.load(open(sys.argv[1]))["result"]
m = r.get("regression", {})
print("cluster:", m.get("r2"), "replicas within", r.get("replica_max_relative_difference"),
      "evaluated", r.get("evaluated_examples"), "on", r.get("evaluation_nodes"), "nodes")
ok = (len(m.get("r2", [])) == 2 and all(v is not None and v >= 0.9 for v in m["r2"])
      and r["replica_max_relative_difference"] <= 1e-5 and r.get("evaluated_examples") == 2000
      and r.get("evaluation_nodes") == 3 and "accuracy" not in r)
sys.exit(0 if ok else 1)
PY
"$SUBMIT" fetch "$id" -o fetched.dtm > fetch.out 2>&1 || fail "fetch: $(cat fetch.out)"
"$SUBMIT" eval fetched.dtm --json > fetched_eval.json 2> fetched_eval.err ||
  fail "eval of the fetched model: $(cat fetched_eval.err)"
python3 - job.json fetched_eval.json <<'PY' || fail "the fetched model does not evaluate here to the job's metrics"
import json, sys
job = json.load(open(sys.argv[1]))["result"]
here = json.load(open(sys.argv[2]))
bad = [(k, c, job["regression"][k][c], here[k][c]) for k in ("mse", "mae", "rmse", "r2")
       for c in range(2) if abs(job["regression"][k][c] - here[k][c]) > 1e-6 * abs(here[k][c])]
bad += [("loss", 0, job["test_loss"], here["loss"])] if abs(job["test_loss"] - here["loss"]) > 1e-6 * here["loss"] else []
print("job vs here:", bad or "equal")
sys.exit(1 if bad else 0)
PY
# The job's model evaluated in place as a cluster job (`eval JOB --cluster`; on the test set
# its spec names): the fetched model's figures, the parts' sums added in another order.
timeout 60 "$SUBMIT" eval "$id" --cluster --json > job_eval.json 2> job_eval.err ||
  fail "eval $id --cluster: $(tail -n 3 job_eval.err)"
python3 - fetched_eval.json job_eval.json <<'PY' || fail "eval JOB --cluster differs from the fetched model's evaluation"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
bad = [k for k in ("mse", "mae", "rmse", "r2") for c in range(2) if abs(a[k][c] - b[k][c]) > 1e-12 * abs(a[k][c])]
print("eval JOB --cluster:", b["r2"], "differs in", bad or "nothing")
sys.exit(1 if bad or a["examples"] != b["examples"] else 0)
PY
"$SUBMIT" infer fetched.dtm --input features.csv --header --output cluster_preds.csv 2> /dev/null ||
  fail "infer of the fetched model"
metrics_match fetched_eval.json cluster_preds.csv || fail "the cluster model's metrics"
finish "regression test"
