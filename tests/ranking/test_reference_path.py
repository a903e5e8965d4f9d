"""Every fast path of the ranking engine equals its plain reference, bit for bit.

``ranking/reference.py`` computes the engine's products (same shapes, same operands), then sorts
every score row and counts by definition. Here the engine (``rank_embeddings``, and
``rank_relevance`` to force a pass) must give the same ``above``, ``tied``, ``num_relevant``,
``gallery_size`` and per-query item order: on float32 data with duplicate rows, collapsed
embeddings, binary codes and one huge class; same source (the symmetric pass) and query/gallery
(the one-sided pass); several block sizes; with a depth (the listed items are the reference's
first ones); with exclusions; through the sparse and the dense counting; on the emulated CUDA
device.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from emulated_cuda import fake_cuda_fixture, to_fake_cuda  # noqa: F401
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking import reference as ref
from retrieval_metrics.functional.ranking.embeddings import embedding_relevance, rank_relevance
from retrieval_metrics.functional.ranking.engine import (
    counting,
    kernels,
    one_sided,
    schedule,
    two_sided,
)
from retrieval_metrics.functional.ranking.engine.counting import TOP_RELEVANT_GAIN
from retrieval_metrics.functional.ranking.engine.threshold import THETA_EVERY
from retrieval_metrics.functional.ranking.items import KEY_FIELDS, Keys
from retrieval_metrics.functional.ranking.reference import (
    rank_by_full_sort,
    rank_embeddings_by_full_sort,
)
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.table import RankTable

SETTINGS = settings(max_examples=20, deadline=None)
KINDS = ("duplicates", "collapsed", "binary", "permuted", "normal")
# One-sided blocks (several query and gallery blocks at these sizes) and square ones.
BLOCKS = (None, (1, 64), (3, 64), (8, 128), (64, 64), (128, 128))


def embeddings(rng: np.random.Generator, n: int, dim: int, kind: str) -> np.ndarray:
    """Float32 rows; all but "normal" make many exact ties (or near ties: "permuted")."""
    if kind == "duplicates":  # a few distinct rows, each repeated
        base = rng.normal(size=(max(1, n // 4), dim))
        x = base[rng.integers(0, base.shape[0], n)]
    elif kind == "collapsed":  # every row the same
        x = np.repeat(rng.normal(size=(1, dim)), n, axis=0)
    elif kind == "binary":  # 0/1 codes
        x = rng.integers(0, 2, size=(n, dim)).astype(np.float64)
    elif kind == "permuted":
        # Coordinates of a few rows shuffled, and rows of one repeated value: the scores of a
        # constant row with the shuffles of one row are equal sums in different orders, so
        # which of them tie depends on how the product rounds (gemv and gemm differ), and a
        # reference of other product shapes than the engine's would count other ties.
        base = rng.normal(size=(3, dim))
        x = np.stack([rng.permutation(base[i]) for i in rng.integers(0, 3, n)])
        constant = rng.random(n) < 0.3
        x[constant] = rng.normal(size=(int(constant.sum()), 1))
    else:
        x = rng.normal(size=(n, dim))
    return x.astype(np.float32)


def labels(rng: np.random.Generator, n: int, classes: int, huge: bool) -> torch.Tensor:
    if huge:  # one class holds most items
        return torch.tensor(np.where(rng.random(n) < 0.8, 0, rng.integers(1, classes + 1, n)))
    return torch.tensor(rng.integers(0, classes, n))


@st.composite
def problems(draw: Any) -> dict[str, Any]:
    """Arguments of rank_embeddings: same source or query/gallery, with or without exclusions."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(KINDS))
    same_source = draw(st.booleans())
    n_g = draw(st.integers(1, 260))
    n_q = n_g if same_source else draw(st.integers(1, 80))
    dim = draw(st.integers(1, 8))
    classes = draw(st.integers(1, 15))
    huge = draw(st.booleans())
    similarity = draw(st.sampled_from(("cosine", "dot", "euclidean")))
    args: dict[str, Any] = {
        "query": torch.tensor(embeddings(rng, n_q, dim, kind)),
        "gallery": None if same_source else torch.tensor(embeddings(rng, n_g, dim, kind)),
        "query_labels": labels(rng, n_q, classes, huge),
        "similarity": similarity,
        "block_size": draw(st.sampled_from(BLOCKS)),
    }
    if not same_source:
        args["gallery_labels"] = labels(rng, n_g, classes, huge)
    if draw(st.booleans()):  # sample ids, some shared: each query excludes the items of its id
        args["query_ids"] = torch.tensor(rng.integers(0, max(1, n_q), n_q))
        if not same_source:
            args["gallery_ids"] = torch.tensor(rng.integers(0, max(1, n_q), n_g))
    return args


