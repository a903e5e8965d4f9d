"""One process of the multi-process engine test: ``python engine_worker.py RANK WORLD INIT_FILE
OUT``.

Each process updates its share of the same data (every item once, with ids) into metrics that
rank with the reference-path engine, for same source, query/gallery and qrels, and writes each
one's values as JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_data import NAMES, QRELS, data
from launch import worker_main

import retrieval_metrics as rm
from engines import CountedReference


def run(rank: int, world: int) -> dict:
    emb, labels = data()
    ids = list(range(len(emb)))
    mine = ids[rank::world]
    out = {}
    for case in ("same_source", "query_gallery", "qrels"):
        engine = CountedReference()
        if case == "qrels":
            metric = rm.RetrievalMetrics(NAMES, qrels=QRELS, engine=engine)
        else:
            metric = rm.RetrievalMetrics(NAMES, engine=engine)
        for i in mine:
            if case == "same_source":
                metric.update(emb[i : i + 1], labels[i : i + 1], ids=[i])
            elif case == "query_gallery":
                role = "query" if i < 40 else "gallery"
                metric.update(emb[i : i + 1], labels[i : i + 1], ids=[i], role=role)
            else:
                role = "query" if i < 40 else "gallery"
                name = f"q{i}" if i < 40 else f"d{i}"
                metric.update(emb[i : i + 1], ids=[name], role=role)
        values = metric.compute()
        out[case] = {"values": {k: float(v) for k, v in values.items()}, "calls": engine.calls}
    return out


if __name__ == "__main__":
    worker_main(run)
