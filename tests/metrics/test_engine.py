"""``engine=`` on the metric classes: every ranking of the states goes through the engine given,
and an engine that ranks as the blocked one does (the plain reference path: every score, a full
sort of each row) gives the same values on every form that ranks embeddings."""

from __future__ import annotations

import pytest
import torch

import retrieval_metrics as rm
from full_sort_engine import FullSortEngine

NAMES = ["hit_rate@1", "hit_rate@5", "map@r", "r_precision", "mrr", "ndcg@10"]


def data(n=120, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    # few distinct rows: exact ties everywhere
    base = torch.randn(n // 4, dim, generator=g)
    emb = base[torch.randint(0, n // 4, (n,), generator=g)]
    labels = torch.randint(0, 9, (n,), generator=g)
    return emb, labels


def both(make, feed):
    """The values of the metric ``make(engine)`` fed by ``feed``, with the default engine and
    with the reference engine, equal; the reference engine ranked them."""
    ours = make(None)
    feed(ours)
    engine = FullSortEngine()
    theirs = make(engine)
    feed(theirs)
    values, expected = theirs.compute(), ours.compute()
    assert engine.calls > 0
    for name, value in expected.items():
        torch.testing.assert_close(values[name], value, rtol=0, atol=1e-6, msg=name)


def test_same_source_and_query_gallery():
    emb, labels = data()
    ids = torch.arange(len(emb))
    both(lambda e: rm.RetrievalMetrics(NAMES, engine=e),
         lambda m: m.update(emb, labels, ids=ids))

    def feed(m):
        m.update(emb[:40], labels[:40], role="query")
        m.update(emb[40:], labels[40:], role="gallery")

    both(lambda e: rm.RetrievalMetrics(NAMES, engine=e), feed)


def test_qrels_and_a_fixed_gallery():
    emb, _ = data(seed=1)
    qrels = {f"q{i}": {f"d{j}": 1 + (i + j) % 3 for j in range(i % 7, 80, 9)} for i in range(40)}
    qids, dids = [f"q{i}" for i in range(40)], [f"d{j}" for j in range(80)]

    def feed(m):
        m.update(emb[:40], ids=qids, role="query")
        m.update(emb[40:], ids=dids, role="gallery")

    both(lambda e: rm.RetrievalMetrics(NAMES, qrels=qrels, engine=e), feed)

    def fixed(m):
        m.set_gallery(emb[40:], ids=dids)
        m.update(emb[:20], ids=qids[:20], role="query")
        m.update(emb[20:40], ids=qids[20:], role="query")

    both(lambda e: rm.RetrievalMetrics(NAMES, qrels=qrels, engine=e), fixed)


def test_image_text_both_ways():
    emb, _ = data(n=150, seed=2)
    images, captions = emb[:50], emb[50:]
    image_ids = torch.arange(50)

    def feed(m):
        m.update(images, captions, image_ids, text_image_ids=torch.arange(100) % 50)

    both(lambda e: rm.CrossModalRetrieval(engine=e), feed)


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="`engine` must be a RankingEngine"):
        rm.RetrievalMetrics(["mrr"], engine=object())
    with pytest.raises(ValueError, match="gallery_sharded=True ranks with the blocked engine"):
        rm.RetrievalMetrics(["mrr"], gallery_sharded=True, engine=FullSortEngine())