def split(args: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, Any]]:
    rest = dict(args)
    return rest.pop("query"), rest.pop("gallery"), rest


def assert_same_table(engine: RankTable, expected: RankTable) -> None:
    """Equal fields, items of each query in the same order (by decreasing score)."""
    for name in ("ptr", "above", "tied", "num_relevant", "gallery_size", "depth"):
        a, b = getattr(engine, name), getattr(expected, name)
        if not torch.equal(a, b):
            at = int(torch.nonzero(a != b)[0, 0]) if a.shape == b.shape else 0
            raise AssertionError(
                f"{name} differs first at {at} of {a.numel()} (shape {b.numel()} expected): "
                f"engine {a[at : at + 8].tolist()} reference {b[at : at + 8].tolist()}"
            )
    for name in ("grade", "query_class"):
        a, b = getattr(engine, name), getattr(expected, name)
        assert (a is None) == (b is None), name
        assert a is None or torch.equal(a, b), name


def assert_prefix(engine: RankTable, expected: RankTable, depth: int, cover: bool) -> None:
    """With a depth: each query lists the reference's first items (its best one at least, and
    every item within the top ``depth`` positions), with the reference's above and tied."""
    for name in ("num_relevant", "gallery_size"):
        assert torch.equal(getattr(engine, name), getattr(expected, name)), name
    m = expected.num_relevant
    want_depth = m.clamp_min(depth) if cover else torch.full_like(m, depth)
    assert torch.equal(engine.depth, want_depth)
    for q in range(expected.num_queries):
        e0, e1 = int(engine.ptr[q]), int(engine.ptr[q + 1])
        r0, r1 = int(expected.ptr[q]), int(expected.ptr[q + 1])
        listed = e1 - e0
        ref_above = expected.above[r0:r1]
        within = int((ref_above < want_depth[q]).sum())
        assert listed >= max(within, min(1, r1 - r0)), (q, listed, within)
        assert torch.equal(engine.above[e0:e1], ref_above[:listed]), q
        assert torch.equal(engine.tied[e0:e1], expected.tied[r0 : r0 + listed]), q


@contextmanager
def passes_taken() -> Iterator[dict[str, list[Any]]]:
    """Records the layouts the reference and the engine chose, and the engine's symmetric
    passes."""
    seen: dict[str, list[Any]] = {"layouts": [], "engine_layouts": [], "two_sided": []}
    original_layout, original_pass = schedule.choose_layout, schedule.two_sided_pass

    def recorder(key: str) -> Any:
        def layout(*args: Any, **kwargs: Any) -> Any:
            seen[key].append(original_layout(*args, **kwargs))
            return seen[key][-1]

        return layout

    def two_sided(*args: Any, **kwargs: Any) -> Any:
        seen["two_sided"].append(args[2].shape)
        return original_pass(*args, **kwargs)

    with (
        mock.patch.object(ref, "choose_layout", side_effect=recorder("layouts")),
        mock.patch.object(schedule, "choose_layout", side_effect=recorder("engine_layouts")),
        mock.patch.object(schedule, "two_sided_pass", side_effect=two_sided),
    ):
        yield seen


def check_pass(seen: dict[str, list[Any]]) -> None:
    """The engine chose the reference's layout, and took the symmetric pass exactly then."""
    (layout,) = seen["layouts"]
    assert seen["engine_layouts"] == [layout]
    assert len(seen["two_sided"]) == int(layout.symmetric), (layout, seen["two_sided"])


