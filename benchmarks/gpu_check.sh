#!/usr/bin/env bash
# One check of everything that touches an accelerator, in under 4 minutes on one CUDA GPU (a GPU
# is often lent for minutes: a check that can run twice):
#   1. the device tests on real CUDA (states on the device, every input form with device tensors,
#      image-text, two processes on one gloo group exchanging CUDA tensors), the counting
#      backends (tests/ranking/test_counters.py: the fused Triton kernel compiled on the GPU
#      against the definition, every backend's values against the CPU's), half precision on
#      the tensor cores (tests/ranking/test_tensor_cores.py: every form's values against the
#      float64 ranking, every product taken in half precision), then the device matrix
#      and the host-sync counts on the emulated device of tests/emulated_cuda.py (a failure there
#      is reported at the end, after the benchmark);
#   2. benchmarks/bench_gpu.py: the metric classes users run (SOP-sized same source in float32
#      and bfloat16, MS MARCO dev's shape in device memory, image-text 5,000 x 25,000, a
#      1,000,000 x 768 corpus against qrels), each counting backend, beside the blocked product
#      + topk a user writes (float32 and bfloat16) and one product, with host syncs and peak
#      device memory, and one compute() a workload profiled (the device's busy share, the top
#      operators) -> benchmarks/results/gpu_cuda.json, .txt and _profile.txt.
# GPU_CHECK_FULL=1 also runs the older, longer benchmarks (bench_device_classes, bench_ranking,
# bench_crossmodal, bench_qrels and bench_msmarco with --device cuda: several minutes more).
#
# The GPU machine has torch with CUDA (and Triton), lightning, torchmetrics, numpy, pytest and
# hypothesis but no package index: nothing is installed, the package runs from src/ on
# PYTHONPATH (the same as `pip install --no-deps --no-build-isolation -e .`, without touching
# that python).
#
# Run from anywhere, with a python that has torch with CUDA (PYTHON=..., default python3):
#     bash benchmarks/gpu_check.sh
# On a borrowed machine that returns only its $OUT, the figures and the log straight there:
#     GPU_CHECK_RESULTS=$OUT bash benchmarks/gpu_check.sh
# Without a GPU, the same commands at smoke size on the CPU (to check the script itself):
#     GPU_CHECK_DEVICE=cpu GPU_CHECK_SMALL=1 bash benchmarks/gpu_check.sh
# Exits non-zero as soon as a step fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
SMALL=${GPU_CHECK_SMALL:-0}
# GPU_CHECK_RESULTS: where the figures and the log go (a borrowed machine returns only what a
# command writes to its $OUT: GPU_CHECK_RESULTS=$OUT keeps them even if the run is stopped)
RESULTS=${GPU_CHECK_RESULTS:-benchmarks/results}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$RESULTS"
START=$SECONDS
# everything printed also goes to a log beside the figures (a tool that keeps only the tail of
# the output loses the tests' report otherwise)
LOG="$RESULTS/gpu_check_${DEVICE%%:*}$([[ "$SMALL" == 1 ]] && echo _smoke || true).log"
exec > >(tee "$LOG") 2>&1

step() { printf '\n== [%3ds] %s\n' "$((SECONDS - START))" "$*"; }
fail() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }
trap 'fail "line $LINENO: $BASH_COMMAND (exit $?)"' ERR

step "machine"
if [[ "$DEVICE" == cuda* ]]; then
    command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver here"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
