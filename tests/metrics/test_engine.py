"""``engine=`` on the metric classes: every ranking of the states goes through the engine given,
and an engine that ranks as the blocked one does (the plain reference path: every score, a full
sort of each row) gives the same values on every form that ranks embeddings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401
from full_sort_engine import FullSortEngine

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
from engine_data import NAMES, QRELS, data  # noqa: E402


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


def test_the_engine_ranks_on_the_emulated_device(fake_cuda):
    """On a device the states, and so the items the engine is handed, live there: the reference
    engine ranks them where they are and gives the CPU values."""
    emb, labels = data(seed=3)
    ids = torch.arange(len(emb))
    expected = rm.RetrievalMetrics(NAMES, engine=FullSortEngine())
    expected.update(emb, labels, ids=ids)
    engine = FullSortEngine()
    metric = rm.RetrievalMetrics(NAMES, engine=engine).to("cuda")
    metric.update(emb.to("cuda"), labels.to("cuda"), ids=ids.to("cuda"))
    values = metric.compute()
    assert engine.calls > 0 and all(v.device.type == "cuda" for v in values.values())
    for name, value in expected.compute().items():
        torch.testing.assert_close(values[name].cpu(), value, rtol=0, atol=1e-6, msg=name)


def test_the_engine_ranks_on_two_processes(tmp_path):
    """Each process holds half of the items; every process gets one process's values, ranked by
    the engine (on several processes it ranks a share of the queries, or all of them)."""
    emb, labels = data()
    expected = {}
    one = rm.RetrievalMetrics(NAMES)
    one.update(emb, labels, ids=torch.arange(len(emb)))
    expected["same_source"] = one.compute()
    one = rm.RetrievalMetrics(NAMES)
    one.update(emb[:40], labels[:40], ids=torch.arange(40), role="query")
    one.update(emb[40:], labels[40:], ids=torch.arange(40, len(emb)), role="gallery")
    expected["query_gallery"] = one.compute()
    one = rm.RetrievalMetrics(NAMES, qrels=QRELS)
    one.update(emb[:40], ids=[f"q{i}" for i in range(40)], role="query")
    one.update(emb[40:], ids=[f"d{i}" for i in range(40, len(emb))], role="gallery")
    expected["qrels"] = one.compute()
    results = launch.run_workers(HERE / "engine_worker.py", [], 2, tmp_path)
    for rank, result in enumerate(results):
        for case, values in expected.items():
            assert result[case]["calls"] > 0, (rank, case)
            for name, value in values.items():
                assert abs(result[case]["values"][name] - float(value)) <= 1e-6, (
                    rank, case, name
                )
