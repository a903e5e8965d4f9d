#!/usr/bin/env bash
# Run sentence-transformers' own InformationRetrievalEvaluator tests against
# retrieval_metrics.compat.sentence_transformers.InformationRetrievalEvaluator.
# Not part of this project's test suite.
#
# Usage: tools/run_st_suite.sh SOURCE [pytest args...]
#   SOURCE: a copy of the sentence-transformers repository (a git work tree, or a bare git
#   directory, e.g. from `git clone --bare`; ST_REF, default HEAD, picks its commit), or the test
#   file itself. Its test of the evaluator is tests/sentence_transformer/evaluation/
#   test_information_retrieval_evaluator.py (6.x), tests/evaluation/... up to 5.x.
#
# The test file is copied to a scratch directory outside this repository (WORK, default a new
# temporary directory), its one import of InformationRetrievalEvaluator is rewritten to the
# compat class (everything else, cos_sim and the mock model included, stays the installed
# sentence-transformers'), and pytest runs it with this repository's src/ first on the path.
# BASELINE=1 runs the same copy without the rewrite (sentence-transformers' own evaluator).
#
# Deselected: the tests that take the `stsb_bert_tiny_model` fixture (test_simple,
# test_metrics_are_independent_of_corpus_chunk_size). It downloads
# sentence-transformers-testing/stsb-bert-tiny-safetensors from the Hugging Face Hub (defined in
# their tests/conftest.py, which is not copied), and this script must run offline.
set -euo pipefail

src="${1:?usage: tools/run_st_suite.sh SOURCE [pytest args...]}"
shift
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/st_suite.XXXXXX")}"
case "$work/" in "$here"/*) echo "WORK must lie outside the repository ($here)" >&2; exit 2;; esac
mkdir -p "$work"
test_file="$work/test_information_retrieval_evaluator.py"
paths=(tests/sentence_transformer/evaluation/test_information_retrieval_evaluator.py
       tests/evaluation/test_information_retrieval_evaluator.py)

if [ -f "$src" ]; then
  cp "$src" "$test_file"
  echo "test file: $src"
elif git --git-dir="$src" rev-parse --git-dir >/dev/null 2>&1 && [ ! -d "$src/tests" ]; then
  ref="${ST_REF:-HEAD}"
  found=""
  for p in "${paths[@]}"; do
    if git --git-dir="$src" cat-file -e "$ref:$p" 2>/dev/null; then found=$p; break; fi
  done
  [ -n "$found" ] || { echo "no ${paths[*]} at $ref in $src" >&2; exit 2; }
  git --git-dir="$src" show "$ref:$found" > "$test_file"
  echo "test file: $found at $(git --git-dir="$src" rev-parse --short "$ref") ($ref) of $src"
else
  found=""
  for p in "${paths[@]}"; do
    if [ -f "$src/$p" ]; then found=$p; break; fi
  done
  [ -n "$found" ] || { echo "no ${paths[*]} in $src" >&2; exit 2; }
  cp "$src/$found" "$test_file"
  echo "test file: $src/$found"
fi

if [ "${BASELINE:-0}" != 1 ]; then
  # `from sentence_transformers[.sentence_transformer].evaluation import InformationRetrievalEvaluator`
  sed -i -E 's/^from sentence_transformers(\.[a-z_]+)*\.evaluation import InformationRetrievalEvaluator$/from retrieval_metrics.compat.sentence_transformers import InformationRetrievalEvaluator/' "$test_file"
  grep -q "^from retrieval_metrics.compat.sentence_transformers import InformationRetrievalEvaluator$" "$test_file" \
    || { echo "the import of InformationRetrievalEvaluator was not found to rewrite" >&2; exit 2; }
  ! grep -n "InformationRetrievalEvaluator" "$test_file" | grep "import" | grep -v retrieval_metrics
fi

cd "$work"
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1
python - <<'PY'
import sentence_transformers

import retrieval_metrics.compat.sentence_transformers as compat

print(f"sentence-transformers {sentence_transformers.__version__}, compat from {compat.__file__}")
PY
name="$(basename "$test_file")"
exec python -m pytest -p no:cacheprovider -q -rfEs -o addopts="" --rootdir "$work" "$name" \
  --deselect "$name::test_simple" \
  --deselect "$name::test_metrics_are_independent_of_corpus_chunk_size" "$@"
