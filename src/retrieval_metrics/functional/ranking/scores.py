"""Scores per query (torchmetrics' preds / target / indexes form)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.checks import all_finite
from retrieval_metrics.functional.grouped import count_in_groups, group_codes
from retrieval_metrics.functional.primitives import masked
from retrieval_metrics.functional.ranking.table_build import table_from_items
from retrieval_metrics.functional.table import UNBOUNDED, RankTable


def rank_scores(preds: Tensor, target: Tensor, indexes: Tensor) -> RankTable:
    """Rank table from flat ``preds`` (scores), ``target`` (relevance grade, 0 = not relevant) and
    ``indexes`` (query of each entry), torchmetrics' retrieval input form.

    Every entry of a query is a ranked candidate; ties are kept as ties. Queries appear in
    ascending ``indexes`` order. Boolean or integer ``target`` gives binary relevance when its
    values are 0/1, graded relevance otherwise; float targets are grades.

    >>> preds, target = torch.tensor([0.9, 0.5, 0.5]), torch.tensor([0, 1, 0])
    >>> t = rank_scores(preds, target, torch.tensor([0, 0, 0]))
    >>> t.above.tolist(), t.tied.tolist()
    ([1], [2])
    """
    if not (preds.shape == target.shape == indexes.shape) or preds.dim() != 1:
        raise ValueError(
            "`preds`, `target` and `indexes` must be 1-D and of the same length, got shapes "
            f"{tuple(preds.shape)}, {tuple(target.shape)} and {tuple(indexes.shape)}"
        )
    if not preds.is_floating_point():
        preds = preds.to(torch.float64)
    elif preds.dtype not in (torch.float32, torch.float64):
        preds = preds.to(torch.float32)  # half precision widens exactly: same order, same ties
    if not all_finite(preds):
        raise ValueError("`preds` contains NaN or infinite values")
    if indexes.is_floating_point():
        raise ValueError(f"`indexes` must hold integers, got {indexes.dtype}")
    if target.numel() and bool((target < 0).any()):
        raise ValueError("`target` must be non-negative (0 = not relevant, > 0 = grade)")
    return rank_checked_scores(preds, target, indexes)


def rank_checked_scores(preds: Tensor, target: Tensor, indexes: Tensor) -> RankTable:
    """:func:`rank_scores` on inputs it has checked (1-D, float32/float64 finite scores,
    non-negative targets, integer indexes): a metric checks each batch as it arrives."""
    scores = preds.detach().cpu().numpy()
    target = target.detach().cpu()
    if target.dtype in (torch.float16, torch.bfloat16):
        target = target.to(torch.float32)  # numpy has no bfloat16; widening is exact
    target_np = target.numpy()
    codes, num_q, grouped = group_codes(indexes.detach().cpu().to(torch.int64).numpy())
    # only the relevant entries' grades are widened to float64, not every entry's
    relevant = np.flatnonzero(target_np > 0)
    grades = target_np[relevant].astype(np.float64)
    above, tied, counts = count_in_groups(scores, codes, num_q, grouped, relevant)
    binary = not target.is_floating_point() and bool(np.all(grades == 1))
    row = torch.from_numpy(codes[relevant])
    rel_counts = torch.bincount(row, minlength=num_q)
    ptr = torch.zeros(num_q + 1, dtype=torch.int64)
    torch.cumsum(rel_counts, 0, out=ptr[1:])
    counts_t = torch.from_numpy(counts)
    return table_from_items(
        ptr,
        torch.from_numpy(above),
        torch.from_numpy(tied),
        torch.ones(relevant.size, dtype=torch.bool),
        None if binary else torch.from_numpy(grades),
        rel_counts,
        counts_t,
        counts_t.clone(),
        row=row,
    )


def positive_counts(preds: Tensor, indexes: Tensor) -> Tensor:
    """Entries scored > 0 of each query, queries in ascending ``indexes`` order (the order of
    :func:`rank_scores`' table)."""
    codes, num_q, _ = group_codes(indexes.detach().cpu().to(torch.int64).numpy())
    positive = preds.detach().cpu().numpy() > 0
    return torch.from_numpy(np.bincount(codes[positive], minlength=num_q).astype(np.int64))


def nonpositive_missed(table: RankTable, positive: Tensor) -> RankTable:
    """``table`` with every relevant item scored <= 0 made a miss: it stays in m_q but is never
    retrieved (torchmetrics' rule for MAP, MRR, precision and recall).

    ``positive[q]`` is the number of entries of query q scored > 0 (:func:`positive_counts`).
    Every entry scored > 0 ranks above every entry scored <= 0, so a listed item scored <= 0 is
    one with ``above >= positive[q]``; tie groups never straddle 0, so no tie is split.
    """
    keep = table.above < positive.to(torch.int64)[table.item_query]
    counts = torch.zeros(table.num_queries, dtype=torch.int64).index_add_(
        0, table.item_query, keep.to(torch.int64)
    )
    ptr = torch.zeros(table.num_queries + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    return replace(
        table,
        ptr=ptr,
        above=masked(table.above, keep),
        tied=masked(table.tied, keep),
        grade=None if table.grade is None else masked(table.grade, keep),
        depth=torch.full_like(table.depth, UNBOUNDED),
    )
