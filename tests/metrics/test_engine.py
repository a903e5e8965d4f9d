"""``engine=`` on the metric classes: every ranking of the states goes through the engine given,
and an engine plugged in at the pass (it implements only ``rank_input``; the relevance sets and
the finishing of the table are ``RankingEngine.rank``'s) gives the default engine's values on
every form that ranks embeddings and on every qrels edge case: judged documents the corpus
lacks, queries judged grade 0 only, a query whose id is a document's, Judged@K and bpref, ties
by id. One parametrized test over the engines: the library's reference engine and a test engine
(``tests/engines.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401
from engines import ENGINES, CountedReference

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
from engine_data import NAMES, QRELS, data  # noqa: E402

#: the measures of the qrels cases: cut-offs (a depth), the whole ranking, the judged documents
QRELS_NAMES = [
    "ndcg@10", "recall@100", "map", "mrr@10", "precision@5", "r_precision", "judged@10", "bpref",
]


def _same_source(m):
    emb, labels = data()
    m.update(emb, labels, ids=torch.arange(len(emb)))


def _query_gallery(m):
    emb, labels = data()
    m.update(emb[:40], labels[:40], role="query")
    m.update(emb[40:], labels[40:], role="gallery")


_QRELS = {f"q{i}": {f"d{j}": 1 + (i + j) % 3 for j in range(i % 7, 80, 9)} for i in range(40)}
_QIDS, _DIDS = [f"q{i}" for i in range(40)], [f"d{j}" for j in range(80)]


def _qrels(m):
    emb, _ = data(seed=1)
    m.update(emb[:40], ids=_QIDS, role="query")
    m.update(emb[40:], ids=_DIDS, role="gallery")


def _fixed_gallery(m):
    emb, _ = data(seed=1)
    m.set_gallery(emb[40:], ids=_DIDS)
    m.update(emb[:20], ids=_QIDS[:20], role="query")
    m.update(emb[20:40], ids=_QIDS[20:], role="query")


def _image_text(m):
    emb, _ = data(n=150, seed=2)
    m.update(emb[:50], emb[50:], torch.arange(50), text_image_ids=torch.arange(100) % 50)


#: every form that ranks embeddings: (make the metric with an engine, feed it)
FORMS = {
    "same source": (lambda e: rm.RetrievalMetrics(NAMES, engine=e), _same_source),
    "query/gallery": (lambda e: rm.RetrievalMetrics(NAMES, engine=e), _query_gallery),
    # each query's label its class: the finished table's query_class, whichever engine ranked
    "query/gallery, by class": (
        lambda e: rm.RetrievalMetrics(NAMES, engine=e, average="class"), _query_gallery
    ),
    "qrels": (lambda e: rm.RetrievalMetrics(NAMES, qrels=_QRELS, engine=e), _qrels),
    "qrels, a fixed gallery": (
        lambda e: rm.RetrievalMetrics(NAMES, qrels=_QRELS, engine=e), _fixed_gallery
    ),
    "image-text both ways": (lambda e: rm.CrossModalRetrieval(engine=e), _image_text),
}

#: 3 queries x 10 documents, judged; each case one edge of the judgments (issue 53's first)
EDGES = {
    "a judged document the corpus lacks": {
        "q0": {"d1": 1, "d4": 2, "d99": 1}, "q1": {"d2": 1}, "q2": {"d7": 1, "d9": 1},
    },
    "a query judged grade 0 only": {
        "q0": {"d1": 1, "d4": 2}, "q1": {"d2": 0, "d3": 0}, "q2": {"d7": 2, "d9": 0},
    },
    "a query whose id is a document's": {
        "q0": {"d1": 1, "d4": 2}, "d5": {"d5": 1, "d2": 1, "d8": 0}, "q2": {"d7": 1},
    },
    "every edge at once": {
        "q0": {"d1": 1, "d4": 0, "d98": 2, "d99": 1}, "d5": {"d5": 2, "d2": 1, "d8": 0},
        "q2": {"d7": 0, "d9": 0},
    },
}


def _edge(qrels, **options):
    emb = torch.randn(13, 8, generator=torch.Generator().manual_seed(5))
    qids = ["q0", "d5" if "d5" in qrels else "q1", "q2"]

    def feed(m):
        m.update(emb[:3], ids=qids, role="query")
        m.update(emb[3:], ids=[f"d{j}" for j in range(10)], role="gallery")

    return (lambda e: rm.RetrievalMetrics(QRELS_NAMES, qrels=qrels, engine=e, **options)), feed


CASES = {**FORMS, **{f"qrels, {edge}": _edge(qrels) for edge, qrels in EDGES.items()}}
CASES["qrels, every edge, ties by id"] = _edge(EDGES["every edge at once"], ties="id")
CASES["qrels, every edge, identical ids kept"] = _edge(
    EDGES["every edge at once"], ignore_identical_ids=False
)


@pytest.mark.filterwarnings("ignore:.*the cut-off reaches the whole gallery")
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_plugged_engine_gives_the_default_values(engine, case):
    """The values of the metric fed with the default engine and with ``engine``, equal; the
    plugged engine ranked them."""
    make, feed = CASES[case]
    ours = make(None)
    feed(ours)
    plugged = ENGINES[engine]()
    theirs = make(plugged)
    feed(theirs)
    values, expected = theirs.compute(), ours.compute()
    assert plugged.calls > 0
    assert values.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(values[name], value, rtol=0, atol=1e-6, msg=name)


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="`engine` must be a RankingEngine"):
        rm.RetrievalMetrics(["mrr"], engine=object())
    with pytest.raises(ValueError, match="gallery_sharded=True ranks with the blocked engine"):
        rm.RetrievalMetrics(["mrr"], gallery_sharded=True, engine=CountedReference())


def test_the_engine_ranks_on_the_emulated_device(fake_cuda):
    """On a device the states, and so the items the engine is handed, live there: the reference
    engine ranks them where they are and gives the CPU values."""
    emb, labels = data(seed=3)
    ids = torch.arange(len(emb))
    expected = rm.RetrievalMetrics(NAMES, engine=CountedReference())
    expected.update(emb, labels, ids=ids)
    engine = CountedReference()
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