@contextmanager
def counting_branches() -> Iterator[dict[str, mock.MagicMock]]:
    """Counts the sparse (count_candidates) and dense (count_block) counts of the engine."""
    with (
        mock.patch.object(
            counting, "count_candidates", wraps=counting.count_candidates
        ) as sparse,
        mock.patch.object(counting, "count_block", wraps=counting.count_block) as dense,
    ):
        yield {"sparse": sparse, "dense": dense}


# ------------------------------------------------------------------------------- properties


@SETTINGS
@given(problems())
def test_rank_embeddings_equals_the_reference(args):
    query, gallery, rest = split(args)
    with passes_taken() as seen:
        expected = rank_embeddings_by_full_sort(query, gallery, **rest)
        engine = rank_embeddings(query, gallery, **rest)
    check_pass(seen)
    assert_same_table(engine, expected)


@SETTINGS
@given(problems(), st.booleans())
def test_each_forced_pass_equals_the_reference(args, symmetric):
    """rank_relevance with the same flag and blocks as the reference; same source with
    ``symmetric=False`` is the one-sided pass over a set against itself."""
    query, gallery, rest = split(args)
    similarity, block_size = rest.pop("similarity"), rest.pop("block_size")
    if gallery is None and symmetric and block_size is not None:
        block_size = (block_size[1], block_size[1])  # square: the symmetric pass
    keys = {
        side: Keys(**{name: rest.get(f"{side}_{name}") for name in KEY_FIELDS})
        for side in ("query", "gallery")
    }
    inputs = embedding_relevance(
        query, gallery, keys["query"], keys["gallery"], RankingSettings(memory_budget=2**28)
    )
    query, gallery, rel = inputs.query, inputs.gallery, inputs.relevance
    q_key, g_key = inputs.query_key, inputs.gallery_key
    symmetric = symmetric and gallery is query
    kwargs = dict(
        similarity=similarity, block_size=block_size, query_order_key=q_key,
        gallery_order_key=g_key,
    )
    with passes_taken() as seen:
        expected = rank_by_full_sort(query, gallery, rel, symmetric=symmetric, **kwargs)
        engine = rank_relevance(query, gallery, rel, same_source=symmetric, **kwargs)
    check_pass(seen)
    if symmetric and similarity != "euclidean":
        assert seen["layouts"][0].symmetric
    assert_same_table(engine, expected)


@contextmanager
def heaps(kept: bool | None) -> Iterator[None]:
    """Within it the rows' thresholds rise to the depth by heaps always (True), never (False:
    every item above the lowest relevant score counted), or as their cost decides (None)."""
    if kept is None:
        yield
        return
    cost = 0 if kept else float("inf")
    with mock.patch.object(counting, "HEAP_PUSH_COST", cost):
        yield


@SETTINGS
@given(problems(), st.integers(1, 6), st.booleans(), st.sampled_from([True, False, None]))
def test_with_a_depth_the_listed_items_are_the_references_first(args, depth, cover, kept):
    """With or without the heaps that raise each row's threshold to its depth: the listed
    items are the reference's first ones."""
    query, gallery, rest = split(args)
    expected = rank_embeddings_by_full_sort(query, gallery, **rest)
    with heaps(kept):
        engine = rank_embeddings(query, gallery, depth=depth, cover_relevant=cover, **rest)
    assert_prefix(engine, expected, depth, cover)


@contextmanager
def query_blocks(read: Any) -> Iterator[list[Any]]:
    """``read(block)`` of every query block once it has started counting."""
    seen: list[Any] = []
    original = counting.QueryBlock.start_counting

    def start(self: counting.QueryBlock) -> None:
        original(self)
        seen.append(read(self))

    with mock.patch.object(counting.QueryBlock, "start_counting", start):
        yield seen


