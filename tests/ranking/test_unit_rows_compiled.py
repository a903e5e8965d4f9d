"""The one-pass read of unit rows (``_rows``, ``row_norms.unit_rows_in_one_pass``) equals torch's
passes, bit for bit.

torch reads a block of unit rows in three passes (``copy_`` upcasting half rows,
``linalg.vector_norm``, ``div_`` by ``unit_divisor``), then zeroes the rows whose norm is not
finite (``NormsAsRead.zero_unfinished``). The compiled pass does each row in one go, its norm
summed in torch's order (``torch_lanes`` checks that order against torch before any use). Held
here to torch itself: random rows over many binades and the edges (zero rows, squares that
underflow or overflow, infinities, NaN, subnormal halves), every float16 and bfloat16 number,
norms known or computed, divided or not, the vector and the portable loop; then a corpus on disk
ranked with it and without it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking import mapped_rows, row_norms
from retrieval_metrics.functional.ranking.row_batches import MappedRows, RowBatches
from retrieval_metrics.functional.ranking.row_norms import (
    LANES,
    NormsAsRead,
    row_norms_of,
    torch_lanes,
    unit_divisor,
    unit_rows_in_one_pass,
)

pytestmark = [
    pytest.mark.skipif(row_norms._rows is None, reason="the _rows module is not built"),
    pytest.mark.skipif(
        row_norms._rows is not None and torch_lanes(768) is None,
        reason="this torch sums a row's squares in an order the one-pass read does not know: "
        "its passes run",
    ),
]

KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def torch_passes(piece: torch.Tensor, unit: bool, norms: torch.Tensor | None = None):
    """What torch's passes read: the rows upcast, their norms (or ``norms``, known), divided
    where ``unit``, zeroed where the norm is not finite."""
    rows = piece.to(torch.float32, copy=True)
    if norms is None:
        norms = row_norms_of(rows, torch.float32)
    if unit:
        rows = rows / unit_divisor(norms)
    return NormsAsRead.zero_unfinished(rows, norms), norms


def one_pass(piece, unit, known_norms=None, lanes=None, simd=True, threads=1):
    """The compiled pass over ``piece`` (norms given where ``known_norms``), its rows shared
    out over ``threads`` of torch's threads."""
    target = torch.empty(piece.shape, dtype=torch.float32)
    norms = torch.empty(piece.shape[0], 1) if known_norms is None else known_norms.clone()
    stored = piece if piece.dtype == torch.float32 else piece.view(torch.int16)
    zeroed = row_norms._rows.unit_rows(
        stored.numpy(), KINDS[piece.dtype], target.numpy(), norms.numpy(),
        lanes or torch_lanes(piece.shape[1]), known_norms is not None, unit, simd,
        threads=threads,
    )
    return target, norms, zeroed


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, bit for bit, NaN where NaN (whose payload no caller reads)."""
    nan = a.isnan()
    return bool(torch.equal(nan, b.isnan())) and torch.equal(
        a.masked_fill(nan, 0).view(torch.int32), b.masked_fill(nan, 0).view(torch.int32)
    )


@st.composite
def pieces(draw: Any) -> torch.Tensor:
    rows = draw(st.integers(1, 40))
    width = 8 * draw(st.integers(1, 40))
    dtype = draw(st.sampled_from(list(KINDS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((rows, width)) * np.exp2(rng.integers(-30, 30, (rows, 1)))
    x = torch.tensor(x, dtype=torch.float32)
    pick = rng.random(rows)
    x[pick < 0.1] = 0.0
    x[(pick >= 0.1) & (pick < 0.15)] *= 1e-25  # squares below float32's least
    x[(pick >= 0.15) & (pick < 0.2)] *= 1e25  # squares beyond float32's largest
    if draw(st.booleans()):
        x[0, rng.integers(width)] = draw(st.sampled_from([np.inf, -np.inf, np.nan]))
    return x.to(dtype)


@settings(max_examples=150, deadline=None)
@given(piece=pieces(), unit=st.booleans(), known=st.booleans(), simd=st.booleans())
def test_one_pass_equals_torch_passes(piece, unit, known, simd):
    """Rows upcast, norms, division, non-finite rows zeroed: torch's values, bit for bit, and
    whether a row was zeroed. Norms known (rows read again by a later block of queries) are
    read, not computed."""
    assert torch_lanes(piece.shape[1]) in LANES
    known_norms = None
    if known:
        known_norms = row_norms_of(piece.float(), torch.float32) * 1.5  # (not the rows' own)
    expected, norms = torch_passes(piece, unit, known_norms)
    got, got_norms, zeroed = one_pass(piece, unit, known_norms, simd=simd)
    assert same_bits(got, expected)
    assert same_bits(got_norms, norms)
    assert zeroed == bool((~torch.isfinite(norms)).any())


@settings(max_examples=40, deadline=None)
@given(piece=pieces(), extra=st.integers(0, 50), unit=st.booleans(), known=st.booleans(),
       threads=st.integers(2, 5), unfinished=st.one_of(st.none(), st.floats(0, 1)))
def test_one_pass_shared_over_threads_equals_one_thread(
    piece, extra, unit, known, threads, unfinished
):
    """The rows shared out over several of torch's threads (a piece's rows repeated to two
    takes of a thread and more, each repeat its own binades): one thread's rows, norms and
    verdict on zeroed rows, bit for bit, and torch's, whichever thread meets a row of infinity
    (``unfinished``: where it lies, or none) or one whose squares overflow."""
    module = row_norms._rows
    if not module.shares_rows():
        assert not sys.platform.startswith("linux"), "torch's OpenMP pool was not found"
        pytest.skip("this platform's passes run on one thread")
    width = piece.shape[1]
    rows = 2 * max(module.ROW_GRAIN, module.TAKE_VALUES // width) + extra
    scale = torch.exp2(torch.arange(rows) % 7 - 3.0)[:, None]
    piece = piece.float().nan_to_num(0.0, 0.0, 0.0).repeat(-(-rows // piece.shape[0]), 1)
    piece = (piece[:rows] * scale).to(piece.dtype)
    if unfinished is not None:
        piece[min(int(unfinished * rows), rows - 1), 0] = float("inf")
    known_norms = torch.linalg.vector_norm(piece.float(), dim=1, keepdim=True) if known else None
    alone = one_pass(piece, unit, known_norms)
    shared = one_pass(piece, unit, known_norms, threads=threads)
    assert same_bits(alone[0], shared[0]) and same_bits(alone[1], shared[1])
    rows_read, norms_read = torch_passes(piece, unit, known_norms)
    assert same_bits(shared[0], rows_read)
    assert alone[2] == shared[2] == (not bool(norms_read.isfinite().all()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("simd", [True, False])
def test_every_half_number_is_read_as_torch_upcasts_it(dtype, simd):
    """Each of the 65,536 numbers of the dtype (subnormals, signed zeros, the largest) as the
    first of a row of zeros: the row read is torch's upcast; rows of an infinity or NaN zeroed."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    piece = torch.zeros(2**16, 8, dtype=torch.int16)
    piece[:, 0] = bits
    piece = piece.view(dtype)
    got, norms, zeroed = one_pass(piece, unit=False, simd=simd)
    expected, expected_norms = torch_passes(piece, unit=False)
    assert zeroed and torch.equal(got, expected)
    assert same_bits(norms, expected_norms)


