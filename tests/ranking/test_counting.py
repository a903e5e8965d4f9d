"""The block counting of the ranking against a count by comparison, on tie-heavy data."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.ranking.engine.kernels import _merge_rows, count_block


def _brute(values: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hist_lt[j]: items with exactly j relevant scores strictly below them; hist_le the
    difference of the "<=" and "<" histograms (items tying a relevant score)."""
    rows, m = rel.shape
    lt = np.zeros((rows, m + 1), dtype=np.int64)
    le = np.zeros((rows, m + 1), dtype=np.int64)
    for i in range(rows):
        for v in values[i]:
            strictly = int((rel[i] < v).sum())
            at_most = int((rel[i] <= v).sum())
            lt[i, strictly] += 1
            le[i, at_most] += 1
            le[i, strictly] -= 1
    return lt, le


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 40),
    st.integers(1, 12),
    st.integers(1, 6),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_block_counts_every_item(rows, n, m, distinct, collapsed, seed):
    """The merge of sorted rows and the whole-block count (with its shortcut for rows whose
    items all lie outside the relevant scores) against a count by comparison."""
    rng = np.random.default_rng(seed)
    # few distinct values: ties between items, between relevant scores, and across the two
    values = rng.integers(0, distinct, (rows, n)).astype(np.float32)
    if collapsed:  # collapsed embeddings: every relevant score of a row equal
        rel = np.repeat(rng.integers(0, distinct, (rows, 1)), m, axis=1).astype(np.float32)
    else:
        rel = np.sort(rng.integers(0, distinct, (rows, m)).astype(np.float32), axis=1)
    rel[:, m - rng.integers(0, m) :] = np.inf  # rows padded with +inf, as the ranking pads them
    lt, le = _brute(values, rel)
    merged = torch.zeros(2, rows, m + 1, dtype=torch.int64)
    _merge_rows(torch.from_numpy(values), torch.from_numpy(rel), merged[0], merged[1])
    whole = torch.zeros(2, rows * (m + 1), dtype=torch.int64)
    count_block(torch.from_numpy(values), torch.from_numpy(rel), whole[0], whole[1], 2**16)
    for got in (merged.view(2, rows, m + 1), whole.view(2, rows, m + 1)):
        np.testing.assert_array_equal(got[0].numpy(), lt)
        np.testing.assert_array_equal(got[1].numpy(), le)