def test_a_deep_cut_off_on_a_weak_model_counts_every_item_instead_of_keeping_heaps():
    """recall@1000 over 4,000 random embeddings in classes of about 40: a heap of each row's
    1,000 best scores is fed by most items (14x the whole count); the rows count every item
    above their lowest relevant score instead, and list the same items. At depth 10 over
    16,000 items in classes of about 160 (each row counting its 10 best relevant scores), the
    heaps cost a fraction of the whole count and are kept."""
    if kernels._count is None:
        pytest.skip("the compiled count is not built")
    gen = torch.Generator().manual_seed(0)
    for n, classes, depth, kept in ((4000, 100, 1000, False), (16000, 100, 10, True)):
        x = torch.randn(n, 16, generator=gen)
        lab = torch.randint(0, classes, (n,), generator=gen)
        queries = slice(0, 600)
        kwargs: dict[str, Any] = dict(query_labels=lab[queries], gallery_labels=lab, depth=depth)
        tables = {}
        for forced in (None, not kept):
            with heaps(forced), query_blocks(lambda qb: qb.threshold_depth) as depths:
                tables[forced] = rank_embeddings(x[queries], x, **kwargs)
            assert set(depths) == ({depth} if (forced is None) == kept else {None}), depths
        for name in ("ptr", "above", "tied"):
            assert torch.equal(getattr(tables[None], name), getattr(tables[not kept], name))


# ------------------------------------------------------------------------------- hand cases


