#!/usr/bin/env bash
# configs/kubernetes/Dockerfile builds the image the manifests run from the .deb
# (tools/package.sh), and in it dtraind and dtrain-submit answer --help and dtraind makes a key
# (its libraries all resolve). SKIPPED, with the reason, where neither docker nor podman can
# build (no client, no daemon, or no way to get the base image).
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
engine=""
for e in docker podman; do
  command -v "$e" > /dev/null && timeout 20 "$e" info > /dev/null 2>&1 && { engine=$e; break; }
done
if [[ -z $engine ]]; then
  what=$(for e in docker podman; do command -v "$e" > /dev/null && echo "$e (not answering: no daemon or no rights)"; done | paste -sd, -)
  echo "SKIPPED: no container engine that builds here: ${what:-neither docker nor podman is installed}"
  exit 0
fi
base=$(sed -nE 's/^ARG BASE=(.*)/\1/p' configs/kubernetes/Dockerfile)
if ! timeout 300 "$engine" image inspect "$base" > /dev/null 2>&1 && ! timeout 300 "$engine" pull "$base" > /dev/null 2>&1; then
  echo "SKIPPED: $engine cannot get the base image $base (no registry reachable)"
  exit 0
fi
out=$(mktemp -d)
tag="dtrain-test:$$"
trap '"$engine" rmi -f "$tag" > /dev/null 2>&1; rm -rf "$out"' EXIT
bash tools/package.sh --out "$out" --dtraind daemon/dtraind --dtrain-submit submit/dtrain-submit \
  > /dev/null 2> "$out/err" || fail "package.sh: $(cat "$out/err")"
timeout 600 "$engine" build -f configs/kubernetes/Dockerfile -t "$tag" "$out" > "$out/build.log" 2>&1 ||
  fail "$engine build: $(tail -n 15 "$out/build.log")"
"$engine" run --rm "$tag" --help | grep -q "dtraind: the dtrain daemon" || fail "dtraind --help in the image"
"$engine" run --rm --entrypoint dtrain-submit "$tag" --help | grep -q "dtrain-submit job.yaml" ||
  fail "dtrain-submit --help in the image"
"$engine" run --rm "$tag" keygen /tmp/k.key | grep -q "wrote /tmp/k.key" || fail "dtraind keygen in the image"
debs=("$out"/*.deb)
echo "container_image_test: $engine built $tag from $(basename "${debs[0]}"); it runs"
