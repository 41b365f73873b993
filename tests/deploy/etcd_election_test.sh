#!/usr/bin/env bash
# Standby controllers' election (daemon/election; docs/architecture/daemon.md, "Standby
# controllers") against a real etcd (Debian's etcd-server), in a network namespace of its own:
# three candidates (tests/deploy:election_probe) with 3 s leases elect one leader; the leader
# killed with SIGKILL, a standby leads within two lease periods; the next leader paused
# (SIGSTOP) past its lease, another leads, but only after the paused one's own count of its
# lease ran out, and resumed it steps down; etcd paused, nobody leads once the leader's lease
# runs out, and etcd back, one does again; the last leader resigns and the other leads within
# a lease. Over the whole run no two candidates' acting spans overlap. SKIPPED without etcd or network namespaces.
#   etcd_election_test.sh ELECTION_PROBE
set -u
PROBE="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
WORK="${TEST_TMPDIR:-$(mktemp -d)}/etcd_election"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# shellcheck source=tests/deploy/etcd_lib.sh
source "$(dirname "$0")/etcd_lib.sh" dte  # ns, pid[], in_ns, the cleanup; etcd up
LEASE=3
now_ms() { date +%s%3N; }

for c in c1 c2 c3; do
  ip netns exec "$ns" "$PROBE" http://127.0.0.1:2379 "$c" "$LEASE" > "$c.log" 2>&1 &
  pid[$c]=$!
done

# leader: the candidate whose last line says it leads (among those given), or nothing.
leader() {
  local c
  for c in "$@"; do
    [[ $(tail -n 1 "$c.log" 2> /dev/null | awk '{print $2}') =~ ^(leader|renewed)$ ]] && { echo "$c"; return; }
  done
}
# wait_leader SECONDS CANDIDATE...: until one of them leads; prints it (nothing on the deadline).
wait_leader() {
  local s=$1 l=""
  shift
  for _ in $(seq 1 $((s * 10))); do l=$(leader "$@"); [[ -n $l ]] && break; sleep 0.1; done
  echo "$l"
}
# led_at C: when C last became leader (ms).
led_at() { awk '$2 == "leader" { t = $1 } END { print t }' "$1.log"; }

echo "== three candidates, one leader"
l1=$(wait_leader 10 c1 c2 c3)
[[ -n $l1 ]] || { echo "FAIL: no leader within 10 s"; tail -n 3 c*.log; exit 1; }
sleep 1
n=0; for c in c1 c2 c3; do [[ $(leader "$c") == "$c" ]] && n=$((n + 1)); done
[[ $n -eq 1 ]] || fail "$n candidates say they lead"
echo "leader: $l1"

echo "== the leader killed (SIGKILL): a standby leads within two lease periods"
others=(); for c in c1 c2 c3; do [[ $c != "$l1" ]] && others+=("$c"); done
killed_at=$(now_ms)
kill -KILL "${pid[$l1]}"; unset "pid[$l1]"
l2=$(wait_leader $((3 * LEASE)) "${others[@]}")
[[ -n $l2 ]] || { fail "no standby led within $((3 * LEASE)) s of the kill"; tail -n 3 c*.log; }
took=$(( $(led_at "${l2:-c1}") - killed_at ))
echo "$l2 leads $took ms after $l1 was killed (lease $LEASE s)"
(( took <= 2 * LEASE * 1000 )) || fail "the takeover took $took ms, over two lease periods"

