"""The compiled parts, all optional: the ranked-lists form's loop over str ids, the codes of str
ids, the scores form's grouping of entries by query, the CPU's count of a score block's rows
against few relevant scores, the tie groups of a binary rank table, and a block's unit rows in
one pass over each row. Each module has a Python path that runs where it is not built
(lists.py, labels.py, scores.py, engine/kernels.py, measures/ties.py, row_norms.py), so a
failed compile still installs the package with the same values."""

import sys

from setuptools import Extension, setup

# the counting loops are written for the compiler's vectorizer
OPTIMIZE = [] if sys.platform == "win32" else ["-O3"]
# the measures' sums must round as torch's do, operation by operation: no fused multiply-adds
UNFUSED = [] if sys.platform == "win32" else ["-ffp-contract=off"]
# the rows of a pass shared out over torch's OpenMP threads (_count, _rows and _group)
PARALLEL = "src/retrieval_metrics/functional/ranking/_parallel.h"

setup(
    ext_modules=[
        Extension(
            "retrieval_metrics.functional.ranking._str_lists",
            ["src/retrieval_metrics/functional/ranking/_str_lists.c"],
            optional=True,
        ),
        Extension(
            "retrieval_metrics.functional.ranking._labels",
            ["src/retrieval_metrics/functional/ranking/_labels.c"],
            optional=True,
        ),
        Extension(
            "retrieval_metrics.functional.ranking._group",
            ["src/retrieval_metrics/functional/ranking/_group.c"],
            depends=[PARALLEL],
            optional=True,
        ),
        Extension(
            "retrieval_metrics.functional.ranking._rows",
            ["src/retrieval_metrics/functional/ranking/_rows.c"],
            depends=[PARALLEL],
            # (a norm summed as torch sums it: each square and each sum rounded)
            extra_compile_args=OPTIMIZE + UNFUSED,
            optional=True,
        ),
        Extension(
            "retrieval_metrics.functional.measures._ties",
            ["src/retrieval_metrics/functional/measures/_ties.c"],
            extra_compile_args=UNFUSED,
            optional=True,
        ),
        Extension(
            "retrieval_metrics.functional.ranking.engine._count",
            ["src/retrieval_metrics/functional/ranking/engine/_count.c"],
            depends=[PARALLEL],
            extra_compile_args=OPTIMIZE,
            optional=True,
        ),
    ]
)