def clusters(n: int, classes: int, dim: int = 16, noise: float = 0.05, seed: int = 0):
    """A good model: tight clusters around random centres (float32)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    lab = rng.integers(0, classes, n)
    x = centres[lab] + noise * rng.normal(size=(n, dim))
    return torch.tensor(x.astype(np.float32)), torch.tensor(lab)


@contextmanager
def python_counts() -> Iterator[None]:
    """Within it the engine counts as where the compiled module is not built: segment maxima,
    then the sparse or the dense count of each block."""
    saved = kernels._count
    kernels._count = None
    try:
        yield
    finally:
        kernels._count = saved


@SETTINGS
@given(problems(), st.sampled_from([None, 1, 4]), st.booleans())
def test_without_the_compiled_count_the_tables_are_the_references(args, depth, cover):
    """Where the compiled module is not built (or rows hold over 128 relevant scores), the
    segment maxima and the sparse or dense counts rank alike: the reference's table, and with
    a depth its first items."""
    query, gallery, rest = split(args)
    expected = rank_embeddings_by_full_sort(query, gallery, **rest)
    with python_counts():
        engine = rank_embeddings(query, gallery, depth=depth, cover_relevant=cover, **rest)
    if depth is None:
        assert_same_table(engine, expected)
    else:
        assert_prefix(engine, expected, depth, cover)


def test_a_good_model_with_a_depth_counts_sparsely_in_both_passes():
    x, lab = clusters(600, 30)
    with python_counts():
        for block_size in ((64, 64), (16, 128)):  # the symmetric pass, then the one-sided one
            expected = rank_embeddings_by_full_sort(x, query_labels=lab, block_size=block_size)
            with counting_branches() as calls:
                engine = rank_embeddings(x, query_labels=lab, depth=3, block_size=block_size)
            assert_prefix(engine, expected, 3, cover=False)
            assert calls["sparse"].call_count > 0
            if block_size[0] == block_size[1]:
                # some counts read the transposed products (the columns of the symmetric pass)
                assert any(c.args[7] is not None for c in calls["sparse"].call_args_list)
        # query/gallery, without a depth: few relevant items per query keep the sparse count
        q, gallery = x[:100], x[100:]
        kwargs = dict(query_labels=lab[:100], gallery_labels=lab[100:], block_size=(32, 128))
        with counting_branches() as calls:
            engine = rank_embeddings(q, gallery, **kwargs)
        assert calls["sparse"].call_count > 0
        assert_same_table(engine, rank_embeddings_by_full_sort(q, gallery, **kwargs))


@pytest.mark.skipif(kernels._count is None, reason="the compiled count is not built")
@pytest.mark.parametrize("cover", [False, True])
def test_the_compiled_count_reads_the_items_above_the_thresholds_in_both_passes(cover):
    """Where the compiled module is built, every block of a good model is counted by one pass
    over the items above each row's threshold (``count_above``; in the symmetric pass one pass
    over each block for the queries of its rows and of its columns): no segment maxima, no
    sparse or dense count; the listed items are the reference's first, with a depth (the
    thresholds raised by the heaps) and without."""
    x, lab = clusters(600, 30)
    for depth in (3, None):
        for block_size in ((64, 64), (16, 128)):
            expected = rank_embeddings_by_full_sort(x, query_labels=lab, block_size=block_size)
            with (
                counting_branches() as calls,
                mock.patch.object(
                    one_sided, "segment_maxima", wraps=kernels.segment_maxima
                ) as seeds,
                mock.patch.object(two_sided, "segment_maxima", wraps=kernels.segment_maxima) as sm,
                mock.patch.object(counting, "count_above", wraps=counting.count_above) as above,
                mock.patch.object(
                    kernels._count, "count_above_both", wraps=kernels._count.count_above_both,
                ) as both,
            ):
                engine = rank_embeddings(
                    x, query_labels=lab, depth=depth, cover_relevant=cover,
                    block_size=block_size,
                )
            if depth is None:
                assert_same_table(engine, expected)
            else:
                assert_prefix(engine, expected, depth, cover)
            assert above.call_count > 0
            assert calls["sparse"].call_count == calls["dense"].call_count == 0
            assert sm.call_count == 0
            # (the one-sided pass reads a few blocks' maxima before counting, for its seeds)
            assert seeds.call_count <= (THETA_EVERY * -(-600 // block_size[0]) if depth else 0)
            # the symmetric pass reads a block once for the queries on both of its sides
            assert (both.call_count > 0) == (block_size[0] == block_size[1])


@pytest.mark.parametrize("kind", ["normal", "binary", "collapsed"])
def test_a_weak_model_with_one_huge_class_counts_densely(kind):
    rng = np.random.default_rng(1)
    x = torch.tensor(embeddings(rng, 400, 4, kind))
    lab = labels(rng, 400, 3, huge=True)
    for block_size in ((64, 64), (32, 128)):
        kwargs = dict(query_labels=lab, block_size=block_size, similarity="dot")
        with counting_branches() as calls:
            engine = rank_embeddings(x, **kwargs)
        assert calls["dense"].call_count > 0
        assert_same_table(engine, rank_embeddings_by_full_sort(x, **kwargs))


def test_collapsed_embeddings_tie_everything():
    x = torch.full((150, 3), 0.25)
    lab = torch.arange(150) % 4
    for similarity in ("cosine", "dot", "euclidean"):
        kwargs = dict(query_labels=lab, similarity=similarity, block_size=(64, 64))
        expected = rank_embeddings_by_full_sort(x, **kwargs)
        assert bool((expected.above == 0).all()) and bool((expected.tied == 149).all())
        assert_same_table(rank_embeddings(x, **kwargs), expected)


def test_zero_rows_under_cosine_tie_at_zero():
    rng = np.random.default_rng(2)
    x = torch.tensor(embeddings(rng, 130, 3, "duplicates"))
    x[::7] = 0.0
    lab = torch.tensor(rng.integers(0, 5, 130))
    kwargs = dict(query_labels=lab, block_size=(64, 64))
    assert_same_table(rank_embeddings(x, **kwargs), rank_embeddings_by_full_sort(x, **kwargs))


def test_exclusions_ignore_label_and_graded_relevance():
    rng = np.random.default_rng(3)
    g = torch.tensor(embeddings(rng, 200, 5, "duplicates"))
    q = torch.tensor(embeddings(rng, 40, 5, "duplicates"))
    gl, ql = torch.tensor(rng.integers(0, 6, 200)), torch.tensor(rng.integers(0, 5, 40))
    cameras = (torch.tensor(rng.integers(0, 3, 40)), torch.tensor(rng.integers(0, 3, 200)))
    graded = [
        {int(i): float(rng.integers(1, 4)) for i in rng.choice(200, 6, replace=False)}
        for _ in range(40)
    ]
    cases = [
        # re-identification: same label and camera excluded, ids shared with gallery items
        dict(
            query_labels=ql, gallery_labels=gl, query_cameras=cameras[0],
            gallery_cameras=cameras[1], query_ids=torch.arange(40),
            gallery_ids=torch.tensor(rng.integers(0, 60, 200)),
        ),
        # an ignore label removes gallery items for every query
        dict(query_labels=ql, gallery_labels=gl, ignore_label=5),
        # graded relevance: tied items by decreasing grade
        dict(relevance="ids", relevant_ids=graded),
    ]
    for kwargs in cases:
        for block_size in (None, (8, 64)):
            engine = rank_embeddings(q, g, block_size=block_size, **kwargs)
            expected = rank_embeddings_by_full_sort(q, g, block_size=block_size, **kwargs)
            assert_same_table(engine, expected)
    # same source with an ignore label: not every item kept, so the one-sided pass
    lab = torch.tensor(rng.integers(0, 4, 200))
    with passes_taken() as seen:
        expected = rank_embeddings_by_full_sort(g, query_labels=lab, ignore_label=3)
        engine = rank_embeddings(g, query_labels=lab, ignore_label=3)
    check_pass(seen)
    assert not seen["layouts"][0].symmetric
    assert_same_table(engine, expected)


def test_the_reference_catches_a_one_ulp_change():
    """The comparison is sharp: one score moved by one ulp changes the reference's table."""
    x, lab = clusters(70, 5, dim=4)
    x[3] = x[5]  # a tie between items 3 and 5 for every query
    expected = rank_embeddings_by_full_sort(x, query_labels=lab, similarity="dot")
    x[3, 0] = torch.nextafter(x[3, 0], torch.tensor(float("inf")))
    moved = rank_embeddings(x, query_labels=lab, similarity="dot")
    assert not (
        torch.equal(moved.above, expected.above) and torch.equal(moved.tied, expected.tied)
    )


