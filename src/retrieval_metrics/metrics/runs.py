"""``metric.run(k)``: each query's top K gallery items from the metric's states, as a run.

The states of the embedding forms hold both sides (same source; queries and gallery in
updates, judged by qrels or not), deduplicated and gathered from every process as ``compute()``
reads them; :func:`retrieval_metrics.functional.top_k` lists each query's K best, with the
metric's similarity and tie rule, a query never listing itself (same source) nor, judged by
qrels, a document of its own id (``ignore_identical_ids``). The states keep string ids as
64-bit codes: the run gets its text back from ``ids`` (the id values as given).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.ranking.tie_order import order_ranks
from retrieval_metrics.functional.ranking.top_lists import top_k

if TYPE_CHECKING:
    from retrieval_metrics.metrics.retrieval import RetrievalMetric

__all__ = ["run_of"]

RUN_FORMS = ("same_source", "query_gallery", "qrels")


def run_of(
    metric: RetrievalMetric, k: int, ids: Iterable[Any] | None
) -> dict[str, list[tuple[str, float]]]:
    """The run of ``metric.run(k, ids=ids)`` (on its synced states)."""
    form = metric._synced_form()
    if form.kind not in RUN_FORMS:
        hint = (
            "the queries ranked against a gallery fixed with set_gallery are not kept: rank them "
            "with retrieval_metrics.functional.top_k (or `retrieval-metrics evaluate "
            "--write-run`)" if form.kind == "fixed_gallery"
            else "its rankings came ranked already"
        )
        raise ValueError(f"{type(metric).__name__}.run() lists embeddings; {hint}")
    if metric.gallery_sharded and metric._several_processes():
        raise ValueError(
            f"{type(metric).__name__}.run() lists the whole gallery's best items; with "
            "gallery_sharded=True each process holds a shard of it: gather the gallery "
            "(gallery_sharded=False) to write a run"
        )
    queries, gallery = form.sides(metric)
    if gallery is None and form.kind != "same_source":
        raise ValueError(f"{type(metric).__name__}.run(): no gallery items were given")
    same = gallery is None
    items = queries if gallery is None else gallery
    tie_keys = None
    if metric.ties == "id":
        if items.order is None:
            raise ValueError(
                "ties='id' orders a separate gallery's tied items by their ids (update with "
                "role='gallery' and `ids=`); a same-source run breaks ties by the states' order "
                "under the other tie rules"
            )
        tie_keys = order_ranks(items.order)
    found = top_k(
        queries.emb,  # type: ignore[arg-type]
        None if same else items.emb,  # type: ignore[arg-type]
        k,
        similarity=metric.similarity,
        tie_keys=tie_keys,
        query_ids=queries.ids,
        gallery_ids=items.ids,
        exclude_identical_ids=(
            (same and queries.ids is not None)
            or (metric.qrels is not None and metric.ignore_identical_ids is not False)
        ),
    )
    text = _id_text(metric, ids)
    q_codes = queries.ids if queries.ids is not None else torch.arange(len(queries))
    g_codes = items.ids if items.ids is not None else torch.arange(len(items))
    return found.run(text(q_codes.cpu(), "query"), text(g_codes.cpu(), "gallery"))


def _id_text(metric: RetrievalMetric, ids: Iterable[Any] | None) -> Any:
    """codes -> the ids as text: integers as they are, strings from ``ids``."""
    strings = any(
        int(metric.key_kinds.reshape(-1)[metric._kind_bits.index((side, "ids", "str"))])
        for side in ("q", "g")
    )
    table: dict[int, str] = {}
    if ids is not None:
        given = list(ids)
        table = dict(zip(label_codes(given, "ids").tolist(), map(str, given), strict=True))
    elif strings:
        raise ValueError(
            "the states keep string ids as 64-bit codes: give run(k, ids=...) the ids as given "
            "(every query and document id, in any order: e.g. the dataset's) to have them back"
        )

    def text(codes: torch.Tensor, side: str) -> list[str]:
        out = []
        for code in codes.tolist():
            if code in table:
                out.append(table[code])
            elif strings:
                raise ValueError(f"run(ids=...): a {side} id of the states is not among `ids`")
            else:
                out.append(str(code))
        return out

    return text
