"""Measures with a model of the user's walk down the list: ERR (a cascade that stops at the first
satisfying document) and RBP (a reader who goes on with a fixed persistence).

ERR@K (Chapelle, Metzler, Zhang and Grinspan, CIKM 2009): a document of grade g satisfies with
probability R = (2^g - 1) / 2^max_grade, and ERR@K = sum_{i <= K} (1 / i) R_i prod_{j < i}
(1 - R_j). The default maximum grade, 4, is that of gdeval (the TREC Web track's evaluation
script, ir_measures' ``ERR@k``).

RBP (Moffat and Zobel, ACM TOIS 2008): ``(1 - p) sum_i g_i p^(i - 1)``, g the gain of the
document at position i; its residual is what the unjudged documents (and those below the
ranking's end) could still add were they all relevant.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.judged import judged_view
from retrieval_metrics.functional.measures.options import DEFAULT_TIES
from retrieval_metrics.functional.measures.per_query.common import (
    as_cutoff,
    require_depth,
    unanswerable_nan,
)
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.table import RankTable

#: (group, relevant, position) terms ERR's tie groups hold at once under ties="expected"
#: (float64 each, several temporaries: about 200 MB at the peak)
TERMS = 2**22

__all__ = ["err_per_query", "rbp_per_query", "rbp_residual_per_query"]


def _check_persistence(p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p < 1:
        raise ValueError(f"RBP's persistence `p` must be a number in (0, 1), got {p!r}")
    return float(p)


def _window_weight(p: float, above: Tensor, size: Tensor, cutoff: Tensor) -> Tensor:
    """sum of (1 - p) p^(i - 1) over a group's positions above + 1 .. above + size that lie
    within the cut-off: p^above - p^min(above + size, K)."""
    lo = torch.minimum(above, cutoff).to(torch.float64)
    hi = torch.minimum(above + size, cutoff).to(torch.float64)
    return torch.pow(p, lo) - torch.pow(p, hi)


def rbp_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    p: float = 0.8,
    gain: str = "binary",
) -> Tensor:
    """RBP(p)@K: ``(1 - p) sum_{i <= K} g_i p^(i - 1)``; without a cut-off over the whole
    ranking. ``gain``: "binary" (1 for every relevant document: Moffat and Zobel's RBP),
    "linear" (the grade: trectools' graded RBP, ir_measures' ``RBP(p=...)`` without ``rel``) or
    "exponential" (2^g - 1). Linear in the positions, so under "expected" ties each group's
    gain is spread evenly over its positions (trectools' ``average_ties``).

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    p = _check_persistence(p)
    cutoff = as_cutoff(table, k)
    require_depth(table, cutoff, "RBP")
    if gain == "binary" or table.grade is None:
        from dataclasses import replace

        table = replace(table, grade=None, ideal_ptr=None, ideal_grade=None)
        gain = "linear"
    groups = T.tie_groups(table, ties, gain=gain)
    weight = _window_weight(p, groups.above, groups.size, groups.at_query(cutoff))
    part = groups.gain / groups.size.to(torch.float64) * weight
    out = torch.zeros(table.num_queries, dtype=torch.float64).index_add_(0, groups.query, part)
    return unanswerable_nan(table, out)


def rbp_residual_per_query(
    table: RankTable, k: int | None = None, ties: str = DEFAULT_TIES, p: float = 0.8
) -> Tensor:
    """The residual of RBP(p)@K: the weight of the positions within the cut-off (or the
    ranking's end) that hold an unjudged document, plus ``p^K`` (``p^n`` for a ranking of n
    documents) for those below it: ``1 - sum over the judged documents in the top K of
    (1 - p) p^(i - 1)``. RBP + residual bounds the value complete judgments could give.

    Returns:
        ``(Q,)`` float64 (defined for every query).
    """
    p = _check_persistence(p)
    cutoff = as_cutoff(table, k)
    view = judged_view(table, "RBP's residual")
    require_depth(view, cutoff, "RBP's residual")
    groups = T.tie_groups(view, ties)
    weight = _window_weight(p, groups.above, groups.size, groups.at_query(cutoff))
    part = groups.relevant.to(torch.float64) / groups.size.to(torch.float64) * weight
    judged = torch.zeros(table.num_queries, dtype=torch.float64).index_add_(
        0, groups.query, part
    )
    return 1.0 - judged


def _satisfaction(table: RankTable, max_grade: float) -> Tensor:
    """R = (2^g - 1) / 2^max_grade per listed item (a binary table's grade is 1)."""
    if isinstance(max_grade, bool) or not isinstance(max_grade, (int, float)) or max_grade <= 0:
        raise ValueError(f"ERR's `max_grade` must be a positive number, got {max_grade!r}")
    grade = table.grade
    if grade is None:
        grade = torch.ones(table.above.numel(), dtype=torch.float64)
    if grade.numel() and float(grade.max()) > max_grade:
        raise ValueError(
            f"ERR: a relevant document has grade {float(grade.max()):g}, above max_grade="
            f"{max_grade:g} (R = (2^g - 1) / 2^max_grade must stay below 1); name a larger "
            "one, as in err(max_grade=5)@20"
        )
    return (torch.pow(2.0, grade) - 1.0) / (2.0 ** max_grade)


def err_per_query(
    table: RankTable, k: int | None = None, ties: str = DEFAULT_TIES, max_grade: float = 4
) -> Tensor:
    """ERR@K (Chapelle et al., CIKM 2009) with R = (2^g - 1) / 2^max_grade; without a cut-off
    over the whole ranking.

    Ties: "optimistic" puts the tied relevant documents first, the higher grades first;
    "pessimistic" last, the higher grades last; "expected" is the exact mean over every order of
    each group of tied documents. There the documents before a group contribute the product
    S of their (1 - R), whatever their order; inside a group of t positions holding r relevant
    documents, the i-th relevant one in the order lies at position P_i (the i-th smallest of r
    positions drawn from t) independently of which document it is, and it is the first to
    satisfy with probability D(i - 1) - D(i), D(m) the mean over m-subsets of the group's
    documents of prod (1 - R) (computed by a recurrence of means, no cancellation).

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    cutoff = as_cutoff(table, k)
    require_depth(table, cutoff, "ERR")
    sat = _satisfaction(table, max_grade)
    n = table.above.numel()
    out = torch.zeros(table.num_queries, dtype=torch.float64)
    if n == 0:
        return unanswerable_nan(table, out)
    if ties != "expected":
        # every relevant document at a position of its own (ties.tie_groups: "optimistic" and
        # "pessimistic" put a tie's documents first or last, the higher grades first or last;
        # "id" refuses a ranking with ties left), its gain 2^g - 1
        groups = T.tie_groups(table, ties, gain="exponential", merge_runs=False)
        sat = groups.gain / 2.0**max_grade
        survive = torch.exp(_exclusive_sums(groups.query, torch.log1p(-sat)))
        position = groups.above + 1
        inside = position <= groups.at_query(cutoff)
        part = torch.where(inside, sat * survive / position.to(torch.float64), 0.0)
        return unanswerable_nan(table, out.index_add_(0, groups.query, part))
    query = table.item_query
    above, tied = table.above, table.tied
    # expected: one group per (query, score)
    same = torch.zeros(n, dtype=torch.bool)
    same[1:] = (query[1:] == query[:-1]) & (above[1:] == above[:-1])
    run = torch.cumsum((~same).to(torch.int64), 0) - 1
    starts = flat_nonzero(~same)
    g_query, g_above, g_size = query[starts], above[starts], tied[starts]
    num_groups = starts.numel()
    g_relevant = torch.bincount(run, minlength=num_groups)
    # S before each group: the product of (1 - R) over the query's earlier groups
    log_keep = torch.zeros(num_groups, dtype=torch.float64).index_add_(
        0, run, torch.log1p(-sat)
    )
    g_survive = torch.exp(_exclusive_sums(g_query, log_keep))
    within = torch.arange(n) - starts[run]
    r_max = int(g_relevant.max())
    values = torch.zeros(num_groups, r_max, dtype=torch.float64)
    values[run, within] = sat
    g_cut = cutoff[g_query]
    contribution = _group_expectation(values, g_relevant, g_above, g_size, g_cut)
    out.index_add_(0, g_query, g_survive * contribution)
    return unanswerable_nan(table, out)


def _exclusive_sums(query: Tensor, values: Tensor) -> Tensor:
    """Per entry, the sum of ``values`` over the earlier entries of its query."""
    if values.numel() == 0:
        return values.clone()
    running = torch.cumsum(values, 0)
    start = torch.ones(values.numel(), dtype=torch.bool)
    start[1:] = query[1:] != query[:-1]
    starts = flat_nonzero(start)
    run = torch.cumsum(start.to(torch.int64), 0) - 1
    return running - values - (running[starts] - values[starts])[run]


def _group_expectation(
    values: Tensor, relevant: Tensor, above: Tensor, size: Tensor, cutoff: Tensor
) -> Tensor:
    """Per group: E[sum_i (1 / position_i) R_(i) prod_{j < i} (1 - R_(j))] over a uniformly
    random order of its t positions (r relevant documents with satisfaction ``values[:, :r]``,
    the others 0), positions within the cut-off only."""
    num_groups, r_max = values.shape
    out = torch.zeros(num_groups, dtype=torch.float64)
    # single documents alone at their score: the common case, in closed form
    single = (size == 1) & (relevant == 1)
    inside = above + 1 <= cutoff
    out[single] = torch.where(
        inside[single], values[single, 0] / (above[single] + 1).to(torch.float64), 0.0
    )
    rest = flat_nonzero(~single & (above < cutoff))
    # groups in chunks of at most TERMS (group, relevant, position) terms; a group wider than
    # that alone (a collapsed model: one group of the whole gallery) sums its positions in parts
    span = torch.minimum(size, (cutoff - above).clamp_min(0))
    widest = int(span[rest].max()) if rest.numel() else 1
    step = max(1, TERMS // max(1, r_max * widest))
    for start in range(0, rest.numel(), step):
        chunk = rest[start : start + step]
        out[chunk] = _tied_groups(
            values[chunk], relevant[chunk], above[chunk], size[chunk], cutoff[chunk]
        )
    return out


def _tied_groups(v: Tensor, r: Tensor, a: Tensor, t: Tensor, k: Tensor) -> Tensor:
    """:func:`_group_expectation` of groups of several positions, exactly."""
    r_max = v.shape[1]
    g = v.shape[0]
    # D[m]: mean over m-subsets of the group's relevant documents of prod (1 - R), by adding
    # the documents one at a time (a convex combination at every step)
    mean = torch.zeros(g, r_max + 1, dtype=torch.float64)
    mean[:, 0] = 1.0
    for item in range(r_max):
        count = item + 1
        active = r >= count
        keep = 1.0 - v[:, item]
        m = torch.arange(1, r_max + 1, dtype=torch.float64)
        updated = mean.clone()
        updated[:, 1:] = (m / count) * keep[:, None] * mean[:, :-1] + (
            (count - m) / count
        ) * mean[:, 1:]
        updated[:, 1:] = torch.where(m[None, :] <= count, updated[:, 1:], 0.0)
        mean = torch.where(active[:, None], updated, mean)
    first = mean[:, :-1] - mean[:, 1:]  # P(the i-th relevant in order satisfies first)
    # E[1 / position of the i-th relevant], positions within the cut-off only, summed over
    # the positions a part at a time: (g, r_max, positions) terms at most TERMS at once
    span = int(torch.minimum(t, (k - a).clamp_min(0)).max())
    part = max(1, TERMS // (g * r_max))
    expected_inverse = torch.zeros(g, r_max, dtype=torch.float64)
    for start in range(1, span + 1, part):
        p = torch.arange(start, min(span, start + part - 1) + 1, dtype=torch.float64)
        expected_inverse += _inverse_position_terms(p, r_max, a, t, r, k).sum(2)
    return (expected_inverse * first).sum(1)


def _inverse_position_terms(
    p: Tensor, r_max: int, a: Tensor, t: Tensor, r: Tensor, k: Tensor
) -> Tensor:
    """Per (group, i, position p in ``p``): P(the i-th relevant of a random order of the group
    sits at p) / (a + p), zero outside the cut-off (a ``(g, r_max, len(p))`` tensor)."""
    i = torch.arange(1, r_max + 1, dtype=torch.float64)
    tf, rf = t.to(torch.float64)[:, None, None], r.to(torch.float64)[:, None, None]
    pp, ii = p[None, None, :], i[None, :, None]
    valid = (pp >= ii) & (tf - pp >= rf - ii) & (ii <= rf) & (pp <= tf)
    valid &= (a[:, None, None] + pp) <= k[:, None, None]
    log_prob = (
        T.log_binomial((pp - 1).expand_as(valid), (ii - 1).expand_as(valid))
        + T.log_binomial((tf - pp).clamp_min(0).expand_as(valid),
                         (rf - ii).clamp_min(0).expand_as(valid))
        - T.log_binomial(tf, rf).expand_as(valid)
    )
    prob = torch.where(valid, torch.exp(log_prob), 0.0)
    return prob / (a.to(torch.float64)[:, None, None] + pp)
