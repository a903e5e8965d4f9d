"""One process of test_shared_pass.py: ``python shared_pass.py RANK WORLD INIT [PART ...] OUT``.

Every process holds the same items (as after the metric's state sync) and ranks them against
themselves, through the metric class and through ``rank_embeddings(..., exchange=)``; it writes
its tables, values and how many block products it computed. The PARTs name the rankings to
run (default: all of them, in ``PARTS``): a test of one counting backend that only compares
some of them (Triton's interpreter takes seconds a block) runs only those.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist

import retrieval_metrics as rm
from retrieval_metrics.functional.measures import retrieval_measures
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.engine import product_shape
from retrieval_metrics.metrics.distributed import DistributedExchange

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the work counter
from work_counts import counting_work

NAMES = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr", "map"]
# square blocks of 192 items (plan.square_block for this budget): 8 blocks, 36 block pairs
# of the half product for the 1,500 items
BUDGET = 2**22


def data(n: int = 1500) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, n // 5, (n,), generator=gen)
    centres = torch.randn(n // 5, 16, generator=gen)
    emb = centres[labels] + 0.9 * torch.randn(n, 16, generator=gen)
    emb[100:160] = emb[40]  # a run of identical rows: ties across blocks
    return emb, labels


# 600 queries against 4,608 gallery items (24 panels of 192: whole blocks on 1, 2 and 3
# processes' shards), D = 16
QUERIES, GALLERY, DIM = 600, 4608, 16


def query_gallery_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    g_labels = torch.randint(0, 900, (GALLERY,), generator=gen)
    centres = torch.randn(900, DIM, generator=gen)
    gallery = centres[g_labels] + torch.randn(GALLERY, DIM, generator=gen)
    q_labels = torch.randint(0, 900, (QUERIES,), generator=gen)
    queries = centres[q_labels] + torch.randn(QUERIES, DIM, generator=gen)
    return queries, gallery, q_labels, g_labels


def table_lists(table) -> dict:
    fields = ("ptr", "above", "tied", "num_relevant", "gallery_size", "depth")
    out = {name: getattr(table, name).tolist() for name in fields}
    # the measures a depth of 4 (covering the relevant items) is enough for
    values = retrieval_measures(table, NAMES[:5])
    out["values"] = {k: float(v) for k, v in values.items()}
    return out


def counted(fn):
    """fn()'s result and the number of matrix products it computed."""
    real = torch.mm
    calls, probing = [0], [False]

    def mm(*args, **kwargs):
        calls[0] += not probing[0]
        return real(*args, **kwargs)

    def uncounted(probed):
        def probe(*args):
            # (the host's BLAS asked once per shape in a process: not the ranking's products)
            probing[0] = True
            try:
                return probed(*args)
            finally:
                probing[0] = False

        return probe

    with mock.patch.object(torch, "mm", mm), \
            mock.patch.object(product_shape, "_probed_rows",
                              uncounted(product_shape._probed_rows)), \
            mock.patch.object(product_shape, "_probed_columns",
                              uncounted(product_shape._probed_columns)):
        result = fn()
    return result, calls[0]


PARTS = ("class", "depth", "full", "euclidean", "query_gallery", "sharded")


def main() -> None:
    rank, world, init_file, *parts, out = sys.argv[1:]
    rank, world = int(rank), int(world)
    parts = parts or PARTS
    unknown = set(parts) - set(PARTS)
    assert not unknown, f"unknown parts {sorted(unknown)}; expected some of {PARTS}"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        emb, labels = data()
        result = {}
        if "class" in parts:
            result["class"] = _class(emb, labels, rank, world)
        # the functional layer, every process holding every item
        for name, options in [
            ("depth", dict(depth=4, cover_relevant=True)),
            ("full", {}),
            ("euclidean", dict(similarity="euclidean")),  # no symmetric pass: query blocks shared
        ]:
            if name not in parts:
                continue
            exchange = DistributedExchange() if world > 1 else None
            table, products = counted(
                lambda options=options, exchange=exchange: rank_embeddings(
                    emb, query_labels=labels, memory_budget=BUDGET, exchange=exchange, **options
                )
            )
            result[name] = {"table": table_lists(table), "products": products}
        # queries against a gallery through the class: the gathered gallery with each process
        # its share of the queries, and the sharded gallery with each process its shard
        queries, gallery, q_labels, g_labels = query_gallery_data()
        for name, sharded in (("query_gallery", False), ("sharded", True)):
            if name not in parts:
                continue
            metric = rm.RetrievalMetrics(NAMES[:5], gallery_sharded=sharded)
            mine = torch.arange(len(queries))[rank::world]
            metric.update(queries[mine], q_labels[mine], ids=mine, role="query")
            shard = torch.arange(len(gallery)).chunk(world)[rank]
            # (ids apart from the queries': a gallery id that is a query's is that query)
            metric.update(gallery[shard], g_labels[shard], ids=shard + len(queries), role="gallery")
            with counting_work() as work:
                values = metric.compute()
            result[name] = {
                "values": {k: float(v) for k, v in values.items()},
                "multiply_adds": work.multiply_adds,
            }
        with open(out, "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def _class(emb: torch.Tensor, labels: torch.Tensor, rank: int, world: int) -> dict:
    """The metric class fed this rank's share of the updates, with ids; its values, per-query
    values and block products."""
    # (a class gives its ranking three quarters of its budget: the functional layer's BUDGET)
    metric = rm.RetrievalMetrics(NAMES, memory_budget=BUDGET * 4 // 3)
    idx = torch.arange(len(emb))[rank::world]
    for chunk in idx.split(200):
        metric.update(emb[chunk], labels[chunk], ids=chunk)
    values, products = counted(metric.compute)
    return {
        "values": {k: float(v) for k, v in values.items()},
        "per_query": {k: v.tolist() for k, v in metric.per_query().items()},
        "products": products,
    }


if __name__ == "__main__":
    main()
