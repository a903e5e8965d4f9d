"""Degenerate data against the brute-force reference, at the smallest memory budget.

Collapsed or identical embeddings, one class, every item relevant, no item relevant, zero
vectors, relevant items ranked last, and many relevant items per query: the shapes that a freshly
initialised or weak model and few-class datasets produce. Every case runs with
``memory_budget=65536`` and small explicit blocks, so several query blocks, gallery blocks and
candidate chunks are exercised, and through each of the two ways the ranking counts a block of
scores (a search per surviving item, or one batched search over the whole block), forced in turn
as well as chosen by the ranking itself.

Values come from tests/reference.py (full score matrix, Python sorts and loops); where the tie
groups are too large to enumerate, ``"expected"`` is checked against the reference's exact
average over every placement of the relevant items (a fully tied gallery is a uniformly random
ranking).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_query_matches, ours_per_query
from reference import (
    reference_chance,
    reference_masks,
    reference_query,
    reference_scores,
)
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional import ranking
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.engine import counting
from retrieval_metrics.metrics import retrieval

SMALLEST_BUDGET = 2**16
TIES = ("optimistic", "pessimistic", "expected")
# each example compares every query with a reference that enumerates tie orders: seconds each
SETTINGS = settings(max_examples=6, deadline=None)
PATHS = ("auto", "per_item", "whole_block")
ENUMERABLE = 3000  # placements the chance reference enumerates for one (N, m)
BLOCKS = st.tuples(st.sampled_from([1, 2, 3, 5, 16]), st.sampled_from([64, 128]))


@contextlib.contextmanager
def counting_path(path: str) -> Iterator[None]:
    """Force one way of counting a block of scores ("auto" lets the ranking choose)."""
    saved = counting.SPARSE_OVERHEAD, counting.DENSE_OVERHEAD
    if path == "per_item":
        counting.DENSE_OVERHEAD = 10**12
    elif path == "whole_block":
        counting.SPARSE_OVERHEAD = 10**12
    try:
        yield
    finally:
        counting.SPARSE_OVERHEAD, counting.DENSE_OVERHEAD = saved


def check(query, gallery, labels_q, labels_g, similarity, block, path, depth=None):
    """Rank with the library and compare every query with the brute-force reference.

    ``gallery=None`` is same source (labels_g unused). Cosine embeddings are float64 so that the
    reference's float64 ties are the library's; dot and euclidean use small integers, exact in
    float32.
    """
    dtype = torch.float64 if similarity == "cosine" else torch.float32
    q_t = torch.tensor(query, dtype=dtype)
    g_t = None if gallery is None else torch.tensor(gallery, dtype=dtype)
    kwargs = {"query_labels": torch.tensor(labels_q)}
    if gallery is not None:
        kwargs["gallery_labels"] = torch.tensor(labels_g)
    with counting_path(path):
        table = rank_embeddings(
            q_t,
            g_t,
            similarity=similarity,
            memory_budget=SMALLEST_BUDGET,
            block_size=block,
            depth=depth,
            cover_relevant=depth is not None,
            **kwargs,
        )
    gal = query if gallery is None else gallery
    scores = reference_scores(query, gal, similarity)
    relevant, excluded = reference_masks(
        query.shape[0],
        gal.shape[0],
        same_source=gallery is None,
        query_labels=labels_q,
        gallery_labels=labels_q if gallery is None else labels_g,
    )
    assert table.gallery_size.tolist() == (~excluded).sum(1).tolist()
    assert table.num_relevant.tolist() == relevant.sum(1).tolist()
    for ties in TIES:
        if depth is None:
            ours = ours_per_query(table, ties, cmc_len=gal.shape[0])
        else:
            ours = _depth_measures(table, ties)
        for q in range(query.shape[0]):
            try:
                ref = reference_query(scores[q], relevant[q], excluded[q], ties=ties)
            except ValueError as err:  # tie groups too large to enumerate: see the chance test
                assert "orderings" in str(err)
                continue
            if ours[q] is not None and ref is not None:
                ref = {key: ref[key] for key in ours[q]}
            assert_query_matches(ours[q], ref, f"query {q} ties {ties} {similarity} {path}")
    return table


def _depth_measures(table, ties):
    """What a ranking with depth 1 and ``cover_relevant`` serves, keyed like the reference."""
    cols = {
        "hit_rate@1": M.hit_rate_per_query(table, 1, ties),
        "r_precision": M.r_precision_per_query(table, ties),
        "map@r": M.map_at_r_per_query(table, ties),
        "rr": M.reciprocal_rank_per_query(table, None, ties),
    }
    return [
        None if int(table.num_relevant[q]) == 0 else {k: float(v[q]) for k, v in cols.items()}
        for q in range(table.num_queries)
    ]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _embeddings(rng: np.random.Generator, n: int, dim: int, similarity: str) -> np.ndarray:
    """Small integers; for cosine, multiples 1, 2 or 4 of a signed unit axis, whose cosines
    (0, 1 and -1) are exact, so no rounding can split a tie the reference sees."""
    if similarity != "cosine":
        return rng.integers(-2, 3, (n, dim)).astype(np.float64)
    emb = np.zeros((n, dim))
    emb[np.arange(n), rng.integers(0, dim, n)] = rng.choice([-4, -2, -1, 1, 2, 4], n)
    return emb


@functools.cache
def _chance(n: int, m: int) -> dict:
    return reference_chance(n, m)


@SETTINGS
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 90),
    st.integers(1, 4),
    BLOCKS,
    st.sampled_from(PATHS),
    st.sampled_from(["cosine", "dot", "euclidean"]),
)
def test_identical_embeddings(seed, n, n_classes, block, path, similarity):
    """Every item the same vector: one tie group holding the whole gallery.

    For cosine the vector is a multiple of a signed axis, whose unit vector is exact: the cosine
    of an arbitrary vector with itself is 1 only to rounding, and a matrix product may round it
    differently in different columns, so the library would see near-ties the reference does not.
    """
    rng = _rng(seed)
    emb = np.repeat(_embeddings(rng, 1, 3, similarity), n, axis=0)
    labels = rng.integers(0, n_classes, n)
    check(emb, None, labels, None, similarity, block, path)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(2, 90), BLOCKS, st.sampled_from(PATHS), st.booleans())
def test_collapsed_embeddings(seed, n, block, path, with_depth):
    """A few distinct vectors shared by many items (a collapsed model): large tie groups."""
    rng = _rng(seed)
    base = rng.integers(-1, 2, (int(rng.integers(1, 4)), 2)).astype(np.float64)
    emb = base[rng.integers(0, base.shape[0], n)]
    labels = rng.integers(0, 3, n)
    check(emb, None, labels, None, "dot", block, path, depth=1 if with_depth else None)


@SETTINGS
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 80),
    BLOCKS,
    st.sampled_from(PATHS),
    st.sampled_from(["cosine", "dot", "euclidean"]),
)
def test_one_class_every_item_relevant(seed, n, block, path, similarity):
    """One class, same source: every other item is relevant to every query."""
    rng = _rng(seed)
    emb = _embeddings(rng, n, 3, similarity)
    check(emb, None, np.zeros(n, dtype=np.int64), None, similarity, block, path)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 100), BLOCKS, st.sampled_from(PATHS))
def test_no_item_relevant(seed, n, block, path):
    """Labels all distinct: no query has a relevant item, and none is answerable."""
    rng = _rng(seed)
    emb = rng.integers(-2, 3, (n, 3)).astype(np.float64)
    table = check(emb, None, rng.permutation(n), None, "euclidean", block, path)
    assert table.num_relevant.sum() == 0 and table.above.numel() == 0


@SETTINGS
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 80),
    BLOCKS,
    st.sampled_from(PATHS),
    st.sampled_from(["cosine", "dot"]),
)
def test_zero_vectors(seed, n, block, path, similarity):
    """Zero vectors score 0 against everything, cosine included (no NaN), and tie with every
    item whose score is exactly 0; -0.0 and 0.0 are the same score."""
    rng = _rng(seed)
    emb = _embeddings(rng, n, 2, similarity)
    emb[rng.random(n) < 0.4] = 0.0
    emb[rng.random(n) < 0.1] = -0.0
    labels = rng.integers(0, 3, n)
    check(emb, None, labels, None, similarity, block, path)


def test_zero_vector_cosine_is_zero_against_everything():
    """Hand-worked: a zero query ties all three items; a zero item ties an orthogonal one."""
    emb = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [2.0, 0.0]], dtype=torch.float64)
    table = rank_embeddings(emb, query_labels=torch.tensor([0, 0, 1, 1]))
    # Query 0 (zero): items 1, 2, 3 all score 0, so relevant item 1 is above 0, tied 3.
    # Query 1: item 3 scores 1, items 0 (zero) and 2 (orthogonal) score 0: relevant item 0 is
    # above 1, tied 2. Query 2: items 0, 1, 3 all score 0: item 3 above 0, tied 3. Query 3:
    # item 1 scores 1, items 0 and 2 score 0: relevant item 2 above 1, tied 2.
    assert table.above.tolist() == [0, 1, 0, 1]
    assert table.tied.tolist() == [3, 2, 3, 2]


def test_tiny_vectors_count_by_direction():
    """A vector far shorter than 1e-12 (squares underflowing in float32) keeps its direction."""
    emb = torch.tensor([[3.0, 4.0], [3e-30, 4e-30], [4.0, -3.0], [2.0**-140, 0.0]])
    table = rank_embeddings(emb, query_labels=torch.tensor([0, 0, 1, 1]))
    # Queries 0 and 1 share a direction: each scores the other 1, above anything else (items 2
    # and 3 score 0 and 0.6). Queries 2 and 3 score each other 0.8, the others 0 and 0.6.
    # Scaled by max(norm, 1e-12) instead, item 1 would score about 5e-18 for query 0 and fall
    # below item 3.
    assert table.above.tolist() == [0, 0, 0, 0]
    assert table.tied.tolist() == [1, 1, 1, 1]


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 100), BLOCKS, st.sampled_from(PATHS))
def test_relevant_items_ranked_last(seed, n, block, path):
    """Query and gallery apart: every relevant item scores below every other item."""
    rng = _rng(seed)
    n_q = int(rng.integers(1, 8))
    query = rng.integers(1, 4, (n_q, 1)).astype(np.float64)
    gallery_labels = rng.integers(0, 2, n)
    # Label 0 (relevant to every query) sits at -5..0, label 1 at 1..5, for positive queries.
    gallery = np.where(
        gallery_labels[:, None] == 0, rng.integers(-5, 1, (n, 1)), rng.integers(1, 6, (n, 1))
    ).astype(np.float64)
    check(query, gallery, np.zeros(n_q, dtype=np.int64), gallery_labels, "dot", block, path)


@settings(max_examples=4, deadline=None)  # the reference enumerates large tie groups: seconds each
@given(
    st.integers(0, 2**31 - 1),
    st.integers(60, 110),
    BLOCKS,
    st.sampled_from(PATHS),
    st.booleans(),
)
def test_many_relevant_items_per_query(seed, n, block, path, with_depth):
    """Two classes of uniform points (a weak model on a two-class dataset): ~n/2 relevant items
    per query, most of the gallery above the lowest of them."""
    rng = _rng(seed)
    emb = rng.integers(-3, 4, (n, 4)).astype(np.float64)
    labels = rng.integers(0, 2, n)
    check(emb, None, labels, None, "euclidean", block, path, depth=1 if with_depth else None)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(2, 70), BLOCKS, st.sampled_from(PATHS))
def test_identical_embeddings_expected_is_chance(seed, n, block, path):
    """All scores tied: ``ties="expected"`` is the average over every placement of each query's
    relevant items, however large the group (the reference enumerates the placements)."""
    rng = _rng(seed)
    emb = np.ones((n, 2))
    # Class sizes that keep C(n - 1, m) enumerable: one class of at most 3, the rest in another.
    small = int(rng.integers(1, min(n, 3) + 1))
    labels = np.zeros(n, dtype=np.int64)
    labels[rng.permutation(n)[:small]] = 1
    with counting_path(path):
        table = rank_embeddings(
            torch.tensor(emb, dtype=torch.float32),
            query_labels=torch.tensor(labels),
            memory_budget=SMALLEST_BUDGET,
            block_size=block,
        )
    ours = ours_per_query(table, "expected", cmc_len=n - 1)
    checked = 0
    for q in range(n):
        m = int((labels == labels[q]).sum()) - 1
        if m == 0 or math.comb(n - 1, m) > ENUMERABLE:
            continue
        ref = _chance(n - 1, m)
        assert_query_matches(ours[q], ref, f"query {q}, N={n - 1}, m={m}")
        checked += 1
    assert checked > 0 or n == 2


@pytest.mark.parametrize("path", PATHS)
def test_many_blocks_and_chunks_at_smallest_budget(path):
    """Larger and fixed: 3 classes of identical-ish points, 300 items, blocks of 64 (5 gallery
    blocks, one padded) and the smallest budget, so candidate chunks are split too."""
    rng = _rng(7)
    n = 300
    emb = rng.integers(0, 2, (n, 2)).astype(np.float64)
    labels = rng.integers(0, 3, n)
    check(emb[:9], emb, labels[:9], labels, "dot", (4, 64), path)


# ------------------------------------------------------------------------------------------
# Thousands of relevant items per query, in small: merged runs, long tie groups, query chunks
# ------------------------------------------------------------------------------------------


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(10, 24), BLOCKS, st.sampled_from(PATHS))
def test_separated_classes_relevant_runs(seed, n, block, path):
    """Two well-separated classes, relevant items on top at (mostly) distinct scores: the tie
    groups of a query's relevant items sit on consecutive positions and are merged into one."""
    rng = _rng(seed)
    labels = rng.integers(0, 2, n)
    # class 0 near the x axis, class 1 near the y axis; the noise spreads the scores
    emb = rng.integers(0, 50, (n, 2)).astype(np.float64)
    emb[np.arange(n), labels] += 500
    check(emb, None, labels, None, "dot", block, path)


