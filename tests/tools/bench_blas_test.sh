#!/usr/bin/env bash
# The PyTorch baselines run on OpenBLAS through tools/bench/torch_on_openblas (LD_LIBRARY_PATH
# for that process only), and blas_check.require_openblas() refuses any other BLAS.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIPPED: Debian's python3-torch is not installed (bash tools/setup.sh --bench installs it)"
  exit 0
fi
if [[ ! -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ]]; then
  echo "SKIPPED: libopenblas0-pthread is not installed (bash tools/setup.sh --bench installs it)"
  exit 0
fi
cd tools/bench
probe='import blas_check; print(" ".join(blas_check.loaded_blas())); blas_check.require_openblas()'
out=$(./torch_on_openblas /usr/bin/python3 -c "$probe" 2>&1) || fail "on OpenBLAS: $out"
[[ $out == *openblas* ]] || fail "torch_on_openblas did not load OpenBLAS: $out"
echo "through torch_on_openblas: $out"

# The check itself: a process pointed at the reference BLAS is refused with the fix.
ref=/usr/lib/x86_64-linux-gnu/blas
if [[ -e $ref/libblas.so.3 ]]; then
  out=$(LD_LIBRARY_PATH=$ref /usr/bin/python3 -c "$probe" 2>&1); rc=$?
  [[ $rc -ne 0 ]] || fail "the reference BLAS was not refused: $out"
  [[ $out == *"not OpenBLAS"*"torch_on_openblas"* ]] || fail "unclear refusal: $out"
  echo "reference BLAS refused:"
  echo "$out"
else
  echo "(the reference BLAS is not installed: its refusal is not checked here)"
fi
echo "PASS"
