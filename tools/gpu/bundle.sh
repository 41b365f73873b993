#!/usr/bin/env bash
# Packs what the GPU checks need onto a GPU machine that has no bazel and none of Debian's
# libraries (docs/user-guide.md, "Building for GPUs"): the --config=cuda builds of dtraind,
# dtrain-submit, the GPU test binaries and benchmarks, and the Debian shared libraries they load
# (not glibc, libstdc++ or CUDA's: the GPU machine's own serve). Fashion-MNIST goes separately (it
# is already packed).
#
#   tools/gpu/bundle.sh [OUT_DIR]      (default .device/, which git ignores)
#
# On the GPU machine: tools/gpu/checks.sh OUT_DIR/gpu-bundle.tar.xz (see its --help).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.device}
mkdir -p "$OUT"
targets=(//daemon:dtraind //submit:dtrain-submit //tests/cuda:codec_cuda_test //tests/cuda:gpu_lenet_test
         //tests/conformance:backend_conformance_test //tests/e2e:gpu_worker_test
         //tests/unit:mixed_precision_test //tests/unit:gpu_sharing_test
         //tests/cuda:gpu_resnet_precision_test //tests/cuda:nccl_nodes_test
         //tools/bench:gpu_bench //tools/bench:codec_cuda_bench //tools/bench:transport_bench)
bazel build --config=cuda "${targets[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  path=${t#//}; bin=bazel-bin/${path%%:*}/${path#*:}
  cp "$bin" "$stage/bin/" && chmod u+w "$stage/bin/${path#*:}" && strip "$stage/bin/${path#*:}"
done
# Every shared library the binaries load (Debian's, and bazel's own libraries of this tree that
# tests link dynamically), minus what any Linux has and CUDA's. ldd reads the binaries where
# bazel put them, so their rpaths resolve.
for t in "${targets[@]}"; do path=${t#//}; ldd "bazel-bin/${path%%:*}/${path#*:}"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
  grep -vE 'libcuda|libcublas|libcudnn|libcudart|libnccl' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar -C "$stage" -cJf "$OUT/gpu-bundle.tar.xz" bin lib
ls -la "$OUT/gpu-bundle.tar.xz"