def _exact_reciprocal(t: int, r: int, a: int, limit: int, last: bool) -> float:
    """E[1 / (a + position)] of the first (or last) of r relevant items placed uniformly at
    random among t tied positions after a, 0 past ``limit``; summed over every position in
    exact fractions."""
    from fractions import Fraction

    total = Fraction(0)
    placements = math.comb(t, r)
    for x in range(1, t + 1):
        # first at x: the other r - 1 after it; last at x: the other r - 1 before it
        ways = math.comb(x - 1, r - 1) if last else math.comb(t - x, r - 1)
        if ways and a + x <= limit:
            total += Fraction(ways, placements * (a + x))
    return float(total)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 400),
    st.integers(0, 30),
    st.data(),
)
def test_long_tie_group_first_and_last_relevant(t, a, data):
    """MRR and mINP of a query whose relevant items all share one tie group of up to 400 items
    (a collapsed model): the library adds only the terms that matter, the reference all of them."""
    r = data.draw(st.integers(1, t), label="relevant")
    k = data.draw(st.one_of(st.none(), st.integers(1, a + t + 2)), label="k")
    table = ranking.RankTable(
        ptr=torch.tensor([0, r]),
        above=torch.full((r,), a),
        tied=torch.full((r,), t),
        num_relevant=torch.tensor([r]),
        gallery_size=torch.tensor([a + t + 3]),
        depth=torch.tensor([a + t + 3]),
    )
    limit = a + t + 3 if k is None else k
    rr = float(M.reciprocal_rank_per_query(table, k, "expected")[0])
    assert rr == pytest.approx(_exact_reciprocal(t, r, a, limit, last=False), rel=1e-12)
    minp = float(M.minp_per_query(table, "expected")[0])
    assert minp == pytest.approx(r * _exact_reciprocal(t, r, a, a + t, last=True), rel=1e-12)