@pytest.mark.parametrize("same_source", [True, False])
def test_on_the_emulated_cuda_device(fake_cuda, same_source):
    rng = np.random.default_rng(4)
    x = torch.tensor(embeddings(rng, 260, 6, "duplicates"))
    lab = labels(rng, 260, 8, huge=False)
    if same_source:
        args, kwargs = (to_fake_cuda(x),), dict(query_labels=lab, block_size=(64, 64))
    else:
        args = (to_fake_cuda(x[:50]), to_fake_cuda(x[50:]))
        kwargs = dict(query_labels=lab[:50], gallery_labels=lab[50:])
    for similarity in ("cosine", "dot"):
        expected = rank_embeddings_by_full_sort(*args, similarity=similarity, **kwargs)
        assert_same_table(rank_embeddings(*args, similarity=similarity, **kwargs), expected)
        # the depth on a device counts every block densely: the listed items are the first
        engine = rank_embeddings(*args, similarity=similarity, depth=2, **kwargs)
        assert_prefix(engine, expected, 2, cover=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_relevant_scores_read_from_gathered_rows_equal_the_reference(kind, similarity):
    """Relevant items in more gallery blocks than the budget keeps: their scores come from
    products of the same shape over their gathered rows (not from their blocks, which would
    be computed twice). Bit for bit the reference's table, ties of duplicate, collapsed,
    binary and permuted rows included."""
    rng = np.random.default_rng(5)
    query = torch.tensor(embeddings(rng, 70, 8, kind))
    gallery = torch.tensor(embeddings(rng, 700, 8, kind))
    rest = dict(
        query_labels=labels(rng, 70, 9, False), gallery_labels=labels(rng, 700, 9, False),
        similarity=similarity, block_size=(64, 64), memory_budget=2**16,
    )
    expected = rank_embeddings_by_full_sort(query, gallery, **rest)
    with mock.patch.object(one_sided, "read_gathered", wraps=one_sided.read_gathered) as read:
        engine = rank_embeddings(query, gallery, **rest)
    assert read.call_count >= 1
    assert_same_table(engine, expected)


def test_gathered_relevant_scores_on_the_emulated_cuda_device(fake_cuda):
    rng = np.random.default_rng(6)
    query = to_fake_cuda(torch.tensor(embeddings(rng, 40, 6, "duplicates")))
    gallery = to_fake_cuda(torch.tensor(embeddings(rng, 500, 6, "duplicates")))
    rest = dict(
        query_labels=labels(rng, 40, 7, False), gallery_labels=labels(rng, 500, 7, False),
        block_size=(64, 64), memory_budget=2**16,
    )
    expected = rank_embeddings_by_full_sort(query, gallery, **rest)
    with mock.patch.object(one_sided, "read_gathered", wraps=one_sided.read_gathered) as read:
        engine = rank_embeddings(query, gallery, **rest)
    assert read.call_count >= 1
    assert_same_table(engine, expected)


def assert_within_depth(engine: RankTable, expected: RankTable, depth: int) -> None:
    """Without ``locate_first``: each query lists a prefix of the reference's items holding every
    item within the top ``depth`` positions (its best one only if it is there), with the
    reference's above and tied; the measures whose cut-offs are at most ``depth`` are the
    reference's."""
    for name in ("num_relevant", "gallery_size"):
        assert torch.equal(getattr(engine, name), getattr(expected, name)), name
    assert torch.equal(engine.depth, torch.full_like(expected.num_relevant, depth))
    for q in range(expected.num_queries):
        e0, e1 = int(engine.ptr[q]), int(engine.ptr[q + 1])
        r0, r1 = int(expected.ptr[q]), int(expected.ptr[q + 1])
        listed = e1 - e0
        within = int((expected.above[r0:r1] < depth).sum())
        assert within <= listed <= r1 - r0, (q, listed, within)
        assert torch.equal(engine.above[e0:e1], expected.above[r0 : r0 + listed]), q
        assert torch.equal(engine.tied[e0:e1], expected.tied[r0 : r0 + listed]), q
    names = [f"{base}@{k}" for base in ("hit_rate", "recall", "ndcg", "map", "mrr", "precision")
             for k in sorted({1, depth})]
    options = M.MeasureOptions(empty_queries="zero")
    got = M.retrieval_measures(engine, names, options=options)
    want = M.retrieval_measures(expected, names, options=options)
    for name in names:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-12, msg=name)


