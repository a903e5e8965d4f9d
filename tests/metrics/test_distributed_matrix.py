"""Every metric class x every input form x ids or none x three ways of splitting the data over
processes: every rank's values and per-query values equal one process fed each sample once.

All cases of one split run in one set of real gloo processes (tests/distributed/matrix.py); each
case is then its own test item. This is what makes a metric kind or an input form exact on many
processes because it goes through the same states, gather, dedupe and rank-table code as every
other, not because of a path of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
import matrix  # noqa: E402

_RUNS: dict[str, list[dict]] = {}


@pytest.fixture(scope="module")
def expected() -> dict:
    return matrix.single_process()


def _results(split: str, tmp_path_factory) -> list[dict]:
    if split not in _RUNS:
        tmp = tmp_path_factory.mktemp(f"matrix_{split}")
        _RUNS[split] = launch.run_workers(
            HERE / "matrix.py", [split], matrix.SPLITS[split], tmp
        )
    return _RUNS[split]


def _assert_close(got, want, context: str) -> None:
    assert got.keys() == want.keys(), context
    for key in want:
        np.testing.assert_allclose(
            np.asarray(got[key], dtype=float), np.asarray(want[key], dtype=float),
            atol=1e-6, rtol=0, err_msg=f"{context}: {key}",
        )


CASES = [
    pytest.param(split, *case, id=f"{split}-{matrix.case_name(*case)}")
    for split in matrix.SPLITS
    for case in matrix.cases()
    if not (split == "padded" and not case[2])
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("split", "cls", "form", "ids"), CASES)
def test_every_rank_equals_one_process(split, cls, form, ids, expected, tmp_path_factory):
    name = matrix.case_name(cls, form, ids)
    for rank, results in enumerate(_results(split, tmp_path_factory)):
        got = results[name]
        _assert_close(got["values"], expected[name]["values"], f"{name} rank {rank}")
        _assert_close(got["per_query"], expected[name]["per_query"], f"{name} per_query {rank}")
        # ids given: nothing to warn about; none given: the warning about padding, once at most
        padding_warnings = sum("cannot be detected" in w for w in got["warnings"])
        assert padding_warnings == (0 if ids or form == "scores" else padding_warnings)
        assert padding_warnings <= 1