def test_the_lane_check_refuses_an_order_torch_does_not_sum_in():
    """The lane count that torch does not use gives other norms on the check's rows (most
    rows round apart): the check can fail, and so keeps torch's passes where the build or the
    processor sums otherwise."""
    width = 768
    lanes = torch_lanes(width)
    other = next(n for n in LANES if n != lanes)
    rows = row_norms._check_rows(width)
    _, theirs, _ = one_pass(rows, unit=True, lanes=other)
    differ = int((theirs != row_norms_of(rows, torch.float32)).sum())
    assert differ > len(rows) // 4


def test_widths_torch_sums_otherwise_keep_torch_passes():
    """A width no lane count divides (torch adds the rest one at a time, in its compiler's
    order): no one-pass read; the caller's torch passes run."""
    assert torch_lanes(100) is None and torch_lanes(0) is None
    piece = torch.randn(4, 100)
    assert not unit_rows_in_one_pass(piece, torch.empty(4, 100), torch.empty(4, 1), True, False)
    assert not unit_rows_in_one_pass(
        piece.double(), torch.empty(4, 100, dtype=torch.float64),
        torch.empty(4, 1, dtype=torch.float64), True, False,
    )


def test_half_rows_are_not_upcast_in_place():
    """Half rows whose memory the float32 rows would overwrite are refused, not read as
    written over."""
    memory = torch.zeros(64)
    target, stored = memory.view(4, 16), memory.view(torch.int16)[:64].view(4, 16)
    with pytest.raises(ValueError, match="in place"):
        row_norms._rows.unit_rows(
            stored.numpy(), 1, target.numpy(), torch.empty(4).numpy(), 8, False, True
        )


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_corpus_on_disk_ranks_alike_with_the_one_pass_read_and_without(
    tmp_path, monkeypatch, dtype
):
    """The metric class over a corpus on disk (duplicates, zero rows, ties) whose blocks are read
    in one pass (one call a block) and by torch's passes (the module hidden): every value and
    every query's ranks equal; the pages mapped at once where the system can, and read by
    faults where it refuses."""
    rng = np.random.default_rng(5)
    corpus = rng.standard_normal((3000, 64)).astype(dtype)
    corpus[100:110] = corpus[0]  # duplicates: exact ties
    corpus[200:205] = 0.0
    np.save(tmp_path / "c.npy", corpus)
    ids = [f"d{i}" for i in range(3000)]
    queries = torch.from_numpy(corpus[rng.choice(3000, 200)].astype(np.float32) + 0.3)
    qrels = {f"q{i}": {f"d{j}": 1 for j in rng.choice(3000, 3)} for i in range(200)}
    qrels["q0"]["d0"] = 2

    def ranked() -> tuple[dict, torch.Tensor]:
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100", "mrr", "map"], qrels=qrels,
                                     protocol="beir", memory_budget=1 << 22)
        metric.set_gallery(str(tmp_path / "c.npy"), ids=ids)
        metric.update(queries, ids=[f"q{i}" for i in range(200)], role="query")
        return metric.compute(), metric.per_query()

    calls = []
    real = row_norms._rows.unit_rows
    # (the check of width 64 made first, once a process: its 96 rows are no block's)
    assert row_norms.torch_lanes(64) is not None
    monkeypatch.setattr(
        row_norms._rows, "unit_rows", lambda *a, **kw: calls.append(a[0].shape[0]) or real(*a, **kw)
    )
    values, per_query = ranked()
    # (each row once a block of queries, a gallery block a call)
    assert sum(calls) % 3000 == 0 and 1 < len(calls) and max(calls) < 3000
    module = row_norms._rows
    monkeypatch.setattr(row_norms, "_rows", None)
    expected, expected_per_query = ranked()
    assert values.keys() == expected.keys()
    assert all(torch.equal(values[k], expected[k]) for k in values)
    assert per_query.keys() == expected_per_query.keys()
    assert all(torch.equal(per_query[k], expected_per_query[k]) for k in per_query)
    monkeypatch.setattr(row_norms, "_rows", module)  # (the one-pass read maps pages at once)
    monkeypatch.setattr(mapped_rows, "_populates", True)
    monkeypatch.setattr(mapped_rows, "MADV_POPULATE_READ", -1)  # (refused: EINVAL)
    faulted, faulted_per_query = ranked()
    assert not mapped_rows._populates
    assert all(torch.equal(faulted[k], expected[k]) for k in values)
    assert all(torch.equal(faulted_per_query[k], expected_per_query[k]) for k in per_query)


