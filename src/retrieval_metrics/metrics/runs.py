"""``metric.run(k)``: each query's top K gallery items from the metric's states, as a run.

The states of the embedding forms hold both sides (same source; queries and gallery in
updates, judged by qrels or not), deduplicated and gathered from every process as ``compute()``
reads them; :func:`retrieval_metrics.functional.top_k` lists each query's K best, with the
metric's similarity and tie rule, a query never listing itself (same source) nor, judged by
qrels, a document of its own id (``ignore_identical_ids``). A gallery sharded over processes:
each lists the best of its shard, and the lists are merged (tied scores at the cut by id
code). The states keep string ids as 64-bit codes: the run gets its text back from ``ids``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.items import Items, keys_on_host
from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.ranking.relevance import left_out_of_lists
from retrieval_metrics.functional.ranking.tie_order import order_ranks
from retrieval_metrics.functional.ranking.top_lists import id_texts, listed_pairs, top_k
from retrieval_metrics.metrics import distributed as D

if TYPE_CHECKING:
    from retrieval_metrics.metrics.forms.base import FormContext, InputForm

__all__ = ["run_of"]

RUN_FORMS = ("same_source", "query_gallery", "qrels", "fixed_gallery")


def run_of(
    context: FormContext,
    form: InputForm,
    k: int,
    ids: Iterable[Any] | None,
    *,
    string_ids: bool,
    several: bool,
    kept: tuple[Tensor, Tensor] | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """The run of ``metric.run(k, ids=ids)``, on its synced states (``context``) read by ``form``;
    ``string_ids``: the states' ids were strings; ``several``: several processes hold them;
    ``kept``: the lists the metric's ranking kept of these states (``run_depth`` >= ``k``:
    rows of the deduplicated gallery, -1 past a query's end, and scores), listed as they are
    where they hold, rather than ranked again."""
    if form.kind not in RUN_FORMS:
        raise ValueError(
            f"{context.owner}.run() lists embeddings; its rankings came ranked already"
        )
    queries, gallery = form.sides(context)  # type: ignore[attr-defined]
    sharded = context.gallery_sharded and several
    if gallery is None and form.kind != "same_source" and not sharded:
        raise ValueError(f"{context.owner}.run(): no gallery items were given")
    if sharded:
        # each process lists the best of its shard; the lists are gathered and merged
        none = torch.zeros(0, dtype=torch.int64)
        shard = gallery if gallery is not None else queries.select(none)
        shard, _ = D.dedupe_across_shards(
            shard, "`ids` of the gallery items", context.processes.group
        )
        codes, scores = _shard_best(context, queries, shard, k)
    elif kept is not None and gallery is not None and len(kept[0]) == len(queries):
        codes, scores = _kept_best(gallery, kept, k)
    else:
        codes, scores = _best(context, queries, gallery, k)
    text = _id_text(string_ids, ids)
    q_codes = queries.ids if queries.ids is not None else torch.arange(len(queries))
    q_text = text(q_codes.cpu().numpy(), "query")
    if len(q_text) != len(set(q_text)):
        raise ValueError(f"{context.owner}.run(): a query id is given twice")
    # every listed entry at once (-inf: past the end of a query's list), then each query's
    # slice: a run of a million entries made text in a few vectorised steps, not a search and a
    # conversion per entry (2,000 queries x 1,000 took 3 s of Python)
    values = scores.cpu()
    listed = (~torch.isneginf(values)).numpy()
    g_text = text(codes.cpu().numpy()[listed], "gallery")
    return dict(zip(q_text, listed_pairs(g_text, values.numpy(), listed), strict=True))


def _best(context: FormContext, queries: Items, gallery: Items | None, k: int):
    """Each query's ``k`` best gallery items: their id codes (positions without ids) and
    scores, ``(Q, k')`` (-inf past the end). The items the ranking leaves out of a query's
    ranking are left out of its list (:func:`_left_out`)."""
    same = gallery is None
    items = queries if gallery is None else gallery
    tie_keys = None
    if context.options.ties == "id":
        if items.order is None:
            raise ValueError(
                "ties='id' orders a separate gallery's tied items by their ids (update with "
                "role='gallery' and `ids=`); a same-source run breaks ties by the states' order "
                "under the other tie rules"
            )
        tie_keys = order_ranks(items.order)
    pairs, kept = _left_out(context, queries, items, same)
    # each listed row's code: its id, or its place in the gallery given
    g_codes = items.ids if items.ids is not None else torch.arange(len(items))
    if kept is not None:
        # (the ignore label's items, out of every query's ranking: out of the gallery listed)
        items, same = items.select(kept), False
        g_codes = g_codes.index_select(0, kept.to(g_codes.device))
        tie_keys = None if tie_keys is None else tie_keys.index_select(0, kept)
    found = top_k(
        queries.emb,  # type: ignore[arg-type]
        None if same else items.emb,  # type: ignore[arg-type]
        k,
        similarity=context.options.similarity,
        tie_keys=tie_keys,
        excluded=pairs,
        memory_budget=context.options.memory_budget,
    )
    g_codes = g_codes.to(found.indices.device)
    codes = g_codes.index_select(0, found.indices.clamp_min(0).view(-1)).view(found.indices.shape)
    return codes, found.scores


def _kept_best(gallery: Items, kept: tuple[Tensor, Tensor], k: int) -> tuple[Tensor, Tensor]:
    """:func:`_best` from the lists the ranking kept as it counted (``engine.listing``: top_k's
    lists of the same blocks, what the ranking leaves out masked there), the first ``k``."""
    rows, scores = kept[0][:, :k], kept[1][:, :k]
    g_codes = gallery.ids if gallery.ids is not None else torch.arange(len(gallery))
    g_codes = g_codes.to(rows.device)
    codes = g_codes.index_select(0, rows.clamp_min(0).reshape(-1)).view(rows.shape)
    return codes, scores


def _left_out(
    context: FormContext, queries: Items, items: Items, same: bool
) -> tuple[tuple[Tensor, Tensor], Tensor | None]:
    """What the ranking of ``queries`` against ``items`` leaves out, as its lists must
    (``relevance.left_out_of_lists``, by the rule every ranking takes: a query itself, the
    items of its label and camera, the ignore label's)."""
    q_keys, g_keys = keys_on_host(queries, items)
    return left_out_of_lists(
        q_keys.keys, g_keys.keys, (len(queries), len(items)), context.ranking_options(), same
    )


def _shard_best(context: FormContext, queries: Items, shard: Items, k: int):
    """:func:`_best` over a gallery split over the processes: every process's best of its shard
    (``k`` places each, -inf past its end), gathered, then per query the ``k`` best of them all,
    tied scores by ascending id code (the shards hold no common order)."""
    num_q = len(queries)
    codes = torch.zeros((num_q, k), dtype=torch.int64)
    scores = torch.full((num_q, k), float("-inf"), dtype=torch.float64)
    if len(shard):
        mine, values = _best(context, queries, shard, k)
        codes[:, : mine.shape[1]], scores[:, : mine.shape[1]] = mine.cpu(), values.cpu().double()
    all_codes, all_scores = D.gather_rows([codes, scores], context.processes.group)
    world = all_codes.shape[0] // max(1, num_q)
    all_codes = all_codes.cpu().view(world, num_q, k).permute(1, 0, 2).reshape(num_q, -1)
    all_scores = all_scores.cpu().view(world, num_q, k).permute(1, 0, 2).reshape(num_q, -1)
    by_code = torch.argsort(all_codes, dim=1, stable=True)
    all_codes, all_scores = all_codes.gather(1, by_code), all_scores.gather(1, by_code)
    by_score = torch.argsort(all_scores, dim=1, descending=True, stable=True)[:, :k]
    return all_codes.gather(1, by_score), all_scores.gather(1, by_score)


def _id_text(strings: bool, ids: Iterable[Any] | None) -> Any:
    """codes -> the ids as text: integers as they are, strings (``strings``) from ``ids``."""
    # the codes of the ids given, sorted, and each code's text looked up when listed: a corpus
    # of a million ids is not made a million python str (nor a dict of them)
    given: Any = []
    codes = np.zeros(0, dtype=np.int64)
    if ids is not None:
        given = ids if isinstance(ids, (list, tuple, np.ndarray, torch.Tensor)) else list(ids)
        codes = label_codes(given, "ids").numpy()
    elif strings:
        raise ValueError(
            "the states keep string ids as 64-bit codes: give run(k, ids=...) the ids as given "
            "(every query and document id, in any order: e.g. the dataset's) to have them back"
        )
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]

    def text(code: np.ndarray, side: str) -> list[str]:
        """The text of each code of ``code`` (1-D int64), in order."""
        code = np.asarray(code, dtype=np.int64).reshape(-1)
        # (of ids given twice with one code, the last, as a dict of them kept)
        at = np.searchsorted(ordered, code, side="right") - 1
        known = (at >= 0) & (ordered[at.clip(min=0)] == code) if ordered.size else at >= 0
        if strings and not known.all():
            raise ValueError(f"run(ids=...): a {side} id of the states is not among `ids`")
        out = np.empty(code.shape[0], dtype=object)
        if known.any():
            out[known] = id_texts(given, order[at[known]])
        if not known.all():
            out[~known] = code[~known].astype(str).tolist()
        return out.tolist()

    return text
