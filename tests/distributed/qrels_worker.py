"""One process of the multi-process qrels tests: ``python qrels_worker.py RANK WORLD INIT_FILE
SCENARIOS OUT``.

Queries and corpus are spread unevenly over the processes the way DistributedSampler spreads
them (padding repeats the first items; batch sizes differ per rank), and the refusal scenarios
give the processes what they must agree on differently; each writes ``{scenario: {"values",
"notes"} or {"error"}}`` as JSON.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenarios import batches, sampler_indices

import retrieval_metrics as rm

NAMES = ["hit_rate@1", "recall@10", "precision@5", "map@10", "mrr@10", "ndcg@10", "map", "ndcg",
         "r_precision",
         # the measures that read which documents were judged, ir_measures' names, a level
         "Judged@10", "Bpref", "nDCG(judged_only=True)@10", "P(rel=2)@5", "ERR@10", "RBP(p=0.8)",
         "rbp_residual", "AP(judged_only=True)"]
NUM_Q, NUM_D, DIM = 23, 61, 6
# every measure at a cut-off: under sentence-transformers' protocol the ranking stops at 10 and
# queries with no relevant document there leave the products
CUT_NAMES = ["hit_rate@1", "recall@10", "precision@5", "map@10", "mrr@10", "ndcg@10"]


def _same(i):
    return i


# ids that do not meet the judgments': every query id with another prefix, every document id
# with another prefix, and all but ten of the documents
IDS_DO_NOT_MEET = {
    "query_ids_renamed": (lambda i: f"query-{i}", _same),
    "document_ids_renamed": (_same, lambda i: f"doc-{i}"),
    "most_documents_renamed": (_same, lambda i: i if int(i[1:]) < 10 else f"doc-{i}"),
}


def data(tied: bool = False):
    """Queries, corpus, string ids (five queries are corpus documents) and graded qrels with
    documents the corpus lacks, grade-0 judgments and queries without judgments. ``tied``: the
    corpus is 8 distinct documents repeated under other ids (scores tie, relevant with
    relevant and with others)."""
    g = torch.Generator().manual_seed(11)
    queries = torch.randn(NUM_Q, DIM, generator=g, dtype=torch.float64)
    docs = torch.randn(NUM_D, DIM, generator=g, dtype=torch.float64)
    if tied:
        docs = docs[torch.arange(NUM_D) % 8]
    q_ids = [f"q{i}" for i in range(NUM_Q)]
    d_ids = [f"d{i}" for i in range(NUM_D)]
    d_ids[:5] = q_ids[:5]
    qrels = {}
    for i, qid in enumerate(q_ids):
        if i % 7 == 6:
            continue
        picked = torch.randperm(NUM_D, generator=g)[: 1 + i % 5].tolist()
        qrels[qid] = {d_ids[j]: int(torch.randint(0, 4, (1,), generator=g)) for j in picked}
        if i % 5 == 0:
            qrels[qid][f"missing-{i}"] = 2
    qrels["never-given"] = {"d9": 1}
    return queries, docs, q_ids, d_ids, qrels


def every_query_judged() -> dict:
    """data()'s qrels with a judgment for each query it leaves unjudged (a ranking of judged
    queries only ranks them all: its lists are the run's)."""
    _, _, q_ids, d_ids, qrels = data()
    return {**qrels, **{q: {d_ids[7]: 1} for q in q_ids if q not in qrels}}


def feed(metric, rank: int, world: int, fixed: bool = False, tied: bool = False,
         renamed=None) -> None:
    """This process's share: the corpus (unless ``fixed``) and the queries, in batches.
    ``renamed``: (query id -> id given, document id -> id given), ids that do not meet."""
    queries, docs, q_ids, d_ids, _ = data(tied)
    if renamed is not None:
        q_ids, d_ids = [renamed[0](i) for i in q_ids], [renamed[1](i) for i in d_ids]
    size = 3 + 2 * rank
    if not fixed:
        # the corpus over the processes too, padded, in batches of another size
        for b in batches(sampler_indices(NUM_D, rank, world), 7 + rank):
            metric.update(docs[b], ids=[d_ids[i] for i in b], role="gallery")
    for b in batches(sampler_indices(NUM_Q, rank, world), size):
        metric.update(queries[b], ids=[q_ids[i] for i in b], role="query")