@SETTINGS
@given(problems(), st.integers(1, 6))
def test_without_locate_first_the_items_within_the_depth_are_the_references(args, depth):
    """``locate_first=False`` (the qrels form under an evaluator's protocol): rows whose relevant
    items all lie deeper stop being ranked, and those within the depth are still exact."""
    query, gallery, rest = split(args)
    expected = rank_embeddings_by_full_sort(query, gallery, **rest)
    engine = rank_embeddings(query, gallery, depth=depth, locate_first=False, **rest)
    assert_within_depth(engine, expected, depth)


def counted_product_rows(run: Any) -> tuple[Any, int]:
    """``run()`` and the rows of the counting products it made (not those reading the relevant
    scores first, gathered from their blocks, where every row is multiplied)."""
    counted, reading = [0], [False]
    original_mm, original_gathered = torch.mm, one_sided.read_gathered

    def product(a, b, *more, **kwargs):
        if not reading[0]:
            counted[0] += a.shape[0]
        return original_mm(a, b, *more, **kwargs)

    def gathering(*more, **kwargs):
        reading[0] = True
        try:
            return original_gathered(*more, **kwargs)
        finally:
            reading[0] = False

    with (
        mock.patch.object(one_sided.torch, "mm", side_effect=product),
        mock.patch.object(one_sided, "read_gathered", side_effect=gathering),
    ):
        result = run()
    return result, counted[0]


def test_finished_queries_leave_the_products():
    """A weak model (half the queries far from everything relevant): the rows whose relevant
    items all lie below the depth are dropped from the products once their counts show it,
    and what is listed is the reference's. Every one of those rows is still multiplied in the
    pass that keeps every row."""
    g = torch.Generator().manual_seed(5)
    gallery = torch.randn(6000, 16, generator=g)
    relevant = [[int(i) for i in torch.randint(0, 6000, (3,), generator=g)] for _ in range(96)]
    query = torch.randn(96, 16, generator=g)
    for q in range(0, 96, 2):  # the even queries near their first relevant item
        query[q] = gallery[relevant[q][0]] + 0.1 * torch.randn(16, generator=g)
    # (a small budget: few score blocks kept between reading relevant scores and counting)
    args = dict(relevance="ids", relevant_ids=relevant, block_size=(96, 192), memory_budget=2**20)
    expected = rank_embeddings_by_full_sort(query, gallery, **args)
    rows = {}
    for locate_first in (True, False):
        engine, rows[locate_first] = counted_product_rows(
            lambda first=locate_first: rank_embeddings(
                query, gallery, depth=10, locate_first=first, **args
            )
        )
    assert_within_depth(engine, expected, 10)
    blocks = -(-6000 // 192)
    assert rows[True] >= 96 * blocks
    # the odd queries (48) leave within the first blocks: well under three quarters remain
    assert rows[False] < 0.75 * 96 * blocks, rows


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([torch.float64, torch.float32]),
       st.sampled_from(["dot", "cosine"]))
