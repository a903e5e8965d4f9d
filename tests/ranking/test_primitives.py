"""The numpy-backed array primitives give exactly what the torch calls they replace give."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from emulated_cuda import fake_cuda_fixture  # noqa: F401
from retrieval_metrics.functional.primitives import (
    finite_flag,
    flat_nonzero,
    is_identity,
    masked,
    repeat,
    to_device,
)

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


def test_to_device_sends_host_tensors_without_waiting(fake_cuda, monkeypatch):
    """A host tensor reaches the device with a non-blocking copy (no stream synchronisation, so
    no host sync in the emulation, which counts a blocking one), with its values; a pinned one
    (which its owner may refill) and a copy to the host wait; on its own device it is itself."""
    host = torch.arange(5)
    with fake_cuda.counting() as log:
        moved = to_device(host, "cuda")
        same = to_device(moved, "cuda")
    assert log == [] and moved.device.type == "cuda" and same is moved
    assert moved.cpu().tolist() == [0, 1, 2, 3, 4]
    with fake_cuda.counting() as log:
        back = to_device(moved, "cpu")
    assert back.device.type == "cpu" and len(log) == 1
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *a: True)
    with fake_cuda.counting() as log:
        to_device(torch.arange(3), "cuda")
    assert log == ["host-to-device copy (_to_copy)"]
    assert to_device(host, "cpu") is host


values = st.one_of(
    st.floats(width=32),  # NaN, both infinities, subnormals, the largest floats
    st.sampled_from([3.0e38, -3.0e38, 1.7e308, -1.7e308]),  # sums that overflow
)


@settings(max_examples=200, deadline=None)
@given(
    entries=st.lists(values, min_size=1, max_size=24),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
    rows=st.integers(1, 3),
)
def test_finite_flag_is_whether_every_value_is_finite(entries, dtype, rows):
    """``finite_flag`` (the scan of embeddings for NaN and infinities) is ``isfinite().all()``,
    sums that overflow included: a finite sum is the fast answer, the minimum and maximum the
    rest."""
    x = torch.tensor(entries * rows, dtype=torch.float64).to(dtype).view(rows, -1)
    expected = bool(torch.isfinite(x).all())
    flag = finite_flag(x)
    assert flag.dtype == torch.bool and flag.shape == ()
    assert bool(flag) == expected
    assert bool(finite_flag(x.T)) == expected  # (a view in another order)


def test_finite_float32_rows_are_scanned_in_one_reduction():
    """Finite float32 embeddings (what a scan nearly always sees) are scanned by one reduction,
    their sum, not the two of a minimum and a maximum: a third of the time on the host."""
    from torch.overrides import TorchFunctionMode

    calls: list[str] = []

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    x = torch.randn(500, 64)
    with Calls():
        assert bool(finite_flag(x))
    assert "aminmax" not in calls and calls.count("sum") == 1
    x[3, 7] = float("nan")
    with Calls():
        assert not bool(finite_flag(x))