def build(fixed: bool = False, qrels=None, sharded: bool = False, ties: str = "expected",
          protocol: str | None = None, run_depth: int | None = None):
    """The metric; ``ties="id"`` ranks the tied corpus of ``data(tied=True)``; with
    ``protocol``, the measures of CUT_NAMES under it."""
    _, docs, _, d_ids, default = data(tied=ties == "id")
    options = {"protocol": protocol} if protocol else {"ties": ties}
    metric = rm.RetrievalMetrics(
        CUT_NAMES if protocol else NAMES, qrels=default if qrels is None else qrels,
        gallery_sharded=sharded, run_depth=run_depth, **options,
    )
    metric.set_dtype(torch.float64)
    if fixed:
        metric.set_gallery(docs, ids=d_ids)
    return metric


def scored(metric) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = metric.compute()
        notes = metric.summary(num_bootstrap=10).notes
    return {"values": {k: float(v) for k, v in values.items()}, "notes": notes}


def warned(metric) -> dict:
    """The warnings compute() gave, and the values."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = metric.compute()
    return {"warnings": [str(w.message) for w in caught],
            "values": {k: float(v) for k, v in values.items()}}


def refused(metric) -> dict:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            metric.compute()
    except ValueError as err:
        return {"error": str(err)}
    return {"error": None}


def run(scenario: str, rank: int, world: int) -> dict:
    if scenario == "qrels":
        metric = build()
        feed(metric, rank, world)
        return scored(metric)
    if scenario == "qrels_fixed":
        metric = build(fixed=True)
        feed(metric, rank, world, fixed=True)
        return scored(metric)
    if scenario == "qrels_fixed_on_disk":
        # the corpus given as a .npy file on every process: its norms and its scan for NaN
        # made by the first ranking's read of it (RowBatches.norms_as_read)
        metric = build()
        docs, d_ids = data()[1], data()[3]
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "corpus.npy"
            np.save(path, docs.numpy())
            metric.set_gallery(str(path), ids=d_ids)
            feed(metric, rank, world, fixed=True)
            return scored(metric)
    if scenario in ("qrels_ties_by_id", "qrels_fixed_ties_by_id"):
        fixed = scenario == "qrels_fixed_ties_by_id"
        metric = build(fixed=fixed, ties="id")
        feed(metric, rank, world, fixed=fixed, tied=True)
        return scored(metric)
    if scenario == "qrels_run_depth":
        metric = build(protocol="sentence_transformers")
        feed(metric, rank, world)
        return scored(metric)
    if scenario == "qrels_sharded":
        # each process keeps its part of the corpus; the sampler's padding puts a few documents
        # on two processes, dropped by their ids
        metric = build(sharded=True)
        feed(metric, rank, world)
        return scored(metric)
    if scenario == "qrels_run":
        # each query's top 12 from every process's states, ids back as text
        metric = build(ties="id")
        feed(metric, rank, world, tied=True)
        _, _, q_ids, d_ids, _ = data(tied=True)
        return {"run": metric.run(12, ids=q_ids + d_ids)}
    if scenario in ("qrels_run_kept", "qrels_run_fixed_kept"):
        # run_depth, the corpus in updates or given once: compute()'s ranking keeps each
        # process's share of the lists, gathered: run() lists them on every process, no product
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: work counts
        from work_counts import counting_work

        fixed = scenario == "qrels_run_fixed_kept"
        metric = build(fixed=fixed, qrels=every_query_judged(), run_depth=12)
        feed(metric, rank, world, fixed=fixed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            metric.compute()
        _, _, q_ids, d_ids, _ = data()
        with counting_work() as work:
            run_ = metric.run(12, ids=q_ids + d_ids)
        return {"run": run_, "run_multiply_adds": work.multiply_adds}
    if scenario == "qrels_run_sharded":
        # each process holds a shard of the corpus (the sampler's padding on two of them): the
        # best of each shard, merged
        metric = build(sharded=True)
        feed(metric, rank, world)
        _, _, q_ids, d_ids, _ = data()
        return {"run": metric.run(12, ids=q_ids + d_ids)}
    if scenario in IDS_DO_NOT_MEET:
        metric = build()
        feed(metric, rank, world, renamed=IDS_DO_NOT_MEET[scenario])
        return warned(metric) if scenario == "most_documents_renamed" else refused(metric)
    if scenario == "sharded_integer_ids_collide":
        # integer ids from two counters: only the last process's shard holds document 0, the id
        # of query 0; every process refuses
        queries, docs = data()[:2]
        metric = rm.RetrievalMetrics(["mrr"], qrels={0: [5], 1: [6]}, gallery_sharded=True)
        metric.update(queries[:2], ids=[0, 1], role="query")
        d = [5, 6] if rank < world - 1 else [0, 7]
        metric.update(docs[d], ids=d, role="gallery")
        return refused(metric)
    if scenario == "different_qrels":
        _, _, _, _, qrels = data()
        if rank == world - 1:
            qrels = {**qrels, "q1": {"d2": 1}}
        metric = build(qrels=qrels)
        feed(metric, rank, world)
        return refused(metric)
    docs = data()[1]
    if scenario in ("set_gallery_shards", "set_gallery_shards_sharded"):
        # each process fixes its own half of the gallery (a gallery split over processes is
        # update(role="gallery") with gallery_sharded=True): ranked against its half alone
        metric = rm.RetrievalMetrics(
            ["mrr"], gallery_sharded=scenario.endswith("_sharded"), similarity="dot"
        )
        t = torch.arange(rank * 10, rank * 10 + 10)
        metric.set_gallery(docs[t], t % 3, ids=t)
        metric.update(docs[:4], torch.arange(4) % 3, ids=torch.arange(100, 104), role="query")
        return refused(metric)
    if scenario == "set_gallery_reordered":
        # every process fixes the same gallery, the last in another row order: refused, and
        # the message says the order counts (it named only "different galleries")
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot")
        t = torch.arange(20)
        if rank == world - 1:
            t = t.flip(0)
        metric.set_gallery(docs[t], t % 3, ids=t)
        metric.update(docs[:4], torch.arange(4) % 3, ids=torch.arange(100, 104), role="query")
        return refused(metric)
    if scenario == "set_gallery_on_some_processes":
        # the last process never fixed a gallery (nor received a query): it would be given a
        # share of the queries to rank against none
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot")
        if rank < world - 1:
            metric.set_gallery(docs[:10], torch.arange(10) % 3, ids=torch.arange(10))
            metric.update(docs[:4], torch.arange(4) % 3, ids=torch.arange(100, 104),
                          role="query")
        return refused(metric)
    if scenario == "different_options":
        metric = rm.RetrievalMetrics(
            ["mrr"], gallery_sharded=True, similarity="cosine" if rank == 0 else "dot"
        )
        t = torch.arange(rank * 10, rank * 10 + 10)
        metric.update(docs[t], t % 3, ids=t, role="gallery")
        metric.update(docs[:4], torch.arange(4) % 3, ids=torch.arange(100, 104), role="query")
        return refused(metric)
    if scenario == "ids_on_some_processes":
        metric = rm.RetrievalMetrics(["mrr"])
        t = torch.arange(rank * 10, rank * 10 + 10)
        labels = t % 3
        if rank == 0:
            metric.update(docs[t], labels, ids=t)
        else:
            metric.update(docs[t], labels)
        return refused(metric)
    if scenario == "ids_on_some_processes_lists":
        metric = rm.RetrievalMetrics(["mrr"])
        ids = [rank] if rank == 0 else None
        metric.update(ranked_ids=[["a", "b"]], relevant_ids=[{"b"}], ids=ids)
        return refused(metric)
    if scenario == "int_and_string_labels":
        metric = rm.RetrievalMetrics(["mrr"])
        t = torch.arange(rank * 10, rank * 10 + 10)
        labels = (t % 3).tolist() if rank == 0 else [f"class{int(v) % 3}" for v in t]
        metric.update(docs[t], labels, ids=t)
        return refused(metric)
    if scenario == "int_and_string_image_ids":
        metric = rm.CrossModalRetrieval(k=(1,))
        t = torch.arange(rank * 4, rank * 4 + 4)
        ids = t.tolist() if rank == 0 else [f"image{int(v)}" for v in t]
        metric.update(docs[t], docs[t] + 0.1, ids)
        return refused(metric)
    raise KeyError(scenario)


def scenarios_run(rank: int, world: int, scenarios: str) -> dict:
    return {name: run(name, rank, world) for name in scenarios.split(",")}


if __name__ == "__main__":
    from launch import worker_main

    worker_main(scenarios_run)
