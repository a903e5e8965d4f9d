"""The block counting of the ranking against a count by comparison, on tie-heavy data."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.engine import kernels
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
    st.sampled_from([np.float32, np.float64]),
    st.integers(0, 2**31 - 1),
)
def test_block_counts_every_item(rows, n, m, distinct, collapsed, dtype, seed):
    """The merge of sorted rows, the whole-block count (with its shortcut for rows whose items
    all lie outside the relevant scores) and the compiled count against a count by comparison."""
    rng = np.random.default_rng(seed)
    # few distinct values: ties between items, between relevant scores, and across the two
    values = rng.integers(0, distinct, (rows, n)).astype(dtype)
    # an excluded pair's -inf, and -0.0 (which ties 0.0)
    values[rng.random((rows, n)) < 0.1] = -np.inf
    values[values == 0] = rng.choice([0.0, -0.0], int((values == 0).sum()))
    if collapsed:  # collapsed embeddings: every relevant score of a row equal
        rel = np.repeat(rng.integers(0, distinct, (rows, 1)), m, axis=1).astype(dtype)
    else:
        rel = np.sort(rng.integers(0, distinct, (rows, m)).astype(dtype), axis=1)
    rel[:, m - rng.integers(0, m) :] = np.inf  # rows padded with +inf, as the ranking pads them
    lt, le = _brute(values, rel)
    merged = torch.zeros(2, rows, m + 1, dtype=torch.int64)
    _merge_rows(torch.from_numpy(values), torch.from_numpy(rel), merged[0], merged[1])
    counted = [merged.view(2, rows, m + 1)]
    for compiled in (True, False):
        whole = torch.zeros(2, rows * (m + 1), dtype=torch.int64)
        with _compiled_count(compiled):
            count_block(torch.from_numpy(values), torch.from_numpy(rel), whole[0], whole[1], 2**16)
        counted.append(whole.view(2, rows, m + 1))
    if kernels._count is not None:
        direct = torch.zeros(2, rows, m + 1, dtype=torch.int64)
        finite = np.isfinite(rel).sum(1, keepdims=True).astype(np.int64)
        kernels._count.count_rows(values, rel, finite, direct[0].numpy(), direct[1].numpy())
        counted.append(direct)
    for got in counted:
        np.testing.assert_array_equal(got[0].numpy(), lt)
        np.testing.assert_array_equal(got[1].numpy(), le)
    if kernels._count is not None:
        # relevant scores passed over (those a ranking's depth left behind): the bins after
        # them, and each row's total, stay exact
        first = rng.integers(0, m + 1, (rows, 1)).astype(np.int64)
        partial = torch.zeros(2, rows, m + 1, dtype=torch.int64)
        kernels._count.count_rows(
            values, rel, finite, partial[0].numpy(), partial[1].numpy(), first
        )
        for i in range(rows):
            after = min(int(first[i, 0]), int(finite[i, 0])) + 1
            np.testing.assert_array_equal(partial[0, i, after:].numpy(), lt[i, after:])
            np.testing.assert_array_equal(partial[1, i, after:].numpy(), le[i, after:])
            assert int(partial[0, i].sum()) == n


class _compiled_count:
    """Within it, count_block uses the compiled count or not (where it is built)."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __enter__(self) -> None:
        self.saved = kernels._count
        if not self.on:
            kernels._count = None

    def __exit__(self, *exc: object) -> None:
        kernels._count = self.saved


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dot"])
def test_the_ranking_gives_the_same_table_with_and_without_the_compiled_count(metric):
    """A whole ranking (several query and gallery blocks, sparse and dense counts, ties from
    duplicated and collapsed rows) gives the same table bit for bit either way."""
    g = torch.Generator().manual_seed(3)
    gallery = torch.randn(3000, 16, generator=g)
    gallery[:200] = gallery[0]  # collapsed: a large group of identical rows
    gallery[200:400] = torch.sign(gallery[200:400])  # binary codes full of ties
    labels = torch.randint(0, 40, (3000,), generator=g)
    queries, q_labels = gallery[::7] + 0.01 * torch.randn(429, 16, generator=g), labels[::7]
    tables = []
    for compiled in (True, False):
        with _compiled_count(compiled):
            tables.append(
                rank_embeddings(
                    queries,
                    gallery,
                    query_labels=q_labels,
                    gallery_labels=labels,
                    similarity=metric,
                    memory_budget=2**20,
                )
            )
    for name in ("ptr", "above", "tied", "num_relevant", "gallery_size"):
        assert torch.equal(getattr(tables[0], name), getattr(tables[1], name)), name


