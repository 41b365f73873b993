#!/usr/bin/env bash
# configs/kubernetes (docs/operations.md, "Kubernetes"), where no Kubernetes runs: both
# kustomizations render (`kubectl kustomize`) and every document holds against the API's models
# (tools/check_manifests.py, which must also reject a misspelt field); the DaemonSet is on the
# host network with probes on /healthz and Prometheus annotations, the GPU overlay selects GPU
# nodes and asks the device plugin for their GPUs; and the ConfigMap's start script and configs,
# as rendered, run a controller "pod" and a node "pod" on two namespaced hosts (the paths and
# the controller's Service name swapped for the test's, the Secrets laid out as the kubelet
# mounts them): the node registers under its
# Kubernetes node name, /healthz answers any Host without a token while /metrics wants the
# token from its Secret's file, and a job trains on it. SKIPPED where kubectl (for kustomize),
# Debian's python3-kubernetes or network namespaces are missing.
#   kubernetes_test.sh DTRAIND SUBMIT SPEC HOSTS_TOOL CHECKER KUSTOMIZATION_FILES...
set -u
SPEC_IN="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
CHECKER="$(cd "$(dirname "$5")" && pwd)/$(basename "$5")"
BASE="$(cd "$(dirname "$6")" && pwd)"  # base/kustomization.yaml's folder
source "$(dirname "$0")/../netns/lib.sh" kubernetes "$1" "$2" "$4"
command -v kubectl > /dev/null || { echo "SKIPPED: no kubectl here (it renders the kustomizations)"; exit 0; }
/usr/bin/python3 -c "import kubernetes" 2> /dev/null ||
  { echo "SKIPPED: no python3-kubernetes (apt-get install python3-kubernetes)"; exit 0; }

echo "== render and check against the API's models"
# A copy of real files: kustomize does not follow the runfiles' symlinks out of its folder.
cp -rL "$BASE/.." manifests
for k in base overlays/gpu; do
  out=$(echo "$k" | tr / -).yaml
  kubectl kustomize "manifests/$k" > "$out" 2> render.err || { fail "$k does not render: $(cat render.err)"; continue; }
  /usr/bin/python3 "$CHECKER" "$out" > check.out; rc=$?
  [[ $rc -eq 0 ]] || fail "$k: $(cat check.out)"
  tail -n 1 check.out | sed "s|^|$k: |"
done
printf 'apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n    spec:\n      hostNetwrk: true\n      containers: [{name: c, image: i}]\n' > typo.yaml
/usr/bin/python3 "$CHECKER" typo.yaml > typo.out && fail "the checker passed a misspelt field"
grep -q "has no field 'hostNetwrk'" typo.out || fail "the checker did not name the misspelt field: $(cat typo.out)"

echo "== what the manifests promise"
/usr/bin/python3 - base.yaml overlays-gpu.yaml > intent.out 2>&1 <<'PY' || fail "$(cat intent.out)"
import sys, yaml
def docs(path): return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(open(path)) if d}
base, gpu = docs(sys.argv[1]), docs(sys.argv[2])
problems = []
def want(cond, what):
    if not cond: problems.append(what)
ds = base[("DaemonSet", "dtraind")]["spec"]["template"]
pod, c = ds["spec"], ds["spec"]["containers"][0]
want(pod.get("hostNetwork") is True, "the DaemonSet is not on the host network")
want(pod.get("dnsPolicy") == "ClusterFirstWithHostNet", "the DaemonSet cannot resolve the controller's Service")
for probe in ("livenessProbe", "readinessProbe"):
    want(c.get(probe, {}).get("httpGet", {}).get("path") == "/healthz", f"the node's {probe} is not /healthz")
for d in (ds, base[("StatefulSet", "dtrain-controller")]["spec"]["template"]):
    a = d["metadata"].get("annotations", {})
    want(a.get("prometheus.io/scrape") == "true" and a.get("prometheus.io/port") == "7080", "no Prometheus annotations")
secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
want({"dtrain-cluster-key", "dtrain-http-token"} <= secrets, f"the nodes' Secrets are {secrets}")
want(all(d["metadata"].get("namespace") == "dtrain" for k, d in base.items() if k[0] != "Namespace"), "not all in namespace dtrain")
g = gpu[("DaemonSet", "dtraind")]["spec"]["template"]["spec"]
want(g.get("nodeSelector", {}).get("nvidia.com/gpu.present") == "true", "the GPU overlay does not select GPU nodes")
gc = g["containers"][0]
want("nvidia.com/gpu" in gc.get("resources", {}).get("limits", {}), "the GPU overlay asks for no GPUs")
want({"name": "DTRAIN_GPUS", "value": "all"} in gc.get("env", []), "the GPU overlay's daemon does not offer its GPUs")
want(gc.get("livenessProbe") == c.get("livenessProbe"), "the GPU overlay lost the probes")
# The wiring: each daemon's config names only paths its pod mounts, the command runs the
# ConfigMap's script, and the nodes find the controller's pod through its Service.
cm = base[("ConfigMap", "dtraind-config")]["data"]
sts = base[("StatefulSet", "dtrain-controller")]
svc = base[("Service", "dtrain-controller")]
for template, config in ((ds, "node.yaml"), (sts["spec"]["template"], "controller.yaml")):
    ctr = template["spec"]["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    conf = yaml.safe_load(cm[config].replace("@GPUS@", "none"))
    paths = [conf["data_dir"], conf["key_file"], conf["http"]["token_file"]] + ([conf["clients_dir"]] if "clients_dir" in conf else [])
    for path in paths:
        want(any(path == m or path.startswith(m + "/") for m in mounts), f"{config}: {path} is on no volume the pod mounts")
    script = ctr["command"][1]
    want(mounts.get(script.rsplit("/", 1)[0]) == "config" and ctr["command"][2] == config and script.endswith("/start.sh"),
         f"{config}'s pod runs {ctr['command']}")
want(svc["spec"].get("clusterIP") == "None" and sts["spec"]["serviceName"] == "dtrain-controller", "the controller's Service is not its StatefulSet's headless one")
want(all(sts["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items()), "the Service selects no controller pod")
node_conf = yaml.safe_load(cm["node.yaml"].replace("@GPUS@", "none"))
want(node_conf["controller"] == "dtrain-controller.dtrain.svc:7070", f"the nodes look for the controller at {node_conf['controller']}")
print("\n".join(problems) if problems else "every promise holds")
sys.exit(1 if problems else 0)
PY
cat intent.out

echo "== the ConfigMap's start script and configs, run as two pods on namespaced hosts"
hosts_up 2 1gbit
# secret_volume DIR KEY FILE: DIR laid out as the kubelet lays out a Secret's volume (the file
# in a dated folder, mode 0400, reached through the ..data symlink).
secret_volume() {
  mkdir -p "$1/..2026_12_07" && cp "$3" "$1/..2026_12_07/$2" && chmod 400 "$1/..2026_12_07/$2"
  ln -s ..2026_12_07 "$1/..data" && ln -s "..data/$2" "$1/$2"
}
mkdir -p etc/dtrain/config etc/dtrain/clients
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > http.token
secret_volume etc/dtrain/key cluster.key cluster.key
secret_volume etc/dtrain/http token http.token
/usr/bin/python3 - base.yaml "$WORK" > extract.out 2>&1 <<'PY' || fail "extracting the ConfigMap: $(cat extract.out)"
import sys, yaml
work = sys.argv[2]
cm = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap")
for name, text in cm["data"].items():
    if name.endswith(".yaml"):  # the test's folders and the controller's address for the pod's
        role = name[:-len(".yaml")]
        text = (text.replace("/etc/dtrain/", work + "/etc/dtrain/")
                    .replace("/var/lib/dtrain-k8s", f"{work}/var/lib/{role}")
                    .replace("dtrain-controller.dtrain.svc", "10.77.0.1"))
    open(f"{work}/etc/dtrain/config/{name}", "w").write(text)
PY
pod() {  # pod HOST NODE_NAME TEMPLATE [VAR=VALUE...]: start.sh on host HOST as that pod
  local i=$1 name=$2 template=$3
  shift 3
  ip netns exec "$tag-h$i" env PATH="$(dirname "$DTRAIND"):$PATH" NODE_NAME="$name" POD_IP="10.77.0.$i" \
    DTRAIN_CONFIG_DIR="$WORK/etc/dtrain/config" DTRAIN_RUN_DIR="$WORK/run-$i" "$@" \
    sh "$WORK/etc/dtrain/config/start.sh" "$template" >> "node-$i.log" 2>&1 &
  host_pid[$i]=$!
}
pod 1 k8s-node-0 controller.yaml
pod 2 k8s-node-1 node.yaml DTRAIN_GPUS=none
wait_alive 1 30
submit nodes --json > nodes.json
[[ $(json nodes.json "[n['name'] for n in j['nodes']]") == "['k8s-node-1']" ]] ||
  fail "the node registered as $(json nodes.json "[n['name'] for n in j['nodes']]")"
token=$(cat http.token)
http_status() {  # http_status HOST PATH [TOKEN]: the status code the pod on 10.77.0.HOST answers
  ip netns exec "$tag-h$1" /usr/bin/python3 - "$1" "$2" "${3:-}" <<'PY'
import sys, urllib.request, urllib.error
h, path, token = sys.argv[1:]
req = urllib.request.Request(f"http://10.77.0.{h}:7080{path}")
if token: req.add_header("Authorization", "Bearer " + token)
try: print(urllib.request.urlopen(req, timeout=5).status)
except urllib.error.HTTPError as e: print(e.code)
except OSError as e: print(f"no answer ({e})")
PY
}
for h in 1 2; do
  [[ $(http_status "$h" /healthz) == 200 ]] || fail "pod $h: /healthz answered $(http_status "$h" /healthz)"
  [[ $(http_status "$h" /metrics) == 401 ]] || fail "pod $h: /metrics without the token answered $(http_status "$h" /metrics)"
  [[ $(http_status "$h" /metrics "$token") == 200 ]] || fail "pod $h: /metrics with the token answered $(http_status "$h" /metrics "$token")"
done
sed -e 's/epochs: 5/epochs: 1/' "$SPEC_IN" > job.yaml
timeout 120 ip netns exec "$tag-h1" "$SUBMIT" job.yaml > job.out 2>&1; rc=$?
[[ $rc -eq 0 ]] || { fail "the job on the node pod: exit $rc"; tail -n 5 job.out; }
grep -h "test accuracy" job.out | tail -n 1
finish kubernetes_test
