#!/usr/bin/env bash
# Run pytorch-metric-learning's own AccuracyCalculator tests against
# retrieval_metrics.compat.pml.AccuracyCalculator. Not part of this project's test suite.
#
# Usage: tools/run_pml_suite.sh PML_CHECKOUT [pytest args...]
#   PML_CHECKOUT: a copy of the pytorch-metric-learning repository (a git work tree, or a bare git
#   directory, e.g. from `git clone --bare`), at the release matching the installed package.
#   PML_REF (environment, default v2.9.0 falling back to HEAD) picks the commit in a git directory.
#
# The tests of that copy are extracted to a scratch directory (WORK, default /tmp/pml_suite), the
# files that exercise AccuracyCalculator get their AccuracyCalculator swapped for the compat class
# (everything else, module helpers included, stays the installed pytorch-metric-learning), and
# pytest runs them on CPU with the installed pytorch-metric-learning and this repository's src/.
set -euo pipefail

src="${1:?usage: tools/run_pml_suite.sh PML_CHECKOUT [pytest args...]}"
shift
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${WORK:-/tmp/pml_suite}"
rm -rf "$work"
mkdir -p "$work"

if git --git-dir="$src" rev-parse --git-dir >/dev/null 2>&1 && [ ! -d "$src/tests" ]; then
  ref="${PML_REF:-v2.9.0}"
  git --git-dir="$src" rev-parse --verify -q "$ref^{commit}" >/dev/null || ref=HEAD
  echo "extracting tests/ of $(git --git-dir="$src" rev-parse --short "$ref") ($ref) from $src"
  git --git-dir="$src" archive "$ref" tests | tar -x -C "$work"
else
  cp -r "$src/tests" "$work/tests"
fi

# The files that use AccuracyCalculator: the class, and the testers/trainers built on it.
files=$(grep -rl "AccuracyCalculator" "$work/tests" --include='*.py' || true)
for f in $files; do
  # `accuracy_calculator.AccuracyCalculator` (the module stays PML's for its helper functions)
  sed -i 's/\baccuracy_calculator\.AccuracyCalculator\b/_CompatAccuracyCalculator/g' "$f"
  # `from ...accuracy_calculator import AccuracyCalculator`
  sed -i 's/^\(\s*\)from pytorch_metric_learning\.utils\.accuracy_calculator import AccuracyCalculator$/\1from retrieval_metrics.compat.pml import AccuracyCalculator/' "$f"
  # put the compat import after the file's first import line
  sed -i '0,/^import \|^from /s//from retrieval_metrics.compat.pml import AccuracyCalculator as _CompatAccuracyCalculator\n&/' "$f"
  echo "swapped: ${f#"$work"/}"
done

# Testers construct a default AccuracyCalculator themselves: patch that default too.
cat > "$work/conftest.py" <<'PY'
import pytorch_metric_learning.testers.base_tester as base_tester

from retrieval_metrics.compat.pml import AccuracyCalculator

base_tester.AccuracyCalculator = AccuracyCalculator
PY

cd "$work"
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
export TEST_DEVICE="${TEST_DEVICE:-cpu}" TEST_DTYPES="${TEST_DTYPES:-float32}"
echo "pytorch-metric-learning $(python -c 'import pytorch_metric_learning as p; print(p.__version__)')," \
  "compat from $(python -c 'import retrieval_metrics.compat.pml as m; print(m.__file__)')"
# shellcheck disable=SC2086
exec python -m pytest -p no:cacheprovider -q -rfEs --continue-on-collection-errors $files "$@"
