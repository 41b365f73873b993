#!/usr/bin/env bash
# Installs every Debian package dtrain needs to build, test and benchmark.
# Idempotent: does nothing when everything is present; runs `apt-get update` only when a package
# is missing. Needs root (or sudo) the first time.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-platforms g++ python3
  # libraries (tools/README.md, "Building offline")
  libasio-dev libflatbuffers-dev flatbuffers-compiler libdnnl-dev libspdlog-dev libfmt-dev
  libcli11-dev libyaml-cpp-dev catch2 libsodium-dev zlib1g-dev libcpp-httplib-dev
  nlohmann-json3-dev libsystemd-dev
  # data
  dataset-fashion-mnist
  # benchmarks: PyTorch baseline on Debian's OpenBLAS (not the reference BLAS)
  python3-torch libopenblas0-pthread
  # multi-host tests and fuzzing
  iproute2 clang libfuzzer-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# PyTorch must use OpenBLAS, not the reference BLAS (13-18x slower: no fair baseline).
if command -v update-alternatives >/dev/null; then
  for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
    best=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas | head -n1 || true)
    if [[ -n "$best" ]]; then
      SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
      $SUDO update-alternatives --set "$alt" "$best" >/dev/null
    fi
  done
fi
echo "setup: all packages present"
