"""The numpy-backed array primitives give exactly what the torch calls they replace give."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.primitives import flat_nonzero, is_identity, masked, repeat

small_ints = st.lists(st.integers(0, 6), max_size=40)


@settings(max_examples=60, deadline=None)
@given(counts=small_ints, offset=st.integers(-3, 3))
def test_repeat_is_repeat_interleave(counts, offset):
    counts_t = torch.tensor(counts, dtype=torch.int64)
    values = torch.arange(len(counts), dtype=torch.int64) * 7 + offset
    got = repeat(values, counts_t)
    expected = torch.repeat_interleave(values, counts_t)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    # a strided view of the values, as the library passes slices of larger arrays
    wide = torch.stack([values, -values], 1)
    assert torch.equal(repeat(wide[:, 1], counts_t), torch.repeat_interleave(-values, counts_t))


@settings(max_examples=60, deadline=None)
@given(bits=st.lists(st.booleans(), max_size=60))
def test_flat_nonzero_is_nonzero(bits):
    mask = torch.tensor(bits, dtype=torch.bool)
    got = flat_nonzero(mask)
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.nonzero(mask).flatten())
    counts = mask.to(torch.int64) * 3  # numbers: their nonzero entries
    assert torch.equal(flat_nonzero(counts), torch.nonzero(counts).flatten())
    assert torch.equal(masked(torch.arange(len(bits)), mask), got)


def test_is_identity():
    assert is_identity(torch.arange(5), 5)
    assert not is_identity(torch.tensor([0, 2, 1]), 3)
    assert is_identity(torch.ones(4, dtype=torch.bool), 4)
    assert not is_identity(torch.tensor([True, False]), 2)
