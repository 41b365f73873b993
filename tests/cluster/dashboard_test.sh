#!/usr/bin/env bash
# The dashboard (docs/architecture/daemon.md, "Dashboard") as a person sees it: Debian's chromium,
# headless, loads the controller's page of a running 3-node job. The loss chart has series from
# every node and grows while the job runs (a long job, cancelled after); after a short job the
# confusion matrix has 10 x 10 cells;
# no script error and no file that failed to load. The job list and the nodes are shown. A
# screenshot is kept as a test output. An evaluation job of its model (eval JOB --cluster) has
# a page of its own. Skipped (with the reason) where chromium is missing.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" dashboard "$1" "$2" "$3"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $CHROMIUM ]]; then
  echo "SKIPPED: chromium is not installed (bash tools/setup.sh installs it)"
  exit 0
fi
OUTPUTS=${TEST_UNDECLARED_OUTPUTS_DIR:-$WORK}
# One page load: the DOM after the page's scripts ran for BUDGET ms of (virtual) time.
browse() {  # browse URL BUDGET_MS OUT
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$WORK/profile" --virtual-time-budget="$2" --enable-logging=stderr --v=0 \
    --dump-dom "$1" > "$3" 2>> chromium.err
}
# attr FILE ID NAME: the value of data-NAME on the element with id ID.
attr() {
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
html = open(sys.argv[1]).read()
tag = re.search(r'<[^>]*\bid="%s"[^>]*>' % re.escape(sys.argv[2]), html)
value = tag and re.search(r'data-%s="([^"]*)"' % re.escape(sys.argv[3]), tag.group(0))
print(value.group(1) if value else "")
PY
}

# The running job's pages are read from a job too long to end meanwhile (however slowly the
# browser starts), then cancelled; the finished job's pages, from a short one.
sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/epochs: 5/epochs: 200/' \
    -e 's/checkpoint_every: 1000/checkpoint_every: 0/' "$SPEC" > long.yaml
sed -e 's/epochs: 200/epochs: 4/' -e 's/name: fashion-mnist-mlp/name: fashion-mnist-short/' \
    long.yaml > job.yaml
grep -q "epochs: 4" job.yaml || fail "job.yaml does not have 4 epochs"
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
url="http://127.0.0.1:$(http_port node-1)"
long_id=$("$SUBMIT" long.yaml --detach) || fail "detached submit"
wait_epoch "$long_id" 2 60 || exit 1

# While it runs: every node's loss, and more points an epoch later.
browse "$url/#/job/$long_id" 4000 running1.html
last1=$(attr running1.html loss last)
wait_epoch "$long_id" $((epoch + 1)) 60 || exit 1
browse "$url/#/job/$long_id" 4000 running2.html
last2=$(attr running2.html loss last)
series=$(attr running2.html loss series)
echo "loss chart while running: up to iteration $last1, then $last2 ($(attr running2.html loss points) points); series $series"
[[ $series == "node-1,node-2,node-3" ]] || fail "the loss chart's series are '$series', not the three nodes"
[[ ${last1:-0} -gt 0 && ${last2:-0} -gt ${last1:-0} ]] || fail "the loss chart did not grow while the job ran (up to iteration $last1, then $last2)"
grep -q "live · every second" running2.html || fail "the running job's page does not say it is live"
"$SUBMIT" cancel "$long_id" > /dev/null || fail "cancel $long_id"
state=$(wait_job_end "$long_id" long.json 60)
[[ $state == cancelled ]] || fail "the long job ended '$state', not cancelled"

id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"
state=$(wait_job_end "$id" job.json 180)
[[ $state == succeeded ]] || fail "job $id ended '$state'"
browse "$url/#/job/$id" 3000 done.html
cells=$(attr done.html confusion cells)
[[ $cells == 100 ]] || fail "the confusion matrix has '${cells:-no}' cells, not 10 x 10"
# Every epoch but the last is evaluated by node-1 (the last one by every node, together).
[[ $(attr done.html accuracy points) -ge 3 ]] || fail "the accuracy chart has $(attr done.html accuracy points) epochs, not 3"
grep -q "job succeeded" done.html || fail "the page does not show the job's log"
[[ $(attr done.html mesh nodes) == 3 ]] || fail "the mesh tree has '$(attr done.html mesh nodes)' nodes, not 3"
grep -q "retransmits (" done.html || fail "the mesh tree does not show its links' figures"
for page in running1 running2 done; do
  errors=$(sed -nE 's/.*<body[^>]*data-errors="([0-9]+)".*/\1/p' "$page.html" | head -n 1)
  [[ $errors == 0 ]] || fail "$page: the page counted ${errors:-?} script or loading errors"
  grep -q "cannot reach the controller" "$page.html" && fail "$page: the page could not reach the API"
done
grep -E "Uncaught|:ERROR:CONSOLE|Failed to load resource" chromium.err > console.err &&
  fail "the browser console has errors: $(head -n 3 console.err)"

# The job list and the nodes page.
browse "$url/#/" 2000 list.html
grep -q "$id" list.html || fail "the job list lacks job $id"
for n in node-1 node-2 node-3; do grep -q "<td>$n</td>" list.html || fail "the nodes table lacks $n"; done

# An evaluation job of the finished job's model (eval JOB --cluster): its own page, its parts
# all done, the confusion matrix and each class's AUC, no training charts; the list shows it.
timeout 60 "$SUBMIT" eval "$id" --cluster --metrics classification,roc > eval.out 2>&1 ||
  fail "eval $id --cluster: $(tail -n 3 eval.out)"
eval_id=$(sed -nE 's/^submitted eval job ([0-9a-f]{16}).*/\1/p' eval.out)
browse "$url/#/job/$eval_id" 2000 task.html
[[ $(attr task.html job-page task) == eval && $(attr task.html parts done) == 12 &&
   $(attr task.html parts total) == 12 && $(attr task.html confusion cells) == 100 ]] ||
  fail "the evaluation's page: task '$(attr task.html job-page task)', parts $(attr task.html parts done)/$(attr task.html parts total), confusion '$(attr task.html confusion cells)'"
grep -q "macro AUC" task.html || fail "the evaluation's page does not show the AUCs"
grep -q 'id="loss"' task.html && fail "the evaluation's page shows training charts"
errors=$(sed -nE 's/.*<body[^>]*data-errors="([0-9]+)".*/\1/p' task.html | head -n 1)
[[ $errors == 0 ]] || fail "task: the page counted ${errors:-?} script or loading errors"
browse "$url/#/" 2000 list2.html
grep -q "$eval_id" list2.html || fail "the job list lacks the evaluation $eval_id"

# A screenshot, as a person would see the finished job.
timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
  --user-data-dir="$WORK/profile" --virtual-time-budget=3000 --hide-scrollbars \
  --window-size=1280,1700 --screenshot="$OUTPUTS/dashboard.png" "$url/#/job/$id" 2>> chromium.err
[[ -s $OUTPUTS/dashboard.png ]] || fail "no screenshot"
echo "screenshot: $OUTPUTS/dashboard.png ($(wc -c < "$OUTPUTS/dashboard.png") bytes)"
finish dashboard
