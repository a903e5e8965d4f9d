"""The ranking's options as one object, its pluggable engine, and embeddings scanned once.

* ``RankingOptions`` holds every option of the ranking, checked once with the messages the
  entry points raise, and goes down whole: the engine's passes hold the very object.
* Its ``engine`` is pluggable at the pass: the reference engine (``reference.ReferenceEngine``,
  the plain path as an engine) gives the blocked engine's tables, bit for bit.
* A metric scans its embeddings for NaN and infinities once, at ``update``; ``compute`` ranks
  them without scanning again. Counted by the calls of the scan, not by the clock.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.ranking import (
    BlockedEngine,
    RankingEngine,
    RankingOptions,
    RankTable,
    rank_embeddings,
)
from retrieval_metrics.functional.ranking.engine import schedule as S
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.reference import ReferenceEngine

FIELDS = ("ptr", "above", "tied", "num_relevant", "gallery_size", "depth")


def assert_same_table(ours: RankTable, theirs: RankTable) -> None:
    for name in FIELDS:
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    a, b = ours.query_class, theirs.query_class
    assert (a is None) == (b is None) and (a is None or torch.equal(a, b))


def problem(n: int = 300, classes: int = 12, seed: int = 0) -> Items:
    """Float32 items with exact ties (a few repeated rows), labels, ids and cameras."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n // 3, 8))
    emb = torch.tensor(base[rng.integers(0, base.shape[0], n)].astype(np.float32))
    return Items(
        emb=emb,
        labels=torch.tensor(rng.integers(0, classes, n)),
        ids=torch.arange(n),
        cameras=torch.tensor(rng.integers(0, 3, n)),
    )


# ------------------------------------------------------------------------------- the options


def test_the_defaults_are_the_librarys_and_the_checks_keep_their_messages():
    options = RankingOptions()
    for name in ("relevance", "radius", "ignore_label", "similarity", "memory_budget"):
        assert getattr(options, name) == OPTIONS[name].default, name
    assert isinstance(options.engine, BlockedEngine)
    for kwargs, match in [
        ({"similarity": "manhattan"}, r"`similarity` must be one of \('cosine', 'dot'"),
        ({"relevance": "cosine"}, '`relevance` must be "label", "radius", "qrels" or "ids"'),
        ({"relevance": "radius", "radius": -1.0}, "`radius` must be a non-negative number"),
        ({"depth": 0}, "`depth` must be a positive int or None"),
        ({"memory_budget": 10}, "`memory_budget` must be an int of at least 65536 bytes"),
    ]:
        with pytest.raises(ValueError, match=match):
            RankingOptions(**kwargs)


@pytest.mark.parametrize("same_source", [True, False])
def test_the_passes_hold_the_options_object_itself(monkeypatch, same_source):
    """No keyword relay, no dict copy: the Pass every query block reads holds the options the
    caller made (the symmetric pass for same source, the one-sided one else)."""
    seen = []
    for name in ("two_sided_pass", "one_sided_pass"):
        original = getattr(S, name)

        def spy(p, *args, original=original, **kwargs):
            seen.append(p.options)
            return original(p, *args, **kwargs)

        monkeypatch.setattr(S, name, spy)
    items = problem()
    options = RankingOptions(depth=3, memory_budget=2**22)
    if same_source:
        options.rank(items, None)
    else:
        options.rank(items.select(slice(0, 50)), items.select(slice(50, None)))
    assert seen and all(o is options for o in seen)


# ------------------------------------------------------------------------------- the engine


@pytest.mark.parametrize(
    "case", ["same source", "same source, ids and cameras", "query/gallery", "ignore label"]
)
def test_a_toy_engine_on_the_reference_path_gives_the_same_tables(case):
    items = problem()
    keep = {"same source": ("labels",), "query/gallery": ("labels", "ids")}.get(
        case, ("labels", "ids", "cameras")
    )
    items = Items(emb=items.emb, **{name: getattr(items, name) for name in keep})
    settings = {"ignore_label": 3} if case == "ignore label" else {}
    blocked = RankingOptions(block_size=(64, 64), **settings)
    toy = RankingOptions(block_size=(64, 64), engine=ReferenceEngine(), **settings)
    if case.startswith("same source"):
        queries, gallery = items, None
    else:
        queries, gallery = items.select(slice(0, 80)), items.select(slice(80, None))
    ours = blocked.rank(queries, gallery)
    assert_same_table(toy.rank(queries, gallery), ours)
    # the engine's template, called with the blocked engine's options, is the same ranking
    assert_same_table(ReferenceEngine().rank(queries, gallery, blocked, None), ours)


