#!/usr/bin/env bash
# tools/setup.sh respects the machine: it installs packages and changes nothing else, in
# particular not the system's BLAS (issue: it used to switch libblas.so.3 to OpenBLAS for
# everyone with update-alternatives). Runs after the real set-up (tools/test.sh runs it first),
# so no package is missing and nothing is installed here.
set -uo pipefail
setup=tools/setup.sh
fail() { echo "FAIL: $*"; exit 1; }

query() {
  for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
    update-alternatives --query "$alt" 2>&1 || true
  done
}
before=$(query)
out=$(bash "$setup" 2>&1) || fail "setup.sh failed: $out"
[[ $out == *"all packages present"* ]] || fail "setup.sh did not say it is done: $out"
# --bench adds the baseline's packages; run it only where they are installed already (here it
# must not install 230 packages).
if dpkg-query -W -f='${Status}\n' python3-torch libopenblas0-pthread 2>/dev/null |
    grep -c "install ok installed" | grep -qx 2; then
  out=$(bash "$setup" --bench 2>&1) || fail "setup.sh --bench failed: $out"
  echo "ran setup.sh and setup.sh --bench"
else
  echo "ran setup.sh (the --bench packages are not installed, so --bench was not run)"
fi
after=$(query)
[[ $before == "$after" ]] || fail "the BLAS alternatives changed:
--- before
$before
--- after
$after"
echo "BLAS alternatives unchanged"

# A wrong option is refused, with what to use.
out=$(bash "$setup" --bnech 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "setup.sh --bnech exited $rc, expected 2"
[[ $out == *"unknown option '--bnech'"*"--bench"* ]] || fail "unclear refusal: $out"
echo "PASS"