def test_a_file_read_in_one_pass_takes_chunks_of_its_pages_held(tmp_path, monkeypatch):
    """Read in one pass, a file's rows come in chunks as large as the pages a process holds of
    it (RELEASE_BYTES), not READ_BYTES, each mapped in one call first: the pass writes into the
    block itself on one thread. Read by torch's passes (the module hidden), 1 MiB chunks
    faulted in, none mapped at once."""
    np.save(tmp_path / "c.npy", np.ones((20_000, 64), dtype=np.float16))  # 2.4 MiB
    rows = RowBatches([MappedRows(np.load(tmp_path / "c.npy", mmap_mode="r"))])
    read, populated = [], []
    real_chunks, real_populate = MappedRows.chunks, MappedRows._populate

    def chunks(self, start, stop, *args, **kwargs):
        for at, piece in real_chunks(self, start, stop, *args, **kwargs):
            read.append(piece.shape[0])
            yield at, piece

    def populate(self, start, stop):
        populated.append(stop - start)
        real_populate(self, start, stop)

    monkeypatch.setattr(MappedRows, "chunks", chunks)
    monkeypatch.setattr(MappedRows, "_populate", populate)
    block = rows.norms_as_read(unit=True).rows(0, 20_000, torch.empty(20_000, 64), copy=True)
    assert read == populated == [20_000]
    assert torch.equal(block, torch.full((20_000, 64), 0.125))
    read.clear()
    populated.clear()
    monkeypatch.setattr(row_norms, "_rows", None)
    block = rows.norms_as_read(unit=True).rows(0, 20_000, torch.empty(20_000, 64), copy=True)
    assert read == [mapped_rows.READ_BYTES // 128] * 2 + [20_000 - 2 * 8192] and not populated
    assert torch.equal(block, torch.full((20_000, 64), 0.125))