echo "== the leader paused past its lease (SIGSTOP): another leads only after its span ran out"
l3_from=(); for c in "${others[@]}"; do [[ $c != "$l2" ]] && l3_from+=("$c"); done
kill -STOP "${pid[$l2]}"
l3=$(wait_leader $((3 * LEASE)) "${l3_from[@]}")
[[ -n $l3 ]] || fail "no standby led while $l2 was paused"
until2=$(awk '$2 == "leader" || $2 == "renewed" { t = $5 } END { print t }' "$l2.log")
from3=$(led_at "${l3:-c1}")
echo "$l2 could act until $until2; $l3 leads from $from3"
(( until2 <= from3 )) || fail "$l3 led from $from3, before $l2's span ended at $until2"
kill -CONT "${pid[$l2]}"
for _ in $(seq 1 $((20 * LEASE))); do [[ $(tail -n 1 "$l2.log" | awk '{print $2}') == standby ]] && break; sleep 0.1; done
tail -n 1 "$l2.log" | grep -q "standby $l2 leader-is $l3" || fail "$l2, resumed, did not step down: $(tail -n 1 "$l2.log")"

echo "== etcd paused: the leader steps down when its lease runs out, nobody leads; etcd back, one does"
le=$(leader "$l2" "$l3")
kill -STOP "${pid[etcd]}"
for _ in $(seq 1 $((30 * LEASE))); do [[ -z $(leader "$l2" "$l3") ]] && break; sleep 0.1; done
[[ -z $(leader "$l2" "$l3") ]] || fail "$(leader "$l2" "$l3") still leads $((3 * LEASE)) s after etcd stopped"
sleep $((2 * LEASE))
[[ -z $(leader "$l2" "$l3") ]] || fail "$(leader "$l2" "$l3") leads while etcd is down"
grep -q "standby ${le:-?} .*(error: " "${le:-c1}.log" || fail "${le:-nobody} did not say why it stopped leading: $(tail -n 1 "${le:-c1}.log")"
kill -CONT "${pid[etcd]}"
l4=$(wait_leader $((5 * LEASE)) "$l2" "$l3")
[[ -n $l4 ]] || fail "nobody led within $((5 * LEASE)) s of etcd's return"
echo "after etcd's return: $l4 leads"

echo "== the leader resigns (SIGTERM): the other leads at its next watch, well within a lease"
other=$([[ $l4 == "$l2" ]] && echo "$l3" || echo "$l2")
resigned_at=$(now_ms)
kill -TERM "${pid[$l4]}"
l5=$(wait_leader "$LEASE" "$other")
[[ $l5 == "$other" ]] || fail "$other did not lead within $LEASE s of $l4's resignation"
took=$(( $(led_at "$other") - resigned_at ))
echo "$other leads $took ms after $l4 resigned"
(( took < LEASE * 1000 )) || fail "the handover after a resignation took $took ms, a whole lease"
kill -TERM "${pid[$other]}"
for c in "$l4" "$other"; do
  for _ in $(seq 1 50); do kill -0 "${pid[$c]}" 2> /dev/null || break; sleep 0.1; done
done

# No two candidates' acting spans (from becoming leader to the last acts-until of that term, or
# its resignation) overlap.
python3 - c1.log c2.log c3.log > spans.out <<'PY' || fail "$(cat spans.out)"
import sys
spans = []
for path in sys.argv[1:]:
    start = end = None
    for line in open(path):
        f = line.split()
        if len(f) < 3 or not f[0].isdigit(): continue
        if f[1] == "leader": start, end = int(f[0]), int(f[4])
        elif f[1] == "renewed" and start is not None: end = int(f[4])
        elif f[1] in ("standby", "resigned") and start is not None:  # it acts no more from here
            spans.append((start, min(end, int(f[0])), path)); start = None
    if start is not None: spans.append((start, end, path))
bad = [(a, b) for a in spans for b in spans if a[2] < b[2] and a[0] < b[1] and b[0] < a[1]]
print(f"{len(spans)} leader terms; overlapping: {bad}" if bad else f"{len(spans)} leader terms, none overlapping")
sys.exit(1 if bad else 0)
PY
cat spans.out
if [[ $failures -ne 0 ]]; then echo "etcd_election_test: $failures check(s) failed"; exit 1; fi
echo "etcd_election_test: all checks passed"
