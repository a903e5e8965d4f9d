"""The CSR building blocks (``functional/csr.py``) against plain Python lists and sets, on the
host and on the emulated CUDA device."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from emulated_cuda import fake_cuda_fixture, is_fake_cuda, to_fake_cuda  # noqa: F401
from retrieval_metrics.functional.csr import (
    csr_difference,
    csr_from_ranges,
    csr_keep_columns,
    csr_rows,
    ptr_from_counts,
    row_of_entries,
)


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
    ptr, index, keep = csr_difference(a_ptr, a_index, b_ptr, b_index)
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


ROWS = st.lists(st.lists(st.integers(0, 20), max_size=8), max_size=10)


@settings(max_examples=60, deadline=None)
@given(ROWS)
def test_pointers_and_rows_of_entries(rows):
    counts = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    ptr = ptr_from_counts(counts)
    assert ptr.dtype == torch.int64
    assert ptr.tolist() == [sum(len(r) for r in rows[:i]) for i in range(len(rows) + 1)]
    assert row_of_entries(ptr).tolist() == [i for i, r in enumerate(rows) for _ in r]


@settings(max_examples=60, deadline=None)
@given(ROWS, st.lists(st.booleans(), min_size=21, max_size=21), st.data())
def test_keep_columns_and_rows_of_a_csr(rows, keep, data):
    rows = [sorted(set(r)) for r in rows]
    ptr, index = _csr(rows)
    new_ptr, new_index, mask = csr_keep_columns(ptr, index, torch.tensor(keep))
    assert _rows(new_ptr, new_index) == [[c for c in r if keep[c]] for r in rows]
    assert new_index.tolist() == index[mask].tolist()
    picked = data.draw(st.lists(st.integers(0, max(0, len(rows) - 1)), max_size=6))
    if not rows:
        picked = []
    row, col, pos = csr_rows(ptr, torch.tensor(picked, dtype=torch.int64))
    expected = [(k, c, int(ptr[q]) + c) for k, q in enumerate(picked) for c in range(len(rows[q]))]
    assert list(zip(row.tolist(), col.tolist(), pos.tolist(), strict=True)) == expected


def test_the_csr_helpers_stay_on_their_inputs_device(fake_cuda):
    """What the helpers make lies on the device of what they are given, as in the code they
    replaced: device in, device out (the emulated device refuses any host/device mix)."""
    ptr, index = _csr([[0, 2, 5], [], [1, 2]])
    dev_ptr = ptr_from_counts(to_fake_cuda(torch.tensor([3, 0, 2])))
    assert is_fake_cuda(dev_ptr) and dev_ptr.cpu().tolist() == ptr.tolist()
    rows = row_of_entries(dev_ptr)
    assert is_fake_cuda(rows) and rows.cpu().tolist() == [0, 0, 0, 2, 2]
    start, stop = to_fake_cuda(torch.tensor([0, 3, 3])), to_fake_cuda(torch.tensor([3, 3, 5]))
    got_ptr, got_index = csr_from_ranges(start, stop, to_fake_cuda(index))
    assert is_fake_cuda(got_ptr) and is_fake_cuda(got_index)
    assert _rows(got_ptr.cpu(), got_index.cpu()) == [[0, 2, 5], [], [1, 2]]
    b_ptr, b_index = _csr([[2], [], [1]])
    d_ptr, d_index, keep = csr_difference(
        to_fake_cuda(ptr), to_fake_cuda(index), to_fake_cuda(b_ptr), to_fake_cuda(b_index)
    )
    assert all(is_fake_cuda(t) for t in (d_ptr, d_index, keep))
    assert _rows(d_ptr.cpu(), d_index.cpu()) == [[0, 5], [], [2]]