def test_a_toy_engine_ranks_both_directions_and_no_sharded_gallery():
    items = problem(200)
    images = Items(emb=items.emb[:60], labels=torch.arange(60))
    captions = Items(emb=items.emb[60:], labels=torch.arange(140) % 60)
    blocked = RankingOptions().rank_two_ways(images, captions)
    toy = RankingOptions(engine=ReferenceEngine()).rank_two_ways(images, captions)
    for ours, theirs in zip(toy, blocked, strict=True):
        assert_same_table(ours, theirs)  # finished alike: each query's label its class
    with pytest.raises(ValueError, match="blocked engine only"):
        RankingOptions(engine=ReferenceEngine()).rank_sharded(images, captions, None)


def test_an_engine_is_a_ranking_engine():
    class Duck:
        def rank(self, queries, gallery, options, exchange):
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="`engine` must be a RankingEngine"):
        RankingOptions(engine=Duck())
    with pytest.raises(NotImplementedError, match="must implement rank_input"):
        RankingOptions(engine=RankingEngine()).rank(problem(), None)


# ------------------------------------------------------------------------------- one scan


@pytest.fixture
def scans(monkeypatch):
    """Counts the scans of embeddings for NaN and infinities (``finite_flag`` once per
    scanned tensor: through ``all_finite`` in ``check_embeddings``, and by the metrics'
    store, which leaves the answer on a device)."""
    from retrieval_metrics.functional import primitives as P
    from retrieval_metrics.metrics import store

    calls = []
    original = P.finite_flag

    def counted(x):
        calls.append(tuple(x.shape))
        return original(x)

    monkeypatch.setattr(P, "finite_flag", counted)
    monkeypatch.setattr(store, "finite_flag", counted)
    return calls


def test_a_metric_scans_its_embeddings_at_update_only(scans):
    items = problem()
    metric = rm.RetrievalMetrics(["hit_rate@1"])
    metric.update(items.emb, items.labels)
    assert scans == [tuple(items.emb.shape)]  # one scan per update
    ours = metric.compute()
    assert len(scans) == 1  # none at compute
    table = rank_embeddings(items.emb, query_labels=items.labels)
    assert len(scans) == 2  # the keyword function scans what it is given
    expected = rm.retrieval_measures(table, ["hit_rate@1"])
    assert float(ours["hit_rate@1"]) == pytest.approx(float(expected["hit_rate@1"]), abs=1e-6)


def test_query_and_gallery_updates_scan_once_each(scans):
    items = problem()
    metric = rm.RetrievalMetrics(["hit_rate@1", "map@r"])
    metric.update(items.emb[:40], items.labels[:40], role="query")
    metric.update(items.emb[40:], items.labels[40:], role="gallery")
    metric.update(items.emb[40:60], items.labels[40:60], role="query")
    assert len(scans) == 3
    metric.compute()
    metric.per_query()
    assert len(scans) == 3


def test_non_finite_embeddings_are_still_refused_at_update():
    metric = rm.RetrievalMetrics(["hit_rate@1"])
    emb = torch.randn(6, 3)
    emb[2, 1] = float("nan")
    with pytest.raises(ValueError, match="`embeddings` contains NaN or infinite values"):
        metric.update(emb, torch.arange(6) % 2)


class LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """The most elements of any tensor an operator returned while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_depth_beyond_the_gallery_costs_what_no_depth_costs(symmetric):
    """Every item lies within a depth of the gallery's size, so a larger depth is the whole
    ranking: the same relevant items, ranks and ties. Its work did not know that: each row kept
    its depth best scores (a cut-off of 2,000,000 over 11 items held 572 MiB, 10**12 asked the
    allocator for 48 TB)."""
    gen = torch.Generator().manual_seed(0)
    emb = torch.randint(-2, 3, (12, 4), generator=gen).float()  # small integers: ties
    labels = torch.arange(12) % 3
    gallery = None if symmetric else emb.flip(0)
    kwargs = dict(query_labels=labels, gallery_labels=None if symmetric else labels.flip(0))
    with LargestTensor() as without_depth:
        whole = rank_embeddings(emb, gallery, **kwargs)
    for depth in (12, 2_000_000, 10**12):
        with LargestTensor() as seen:
            deep = rank_embeddings(emb, gallery, depth=depth, **kwargs)
        assert seen.largest <= without_depth.largest
        assert deep.depth.tolist() == [depth] * 12  # (the depth asked for, as recorded before)
        for field in ("above", "tied", "num_relevant", "num_listed"):
            assert torch.equal(getattr(deep, field), getattr(whole, field)), (depth, field)
    metric = rm.RecallAtK(k=10**12, memory_budget=65536)
    metric.update(emb, labels)
    with pytest.warns(UserWarning):  # (a cut-off at or beyond the gallery warns)
        assert float(metric.compute()) == 1.0
