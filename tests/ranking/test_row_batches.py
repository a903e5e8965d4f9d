"""A gallery held in the batches it was updated in is ranked without joining them, bit for bit.

``RowBatches`` reads blocks of rows (a view of one batch, or a copy across a batch edge), rows by
index, and the cosine's unit rows (each row divided by its norm as it is read). Here each is held
to the joined tensor's rows and to ``_unit_rows`` of it, bit for bit; the ranking of a gallery in
batches to the ranking of the joined gallery (every table field, block edges falling inside and
across batches, every similarity, with the label order that gathers the gallery, very short and
zero rows, on the emulated CUDA device); and the metric classes to one batch, with the corpus'
batches never joined and its unit rows never made whole.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reference_path import assert_same_table, problems

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture, to_fake_cuda  # noqa: F401
from retrieval_metrics.functional.ranking import rank_embeddings, row_batches
from retrieval_metrics.functional.ranking.embeddings import embedding_relevance, ranked_table
from retrieval_metrics.functional.ranking.engine.similarity import (
    _unit_rows,
    gallery_in_blocks,
    stands,
)
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.reference import ReferenceEngine
from retrieval_metrics.functional.ranking.row_batches import MappedRows, RowBatches
from retrieval_metrics.functional.ranking.row_norms import reciprocal_norms, unit_divisor
from retrieval_metrics.functional.ranking.settings import RankingSettings


def cut(x: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """``x`` in batches of ``sizes`` (the last takes the rest; empty batches allowed)."""
    out, at = [], 0
    for n in sizes:
        out.append(x[at : at + n].clone())
        at += n
    out.append(x[at:].clone())
    return out


@st.composite
def batched(draw: Any) -> tuple[torch.Tensor, list[int]]:
    n = draw(st.integers(1, 300))
    dim = draw(st.integers(1, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = torch.tensor(rng.normal(size=(n, dim)).astype(np.float32))
    if draw(st.booleans()):  # zero rows and rows too short for their squares
        x[rng.random(n) < 0.2] = 0.0
        x[rng.random(n) < 0.1] *= 1e-30
    sizes = draw(st.lists(st.integers(0, 120), max_size=6))
    return x, sizes


@settings(max_examples=60, deadline=None)
@given(batched(), st.data())
def test_rows_and_unit_rows_equal_the_joined_tensors(case, data):
    x, sizes = case
    # (consecutive batches are picked from together up to GROUP_ROWS rows: runs of every size)
    group_rows = data.draw(st.integers(1, 300))
    with mock.patch.object(row_batches, "GROUP_ROWS", group_rows):
        _rows_equal_the_joined_tensors(x, sizes, data)


def _rows_equal_the_joined_tensors(x, sizes, data):
    m = RowBatches(cut(x, sizes))
    n = x.shape[0]
    assert m.shape == x.shape and len(m) == n
    assert torch.equal(m.joined(), x)
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    out = torch.full((stop - start + 3, x.shape[1]), float("nan"))
    for copy in (False, True):
        assert torch.equal(m.rows(start, stop, out, copy=copy), x[start:stop])
    index = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), max_size=40)),
                         dtype=torch.int64)
    assert torch.equal(m.index_select(0, index), x[index])
    mask = torch.rand(n) < 0.5
    assert torch.equal(m[mask], x[mask]) and torch.equal(m[1::3], x[1::3])
    # read divided by the norms: _unit_rows of the joined rows wherever no row is too short
    norm = m.row_norms()
    assert torch.equal(norm, torch.linalg.vector_norm(x, dim=1, keepdim=True))
    unit = m.divided(torch.where(norm > 0, norm, torch.ones_like(norm)))
    expected = _unit_rows(x)
    fine = ~((norm[:, 0] < 2.0**-60) & (x != 0).any(1))
    assert torch.equal(unit.rows(start, stop, out)[fine[start:stop]],
                       expected[start:stop][fine[start:stop]])
    assert torch.equal(unit.index_select(0, index)[fine[index]], expected[index][fine[index]])


@settings(max_examples=60, deadline=None)
@given(batched(), st.sampled_from(["float32", "float16", "bfloat16"]), st.booleans(), st.data())
def test_norms_as_read_are_the_norms_and_unit_rows_of_a_pass_of_their_own(
    case, stored, unit, data
):
    """The first ranking's read (norms_as_read: each row's norm computed as a block holding it is
    read): the blocks, in any order and any number of times, and rows by index equal those of
    ``divided(row_norms())`` (``unit``) or of the rows as they are, bit for bit; once finished
    (the blocks not read, read for their norms alone) the norms are row_norms', kept for the
    rows it was made from."""
    x, sizes = case
    x = x.to(getattr(torch, stored))
    fresh = RowBatches(cut(x, sizes))
    norms = fresh.row_norms()
    expected = fresh.divided(unit_divisor(norms)) if unit else fresh
    held = RowBatches(cut(x, sizes))
    m = held.norms_as_read(unit)
    n, dim = x.shape
    block = data.draw(st.integers(1, n))
    got, want = torch.full((block, dim), float("nan")), torch.empty(block, dim)
    for b in data.draw(st.lists(st.integers(0, (n - 1) // block), max_size=6)):
        start, stop = b * block, min(n, (b + 1) * block)
        assert torch.equal(m.rows(start, stop, got), expected.rows(start, stop, want, copy=True))
    index = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), max_size=40)),
                         dtype=torch.int64)
    assert torch.equal(m.index_select(0, index), expected.index_select(0, index))
    assert not held.knows_norms()
    assert torch.equal(m.finish_norms()[0], norms)
    assert held.knows_norms() and torch.equal(held.row_norms(), norms)


def test_rows_of_no_finite_norm_are_read_as_zeros_until_the_check():
    """A row with a NaN, or whose squares overflow, is read as zeros as the norms are computed
    (no NaN score reaches the ranking); finished, a NaN is refused by the name the check was
    put off under, and finite values whose squares overflow ask for the ranking to be made
    again, with the rows read as they are."""
    x = torch.ones(6, 3)
    x[2, 1], x[4] = float("nan"), 1e30
    view = RowBatches([x]).check_when_read("corpus").norms_as_read(unit=False)
    got = view.rows(0, 6, torch.empty(6, 3), copy=True)
    fine = [0, 1, 3, 5]
    assert torch.equal(got[fine], x[fine]) and not got[[2, 4]].any()
    with pytest.raises(ValueError, match="`corpus` contains NaN or infinite values"):
        view.finish_norms()
    x[2, 1] = 1.0
    held = RowBatches([x]).check_when_read("corpus")
    view = gallery_in_blocks(held, "dot", torch.float32)
    assert view is not None and view.reads_norms
    assert not view.rows(4, 5, torch.empty(1, 3), copy=True).any()
    assert not stands(view) and held.checked
    again = gallery_in_blocks(held, "dot", torch.float32)
    assert again is held and torch.equal(again.rows(4, 5, torch.empty(1, 3), copy=True), x[4:5])


def test_rows_read_again_take_the_norms_kept(monkeypatch):
    """A block read again (by a later block of queries) is divided by the norms its first read
    kept: no norm computed twice, the same rows."""
    from retrieval_metrics.functional.ranking import row_norms

    calls = []
    real = row_norms.row_norms_of
    monkeypatch.setattr(row_norms, "row_norms_of", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(30, 4).half()
    view = RowBatches(cut(x, [12])).norms_as_read(unit=True)
    first = view.rows(0, 20, torch.empty(20, 4), copy=True).clone()
    computed = len(calls)
    assert computed == 1  # (one per block, however many batches it spans)
    assert torch.equal(view.rows(0, 20, torch.empty(20, 4), copy=True), first)
    assert len(calls) == computed


@pytest.mark.parametrize("tiny", [False, True])
def test_half_rows_read_with_their_factors_and_checked_after_the_pass(tiny):
    """bfloat16 rows held on the host, read as stored with their norms and cosine's factors
    computed as they are read (what the tensor cores' pass reads of a corpus on disk, there
    sent to the device): the rows as held, the factors reciprocal_norms of row_norms', bit for
    bit. Finished, a row below NORM_BOUNDS (its products would underflow) makes half_stands ask
    for another ranking, which takes the float32 path; else the pass stands, a zero row said
    by name."""
    from retrieval_metrics.functional.ranking.engine.tensor_cores import half_stands

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 8, generator=gen).to(torch.bfloat16)
    x[9] = 0.0
    if tiny:
        x[7] *= 2.0**-40  # (a norm below NORM_BOUNDS' 2**-30)
    held = RowBatches(cut(x, [15, 10])).check_when_read("gallery")
    view = held.stored().norms_as_read(unit=False, factors=True)
    out = torch.empty(16, 8, dtype=torch.bfloat16)
    for start in range(0, 40, 16):
        assert torch.equal(view.rows(start, min(40, start + 16), out), x[start : start + 16])
    assert torch.equal(view.index_select(0, torch.tensor([7, 9, 3])), x[[7, 9, 3]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stands = half_stands(view, "cosine")
    assert stands is not tiny and held.checked
    assert any("1 gallery embedding is a zero vector" in str(w.message) for w in caught) is (
        not tiny
    )
    norms = RowBatches(cut(x, [15, 10])).row_norms().view(-1)
    assert torch.equal(view.factors_as_read, reciprocal_norms(norms))


def test_norms_are_computed_as_read_from_rows_held_on_the_host_only(fake_cuda):
    """Batches in a device's memory keep their norms' pass: a device's reduction may give a row
    another last bit in a block than among rows picked by index."""
    held = RowBatches([torch.randn(6, 3).cuda()])
    assert not held.held_on_host
    with pytest.raises(ValueError, match="held on the host only"):
        held.norms_as_read(unit=True)


def ranked(query, gallery, keys, settings_):
    inputs = embedding_relevance(query, gallery, keys[0], keys[1], settings_)
    return ranked_table(inputs, settings_)


@settings(max_examples=40, deadline=None)
@given(problems(), st.lists(st.integers(0, 90), max_size=5), st.booleans(), st.booleans())
def test_a_gallery_in_batches_ranks_as_the_joined_gallery(args, sizes, by_label, short_rows):
    """Every table field equal, whether the engine reads the batches a block at a time (cosine,
    dot; every item kept in the order held) or gathers them (labels order the gallery,
    euclidean scores, very short rows)."""
    if args["gallery"] is None:  # a separate gallery: the form a corpus comes in
        args = {**args, "gallery": args["query"].flip(0).contiguous(),
                "gallery_labels": args["query_labels"].flip(0)}
        args.pop("gallery_ids", None), args.pop("query_ids", None)
    gallery = args["gallery"].clone()
    if short_rows:
        gallery[::7] *= 1e-30
    options = RankingSettings(similarity=args["similarity"], block_size=args["block_size"])
    keys = (
        Keys(labels=args["query_labels"] if by_label else None, ids=args.get("query_ids")),
        Keys(labels=args["gallery_labels"] if by_label else None, ids=args.get("gallery_ids")),
    )
    if not by_label:  # relevance by ids: each query's relevant items, no order key
        n_g = gallery.shape[0]
        options = RankingSettings(
            similarity=args["similarity"], block_size=args["block_size"], relevance="ids",
            ignore_identical_ids=False,
        )
        rng = np.random.default_rng(len(sizes) + n_g)
        judged = [list(rng.integers(0, n_g, rng.integers(0, 4))) for _ in args["query"]]
        keys = (Keys(), Keys(ids=torch.arange(n_g)))
        whole = embedding_relevance(args["query"], gallery, keys[0], keys[1], options, judged)
        parts = embedding_relevance(
            args["query"], RowBatches(cut(gallery, sizes)), keys[0], keys[1], options, judged
        )
        assert_same_table(ranked_table(parts, options), ranked_table(whole, options))
        return
    whole = ranked(args["query"], gallery, keys, options)
    parts = ranked(args["query"], RowBatches(cut(gallery, sizes)), keys, options)
    assert_same_table(parts, whole)


def test_blocks_are_read_from_the_batches_not_a_joined_copy():
    """Cosine and dot over batches never join them, labelled or not; euclidean (an extra
    column) does, and gives the same table."""
    g = torch.randn(500, 6)
    q = torch.randn(40, 6)
    batches = cut(g, [130, 0, 200, 64])
    for similarity in ("cosine", "dot"):
        expected = rank_embeddings(q, g, query_labels=torch.arange(40) % 5,
                                   gallery_labels=torch.arange(500) % 5,
                                   similarity=similarity, block_size=(16, 128))
        with mock.patch.object(RowBatches, "joined", side_effect=AssertionError("joined")):
            options = RankingSettings(similarity=similarity, block_size=(16, 128),
                                      relevance="ids", ignore_identical_ids=False)
            judged = [[i, i + 100, i + 333] for i in range(40)]
            keys = (Keys(), Keys(ids=torch.arange(500)))
            parts = embedding_relevance(q, RowBatches(batches), *keys, options, judged)
            whole = embedding_relevance(q, g, *keys, options, judged)
            assert_same_table(ranked_table(parts, options), ranked_table(whole, options))
        parts = ranked(q, RowBatches(batches),
                       (Keys(labels=torch.arange(40) % 5), Keys(labels=torch.arange(500) % 5)),
                       RankingSettings(similarity=similarity, block_size=(16, 128)))
        assert_same_table(parts, expected)


def _qrels_case(n_docs: int = 700, n_q: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    docs = torch.randn(n_docs, 8, generator=g)
    docs[100:140] = docs[100]  # a run of identical documents: ties
    queries = torch.randn(n_q, 8, generator=g)
    queries[::3] = docs[100] + 0.01 * queries[::3]
    qrels = {f"q{i}": {f"d{(7 * i) % n_docs}": 2, f"d{100 + i}": 1, "missing": 1}
             for i in range(n_q)}
    return docs, queries, qrels


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_the_metric_ranks_its_corpus_batches_as_one_batch(similarity):
    docs, queries, qrels = _qrels_case()
    names = ["ndcg@10", "recall@100", "map@100", "mrr@10", "precision@5"]

    def scored(sizes):
        m = rm.RetrievalMetrics(names, qrels=qrels, similarity=similarity)
        for part, ids in zip(cut(docs, sizes), cut(torch.arange(len(docs)), sizes), strict=True):
            m.update(part, ids=[f"d{i}" for i in ids.tolist()], role="gallery")
        m.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
        return m, m.compute()

    _, one = scored([])
    m, several = scored([64, 100, 0, 300, 17])
    assert {k: float(v) for k, v in several.items()} == {k: float(v) for k, v in one.items()}
    # the states still hold the batches as updated (the empty one too): nothing joined them
    assert len(m.g_emb) == 6 and all(isinstance(b, torch.Tensor) for b in m.g_emb)
    assert m.compute().keys() == one.keys()


def test_the_metric_does_not_join_a_cosine_corpus():
    docs, queries, qrels = _qrels_case()
    m = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels)
    for part in range(0, len(docs), 128):
        m.update(docs[part : part + 128],
                 ids=[f"d{i}" for i in range(part, min(part + 128, len(docs)))], role="gallery")
    m.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
    with mock.patch.object(RowBatches, "joined", side_effect=AssertionError("joined")), \
            mock.patch("torch.cat", side_effect=_no_large_cat(docs.numel())):
        value = m.compute()["ndcg@10"]
    expected = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels)
    expected.update(docs, ids=[f"d{i}" for i in range(len(docs))], role="gallery")
    expected.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
    assert float(value) == float(expected.compute()["ndcg@10"])


@pytest.mark.parametrize("batches", [1, 3])
def test_the_metric_never_normalises_a_copy_of_its_corpus(batches):
    """One batch or several: the corpus' unit rows are read block by block, never made whole."""
    from retrieval_metrics.functional.ranking.engine import similarity

    docs, queries, qrels = _qrels_case()
    m = rm.RetrievalMetrics(["ndcg@10", "map@100"], qrels=qrels)
    for part in torch.tensor_split(torch.arange(len(docs)), batches):
        m.update(docs[part], ids=[f"d{i}" for i in part.tolist()], role="gallery")
    m.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
    real = similarity._unit_rows

    def small_only(x, *args, **kwargs):
        assert x.shape[0] < len(docs), "the corpus was normalised whole"
        return real(x, *args, **kwargs)

    with mock.patch.object(similarity, "_unit_rows", small_only):
        got = {k: float(v) for k, v in m.compute().items()}
    expected = rm.RetrievalMetrics(["ndcg@10", "map@100"], qrels=qrels)
    expected.set_gallery(docs, ids=[f"d{i}" for i in range(len(docs))])
    expected.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
    assert got == {k: float(v) for k, v in expected.compute().items()}


