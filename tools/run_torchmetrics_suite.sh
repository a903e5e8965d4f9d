#!/usr/bin/env bash
# Run torchmetrics' own retrieval test suite against retrieval_metrics.compat.torchmetrics.
#
# Not part of the project's tests: it needs a copy of torchmetrics' repository and takes
# minutes. Usage (from the repository root, with the project's virtualenv active):
#
#   tools/run_torchmetrics_suite.sh SOURCE [WORKDIR] [-- PYTEST ARGS...]
#
# SOURCE is a clone or bare git directory of github.com/Lightning-AI/torchmetrics (the tag
# v1.9.0 is exported), or a directory that already holds its tests/ tree. WORKDIR (default: a
# new temporary directory) receives the copy whose retrieval modules import from the compat
# module instead of torchmetrics. The DDP variants run on torchmetrics' pool of 2 gloo processes
# (USE_PYTEST_POOL=1). Its helpers need `cachier`: pass EXTRA_PYTHONPATH=/dir/with/cachier if it
# is not installed (pip install --target DIR cachier).
#
# BASELINE=1 runs the same copy without swapping the imports (torchmetrics itself), to tell the
# suite's own failures from the compat module's. Several runs at once (one per module, say) need
# their own WORKDIR and PORT (the first port of the DDP pool; torchmetrics' default 8088).
set -euo pipefail

SOURCE=${1:?usage: tools/run_torchmetrics_suite.sh SOURCE [WORKDIR] [-- PYTEST ARGS...]}
shift
WORKDIR=""
if [[ $# -gt 0 && $1 != "--" ]]; then WORKDIR=$1; shift; fi
if [[ $# -gt 0 && $1 == "--" ]]; then shift; fi
WORKDIR=${WORKDIR:-$(mktemp -d /tmp/tm_suite.XXXXXX)}
REPO_SRC=$(cd "$(dirname "$0")/.." && pwd)/src
TAG=${TAG:-v1.9.0}
# the seven measure modules; MODULES="test_fallout test_auroc" (etc.) runs others
read -r -a MODULES <<< "${MODULES:-test_hit_rate test_map test_mrr test_ndcg test_precision test_r_precision test_recall}"

mkdir -p "$WORKDIR"
if [[ -d $SOURCE/tests/unittests ]]; then
    cp -r "$SOURCE/tests" "$WORKDIR/"
elif git --git-dir="$SOURCE" rev-parse --verify -q "$TAG" >/dev/null \
        || git --git-dir="$SOURCE/.git" rev-parse --verify -q "$TAG" >/dev/null; then
    GITDIR=$SOURCE; [[ -d $SOURCE/.git ]] && GITDIR=$SOURCE/.git
    git --git-dir="$GITDIR" archive "$TAG" tests | tar -x -C "$WORKDIR"
else
    echo "no tests/unittests and no tag $TAG in $SOURCE" >&2; exit 2
fi

RET="$WORKDIR/tests/unittests/retrieval"
if [[ ${BASELINE:-0} != 1 ]]; then
    # from torchmetrics.retrieval[.x] import ... / from torchmetrics.functional.retrieval[.x] import
    for m in "${MODULES[@]}"; do
        sed -i -E \
            -e 's/^from torchmetrics\.retrieval(\.[a-z_]+)? import/from retrieval_metrics.compat.torchmetrics import/' \
            -e 's/^from torchmetrics\.functional\.retrieval(\.[a-z_]+)? import/from retrieval_metrics.compat.torchmetrics import/' \
            "$RET/$m.py"
        ! grep -n "^from torchmetrics.*retrieval" "$RET/$m.py"
    done
fi

if [[ -n ${PORT:-} ]]; then
    sed -i -E -e "s/^START_PORT = [0-9]+/START_PORT = $PORT/" \
        -e "s/^MAX_PORT = [0-9]+/MAX_PORT = $((PORT + 12))/" "$WORKDIR/tests/unittests/conftest.py"
fi

FILES=()
for m in "${MODULES[@]}"; do FILES+=("tests/unittests/retrieval/$m.py"); done
cd "$WORKDIR"
echo "workdir: $WORKDIR"
PYTHONPATH="$WORKDIR/tests:$REPO_SRC${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH}" \
USE_PYTEST_POOL=1 PYTEST_REFERENCE_CACHE="$WORKDIR/_cache-references" \
    python -m pytest -q -p no:cacheprovider -o addopts="" --rootdir "$WORKDIR/tests" \
        --timeout 900 -W ignore::DeprecationWarning "${FILES[@]}" "$@"