def test_relevant_scores_gathered_from_many_blocks_are_their_blocks_scores(seed, dtype, sim):
    """Relevant items spread over more blocks than stay cached are scored in products of their
    rows gathered together. A BLAS may round a pair otherwise in another column of a product
    (double precision here: the last width mod 12 columns), so each row is gathered into its
    own block's column. Before, a double-precision relevant score could differ from its
    block's in the last bit: the item did not tie with itself (tied 0, above off by one), and
    its query's recall, precision and AP read NaN (found by an audit at memory_budget=65536)."""
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(20, 4, generator=gen, dtype=dtype)
    gallery = torch.randn(2000, 4, generator=gen, dtype=dtype)
    labels = {"query_labels": torch.randperm(100, generator=gen)[:20],
              "gallery_labels": torch.randint(0, 100, (2000,), generator=gen)}
    # (blocks of 64 columns, 4 of them in double precision's last columns; of 8 queries of as
    # many classes, whose relevant items lie in more blocks than the budget keeps)
    rest = {"similarity": sim, "memory_budget": 65536, "block_size": (8, 64), **labels}
    with mock.patch.object(one_sided, "read_gathered", wraps=one_sided.read_gathered) as spy:
        engine = rank_embeddings(query, gallery, **rest)
    assert spy.call_count > 0, "the case is meant to gather the relevant rows"
    assert bool((engine.tied >= 1).all())
    assert_same_table(engine, rank_embeddings_by_full_sort(query, gallery, **rest))


@settings(max_examples=12, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(KINDS),
    st.integers(1, 5),
    st.booleans(),
    st.sampled_from(["labels", "same source", "graded"]),
)
def test_a_huge_class_counts_its_best_relevant_scores_only(seed, kind, depth, locate_first, form):
    """With a depth, a row of many more relevant items than the depth counts only its relevant
    scores at or above its depth-th best one (ties at the cut included): one below it lies
    below the depth, and below the row's best item. The listed items are still the
    reference's (binary relevance written by score, graded in CSR order; with and without
    locate_first), and where the scores are distinct the counting is depth wide, not as wide
    as the class."""
    rng = np.random.default_rng(seed)
    gallery = torch.tensor(embeddings(rng, 240, 4, kind))
    query = None if form == "same source" else torch.tensor(embeddings(rng, 50, 4, kind))
    if form == "graded":
        grades = [
            {int(i): float(rng.integers(1, 4)) for i in rng.choice(240, 150, replace=False)}
            for _ in range(50)
        ]
        kwargs: dict[str, Any] = dict(relevance="ids", relevant_ids=grades)
    else:
        lab = labels(rng, 240, 3, huge=True)
        kwargs = dict(query_labels=lab) if query is None else dict(
            query_labels=lab[:50], gallery_labels=lab
        )
    kwargs.update(block_size=(16, 64), similarity="dot")
    q = gallery if query is None else query
    g = None if query is None else gallery
    expected = rank_embeddings_by_full_sort(q, g, **kwargs)
    # the width of each query block's counted relevant scores
    with query_blocks(lambda qb: qb.rel_sorted.shape[1]) as widths:
        engine = rank_embeddings(q, g, depth=depth, locate_first=locate_first, **kwargs)
    if locate_first:
        assert_prefix(engine, expected, depth, cover=False)
    else:
        assert_within_depth(engine, expected, depth)
    if form == "graded":
        assert engine.grade is not None and expected.grade is not None
        for qi in range(expected.num_queries):
            e0, e1 = int(engine.ptr[qi]), int(engine.ptr[qi + 1])
            r0 = int(expected.ptr[qi])
            assert torch.equal(engine.grade[e0:e1], expected.grade[r0 : r0 + e1 - e0]), qi
    if kind == "normal":
        # depth wide, or, in a block holding fewer than TOP_RELEVANT_GAIN * depth relevant
        # scores (where leaving some out spares little), all of them: never the class's
        assert widths and depth in widths, widths
        assert all(w == depth or w < TOP_RELEVANT_GAIN * depth for w in widths), widths
