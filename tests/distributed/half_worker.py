"""Half-precision embeddings over processes: ``python half_worker.py RANK WORLD INIT_FILE OUT``.

Every rank feeds its share of each case twice, the embeddings in float16 or bfloat16 and the
same numbers upcast to float32, and writes ``{case: {"half": values, "float32": values,
"state_dtype": ...}}``: the half states travel through the gather (and the sharded exchange) as
they are, and rank what the float32 ones rank. :func:`values` gives one process's answers.
"""

from __future__ import annotations

import warnings

import torch

import retrieval_metrics as rm

NAMES = ["hit_rate@1", "recall@3", "map@r", "mrr", "ndcg@5", "median_rank"]
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
FORMS = ["same_source", "query_gallery", "fixed_gallery", "sharded_gallery", "qrels",
         "crossmodal"]
N, DIM = 60, 12


def _data():
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(0, 8, (N,), generator=gen)
    emb = torch.randn(8, DIM, generator=gen)[labels] + 0.8 * torch.randn(N, DIM, generator=gen)
    emb[7] = emb[3]  # a duplicate: ties across processes
    return emb, labels


def _share(n: int, rank: int, world: int) -> list[int]:
    return list(range(rank, n, world))


def _metric(form: str):
    if form == "crossmodal":
        return rm.CrossModalRetrieval(k=(1, 5))
    if form == "qrels":
        qrels = {q: {40 + (q * 7 + j) % 20: 1 + j % 2 for j in range(1 + q % 3)} for q in range(40)}
        return rm.RetrievalMetrics(NAMES, qrels=qrels, ignore_identical_ids=False)
    return rm.RetrievalMetrics(NAMES, gallery_sharded=form == "sharded_gallery")


def feed(metric, form: str, cast, rank: int, world: int) -> None:
    """This rank's share of ``form``, the embeddings through ``cast``."""
    emb, labels = _data()
    mine = torch.tensor(_share(N, rank, world))
    if form == "same_source":
        for part in mine.split(7):
            metric.update(cast(emb[part]), labels[part], ids=part)
        return
    if form == "crossmodal":
        images = mine[mine < 20]
        captions = (emb[images] + 0.5 * emb[images + 20]).contiguous()
        metric.update(cast(emb[images]), cast(captions), images)
        return
    queries, docs = mine[mine < 40], mine[mine >= 40]
    ids = {"qrels": True}.get(form, False)
    if form == "fixed_gallery":
        every = torch.arange(40, N)
        metric.set_gallery(cast(emb[every]), labels[every])
    else:
        for part in docs.split(4):
            if ids:
                metric.update(cast(emb[part]), ids=part, role="gallery")
            else:
                metric.update(cast(emb[part]), labels[part], ids=part, role="gallery")
    for part in queries.split(5):
        if ids:
            metric.update(cast(emb[part]), ids=part, role="query")
        else:
            metric.update(cast(emb[part]), labels[part], ids=part, role="query")


def values(form: str, dtype: torch.dtype, rank: int = 0, world: int = 1) -> dict:
    out = {}
    for name, cast in (("half", lambda t: t.to(dtype)),
                       ("float32", lambda t: t.to(dtype).float())):
        metric = _metric(form)
        feed(metric, form, cast, rank, world)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = {k: float(v) for k, v in metric.compute().items()}
        held = [v for k, v in metric.metric_state.items() if k.endswith("emb")]
        dtypes = {str(t.dtype) for v in held for t in (v if isinstance(v, list) else [v])}
        if form == "fixed_gallery":
            dtypes.add(str(metric._gallery.emb.stored_dtype))
        out[f"{name}_state_dtypes"] = sorted(dtypes)
    return out


def all_cases(rank: int, world: int) -> dict:
    return {
        f"{form}-{dname}": values(form, dtype, rank, world)
        for form in FORMS for dname, dtype in DTYPES.items()
    }


if __name__ == "__main__":
    from launch import worker_main

    worker_main(all_cases)