def test_a_fixed_gallery_is_never_normalised_whole():
    """set_gallery's corpus: compute() ranks the query updates against it from its one batch,
    read a block at a time (never gathered and normalised whole, ``prepare``'s path), with the
    values of the query/gallery form."""
    from retrieval_metrics.functional.ranking.engine import similarity

    docs, queries, qrels = _qrels_case(seed=2)
    doc_ids = [f"d{i}" for i in range(len(docs))]
    fixed = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels)
    fixed.set_gallery(docs, ids=doc_ids)
    real = similarity._unit_rows

    def small_only(x, *args, **kwargs):
        assert x.shape[0] < len(docs), "the corpus was normalised whole"
        return real(x, *args, **kwargs)

    with mock.patch.object(similarity, "_unit_rows", small_only):
        for q0 in range(0, len(queries), 7):
            q1 = min(q0 + 7, len(queries))
            fixed.update(queries[q0:q1], ids=[f"q{i}" for i in range(q0, q1)], role="query")
        got = {k: float(v) for k, v in fixed.compute().items()}  # (the ranking: here)
    batched = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels)
    batched.update(docs, ids=doc_ids, role="gallery")
    batched.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
    assert got == {k: float(v) for k, v in batched.compute().items()}


def _no_large_cat(corpus_numel: int):
    real = torch.cat

    def cat(tensors, *args, **kwargs):
        out = real(tensors, *args, **kwargs)
        # (a block's rows read into the ranking's block buffer, ``out=``, allocate nothing:
        # here one block holds the whole corpus)
        assert "out" in kwargs or out.numel() < corpus_numel, "the corpus was joined"
        return out

    return cat


