#!/usr/bin/env bash
# Runs the GPU checks (docs/user-guide.md, "Building for GPUs") on a GPU machine from a bundle made
# by tools/gpu/bundle.sh: the GPU test binaries (DTRAIN_REQUIRE_GPU=1: a missing GPU fails instead
# of skipping), the mixed GPU/CPU cluster test on the real GPU, and optionally the GPU benchmarks.
# Prints one PASS/FAIL line per check and a total; each check's whole output goes to LOG_DIR.
#
#   tools/gpu/checks.sh BUNDLE.tar.xz [--data DIR] [--logs LOG_DIR] [--timeout S] [--tests "codec
#                       conformance worker lenet precision sharing resnet-precision nccl-nodes
#                       cluster nccl-cluster"]
#                       [--bench "codec train ops transport"] [--bench-args "..."]
#
# --timeout: each check's deadline in seconds (default 900). --data: a folder with
# Fashion-MNIST's four .gz files, copied to /usr/share/datasets when the machine lacks them.
# cuBLAS comes from the CUDA toolkit (/usr/local/cuda/lib64), cuDNN from PyTorch's nvidia-cudnn
# wheel when the system has none, NCCL likewise from nvidia-nccl. --bench transport needs no
# GPU: tools/bench/transport_cores.sh on the machine's cores (docs/performance.md, "The transport").
set -uo pipefail
cd "$(dirname "$0")/../.."
[[ ${1:-} == -h || ${1:-} == --help || $# -lt 1 ]] && { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
BUNDLE=$1; shift
DATA=""; LOGS=${TMPDIR:-/tmp}/gpu-checks; BENCH=""; TIMEOUT=900
TESTS="codec conformance worker lenet precision sharing resnet-precision nccl-nodes cluster
       nccl-cluster"
BENCH_ARGS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --tests) TESTS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --bench) BENCH=$2; shift 2 ;;
    --bench-args) BENCH_ARGS=$2; shift 2 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$LOGS"
ROOT=$(mktemp -d)
tar -C "$ROOT" -xJf "$BUNDLE" || { echo "cannot unpack $BUNDLE" >&2; exit 2; }
BIN=$ROOT/bin
datasets=/usr/share/datasets/fashion-mnist
if [[ ! -f $datasets/t10k-labels-idx1-ubyte.gz && -n $DATA ]]; then
  mkdir -p "$datasets" && cp "$DATA"/*.gz "$datasets/"
fi
# A wheel's lib folder. __path__, not __file__: nvidia-nccl's wheel is a namespace package.
wheel_lib() {  # the first of the package's folders that has a lib/ (a namespace may span several)
  python3 -c "import importlib, os; m = importlib.import_module('nvidia.$1'); print(next(os.path.join(p, 'lib') for p in m.__path__ if os.path.isdir(os.path.join(p, 'lib'))))" 2>/dev/null
}
cudnn_dir=$(wheel_lib cudnn); cublas_dir=$(wheel_lib cublas); nccl_dir=$(wheel_lib nccl)
export LD_LIBRARY_PATH=$ROOT/lib:/usr/local/cuda/lib64:${cudnn_dir:-}:${cublas_dir:-}:${nccl_dir:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# libnccl is opened at run time (dlopen), so ldd below cannot tell whether it will load.
if python3 -c "import ctypes; ctypes.CDLL('libnccl.so.2')" 2>/dev/null; then
  echo "libnccl.so.2 loads (${nccl_dir:-system})"
else
  echo "libnccl.so.2 does not load: GPU sharing will use host memory (nccl wheel lib: '${nccl_dir:-}')"
fi
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # a failed NCCL call then says why in the check's log
for b in "$BIN"/*; do
  missing=$(ldd "$b" | grep 'not found') && { echo "$(basename "$b") cannot load: $missing"; }
done

passed=0; failed=0
check() {  # check NAME COMMAND...: runs it with a deadline, logs it, counts it
  local name=$1; shift
  local start=$SECONDS
  timeout "$TIMEOUT" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1)); echo "PASS $name ($((SECONDS - start)) s)"
  elif [[ $rc -eq 77 ]]; then  # what this machine cannot run (nccl-nodes: fewer than 2 GPUs)
    echo "SKIP $name: $(grep -m 1 SKIPPED "$LOGS/$name.log")"
  else
    failed=$((failed + 1)); echo "FAIL $name (exit $rc, $((SECONDS - start)) s); its last lines:"
    tail -n 25 "$LOGS/$name.log"
  fi
}
export DTRAIN_REQUIRE_GPU=1
for t in $TESTS; do
  case "$t" in
    codec) check codec "$BIN/codec_cuda_test" ;;
    conformance) check conformance "$BIN/backend_conformance_test" ;;
    worker) check worker "$BIN/gpu_worker_test" ;;
    lenet) check lenet "$BIN/gpu_lenet_test" ;;
    precision) check precision "$BIN/mixed_precision_test" ;;
    sharing) check sharing "$BIN/gpu_sharing_test" ;;
    resnet-precision) check resnet-precision "$BIN/gpu_resnet_precision_test" ;;
    nccl-nodes) check nccl-nodes "$BIN/nccl_nodes_test" ;;
    cluster) sed 's/^  mode: gradient_sharing$/  mode: gradient_sharing\n  sync: bsp/' \
               configs/fashion-mnist-mlp.yaml > "$LOGS/fashion-mnist-mlp-bsp.yaml"  # as CI pins it
             REAL_GPUS=1 check cluster bash tests/cluster/gpu_cluster_test.sh "$BIN/dtraind" \
               "$BIN/dtrain-submit" tools/local_cluster.sh "$LOGS/fashion-mnist-mlp-bsp.yaml" ;;
    # Two daemons on two GPUs of this machine sum over NCCL between them (SKIP with one GPU).
    nccl-cluster) check nccl-cluster bash tests/cluster/nccl_cluster_test.sh "$BIN/dtraind" \
                    "$BIN/dtrain-submit" tools/local_cluster.sh configs/fashion-mnist-mlp.yaml ;;
    *) echo "unknown check $t" >&2; failed=$((failed + 1)) ;;
  esac
done
for b in $BENCH; do
  case "$b" in
    codec) "$BIN/codec_cuda_bench" $BENCH_ARGS 2>&1 | tee "$LOGS/bench-codec.log" ;;
    # GPU time per backend operation of a ResNet-20 step (kernels/cuda/op_times.h)
    ops) for p in fp32 bf16; do
           DTRAIN_CUDA_OP_TIMES=1 "$BIN/gpu_bench" configs/cifar10-resnet20.yaml --generated 50000 \
             --batch 256 --iterations 30 --repeats 1 --precision "$p"
         done 2>&1 | tee "$LOGS/bench-ops.log" ;;
    # eval: --bench-args holds quoted lists, e.g. --precisions "fp32 bf16"
    train) eval "tools/bench/gpu --bench \"\$BIN/gpu_bench\" $BENCH_ARGS" 2>&1 | tee "$LOGS/bench-train.log" ;;
    # Authenticated goodput against raw UDP where the CPU is not the limit: lanes 1-8, three
    # runs of medians of 5, then over rate-limited links (tools/bench/transport_cores.sh).
    transport) TRANSPORT_BENCH=$BIN/transport_bench tools/bench/transport_cores.sh $BENCH_ARGS 2>&1 |
                 tee "$LOGS/bench-transport.log" ;;
    *) echo "unknown benchmark $b" >&2 ;;
  esac
done
rm -rf "$ROOT"
echo "gpu checks: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
