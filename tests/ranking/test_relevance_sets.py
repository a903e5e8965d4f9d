"""The CSR building blocks of relevance sets against plain Python sets."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.ranking.relevance import _csr_difference, csr_from_ranges


def _csr(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    counts = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    ptr = torch.zeros(len(rows) + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    index = torch.tensor([c for r in rows for c in r], dtype=torch.int64)
    return ptr, index


def _rows(ptr: torch.Tensor, index: torch.Tensor) -> list[list[int]]:
    return [index[ptr[i] : ptr[i + 1]].tolist() for i in range(ptr.numel() - 1)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sets(st.integers(0, 40), max_size=30), st.sets(st.integers(0, 40), max_size=6)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_csr_difference_is_the_set_difference_row_by_row(pairs):
    a_rows = [sorted(a) for a, _ in pairs]
    b_rows = [sorted(b) for _, b in pairs]  # items of B missing from A are ignored
    a_ptr, a_index = _csr(a_rows)
    b_ptr, b_index = _csr(b_rows)
    ptr, index, keep = _csr_difference(a_ptr, a_index, b_ptr, b_index)
    expected = [[c for c in a if c not in set(b)] for a, b in zip(a_rows, b_rows, strict=True)]
    assert _rows(ptr, index) == expected
    assert index.tolist() == a_index[keep].tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-3, 12)), min_size=1, max_size=10))
def test_csr_from_ranges_lists_each_range(ranges):
    order = torch.randperm(45, generator=torch.Generator().manual_seed(len(ranges)))
    start = torch.tensor([s for s, _ in ranges], dtype=torch.int64)
    stop = torch.tensor([s + n for s, n in ranges], dtype=torch.int64)
    ptr, index = csr_from_ranges(start, stop, order)
    expected = [order[s : s + n].tolist() if n > 0 else [] for s, n in ranges]
    assert _rows(ptr, index) == expected
    plain_ptr, plain_index = csr_from_ranges(start, stop)
    assert _rows(plain_ptr, plain_index) == [list(range(s, s + max(n, 0))) for s, n in ranges]
