# shellcheck shell=bash
# Shared by the tests against a real etcd (Debian's etcd-server) in a network namespace of the
# test's own, where fixed ports are free: etcd_election_test.sh, controller_failover_test.sh.
# Sourced from WORK (the test's folder, its current directory):
#   source "$(dirname "$0")/etcd_lib.sh" TAG
# prints SKIPPED and exits 0 without etcd or without the right to make a namespace; otherwise
# makes namespace TAG$$ (ns), declares pid[] (every program the test starts, by name), installs
# the EXIT trap that resumes (a test that failed during a pause leaves nothing stopped) and
# kills each, runs the test's own extra_cleanup if it defines one, and deletes the namespace;
# then starts etcd on 127.0.0.1:2379 in it (pid[etcd], its log etcd.log) and waits up to 10 s
# for it to be healthy (exit 1, saying so, when it is not).
command -v etcd > /dev/null ||
  { echo "SKIPPED: no etcd here (apt-get install etcd-server)"; exit 0; }
ns="$1$$"
if ! err=$(ip netns add "$ns" 2>&1); then
  [[ $err == *"not permitted"* || $err == *"Permission denied"* ]] &&
    { echo "SKIPPED: cannot create a network namespace here: $err (run as root)"; exit 0; }
  echo "FAIL: ip netns add $ns: $err"; exit 1
fi
declare -A pid=()
etcd_cleanup() {
  local p
  declare -F extra_cleanup > /dev/null && extra_cleanup
  for p in "${pid[@]}"; do kill -CONT "$p" 2> /dev/null; kill -KILL "$p" 2> /dev/null; done
  ip netns delete "$ns" 2> /dev/null
}
trap etcd_cleanup EXIT
ip -n "$ns" link set lo up
in_ns() { ip netns exec "$ns" "$@"; }

# Started with ip netns exec itself (it becomes the program): $! is etcd's own pid, the one
# SIGSTOP must reach.
ip netns exec "$ns" etcd --name default --data-dir etcd-data \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 > etcd.log 2>&1 &
pid[etcd]=$!
echo "waiting up to 10 s for etcd to be healthy"
etcd_up=""
for _ in $(seq 1 100); do
  [[ $(in_ns curl -s -m 1 http://127.0.0.1:2379/health 2> /dev/null) == *'"true"'* ]] &&
    { etcd_up=yes; break; }
  sleep 0.1
done
[[ -n $etcd_up ]] || { echo "FAIL: etcd not healthy within 10 s: $(tail -n 3 etcd.log)"; exit 1; }