"$PYTHON" - "$DEVICE" <<'PY'
import sys, torch
import retrieval_metrics
device = sys.argv[1]
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"retrieval_metrics from {retrieval_metrics.__file__}")
if device.startswith("cuda"):
    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device")
    print(f"cuda {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
# the counting backend the rankings take here: on a GPU with Triton, the fused kernel once its
# check on the device passed (engine/triton_check.py), else torch's kernels and the reason
import warnings
from retrieval_metrics.functional.ranking.engine.counters import choose_counter
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    chosen = choose_counter(device)
print(f"counting backend on {device}: {chosen}", *(f"\n  {w.message}" for w in caught))
PY

if [[ "$SMALL" == 1 ]]; then
    RANKING_ARGS=(--small --rounds 1)
    CROSSMODAL_ARGS=(--images 500 --repeats 1)
    CLASSES_ARGS=(--small --repeats 1)
    QRELS_ARGS=(--docs 20000 --dim 64 --queries 100)
    MSMARCO_ARGS=(--docs 50000 --dim 64 --queries 200)
    GPU_ARGS=(--small --repeats 1)
    SUFFIX=_smoke
else
    RANKING_ARGS=()
    CROSSMODAL_ARGS=()
    CLASSES_ARGS=()
    QRELS_ARGS=(--docs 1000000 --dim 768 --queries 7000)
    MSMARCO_ARGS=(--queries 6980)
    GPU_ARGS=()
    SUFFIX=
fi
TAG="${DEVICE%%:*}${SUFFIX}"

step "device tests (test_devices.py on $DEVICE, precision, counters, tensor cores, half)"
# the CUDA cases skip on a machine without CUDA; -rs lists what was skipped and why
"$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/metrics/test_devices.py \
    tests/ranking/test_precision.py tests/ranking/test_counters.py \
    tests/ranking/test_tensor_cores.py tests/metrics/test_half_precision.py

step "device matrix, host-sync counts (the emulated device, also beside real CUDA), runs on $DEVICE"
# Not stopping the benchmark if the emulator and a CUDA build of torch disagree: recorded, and
# the script exits non-zero at the end.
MATRIX_STATUS=0
# (test_product_rows.py: whether a query ranks alike alone and among many, and whatever blocks
# block_size sets, on the device too: cuBLAS is not probed for the shapes it computes alike)
"$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/metrics/test_device_matrix.py \
    tests/ranking/test_device_syncs.py tests/ranking/test_top_k.py \
    tests/metrics/test_metric_runs.py tests/ranking/test_product_rows.py || MATRIX_STATUS=$?

step "the metric classes beside the user's product + topk on $DEVICE (benchmarks/bench_gpu.py)"
"$PYTHON" benchmarks/bench_gpu.py --device "$DEVICE" "${GPU_ARGS[@]}" --profile \
    --out "$RESULTS/gpu_$TAG"

if [[ "${GPU_CHECK_FULL:-0}" == 1 ]]; then
    step "metric classes on $DEVICE (benchmarks/bench_device_classes.py)"
    "$PYTHON" benchmarks/bench_device_classes.py --device "$DEVICE" "${CLASSES_ARGS[@]}" \
        --out "$RESULTS/gpu$SUFFIX.json" | tee "$RESULTS/gpu$SUFFIX.txt"
    step "ranking benchmark on $DEVICE"
    "$PYTHON" benchmarks/bench_ranking.py --device "$DEVICE" --skip-peers "${RANKING_ARGS[@]}" \
        --out "$RESULTS/bench_ranking_$TAG.json" | tee "$RESULTS/bench_ranking_$TAG.txt"
    step "image-text benchmark on $DEVICE"
    "$PYTHON" benchmarks/bench_crossmodal.py --device "$DEVICE" "${CROSSMODAL_ARGS[@]}" \
        --out "$RESULTS/bench_crossmodal_$TAG"
    step "qrels benchmark on $DEVICE"
    "$PYTHON" benchmarks/bench_qrels.py --device "$DEVICE" "${QRELS_ARGS[@]}" \
        --paths product classes --repeat 1 --out "$RESULTS/bench_qrels_$TAG"
    step "MS MARCO dev's shape on $DEVICE"
    "$PYTHON" benchmarks/bench_msmarco.py --device "$DEVICE" "${MSMARCO_ARGS[@]}"
fi

if [[ "$MATRIX_STATUS" != 0 ]]; then
    fail "the device matrix failed (exit $MATRIX_STATUS); the benchmark above ran"
fi
step "done in $((SECONDS - START)) s: results in $RESULTS/gpu_$TAG.json, .txt and _profile.txt"