CHUNK_NAMES = ["hit_rate@1", "map@r", "r_precision", "map", "mrr", "recall@5", "ndcg@5", "minp"]


@settings(max_examples=8, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(40, 70),
    st.sampled_from(TIES),
    st.sampled_from(["macro", "micro", "class"]),
    st.sampled_from(["skip", "zero"]),
    st.booleans(),
)
def test_compute_in_query_chunks(seed, n, ties, average, empty_queries, same_source):
    """compute() with more relevant pairs than the budget ranks a chunk of queries at a time;
    its values are those of the whole table, whose per-query values are the reference's."""
    from retrieval_metrics import RetrievalMetrics
    from retrieval_metrics.metrics.chunks import PAIR_BYTES

    rng = _rng(seed)
    emb = rng.integers(-3, 4, (n, 3)).astype(np.float64)
    labels = rng.integers(0, 2, n)
    labels[0] = 5  # a class of one: a query with no relevant item when same source
    metric = RetrievalMetrics(
        CHUNK_NAMES,
        ties=ties,
        average=average,
        empty_queries=empty_queries,
        similarity="euclidean",
        memory_budget=SMALLEST_BUDGET,
    )
    if same_source:
        metric.update(torch.tensor(emb), torch.tensor(labels))
        query, gallery, labels_g = emb, None, labels
    else:
        metric.update(torch.tensor(emb[:20]), torch.tensor(labels[:20]), role="query")
        metric.update(torch.tensor(emb), torch.tensor(labels), role="gallery")
        query, gallery, labels_g = emb[:20], emb, labels
    chunked = []
    original = retrieval.query_parts_in_chunks

    def counting(tables, *args, **kwargs):
        tables = list(tables)
        chunked.append(len(tables))
        return original(tables, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(retrieval, "query_parts_in_chunks", counting)
        values = metric.compute()
    pairs = sum(int((labels_g == lab).sum()) for lab in labels[: query.shape[0]])
    if pairs * PAIR_BYTES > SMALLEST_BUDGET:
        assert chunked and chunked[0] > 1
    else:  # few pairs: the whole table at once
        assert not chunked
    whole = rank_embeddings(
        torch.tensor(query),
        None if gallery is None else torch.tensor(gallery),
        query_labels=torch.tensor(labels[: query.shape[0]]),
        gallery_labels=None if gallery is None else torch.tensor(labels_g),
        similarity="euclidean",
    )
    expected = M.retrieval_measures(
        whole, CHUNK_NAMES, ties=ties, average=average, empty_queries=empty_queries
    )
    for name in CHUNK_NAMES:
        assert float(values[name]) == pytest.approx(float(expected[name]), rel=1e-6, nan_ok=True)
    # the whole table's macro MAP, query by query from the reference
    scores = reference_scores(query, emb, "euclidean")
    relevant, excluded = reference_masks(
        query.shape[0],
        emb.shape[0],
        same_source=gallery is None,
        query_labels=labels[: query.shape[0]],
        gallery_labels=labels_g,
    )
    aps = [
        ref["ap"]
        for q in range(query.shape[0])
        if (ref := reference_query(scores[q], relevant[q], excluded[q], ties="pessimistic"))
    ]
    pessimistic = M.average_precision_per_query(whole, None, "pessimistic")
    assert np.nanmean(pessimistic.numpy()) == pytest.approx(np.mean(aps), rel=1e-9)


@pytest.mark.parametrize("same_source", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_per_query_in_query_chunks(seed, same_source):
    """per_query() with more relevant pairs than the budget ranks a chunk of queries at a time,
    as compute() does; each query's values are those of the whole table, in the same order."""
    from retrieval_metrics import RetrievalMetrics

    rng = _rng(seed)
    n = 160
    emb = torch.tensor(rng.integers(-3, 4, (n, 3)).astype(np.float64))
    labels = torch.tensor(rng.integers(0, 2, n))
    labels[0] = 5  # a query with no relevant item (NaN) when same source
    metric = RetrievalMetrics(CHUNK_NAMES, similarity="euclidean", memory_budget=SMALLEST_BUDGET)
    if same_source:
        metric.update(emb, labels)
        query, gallery, labels_q, labels_g = emb, None, labels, None
    else:
        metric.update(emb[:40], labels[:40], role="query")
        metric.update(emb, labels, role="gallery")
        query, gallery, labels_q, labels_g = emb[:40], emb, labels[:40], labels
    chunks = []
    original = metric._tables_in_chunks

    def spy(**kwargs):
        tables = original(**kwargs)
        chunks.append(None if tables is None else list(tables))
        return None if tables is None else iter(chunks[-1])

    metric._tables_in_chunks = spy
    got = metric.per_query()
    assert chunks and chunks[0] is not None and len(chunks[0]) > 1
    whole = rank_embeddings(
        query,
        gallery,
        query_labels=labels_q,
        gallery_labels=labels_g,
        similarity="euclidean",
    )
    assert set(got) == set(CHUNK_NAMES)
    for name in CHUNK_NAMES:
        expected = M.per_query_values(whole, M.parse_metric(name))
        np.testing.assert_allclose(got[name].numpy(), expected.numpy(), rtol=1e-9, equal_nan=True)


@pytest.mark.parametrize("empty_queries", ["skip", "zero"])
def test_summary_in_query_chunks(empty_queries):
    """summary() with more relevant pairs than the budget: values, intervals, chance levels and
    counts equal the summary of the whole table."""
    from retrieval_metrics import RetrievalMetrics
    from retrieval_metrics.functional.measures import stats

    rng = _rng(3)
    n = 150
    emb = torch.tensor(rng.integers(-3, 4, (n, 3)).astype(np.float64))
    labels = torch.tensor(rng.integers(0, 2, n))
    labels[0] = 5  # a query with nothing relevant: skipped, or zero
    metric = RetrievalMetrics(
        CHUNK_NAMES,
        similarity="euclidean",
        memory_budget=SMALLEST_BUDGET,
        empty_queries=empty_queries,
    )
    metric.update(emb, labels)
    chunked = []
    original = metric._tables_in_chunks

    def spy(**kwargs):
        tables = original(**kwargs)
        chunked.append(tables is not None)
        return tables

    metric._tables_in_chunks = spy
    got = metric.summary(num_bootstrap=200, seed=1)
    assert chunked == [True]
    whole = rank_embeddings(emb, query_labels=labels, similarity="euclidean")
    expected = stats.summarize(
        whole, CHUNK_NAMES, empty_queries=empty_queries, num_bootstrap=200, seed=1
    )
    assert [r["name"] for r in got.rows] == [r["name"] for r in expected.rows]
    for mine, theirs in zip(got.rows, expected.rows, strict=True):
        for key in ("queries", "skipped", "gallery"):
            assert mine[key] == theirs[key], (mine["name"], key)
        for key in ("value", "chance"):
            assert float(mine[key]) == pytest.approx(float(theirs[key]), rel=1e-9, nan_ok=True)
        np.testing.assert_allclose(
            np.asarray(mine["interval"], dtype=float),
            np.asarray(theirs["interval"], dtype=float),
            rtol=1e-9,
        )
