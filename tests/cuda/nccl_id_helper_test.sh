#!/usr/bin/env bash
# The controller's NCCL id helper (daemon/controller/nccl_ids.h) in a CUDA build, with the real
# libnccl: `dtraind nccl-id` prints an id and serves NCCL's bootstrap listener until its stdin
# ends, and then the listener is gone with it. Needs no GPU (ncclGetUniqueId does not); skipped
# (exit 77) where libnccl is not installed. Run from the repository root after
# `bazel build --config=cuda //daemon:dtraind` (tools/test.sh's CUDA phase).
set -uo pipefail
DTRAIND=${1:-bazel-bin/daemon/dtraind}
[[ -x $DTRAIND ]] || { echo "FAILED: no $DTRAIND (build it with --config=cuda)"; exit 1; }
dir=$(mktemp -d)
pid=""
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2> /dev/null
  exec 7>&- 2> /dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
mkfifo "$dir/stdin"
"$DTRAIND" nccl-id < "$dir/stdin" > "$dir/out" 2> "$dir/err" &
pid=$!
exec 7> "$dir/stdin"  # the helper's stdin stays open while this holds it

# Its answer, within 30 s.
for _ in $(seq 300); do
  grep -qE '^(id|error) ' "$dir/out" && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
answer=$(grep -E '^(id|error) ' "$dir/out" | head -n 1)
case "$answer" in
  "error NCCL is not installed here"*)
    echo "SKIPPED: ${answer#error }"; exit 77 ;;
  "id "*) ;;
  *) echo "FAILED: no id from dtraind nccl-id within 30 s: '${answer}'"; cat "$dir/err"; exit 1 ;;
esac
id=${answer#id }
[[ ${#id} -eq 256 && $id =~ ^[0-9a-f]+$ ]] ||
  { echo "FAILED: the id is not 128 bytes of hexadecimal: '$id'"; exit 1; }
listeners() { ss -Hltnp 2> /dev/null | grep -c "pid=$pid,"; }
[[ $(listeners) -ge 1 ]] ||
  { echo "FAILED: the helper (pid $pid) serves no bootstrap listener"; ss -ltnp; exit 1; }
at=$(ss -Hltnp | grep "pid=$pid," | awk '{print $4}')
echo "the helper (pid $pid) made an id and listens: $at"

# Its stdin ends (the controller released the job, or exited): it ends within 5 s.
exec 7>&-
for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2> /dev/null; then
  echo "FAILED: the helper (pid $pid) still runs 5 s after its stdin ended"; exit 1
fi
wait "$pid"
rc=$?
pid=""
[[ $rc -eq 0 ]] || { echo "FAILED: the helper exited $rc"; exit 1; }
echo "PASSED: the helper ended with its stdin, and its listener with it"
