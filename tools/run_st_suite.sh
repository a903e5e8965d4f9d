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
# STAND_IN=1 runs them too, with an offline stand-in for that fixture written to the scratch
# directory's conftest.py: a model whose embedding of a text is a sum of one seeded random
# vector per word (equal texts, equal rows: the duplicates of the chunk-size test tie bit for
# bit), with encode / encode_query / encode_document and cosine similarity.
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
if [ "${STAND_IN:-0}" = 1 ]; then
  cat > "$work/conftest.py" <<'PY'
import zlib

import pytest
import torch
from sentence_transformers.util.similarity import SimilarityFunction


class _Card:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class StandInModel:
    """Offline stand-in for stsb-bert-tiny: a sum of one seeded vector per word."""

    similarity_fn_name = "cosine"
    model_card_data = _Card()

    def __init__(self):
        self.similarity = SimilarityFunction.to_similarity_fn("cosine")

    def _row(self, text):
        row = torch.zeros(32)
        for word in text.lower().split():
            g = torch.Generator().manual_seed(zlib.crc32(word.strip(".?,!").encode()))
            row += torch.randn(32, generator=g)
        return row

    def encode(self, sentences, **kwargs):
        texts = [sentences] if isinstance(sentences, str) else list(sentences)
        return torch.stack([self._row(t) for t in texts])

    encode_query = encode_document = encode


@pytest.fixture
def stsb_bert_tiny_model():
    return StandInModel()
PY
  exec python -m pytest -p no:cacheprovider -q -rfEs -o addopts="" --rootdir "$work" "$name" "$@"
fi
exec python -m pytest -p no:cacheprovider -q -rfEs -o addopts="" --rootdir "$work" "$name" \
  --deselect "$name::test_simple" \
  --deselect "$name::test_metrics_are_independent_of_corpus_chunk_size" "$@"
