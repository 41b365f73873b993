#!/usr/bin/env bash
# Installs the Debian packages dtrain needs to build and test (and run the quick start);
# with --bench also the benchmarks' PyTorch baseline and OpenBLAS (about 230 packages more).
# Idempotent: does nothing when everything is present; runs `apt-get update` only when a package
# is missing. Needs root (or sudo) the first time. It changes nothing else on the machine: the
# benchmarks point only their own PyTorch processes at OpenBLAS (tools/bench/torch_on_openblas),
# never the system's BLAS alternatives.
set -euo pipefail

BENCH=0
case "${1:-}" in
  --bench) BENCH=1 ;;
  "") ;;
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
  *) echo "setup: unknown option '$1' (use --bench, or nothing)" >&2; exit 2 ;;
esac

PACKAGES=(
  # build
  bazel-bootstrap bazel-platforms g++ python3
  # libraries (tools/README.md, "Building offline")
  libasio-dev libflatbuffers-dev flatbuffers-compiler libdnnl-dev libspdlog-dev libfmt-dev
  libcli11-dev libyaml-cpp-dev catch2 libsodium-dev zlib1g-dev libcpp-httplib-dev
  nlohmann-json3-dev libsystemd-dev libsqlite3-dev libjs-dygraphs libpng-dev libjpeg62-turbo-dev
  # data
  dataset-fashion-mnist
  # multi-host tests and fuzzing
  iproute2 clang libfuzzer-14-dev
  # the Debian package for cluster nodes (tools/package.sh) and its checks
  fakeroot help2man lintian dpkg-dev
  # the dashboard's browser test (headless)
  chromium
  # configs/slurm/dtrain.sbatch's test on a real local Slurm (tools/local_slurm.sh)
  slurmctld slurmd slurm-client munge
  # standby controllers' election test (a real etcd)
  etcd-server
  # the Kubernetes manifests' check against the API's models (tools/check_manifests.py)
  python3-kubernetes
)
# benchmarks: the PyTorch baseline, run on Debian's OpenBLAS (not the reference BLAS)
((BENCH)) && PACKAGES+=(python3-torch libopenblas0-pthread)

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

echo "setup: all packages present"