def test_batches_on_the_emulated_device(fake_cuda):
    docs, queries, qrels = _qrels_case(seed=1)
    names = ["ndcg@10", "recall@100", "map@100"]
    cpu = rm.RetrievalMetrics(names, qrels=qrels)
    cpu.update(docs, ids=[f"d{i}" for i in range(len(docs))], role="gallery")
    cpu.update(queries, ids=[f"q{i}" for i in range(len(queries))], role="query")
    device = rm.RetrievalMetrics(names, qrels=qrels).to("cuda")
    for part in range(0, len(docs), 150):
        chunk = to_fake_cuda(docs[part : part + 150])
        device.update(chunk, ids=[f"d{i}" for i in range(part, part + chunk.shape[0])],
                      role="gallery")
    device.update(to_fake_cuda(queries), ids=[f"q{i}" for i in range(len(queries))],
                  role="query")
    got = device.compute()
    assert all(v.device.type == "cuda" for v in got.values())
    assert {k: float(v) for k, v in got.items()} == {
        k: float(v) for k, v in cpu.compute().items()
    }


@pytest.mark.parametrize("source", ["float16", "bfloat16", "float16_on_disk"])
def test_half_and_mapped_batches_read_as_their_float32_values(source, tmp_path):
    """Half batches (in memory, or a memory-mapped .npy whose pages go back once read) read as
    the float32 values of the stored numbers: rows, rows by index, norms and unit rows, across
    batch edges; read again after the pages went back, the same numbers."""
    emb = torch.from_numpy(np.random.default_rng(1).standard_normal((5000, 16)))
    stored = torch.float16 if source == "float16_on_disk" else getattr(torch, source)
    held = emb.to(stored)
    upcast = held.float()  # the stored numbers' float32 values
    if source == "float16_on_disk":
        np.save(tmp_path / "c.npy", held.numpy())
        mapped = np.load(tmp_path / "c.npy", mmap_mode="r")
        rows = RowBatches([MappedRows(mapped[:1234]), MappedRows(mapped[1234:])])
    else:
        rows = RowBatches([held[:1234], held[1234:]])
    assert rows.dtype == torch.float32 and rows.stored_dtype == stored and rows.all_finite()
    for _ in range(2):
        assert torch.equal(rows.joined(), upcast)
        assert torch.equal(rows.rows(1200, 1300, torch.empty(100, 16)), upcast[1200:1300])
        assert torch.equal(rows.rows(0, 10, torch.empty(10, 16)), upcast[:10])
        index = torch.tensor([4999, 0, 1234, 1233, 1233])
        assert torch.equal(rows.index_select(0, index), upcast[index])
    norms = torch.linalg.vector_norm(upcast, dim=1, keepdim=True)
    assert torch.equal(rows.row_norms(), norms)
    unit = rows.divided(norms)
    assert torch.equal(unit.rows(10, 2000, torch.empty(1990, 16)), upcast[10:2000] / norms[10:2000])