class _AboveSide:
    """One side of a compiled count above the thresholds, drawn at random: the queries' items
    (``values``, a row per query), relevant scores, start thresholds and, with a depth, heaps."""

    def __init__(self, rng, values, m, depth, among, dtype):
        rows = values.shape[0]
        self.values = values
        rel = np.sort(rng.integers(0, 8, (rows, m)).astype(dtype), axis=1)
        finite = rng.integers(0, m + 1, (rows, 1)).astype(np.int64)
        for i in range(rows):
            if among:  # the relevant scores are some items' own
                scored = np.flatnonzero(np.isfinite(values[i]))
                finite[i, 0] = min(finite[i, 0], scored.size)
                chosen = rng.choice(scored, int(finite[i, 0]), replace=False)
                rel[i, : finite[i, 0]] = np.sort(values[i, chosen])
            rel[i, finite[i, 0] :] = np.inf
        self.rel, self.finite, self.among = rel, finite, among
        best = np.array(
            [rel[i, finite[i, 0] - 1] if finite[i, 0] else -np.inf for i in range(rows)],
            dtype=dtype,
        )
        self.start = np.where(
            rng.random(rows) < 0.5, rel[:, 0], rng.integers(-1, 8, rows)
        ).astype(dtype)
        self.threshold = torch.from_numpy(self.start.copy())
        self.heap = None
        if depth is not None:
            k = rng.integers(1, depth + 1, (rows, 1)).astype(np.int64)
            heap = np.full((rows, depth), -np.inf, dtype=dtype)
            for i in range(rows):
                known = sorted([*rel[i, : finite[i, 0]], *([-np.inf] * depth)], reverse=True)
                for place in range(depth):
                    heap[i, place] = known[max(0, int(k[i, 0]) - 1 - place)]
            cap = np.where(rng.random(rows) < 0.5, best, np.inf).astype(dtype)
            self.heap = (torch.from_numpy(heap), torch.from_numpy(k), torch.from_numpy(cap))
        self.hist = torch.zeros(2, rows * (m + 1), dtype=torch.int64)

    def arrays(self):
        return kernels.above_arrays(
            self.threshold, torch.from_numpy(self.rel), torch.from_numpy(self.finite),
            self.hist[0], self.hist[1], self.heap,
        )

    def check(self):
        """What the ranking reads is a count by comparison's; the thresholds never fall nor
        pass their caps, and stay lower bounds of the depth-th best score."""
        values, rel, finite = self.values, self.rel, self.finite
        rows, m = rel.shape
        final = self.threshold.numpy()
        assert (final >= self.start).all()
        lt = self.hist[0].view(rows, m + 1)
        le = (self.hist[1] + self.hist[0]).view(rows, m + 1)
        above = lt.sum(1, keepdim=True) - lt.cumsum(1)[:, :-1]
        tied = le.sum(1, keepdim=True) - le.cumsum(1)[:, :-1] - above
        for i in range(rows):
            if self.heap is not None:
                assert final[i] <= max(self.start[i], self.heap[2][i].item())
                # every score the heap could hold: the row's relevant scores and its items
                held = [values[i]] if self.among else [rel[i, : finite[i, 0]], values[i]]
                known = np.sort(np.concatenate(held))[::-1]
                k = int(self.heap[1][i, 0])
                kth = known[k - 1] if known.size >= k else -np.inf
                assert final[i] <= max(self.start[i], kth)
            else:
                assert final[i] == self.start[i]
            for j in range(int(finite[i, 0])):
                if rel[i, j] >= final[i]:
                    assert int(above[i, j]) == int((values[i] > rel[i, j]).sum()), (i, j)
                    assert int(tied[i, j]) == int((values[i] == rel[i, j]).sum()), (i, j)


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
@settings(max_examples=300, deadline=None)
@given(
    # (more queries than a vector has lanes: the columns counted whole a vector at a time)
    st.one_of(st.integers(1, 6), st.integers(7, 40)),
    st.integers(1, 70),
    st.integers(1, 12),
    st.integers(1, 8),
    st.sampled_from([np.float32, np.float64]),
    st.sampled_from(["rows", "columns", "both"]),
    st.sampled_from([None, 1, 3, 20]),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_count_above_counts_what_the_final_thresholds_list(
    queries, n, m, distinct, dtype, mode, depth, among, seed
):
    """The compiled pass over the items above each row's threshold, by the rows of a block, by
    its columns (read in place), and by both at once (one pass over a block for its two sides):
    for every relevant score at or above a query's final threshold, the items above it and tied
    with it are exactly a count by comparison's (all the ranking reads); a threshold never
    falls, never passes its cap, and with a heap stays a lower bound of the depth-th best of the
    query's relevant scores and items (``among``: the relevant items are among the items, as
    in a ranking, and count once)."""
    rng = np.random.default_rng(seed)
    # (n x width) scores, few distinct values: ties between items, between relevant scores,
    # and across the two; an excluded pair's -inf, and -0.0 (which ties 0.0)
    width = queries + int(rng.integers(0, 3)) if mode != "rows" else queries
    block = rng.integers(0, distinct, (n, width)).astype(dtype)
    block[rng.random(block.shape) < 0.1] = -np.inf
    block[block == 0] = rng.choice([0.0, -0.0], int((block == 0).sum()))
    if mode == "rows":
        rows = _AboveSide(rng, block.T.copy(), m, depth, among, dtype)
        kernels.count_above(torch.from_numpy(block.T.copy()), rows.arrays())
        rows.check()
        return
    cols = _AboveSide(rng, block[:, :queries].T.copy(), m, depth, among, dtype)
    if mode == "columns":
        kernels.count_above(torch.from_numpy(block).T[:queries], cols.arrays())
        cols.check()
        return
    row_queries = int(rng.integers(0, n + 1))
    rows = _AboveSide(rng, block[:row_queries], m, depth, among, dtype)
    kernels.count_above_both(torch.from_numpy(block), cols.arrays(), rows.arrays())
    cols.check()
    rows.check()


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
def test_count_above_by_columns_counts_a_weak_models_block_whole_in_place():
    """Read by columns, a block whose items nearly all pass gives up the search item by item
    early and counts the rest whole, in place; one where none pass is read to its end. Either
    way each column's counts are a count by comparison's (67 columns: vectors of columns and
    a tail; the relevant scores in a group of four and one more)."""
    rng = np.random.default_rng(0)
    block = rng.normal(size=(512, 67)).astype(np.float32)
    rel = np.sort(rng.normal(size=(67, 5)).astype(np.float32), axis=1)
    finite = np.full((67, 1), 5, dtype=np.int64)
    finite[::3] = 3
    rel[::3, 3:] = np.inf
    for start, whole in ((-np.inf, False), (np.inf, True)):
        hist = np.zeros((2, 67, 6), dtype=np.int64)
        threshold = np.full(67, start, dtype=np.float32)
        read = kernels._count.count_above_columns(block, threshold, rel, finite, *hist)
        assert (read == 512) == whole
        if whole:
            continue
        above = hist[0].sum(1, keepdims=True) - hist[0].cumsum(1)[:, :-1]
        for j in range(67):
            for k in range(int(finite[j, 0])):
                assert above[j, k] == (block[:, j] > rel[j, k]).sum()


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
@pytest.mark.parametrize("mode", ["rows", "columns"])
def test_a_query_counted_whole_leaves_its_heap_once_it_reaches_the_cap(mode):
    """A weak model's query (most items above its threshold) is counted whole; once its heap's
    least is at its cap (the best relevant score: the threshold can rise no further), no item
    is pushed into the heap any more, which was most of the cost of such a row. A query whose
    heap is still below its cap keeps feeding it. The counts are exact either way."""
    rng = np.random.default_rng(1)
    items, queries, depth = 2000, 16, 10
    block = rng.normal(size=(items, queries)).astype(np.float32)  # columns: the queries
    rel = np.full((queries, 1), -1.0, dtype=np.float32)  # 84% of the items score above it
    heap = np.sort(rng.uniform(-0.9, -0.5, (queries, depth)).astype(np.float32), axis=1)
    heap[queries // 2 :] = -np.inf  # these still below their cap: fed
    heap[queries // 2 :, -1] = -1.0
    before = heap.copy()
    threshold = rel[:, 0].copy()
    hist = np.zeros((2, queries, 2), dtype=np.int64)
    args = (threshold, rel, np.ones((queries, 1), dtype=np.int64), *hist, heap,
            np.full((queries, 1), depth, dtype=np.int64), rel[:, 0].copy())
    if mode == "rows":
        kernels._count.count_above(np.ascontiguousarray(block.T), *args)
    else:
        assert kernels._count.count_above_columns(block, *args) < items  # (it gave up)
    np.testing.assert_array_equal(heap[: queries // 2], before[: queries // 2])
    assert (heap[queries // 2 :, 0] >= -1.0).all()  # fed until its least reached the cap
    above = hist[0].sum(1) - hist[0][:, 0]
    np.testing.assert_array_equal(above, (block > -1.0).sum(0))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 60),
    st.integers(129, 260),
    st.sampled_from([2, 7, 1000, None, "close"]),
    st.sampled_from([np.float32, np.float64]),
    st.integers(0, 2**31 - 1),
)
def test_rows_of_many_relevant_scores_are_sorted_to_the_same_counts(
    rows, n, m, distinct, dtype, seed
):
    """Rows of more than COMPILED_MAX_RELEVANT relevant scores (classes of thousands) are
    counted by a radix sort of the row in the compiled count: the same histograms as the count
    by comparison, with ties, -inf, -0.0 against 0.0, negative scores, +inf padding and
    relevant scores passed over (``first``)."""
    if kernels._count is None:
        pytest.skip("the compiled count is not built")
    rng = np.random.default_rng(seed)
    if distinct == "close":  # neighbours one unit of the last place apart: the low bytes sort
        ulp = np.finfo(dtype).eps
        values = (1 + rng.integers(0, 3000, (rows, n)) * ulp).astype(dtype)
        rel = np.sort(1 + rng.integers(0, 3000, (rows, m)) * ulp, axis=1).astype(dtype)
    elif distinct is None:  # every value its own: all bytes of the keys differ
        values = rng.standard_normal((rows, n)).astype(dtype)
        rel = np.sort(rng.standard_normal((rows, m)).astype(dtype), axis=1)
        rel[:, : m // 3] = np.sort(rng.choice(values.ravel(), (rows, m // 3)), axis=1)
        rel.sort(axis=1)
    else:
        values = (rng.integers(0, distinct, (rows, n)) - distinct // 2).astype(dtype)
        rel = np.sort(rng.integers(0, distinct, (rows, m)) - distinct // 2, axis=1).astype(dtype)
    values[rng.random((rows, n)) < 0.1] = -np.inf
    values[values == 0] = rng.choice([0.0, -0.0], int((values == 0).sum()))
    finite = rng.integers(COMPILED + 1, m + 1, (rows, 1)).astype(np.int64)
    for i in range(rows):
        rel[i, int(finite[i, 0]) :] = np.inf
    lt, le = _brute(values, rel)
    direct = torch.zeros(2, rows, m + 1, dtype=torch.int64)
    kernels._count.count_rows(values, rel, finite, direct[0].numpy(), direct[1].numpy())
    np.testing.assert_array_equal(direct[0].numpy(), lt)
    np.testing.assert_array_equal(direct[1].numpy(), le)
    whole = torch.zeros(2, rows * (m + 1), dtype=torch.int64)
    count_block(torch.from_numpy(values), torch.from_numpy(rel), whole[0], whole[1], 2**16)
    np.testing.assert_array_equal(whole.view(2, rows, m + 1).numpy(), direct.numpy())
    first = rng.integers(0, m + 1, (rows, 1)).astype(np.int64)
    partial = torch.zeros(2, rows, m + 1, dtype=torch.int64)
    kernels._count.count_rows(values, rel, finite, partial[0].numpy(), partial[1].numpy(), first)
    for i in range(rows):
        after = min(int(first[i, 0]), int(finite[i, 0])) + 1
        np.testing.assert_array_equal(partial[0, i, after:].numpy(), lt[i, after:])
        np.testing.assert_array_equal(partial[1, i, after:].numpy(), le[i, after:])
        assert int(partial[0, i].sum()) == n


COMPILED = kernels.COMPILED_MAX_RELEVANT


def _shares_rows(module) -> bool:
    """Whether ``module`` shares a pass's rows out: on Linux (torch's OpenMP runtime loaded
    globally) it must, or the tests of the threaded passes would test one thread only."""
    shares = module is not None and module.shares_rows()
    if sys.platform.startswith("linux"):
        assert shares, "torch's OpenMP pool was not found: the passes run on one thread"
    return shares


def split_rows(module, row_length: int, extra: int) -> int:
    """Rows enough for two takes of a thread and ``extra`` more (a thread takes ROW_GRAIN rows
    at a time, more where rows are short: TAKE_VALUES values at least)."""
    grain = max(module.ROW_GRAIN, module.TAKE_VALUES // max(row_length, 1))
    return 2 * grain + extra


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(64, 300),
    extra=st.integers(0, 100),
    m=st.integers(1, 8),
    depth=st.sampled_from([None, 1, 5]),
    threads=st.integers(2, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_count_above_shared_over_threads_counts_as_one_thread(
    n, extra, m, depth, threads, dtype, seed
):
    """The rows of a block's count above the thresholds shared out over several of torch's
    threads (rows counted whole, searched item by item, and feeding heaps side by side) give
    one thread's histograms, thresholds and heaps, bit for bit, and what the ranking reads is a
    count by comparison's."""
    if not _shares_rows(kernels._count):
        pytest.skip("this platform's passes run on one thread")
    rows = split_rows(kernels._count, n, extra)
    values = np.random.default_rng(seed).integers(0, 4, (rows, n)).astype(dtype)
    values[np.random.default_rng(seed + 1).random(values.shape) < 0.1] = -np.inf
    outcomes = []
    for team in (1, threads):
        side = _AboveSide(np.random.default_rng(seed), values, m, depth, True, dtype)
        kernels._count.count_above(values, *side.arrays(), threads=team)
        side.check()
        heap = () if side.heap is None else (side.heap[0],)
        outcomes.append((side.hist, side.threshold, *heap))
    for one, shared in zip(*outcomes, strict=True):
        assert torch.equal(one, shared)


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(64, 300),
    extra=st.integers(0, 100),
    m=st.sampled_from([1, 3, 6, 140]),
    threads=st.integers(2, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_count_rows_shared_over_threads_counts_as_one_thread(n, extra, m, threads, dtype, seed):
    """The whole count of a block's rows (compares, and the radix sort of rows with more than
    128 relevant scores, each thread with its own keys) shared out over threads gives one
    thread's histograms, and both a count by comparison's."""
    if not _shares_rows(kernels._count):
        pytest.skip("this platform's passes run on one thread")
    rows = split_rows(kernels._count, n, extra)
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, (rows, n)).astype(dtype)
    rel = np.sort(rng.integers(0, 6, (rows, m)).astype(dtype), axis=1)
    finite = rng.integers(0, m + 1, (rows, 1)).astype(np.int64)
    rel[np.arange(m)[None, :] >= finite] = np.inf
    hists = []
    for team in (1, threads):
        hist = np.zeros((2, rows, m + 1), dtype=np.int64)
        kernels._count.count_rows(values, rel, finite, hist[0], hist[1], threads=team)
        hists.append(hist)
    np.testing.assert_array_equal(hists[0], hists[1])
    lt = hists[1][0]
    above = lt.sum(1, keepdims=True) - lt.cumsum(1)[:, :-1]
    brute = (values[:, :, None] > rel[:, None, :]).sum(1)
    counted = np.arange(m)[None, :] < finite
    np.testing.assert_array_equal(above[counted], brute[counted])


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
def test_the_threads_asked_of_a_pass_are_checked():
    values = np.zeros((4, 3), dtype=np.float32)
    rel = np.ones((4, 1), dtype=np.float32)
    args = (values, rel, np.ones((4, 1), dtype=np.int64), *np.zeros((2, 4, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="`threads` must be a positive int"):
        kernels._count.count_rows(*args, threads=0)
    with pytest.raises(TypeError, match="the only keyword taken is `threads`"):
        kernels._count.count_rows(*args, workers=2)


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
def test_a_ranking_shares_its_passes_out_over_torchs_threads(monkeypatch):
    """A ranking's compiled passes (unit rows, counts) take torch's threads for blocks of at
    least SHARED_FROM values and one thread below it or under torch.set_num_threads(1); the
    tables are the same either way."""
    from retrieval_metrics.functional.ranking import row_norms, threads

    asked = []

    def asking(real):
        return lambda *a, **kw: asked.append(kw.get("threads", 1)) or real(*a, **kw)

    monkeypatch.setattr(kernels._count, "count_above", asking(kernels._count.count_above))
    monkeypatch.setattr(kernels._count, "count_rows", asking(kernels._count.count_rows))
    if row_norms._rows is not None:
        monkeypatch.setattr(row_norms._rows, "unit_rows", asking(row_norms._rows.unit_rows))
    g = torch.Generator().manual_seed(5)
    gallery = torch.randn(3000, 16, generator=g)
    labels = torch.randint(0, 30, (3000,), generator=g)
    queries = gallery[::10] + 0.1 * torch.randn(300, 16, generator=g)

    def ranked():
        asked.clear()
        return rank_embeddings(
            queries, gallery, query_labels=labels[::10], gallery_labels=labels,
            similarity="cosine", memory_budget=2**22,
        )

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        tables = {}
        for label, shared_from in (("shared", 1), ("one", 1 << 62)):
            monkeypatch.setattr(threads, "SHARED_FROM", shared_from)
            tables[label] = ranked()
            assert asked and set(asked) == ({3} if label == "shared" else {1}), (label, asked)
        monkeypatch.setattr(threads, "SHARED_FROM", 1)
        torch.set_num_threads(1)
        tables["torch's one"] = ranked()
        assert set(asked) == {1}
    finally:
        torch.set_num_threads(before)
    for table in tables.values():
        for name in ("ptr", "above", "tied", "num_relevant"):
            assert torch.equal(getattr(table, name), getattr(tables["one"], name)), name
