#!/usr/bin/env bash
# One check of everything that touches an accelerator, in under 5 minutes on one CUDA GPU:
#   1. the device tests on real CUDA (states on the device, .to(device), every input form with
#      device tensors, image-text, two processes on one gloo group exchanging CUDA tensors: two
#      processes cannot share one GPU over NCCL), then the device matrix on the emulated device
#      of tests/emulated_cuda.py (a failure there is reported at the end, after the benchmarks);
#   2. benchmarks/bench_device_classes.py: the metric classes users run (SOP-sized
#      RetrievalMetrics, 5,000 x 25,000 CrossModalRetrieval), synchronize-timed medians, one
#      product on the same device, and the host syncs of one compute() counted by CUDA's sync
#      debug mode -> benchmarks/results/gpu.json;
#   3. benchmarks/bench_ranking.py --device cuda (the functional path beside the classes, and
#      the 100k memory case; the CPU peers are skipped: they say nothing about the device);
#   4. benchmarks/bench_crossmodal.py --device cuda (5,000 images x 25,000 captions, D = 512);
#   5. benchmarks/bench_qrels.py --device cuda: dense retrieval against qrels through the classes,
#      a 1,000,000 x 768 corpus in batches and 7,000 queries, beside one product on the device;
#   6. benchmarks/bench_msmarco.py --device cuda: MS MARCO dev's shape in device memory,
#      8,841,823 x 768 in bfloat16 and in float32, 6,980 queries, BEIR's measures + MRR@10
#      through the classes, beside one float32 product at the device's rate (about 40 GB of
#      device memory at the float32 step).
# Results land in benchmarks/results/ (gpu.json, *_cuda.*); each step's log is printed as it runs.
#
# The GPU machine has torch with CUDA, lightning, torchmetrics, numpy, pytest and hypothesis but
# no package index: nothing is installed, the package runs from src/ on PYTHONPATH (the same as
# `pip install --no-deps --no-build-isolation -e .`, without touching that python).
#
# Run from anywhere, with a python that has torch with CUDA (PYTHON=..., default python3):
#     bash benchmarks/gpu_check.sh
# Without a GPU, the same commands at smoke size on the CPU (to check the script itself):
#     GPU_CHECK_DEVICE=cpu GPU_CHECK_SMALL=1 bash benchmarks/gpu_check.sh
# Exits non-zero as soon as a step fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
SMALL=${GPU_CHECK_SMALL:-0}
RESULTS=benchmarks/results
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$RESULTS"
START=$SECONDS

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
PY

if [[ "$SMALL" == 1 ]]; then
    RANKING_ARGS=(--small --rounds 1)
    CROSSMODAL_ARGS=(--images 500 --repeats 1)
    CLASSES_ARGS=(--small --repeats 1)
    QRELS_ARGS=(--docs 20000 --dim 64 --queries 100)
    MSMARCO_ARGS=(--docs 50000 --dim 64 --queries 200)
    SUFFIX=_smoke
else
    RANKING_ARGS=()
    CROSSMODAL_ARGS=()
    CLASSES_ARGS=()
    QRELS_ARGS=(--docs 1000000 --dim 768 --queries 7000)
    MSMARCO_ARGS=(--queries 6980)
    SUFFIX=
fi
TAG="${DEVICE%%:*}${SUFFIX}"

step "device tests (tests/metrics/test_devices.py on $DEVICE, tests/ranking/test_precision.py)"
# the CUDA cases skip on a machine without CUDA; -rs lists what was skipped and why
"$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/metrics/test_devices.py tests/ranking/test_precision.py

step "device matrix and host-sync budget (the emulated device, also beside real CUDA)"
# Not stopping the benchmarks if the emulator and a CUDA build of torch disagree: recorded, and
# the script exits non-zero at the end.
MATRIX_STATUS=0
"$PYTHON" -m pytest -q -rs -p no:cacheprovider tests/metrics/test_device_matrix.py tests/ranking/test_device_syncs.py \
    || MATRIX_STATUS=$?

step "metric classes on $DEVICE (benchmarks/bench_device_classes.py)"
"$PYTHON" benchmarks/bench_device_classes.py --device "$DEVICE" "${CLASSES_ARGS[@]}" \
    --out "$RESULTS/gpu$SUFFIX.json" | tee "$RESULTS/gpu$SUFFIX.txt"

step "ranking benchmark on $DEVICE"
set -o pipefail
"$PYTHON" benchmarks/bench_ranking.py --device "$DEVICE" --skip-peers "${RANKING_ARGS[@]}" \
    --out "$RESULTS/bench_ranking_$TAG.json" | tee "$RESULTS/bench_ranking_$TAG.txt"

step "image-text benchmark on $DEVICE"
"$PYTHON" benchmarks/bench_crossmodal.py --device "$DEVICE" "${CROSSMODAL_ARGS[@]}" \
    --out "$RESULTS/bench_crossmodal_$TAG"

if [[ "$MATRIX_STATUS" != 0 ]]; then
    fail "the device matrix failed (exit $MATRIX_STATUS); the benchmarks above ran"
fi
step "qrels benchmark on $DEVICE (1,000,000 x 768 corpus, 7,000 queries)"
"$PYTHON" benchmarks/bench_qrels.py --device "$DEVICE" "${QRELS_ARGS[@]}" --paths product classes --repeat 1 \
    --out "$RESULTS/bench_qrels_$TAG"

step "MS MARCO dev's shape on $DEVICE (8,841,823 x 768, bfloat16 and float32, 6,980 queries)"
"$PYTHON" benchmarks/bench_msmarco.py --device "$DEVICE" "${MSMARCO_ARGS[@]}"

step "done: results in $RESULTS/gpu$SUFFIX.json and $RESULTS/*_$TAG.*"