def _mapped_kib(path) -> int:
    """KiB of ``path``'s pages mapped into this process (/proc/self/smaps: its mappings' Rss)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # (a mapping's first line)
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")
def test_a_file_read_in_order_leaves_none_of_its_pages_mapped(tmp_path, monkeypatch):
    """Read in order through the mapping (the norms, blocks of rows), a file's chunks hand their
    pages back, also the pages a fault maps around the next chunk's first row (the kernel's
    fault-around, a large folio), which would pile up, chunk after chunk, over a whole corpus."""
    from retrieval_metrics.functional.ranking import mapped_rows

    # (chunks of 64 KiB, each handed back by itself: many chunk edges to leave pages at)
    monkeypatch.setattr(mapped_rows, "READ_BYTES", 1 << 16)
    monkeypatch.setattr(mapped_rows, "RELEASE_BYTES", 1 << 16)
    data = np.random.default_rng(0).standard_normal((32 * 1024, 512)).astype(np.float16)
    np.save(tmp_path / "c.npy", data)  # 32 MiB
    del data
    rows = RowBatches([MappedRows(np.load(tmp_path / "c.npy", mmap_mode="r"))])
    rows.row_norms()
    block = torch.empty(3000, 512)
    for start in range(0, len(rows), 3000):
        rows.rows(start, min(len(rows), start + 3000), block)
    held = _mapped_kib(tmp_path / "c.npy")
    # (read to its end: no page lies beyond the last row read; without the pages before each
    # chunk handed back, 1.7 MiB stayed mapped here)
    assert held == 0, f"{held} KiB of the 32 MiB file still mapped"


class _NoAdvice:
    """A memory map where ``mmap.madvise`` does not exist (Windows): its length only."""

    def __init__(self, mapping) -> None:
        self.length = len(mapping)

    def __len__(self) -> int:
        return self.length


@pytest.fixture
def no_advice(monkeypatch):
    """This system as one whose memory maps take no advice and whose ``os`` has no ``preadv``
    (Windows): every MappedRows made with a map that has no ``madvise`` at all."""
    from retrieval_metrics.functional.ranking import mapped_rows

    monkeypatch.setattr(mapped_rows, "_ADVISES", False, raising=False)
    monkeypatch.setattr(mapped_rows, "_PREADV", False, raising=False)
    monkeypatch.setattr(mapped_rows, "_populates", False)
    monkeypatch.delattr(mapped_rows.os, "preadv")
    made = MappedRows.__init__

    def init(self, array) -> None:
        made(self, array)
        self._mapping = _NoAdvice(self._mapping)

    monkeypatch.setattr(MappedRows, "__init__", init)


@pytest.mark.filterwarnings("ignore:similarity=.cosine.. 3 gallery embeddings are zero")
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_corpus_on_disk_ranks_alike_where_maps_take_no_advice(tmp_path, dtype, no_advice):
    """Where a memory map takes no advice and ``os`` has no ``preadv`` (Windows), a corpus on
    disk is ranked from the file itself (its rows in order read a chunk at a time into a
    buffer, its judged rows by seek and read): every value and every query's ranks as here,
    the run's lists too. (Before, ``madvise`` and ``preadv`` were called all the same: an
    AttributeError.)"""
    rng = np.random.default_rng(7)
    corpus = rng.standard_normal((5000, 48)).astype(dtype)
    corpus[100:110] = corpus[0]  # duplicates: exact ties
    corpus[300:303] = 0.0
    np.save(tmp_path / "c.npy", corpus)
    ids = [f"d{i}" for i in range(5000)]
    queries = torch.from_numpy(corpus[rng.choice(5000, 120)].astype(np.float32) + 0.2)
    q_ids = [f"q{i}" for i in range(120)]
    qrels = {q: {f"d{j}": 1 for j in rng.choice(5000, 3)} for q in q_ids}

    def ranked() -> tuple[dict, dict, dict]:
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100", "mrr", "map"], qrels=qrels,
                                     protocol="beir", memory_budget=1 << 21)
        metric.set_gallery(str(tmp_path / "c.npy"), ids=ids)
        metric.update(queries, ids=q_ids, role="query")
        return metric.compute(), metric.per_query(), metric.run(20, ids=q_ids + ids)

    # (a copy made before the fixture's MappedRows would be this system's)
    no_advice_values, no_advice_per_query, no_advice_run = ranked()
    expected = rm.RetrievalMetrics(["ndcg@10", "recall@100", "mrr", "map"], qrels=qrels,
                                   protocol="beir", memory_budget=1 << 21)
    expected.update(torch.from_numpy(corpus.astype(np.float32)), ids=ids, role="gallery")
    expected.update(queries, ids=q_ids, role="query")
    assert no_advice_values.keys() == expected.compute().keys()
    assert all(torch.equal(no_advice_values[k], expected.compute()[k]) for k in no_advice_values)
    assert all(
        torch.equal(no_advice_per_query[k], expected.per_query()[k]) for k in no_advice_per_query
    )
    assert no_advice_run == expected.run(20, ids=q_ids + ids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")
def test_a_file_read_where_maps_take_no_advice_maps_none_of_its_pages(tmp_path, no_advice):
    """Where pages cannot be handed back (no ``madvise``), the rows in order are read from the
    file into one buffer a chunk at a time: none of the file's pages is mapped, whatever was
    read, and the values are those of the file."""
    from retrieval_metrics.functional.ranking import mapped_rows

    data = np.random.default_rng(1).standard_normal((20_000, 256)).astype(np.float16)
    np.save(tmp_path / "c.npy", data)  # 9.8 MiB
    rows = RowBatches([MappedRows(np.load(tmp_path / "c.npy", mmap_mode="r"))])
    norms = rows.row_norms()
    block = torch.empty(7000, 256)
    for start in range(0, len(rows), 7000):
        got = rows.rows(start, min(len(rows), start + 7000), block, copy=True)
        assert torch.equal(got, torch.from_numpy(data[start : start + 7000]).float())
    assert torch.equal(norms[:, 0], torch.linalg.vector_norm(torch.from_numpy(data).float(), 2, 1))
    picked = torch.tensor([19_999, 3, 3, 12_000])
    expected = torch.from_numpy(data[picked.numpy()]).float()
    assert torch.equal(rows.index_select(0, picked), expected)
    assert _mapped_kib(tmp_path / "c.npy") == 0
    chunk = mapped_rows.READ_BYTES // (256 * 2)
    assert len(list(rows.mapped[0].chunks(0, 20_000))) == -(-20_000 // chunk)


def test_a_file_read_in_order_asks_for_its_next_rows_ahead(tmp_path):
    """Each read of rows in order (a block of the ranking) asks the system to read as many of
    the following rows into the page cache in the background (``MADV_WILLNEED``), so that a
    corpus larger than the page cache comes from the disk while a block's product runs; the
    last block asks for nothing past the file."""
    import mmap

    np.save(tmp_path / "c.npy", np.zeros((1000, 64), dtype=np.float16))
    mapped = MappedRows(np.load(tmp_path / "c.npy", mmap_mode="r"))
    real = mapped._mapping

    class Recording:
        def __init__(self) -> None:
            self.asked: list[tuple[int, int]] = []

        def __len__(self) -> int:
            return len(real)

        def madvise(self, option: int, start: int, length: int) -> None:
            if option == mmap.MADV_WILLNEED:
                self.asked.append((start, start + length))
            real.madvise(option, start, length)

    recording = Recording()
    mapped._mapping = recording
    first_row = mapped._start  # (the header's bytes before row 0)
    list(mapped.chunks(100, 300))
    (start, end), = recording.asked
    assert start <= first_row + 300 * 128 < end  # rows 300:500, from the page holding row 300
    assert end == first_row + 500 * 128
    recording.asked.clear()
    list(mapped.chunks(800, 1000))
    assert recording.asked == []


def test_rows_read_ahead_are_asked_for_in_pieces_linux_reads_whole(tmp_path):
    """Linux reads at most its read-ahead window of one ``MADV_WILLNEED`` advice (128 KiB by
    default) and drops the rest: the rows after a block are asked for in pieces of
    ``READ_AHEAD_PIECE``, one after another, together every byte that holds them (in one advice,
    a block of 3 MiB had its first 128 KiB read ahead)."""
    import mmap

    from retrieval_metrics.functional.ranking.mapped_rows import READ_AHEAD_PIECE

    width = 64  # (float16: 128 bytes a row)
    rows = 8 * READ_AHEAD_PIECE // (2 * width)
    np.save(tmp_path / "c.npy", np.zeros((rows, width), dtype=np.float16))
    mapped = MappedRows(np.load(tmp_path / "c.npy", mmap_mode="r"))
    real = mapped._mapping
    asked: list[tuple[int, int]] = []

    class Recording:
        def __len__(self) -> int:
            return len(real)

        def madvise(self, option: int, start: int, length: int) -> None:
            if option == mmap.MADV_WILLNEED:
                asked.append((start, start + length))
            real.madvise(option, start, length)

    mapped._mapping = Recording()
    block = rows // 3 + 7  # (the next block's rows start and end inside pages)
    list(mapped.chunks(5, 5 + block))
    first_row = mapped._start + (5 + block) * 128
    assert asked[0][0] == first_row // mmap.PAGESIZE * mmap.PAGESIZE
    assert asked[-1][1] == mapped._start + (5 + 2 * block) * 128
    assert all(end - start <= READ_AHEAD_PIECE for start, end in asked)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(asked))  # (no gap, no overlap)
    assert len(asked) == -(-(asked[-1][1] - asked[0][0]) // READ_AHEAD_PIECE) > 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_a_labelled_gallery_in_batches_is_read_as_held_not_gathered_into_label_order(
    dtype, similarity
):
    """Labels in any order: the ranking reads the gallery's batches as they are held. Ordered
    by label it gathered a copy of the whole gallery (float32: twice the states of half
    precision, beyond the memory bound). The values are the reference engine's."""
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(900, 8, generator=gen).to(dtype)
    labels = torch.randint(0, 150, (900,), generator=gen)
    q = torch.randn(60, 8, generator=gen).to(dtype)
    names = ["hit_rate@1", "recall@10", "map@r", "mrr"]

    def metric(**kwargs):
        m = rm.RetrievalMetrics(names, similarity=similarity, memory_budget=2**20, **kwargs)
        m.update(q, labels[:60], role="query")
        for part in torch.tensor_split(torch.arange(900), 7):
            m.update(g[part], labels[part], role="gallery")
        return m

    real = RowBatches.index_select

    def gathered(self, dim, index):
        assert index.numel() < 450, "the gallery was gathered whole"
        return real(self, dim, index)

    ours = metric()
    with mock.patch.object(RowBatches, "joined", side_effect=AssertionError("joined")), \
            mock.patch.object(RowBatches, "index_select", gathered):
        values = ours.compute()
    expected = metric(engine=ReferenceEngine()).compute()
    for name in names:
        assert float(values[name]) == pytest.approx(float(expected[name]), abs=1e-6), name
