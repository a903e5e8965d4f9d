#!/usr/bin/env bash
# Run this project's whole test suite (and, with SMOKE=1, benchmarks/gpu_check.sh's CPU smoke run)
# under other releases of torch and triton than the ones a development venv has: those of the
# machine that will run the GPU check (torch 2.11 + CUDA 13 and triton 3.6 on the lent GPUs), on
# a machine with no GPU. Not part of the test command.
#
# A CUDA build of torch runs on the CPU where no GPU is; the tests' emulated CUDA device and
# Triton's interpreter stand in for the device as in the usual run (tests/conftest.py). What a
# release changes shows up here before a borrowed GPU's minutes are spent on it: an operator
# that release lacks, an interpreter that cannot run a kernel (tests/triton_here.py skips those
# tests and says why), a warning the suite promotes to an error.
#
# Usage: tools/run_suite_with_versions.sh TORCH_VERSION TRITON_VERSION [pytest args...]
#   (pytest args: the whole suite, tests/, without any; or files, -k, -x...)
#   e.g. tools/run_suite_with_versions.sh 2.11.0 3.6.0
# VENV (default /tmp/rm_venv_torch$TORCH_VERSION) is made once and reused. A CUDA build of torch
# is several GB with its NVIDIA libraries; pip may take it from a local cache.
set -euo pipefail

torch_version="${1:?usage: tools/run_suite_with_versions.sh TORCH_VERSION TRITON_VERSION [pytest args...]}"
triton_version="${2:?usage: tools/run_suite_with_versions.sh TORCH_VERSION TRITON_VERSION [pytest args...]}"
shift 2
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-/tmp/rm_venv_torch$torch_version}"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q "torch==$torch_version" "triton==$triton_version"
# the project's test dependencies; pip keeps the torch and triton installed above where they
# satisfy the project's ranges
"$venv/bin/python" -m pip install -q -e "$here[dev]"
"$venv/bin/python" - <<'PY'
import numpy, torch, triton
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, a GPU: "
      f"{torch.cuda.is_available()}), triton {triton.__version__}, numpy {numpy.__version__}")
PY

cd "$here"
status=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -rs "$@" || status=$?
if [ "${SMOKE:-0}" = 1 ]; then
  GPU_CHECK_DEVICE=cpu GPU_CHECK_SMALL=1 PYTHON="$venv/bin/python" \
    GPU_CHECK_RESULTS="${SMOKE_RESULTS:-/tmp/rm_smoke_torch$torch_version}" \
    bash benchmarks/gpu_check.sh || status=$?
fi
exit "$status"
