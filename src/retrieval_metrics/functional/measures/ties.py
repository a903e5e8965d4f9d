"""The three tie rules (docs/definitions.md, Ties), in closed form.

A rank table lists each relevant item with ``above`` (items scoring strictly higher) and ``tied``
(items with its exact score). :func:`tie_groups` turns it into *groups*: runs of positions
``above + 1 .. above + size`` holding ``relevant`` relevant items in a uniformly random order.

* ``"expected"``: one group per distinct score that holds relevant items.
* ``"optimistic"`` / ``"pessimistic"``: every relevant item becomes a group of size 1 at the first
  (last) free position of its tie group, so the same formulas give the deterministic values.
* ``"id"``: the ranking already placed tied items by ascending id (``tie_order``), so every
  group has size 1; a table with ties left is refused.

The functions below are the exact expectations over the random order inside groups (McSherry and
Najork, ECIR 2008), derived by linearity of expectation; with groups of size 1 they reduce to the
ordinary definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.measures.options import DEFAULT_TIES
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.primitives import flat_nonzero, masked, order_by_row
from retrieval_metrics.functional.table import RankTable

try:  # the groups of a binary table in one pass, where built (setup.py); else the torch path
    from retrieval_metrics.functional.measures import _ties
except ImportError:  # pragma: no cover - depends on the build
    _ties = None

__all__ = ["TIES", "TieGroups", "tie_groups"]

TIES: tuple[str, ...] = OPTIONS["ties"].allowed
_DIRECT_TERMS = 16


@dataclass(frozen=True)
class TieGroups:
    """Groups of positions holding relevant items, sorted by query then position.

    Attributes:
        query: query index of each group.
        above: items ranked before the group (its positions are ``above + 1 .. above + size``).
        size: items in the group.
        relevant: relevant items in the group.
        relevant_before: relevant items of the same query in earlier groups.
        gain: sum of the relevant items' grades in the group (``relevant`` when binary), float64.
        first: True for each query's first group, last: True for its last.
        first_index: positions of the first groups (where ``first`` is True).
    """

    query: Tensor
    above: Tensor
    size: Tensor
    relevant: Tensor
    relevant_before: Tensor
    gain: Tensor
    first: Tensor
    last: Tensor
    first_index: Tensor

    def at_query(self, per_query: Tensor) -> Tensor:
        """A ``(Q, ...)`` tensor's rows at each group's query (a gather by index_select, a
        third of the time of indexing by a tensor on 60,000 groups)."""
        return per_query.index_select(0, self.query)

    @cached_property
    def first_groups(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(query, above, size, relevant)`` of each query's first group (taken once: hit
        rates at several cut-offs and the first ranks of a shared call read the same)."""
        i = self.first_index
        return (
            self.query.index_select(0, i),
            self.above.index_select(0, i),
            self.size.index_select(0, i),
            self.relevant.index_select(0, i),
        )


def _run_id(keys_equal_prev: Tensor) -> Tensor:
    """Run ids of a sequence flagged 'same run as previous'."""
    return torch.cumsum((~keys_equal_prev).to(torch.int64), 0) - 1


def _within_run(keys_equal_prev: Tensor, run_id: Tensor) -> Tensor:
    """Position of each element inside its run."""
    n = keys_equal_prev.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    run_start = flat_nonzero(~keys_equal_prev)
    return torch.arange(n) - run_start[run_id]


def tie_groups(
    table: RankTable, ties: str = DEFAULT_TIES, gain: str | None = None, merge_runs: bool = True
) -> TieGroups:
    """Groups of the table under a tie rule. ``gain`` ("exponential", "linear") maps grades.

    "expected" is McSherry and Najork's rule (ECIR 2008): the measure averaged over every order
    of the items inside each group of equal scores, in closed form, with no sampling.

    ``merge_runs``: join consecutive groups of relevant items only (binary relevance; see
    :func:`_merge_full_runs`, and :func:`_binary_runs` for expected ties); a measure that cuts
    groups by where they start (AUROC@K) keeps them apart."""
    if ties not in TIES:
        raise ValueError(f"`ties` must be one of {TIES}, got {ties!r}")
    if ties == "id":
        # The ranking placed tied items by id (rank_embeddings(ties_by_id=True), the metric
        # classes under ties="id"): nothing is left to share a place, and any rule agrees.
        if bool((table.tied != 1).any()):
            raise ValueError(
                "ties='id' orders tied items by their gallery ids, and a relevant item ties "
                "items that have none to order by: give queries and a gallery (role='query' / "
                "'gallery') with the gallery's `ids=` (rank_embeddings(..., ties_by_id=True) in "
                "the functional layer), or choose another `ties`"
            )
        ties = "expected"
    if gain not in ("exponential", "linear", None):
        raise ValueError(f'`gain` must be "exponential" or "linear", got {gain!r}')
    if table.grade is None and ties == "expected" and merge_runs:
        compiled = _compiled_binary_groups(table)  # (reads the CSR pointers: no item_query)
        if compiled is not None:
            return compiled
    item_query = table.item_query
    # binary relevance: every item's gain is 1 under both gains, so a group's is its count
    item_gain = None
    if table.grade is not None:
        grade = table.grade
        item_gain = exponential_gain(grade) if gain == "exponential" else grade.clone()
    full_ties = None
    if table.grade is None and ties == "expected" and merge_runs:
        query, above, size, relevant, full_ties = _binary_runs(
            item_query, table.above, table.tied
        )
        gain_sum = relevant.to(torch.float64)
    else:
        query, above, size, relevant, gain_sum = _rule_groups(table, item_query, item_gain, ties)
    if table.grade is None and merge_runs:
        query, above, size, relevant, gain_sum = _merge_full_runs(
            query, above, size, relevant, gain_sum, full_ties
        )
    g = query.numel()
    first = torch.ones(g, dtype=torch.bool)
    last = torch.ones(g, dtype=torch.bool)
    if g > 1:
        new_query = query[1:] != query[:-1]
        first[1:] = new_query
        last[:-1] = new_query
    group_start = flat_nonzero(first)
    # Every listed item is counted once in `relevant`, so the items of the earlier queries
    # number ptr[query].
    relevant_before = torch.cumsum(relevant, 0) - relevant - table.ptr.index_select(0, query)
    return TieGroups(
        query=query,
        above=above,
        size=size,
        relevant=relevant,
        relevant_before=relevant_before,
        gain=gain_sum,
        first=first,
        last=last,
        first_index=group_start,
    )


def _compiled_binary_groups(table: RankTable) -> TieGroups | None:
    """The groups of a binary table under expected ties, merged, from ``_ties.c``'s one pass
    over the items: those of :func:`_binary_runs` then :func:`_merge_full_runs` (the readable
    reference, which it equals). None where the module is not built or the table is not on the
    host."""
    if _ties is None or table.above.device.type != "cpu":
        return None
    n, num_q = table.above.numel(), table.num_queries
    # (outputs sized for one group an item, the most there can be; the groups are a prefix)
    query, above, size, relevant, before = (torch.empty(n, dtype=torch.int64) for _ in range(5))
    first, last = torch.empty(n, dtype=torch.bool), torch.empty(n, dtype=torch.bool)
    first_index = torch.empty(num_q, dtype=torch.int64)
    inputs = (x.to(torch.int64).contiguous().numpy() for x in (table.ptr, table.above, table.tied))
    outputs = (query, above, size, relevant, before, first, last, first_index)
    g, firsts = _ties.binary_groups(*inputs, *(x.numpy() for x in outputs))
    relevant = relevant[:g]
    return TieGroups(
        query=query[:g],
        above=above[:g],
        size=size[:g],
        relevant=relevant,
        relevant_before=before[:g],
        gain=relevant.to(torch.float64),
        first=first[:g],
        last=last[:g],
        first_index=first_index[:firsts],
    )


def _rule_groups(
    table: RankTable, item_query: Tensor, item_gain: Tensor | None, ties: str
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(query, above, size, relevant, gain)`` of the groups under a tie rule, unmerged."""
    n = item_query.numel()
    same_prev = torch.zeros(n, dtype=torch.bool)
    if n > 1:
        same_prev[1:] = (item_query[1:] == item_query[:-1]) & (table.above[1:] == table.above[:-1])
    run_id = _run_id(same_prev)
    if ties == "expected":
        starts = flat_nonzero(~same_prev)
        num_runs = starts.numel()
        query = item_query.index_select(0, starts)
        above = table.above.index_select(0, starts)
        size = table.tied.index_select(0, starts)
        relevant = torch.bincount(run_id, minlength=num_runs)
        if item_gain is None:
            gain_sum = relevant.to(torch.float64)
        else:
            gain_sum = torch.zeros(num_runs, dtype=torch.float64).index_add_(0, run_id, item_gain)
        return query, above, size, relevant, gain_sum
    within = _within_run(same_prev, run_id)
    if item_gain is None:
        item_gain = torch.ones(n, dtype=torch.float64)
    if ties == "optimistic":
        above = table.above + within
    else:
        # Items of a run are stored by decreasing grade; the worst order puts the best last.
        above = table.above + table.tied - 1 - within
    order = order_by_row(item_query, above)
    ones = torch.ones(n, dtype=torch.int64)
    return item_query[order], above[order], ones, ones, item_gain[order]


def _binary_runs(
    item_query: Tensor, above: Tensor, tied: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``(query, above, size, relevant, full_ties)`` of the expected-tie groups of a binary
    table, with consecutive positions of untied relevant items joined as
    :func:`_merge_full_runs` would; ``full_ties``: the groups of two or more tied items all
    relevant, the only ones left that may join a neighbour.

    Read off the items in one pass: an item continues the group of the one before it (same
    query) when it has the same score (same ``above``), or when it is alone at its score on the
    position right after it. A group's items are then contiguous, so its relevant count is the
    distance to the next group's start: no run ids or sums over items. Tie groups whose items
    are all relevant are joined afterwards, over groups (:func:`_merge_full_runs`).
    """
    n = item_query.numel()
    joins = torch.zeros(n, dtype=torch.bool)
    if n > 1:
        step = above[1:] - above[:-1]
        # (one position further down is never the last item of a tie group of two or more,
        # whose positions all come before the next item's, so only the item itself is checked)
        joins[1:] = (item_query[1:] == item_query[:-1]) & (
            (step == 0) | ((step == 1) & (tied[1:] == 1))
        )
    starts = flat_nonzero(~joins)
    relevant = torch.diff(starts, append=torch.tensor([n], dtype=starts.dtype))
    tied_size = tied.index_select(0, starts)
    full_ties = flat_nonzero((tied_size > 1) & (tied_size == relevant))
    # a joined run of untied items fills its positions: as many as it holds
    size = torch.where(tied_size == 1, relevant, tied_size)
    query = item_query.index_select(0, starts)
    return query, above.index_select(0, starts), size, relevant, full_ties


def _merge_full_runs(
    query: Tensor,
    above: Tensor,
    size: Tensor,
    relevant: Tensor,
    gain: Tensor,
    candidates: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Merge consecutive groups of a query whose every position is relevant into one group.

    A group with ``relevant == size`` has no random order to average over, and neither has a run
    of such groups on consecutive positions: with binary relevance the run is one group of
    relevant positions, and every closed form below gives it the same value as its parts. A good
    model ranks thousands of relevant items on top, each at its own score; merged, the measures
    cost one group per query instead of one per relevant item.

    ``candidates``: where only these groups can join a neighbour (the others being known not to),
    only their joins with the groups either side are tested.
    """
    g = query.numel()
    if g < 2 or (candidates is not None and candidates.numel() == 0):
        # (no candidate, no join: a good model's table, most often, where every test below
        # would run to find nothing)
        return query, above, size, relevant, gain
    # A join of group i - 1 with group i is tested at i: at every i, or next to the candidates
    # where they are few (a position tested twice gets the same answer twice).
    at = None
    if candidates is not None and candidates.numel() * 8 < g:
        at = torch.cat([candidates, candidates + 1])
        at = at[(at >= 1) & (at < g)]

    def pair(x: Tensor) -> tuple[Tensor, Tensor]:
        """x of the later and of the earlier group of each tested join."""
        if at is None:
            return x[1:], x[:-1]
        return x.index_select(0, at), x.index_select(0, at - 1)

    (r1, r0), (t1, t0), (q1, q0), (a1, a0) = (pair(x) for x in (relevant, size, query, above))
    tested = (r1 == t1) & (r0 == t0) & (q1 == q0) & (a1 == a0 + t0)
    joins = torch.zeros(g, dtype=torch.bool)
    if at is None:
        joins[1:] = tested
    else:
        joins[at] = tested
    if not bool(tested.any()):
        return query, above, size, relevant, gain
    starts = ~joins
    last = flat_nonzero(torch.cat([starts[1:], torch.ones(1, dtype=torch.bool)]))

    def summed(x: Tensor) -> Tensor:
        # A run is a contiguous slice: its sum is a difference of running sums (exact: binary
        # relevance, so the gains are whole numbers too).
        through = torch.cumsum(x, 0).index_select(0, last)
        return torch.diff(through, prepend=through.new_zeros(1))

    kept = (masked(query, starts), masked(above, starts))
    return *kept, summed(size), summed(relevant), summed(gain)


# ------------------------------------------------------------------------------------------
# Closed forms. Every argument is a float64 or int64 tensor over groups.
# ------------------------------------------------------------------------------------------


def exponential_gain(grade: Tensor) -> Tensor:
    """2^g - 1, NDCG's and DCG's exponential gain; refused where float64 cannot hold it (a
    grade of 1024 or more gave an infinite gain, and NDCG read NaN)."""
    if grade.numel() and float(grade.max()) >= 1024:
        raise ValueError(
            f"a grade of {float(grade.max()):g} is too large for the exponential gain 2^g - 1 "
            "(float64 overflows from 1024): use gain='linear' (as in ndcg(gain=linear)@10)"
        )
    return torch.pow(2.0, grade) - 1.0


def log_binomial(n: Tensor, k: Tensor) -> Tensor:
    n = n.to(torch.float64)
    k = k.to(torch.float64)
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def positions_in_cutoff(above: Tensor, size: Tensor, cutoff: Tensor | int) -> Tensor:
    """How many of the group's positions lie within the top ``cutoff``: clip(K - a, 0, t)."""
    return torch.minimum((cutoff - above).clamp_min(0), size)


def expected_hits(groups: TieGroups, cutoff: Tensor) -> Tensor:
    """Per group, expected relevant items within the top ``cutoff``: r * clip(K - a, 0, t) / t."""
    u = positions_in_cutoff(groups.above, groups.size, cutoff).to(torch.float64)
    return groups.relevant.to(torch.float64) * u / groups.size.to(torch.float64)


def miss_probability(size: Tensor, relevant: Tensor, drawn: Tensor) -> Tensor:
    """C(t - r, u) / C(t, u): no relevant item among ``drawn`` random positions of the group."""
    # Exact without lgamma for the common cases: nothing drawn (1), or a group whose every
    # item is relevant (one item, or a run of them) drawn (0).
    shape = drawn.shape  # (a CMC curve's are 2-D: a group's size beside each cut-off)
    size, relevant, drawn = (x.reshape(-1) for x in (size, relevant, drawn))
    ratio = (drawn == 0).to(torch.float64)
    # (the groups found once, then taken by index: a boolean mask per operand searched the
    # whole mask each time, most of image-text's host work at 25,000 queries)
    general = flat_nonzero((drawn > 0) & (size > relevant))
    if general.numel():
        t, r, u = (x.index_select(0, general).to(torch.float64) for x in (size, relevant, drawn))
        log_ratio = (
            torch.lgamma(t - r + 1)
            + torch.lgamma(t - u + 1)
            - torch.lgamma((t - r - u).clamp_min(0) + 1)
            - torch.lgamma(t + 1)
        )
        ratio.index_copy_(0, general, torch.where(u <= t - r, torch.exp(log_ratio), 0.0))
    return ratio.view(shape)


def position_sum(alpha: Tensor, beta: Tensor, above: Tensor, count: Tensor) -> Tensor:
    """sum_{i=1..count} (alpha + beta (i - 1)) / (above + i), exactly.

    Short sums are added term by term; long ones use
    ``count * beta + (alpha - beta (above + 1)) (psi(above + count + 1) - psi(above + 1))``.
    """
    alpha = alpha.to(torch.float64)
    beta = beta.to(torch.float64)
    a = above.to(torch.float64)
    u = count.to(torch.float64)
    # Most groups are single items: their sum is the first term alone.
    out = torch.where(u >= 1, alpha / (a + 1), 0.0)
    more = flat_nonzero(u > 1)
    if more.numel() == 0:
        return out
    alpha, beta, a, u = (x.index_select(0, more) for x in (alpha, beta, a, u))
    rest = torch.zeros_like(a)
    long = u > _DIRECT_TERMS
    # term by term where the sum is short, the closed form elsewhere: each on its own groups
    # (a long group, e.g. one tie group of a collapsed gallery, needs no direct terms)
    short = flat_nonzero(~long)
    if short.numel():
        # Longest sums first, so that term i is added to a prefix (the sums with at least i
        # terms): the work is the number of terms, not the longest sum times the groups (the
        # lengths of a weak model's runs fall off geometrically).
        # (numpy sorts small integers by radix: linear time)
        terms = u.index_select(0, short).cpu().numpy().astype(np.uint8)
        by_length = torch.from_numpy(np.argsort(_DIRECT_TERMS - terms, kind="stable"))
        short = short.index_select(0, by_length.to(short.device))
        s_alpha, s_beta, s_a = (x.index_select(0, short) for x in (alpha, beta, a))
        with_terms = torch.from_numpy(np.bincount(terms)[::-1].cumsum()[::-1].copy())
        s_rest = torch.zeros_like(s_a)
        for i in range(2, with_terms.numel()):
            k = int(with_terms[i])
            s_rest[:k] += (s_alpha[:k] + s_beta[:k] * (i - 1)) / (s_a[:k] + i)
        rest.index_copy_(0, short, s_rest)
    far = flat_nonzero(long)
    if far.numel():
        l_alpha, l_beta, l_a, l_u = (x.index_select(0, far) for x in (alpha, beta, a, u))
        closed = l_u * l_beta + (l_alpha - l_beta * (l_a + 1)) * (
            torch.digamma(l_a + l_u + 1) - torch.digamma(l_a + 1)
        )
        rest.index_copy_(0, far, closed - l_alpha / (l_a + 1))
    return out.index_copy(0, more, out.index_select(0, more) + rest)


def pair_rate(size: Tensor, relevant: Tensor) -> Tensor:
    """(r - 1) / (t - 1): chance that another position of the group is relevant, given one is."""
    t = size.to(torch.float64)
    r = relevant.to(torch.float64)
    return torch.where(t > 1, (r - 1) / (t - 1).clamp_min(1), torch.zeros_like(t))


def expected_precision_sum(
    groups: TieGroups, cutoff: Tensor, whole: Tensor | None = None
) -> Tensor:
    """Per group, E[sum over its positions p <= K of rel(p) * P(p)] (step AP numerator).

    ``whole``: the sums without a cut-off, when already known (several measures of one table):
    a group inside the cut-off keeps its whole sum, one past it 0, and only the groups the
    cut-off splits (one per query at most) are computed.
    """
    if whole is None:
        return _precision_sum_of(
            groups.above, groups.size, groups.relevant, groups.relevant_before, cutoff
        )
    inside = groups.above + groups.size <= cutoff
    out = torch.where(inside, whole, 0.0)
    split = flat_nonzero(~inside & (groups.above < cutoff))
    if split.numel():
        parts = (groups.above, groups.size, groups.relevant, groups.relevant_before, cutoff)
        out.index_copy_(0, split, _precision_sum_of(*(x.index_select(0, split) for x in parts)))
    return out


def _precision_sum_of(
    above: Tensor, size: Tensor, relevant: Tensor, relevant_before: Tensor, cutoff: Tensor
) -> Tensor:
    parts = (above, size, relevant, relevant_before, cutoff)
    if _ties is not None and above.device.type == "cpu" and cutoff.shape == above.shape:
        # one pass in C (_ties.c), the torch path below taking only the long sums
        inputs = [x.to(torch.int64).contiguous() for x in parts]
        out = torch.empty(above.numel(), dtype=torch.float64)
        long_index = torch.empty(above.numel(), dtype=torch.int64)
        num_long = _ties.precision_sums(
            *(x.numpy() for x in inputs), out.numpy(), long_index.numpy(), _DIRECT_TERMS
        )
        if num_long:
            long_index = long_index[:num_long]
            out.index_copy_(
                0, long_index, _precision_sum_in_torch(*(x[long_index] for x in inputs))
            )
        return out
    return _precision_sum_in_torch(*parts)


def _precision_sum_in_torch(
    above: Tensor, size: Tensor, relevant: Tensor, relevant_before: Tensor, cutoff: Tensor
) -> Tensor:
    """:func:`_precision_sum_of` in torch (the reference of ``_ties.precision_sums``)."""
    u = positions_in_cutoff(above, size, cutoff)
    beta = pair_rate(size, relevant)
    alpha = relevant_before.to(torch.float64) + 1
    rate = relevant.to(torch.float64) / size.to(torch.float64)
    return rate * position_sum(alpha, beta, above, u)


def expected_trapezoid_extra(groups: TieGroups) -> Tensor:
    """Per group, E[sum of rel(p) * (h(p) - 1) / (p - 1)] over its positions, with 1 at p = 1.

    The official Market-1501 AP is half this plus half the step numerator (the AP row of
    docs/definitions.md).
    """
    t = groups.size
    beta = pair_rate(t, groups.relevant)
    alpha = groups.relevant_before.to(torch.float64)  # (h(p) - 1) counts the others only
    rate = groups.relevant.to(torch.float64) / t.to(torch.float64)
    at_top = groups.above == 0
    shifted = position_sum(alpha, beta, (groups.above - 1).clamp_min(0), t)
    # A group at the top: position 1 counts 1, the others (i = 2..t) give beta each.
    top = 1.0 + beta * (t.to(torch.float64) - 1)
    return rate * torch.where(at_top, top, shifted)


def _ragged_expectation(
    groups_mask: Tensor,
    size: Tensor,
    relevant: Tensor,
    above: Tensor,
    limit: Tensor,
    from_end: bool,
) -> Tensor:
    """E[1 / (a + X)] where X is the first (or, from_end, last) relevant position of the group.

    First: P(X = x) = C(t - x, r - 1) / C(t, r), x = 1..t - r + 1. Last: P(Y = y) =
    C(y - 1, r - 1) / C(t, r), y = r..t. Positions with a + x > ``limit`` count 0 (cut-off).

    One relevant item (r = 1) is equally likely at each position: a harmonic sum, in closed form
    (:func:`position_sum`). Otherwise the terms are added while they matter: the first relevant
    item lies beyond position x with probability C(t - x, r) / C(t, r) <= (1 - x / t)^r, below
    e^-80 once x >= 80 t / r, so at most min(t - r + 1, 80 t / r) terms per group are summed and
    what is left out is below 1e-34 of the value. A tie group of thousands holding thousands of
    relevant items costs a few hundred terms, not thousands.
    """
    out = torch.zeros(size.numel(), dtype=torch.float64)
    idx = flat_nonzero(groups_mask)
    if idx.numel() == 0:
        return out
    t, r, a, lim = size[idx], relevant[idx], above[idx], limit[idx]
    single = r == 1
    if bool(single.any()):
        # Uniform over the positions a + 1 .. a + t, first or last alike; those past the limit
        # count 0.
        ts, as_ = t[single], a[single]
        inside = torch.minimum((lim[single] - as_).clamp_min(0), ts)
        harmonic = position_sum(
            torch.ones_like(as_, dtype=torch.float64),
            torch.zeros_like(as_, dtype=torch.float64),
            as_,
            inside,
        )
        out[idx[single]] = harmonic / ts.to(torch.float64)
    idx, t, r, a, lim = idx[~single], t[~single], r[~single], a[~single], lim[~single]
    full = r == t
    if bool(full.any()):
        # Every item of the group relevant: the first is at a + 1 and the last at a + t for
        # certain; exact, where the sum of the general case rounds its probability of 1.
        rank = a[full] + (t[full] if from_end else torch.ones_like(a[full]))
        out[idx[full]] = torch.where(
            rank <= lim[full], 1.0 / rank.to(torch.float64), torch.zeros((), dtype=torch.float64)
        )
        idx, t, r, a, lim = idx[~full], t[~full], r[~full], a[~full], lim[~full]
    if idx.numel() == 0:
        return out
    # Groups alike in (t, r, a, limit) have one expectation: each distinct one is summed once.
    # Collapsed embeddings give every query one tie group of the whole gallery at a = 0, its r
    # one of a few class sizes: the terms were queries x gallery (140 s at 20,000 items) and are
    # now the distinct groups x gallery. Each group's sum is the one it was, term for term.
    distinct, alike = torch.unique(torch.stack([t, r, a, lim], 1), dim=0, return_inverse=True)
    out[idx] = _ragged_sums(*distinct.unbind(1), from_end).index_select(0, alike)
    return out


def _ragged_sums(t: Tensor, r: Tensor, a: Tensor, lim: Tensor, from_end: bool) -> Tensor:
    """:func:`_ragged_expectation` of groups with 1 < r < t: the sum over the terms that matter
    (see there) of p_x / (a + pos), where p_x = C(t - x, r - 1) / C(t, r) is each the last times
    a ratio: p_1 = r / t, p_x = p_{x-1} (t - x - r + 2) / (t - x + 1). (Four lgamma a term took
    seconds on half-collapsed embeddings, and lost more digits: lgamma of 10**5 is about 10**6,
    so its rounding moved each term by some 1e-10 of itself.) In C where it is built
    (``_ties.reciprocal_sums``), else :func:`_reciprocal_sums_in_torch`, the same operations."""
    n_terms = torch.minimum(t - r + 1, torch.div(80 * t + r - 1, r, rounding_mode="floor"))
    if not from_end:
        # positions past the limit count 0: the terms stop there
        n_terms = torch.minimum(n_terms, (lim - a).clamp_min(0))
    parts = [x.to(torch.int64).contiguous() for x in (t, r, a, lim, n_terms)]
    if _ties is not None and t.device.type == "cpu":
        out = torch.empty(t.numel(), dtype=torch.float64)
        _ties.reciprocal_sums(*(x.numpy() for x in parts), from_end, out.numpy())
        return out
    return _reciprocal_sums_in_torch(*parts, from_end)


def _reciprocal_sums_in_torch(
    t: Tensor, r: Tensor, a: Tensor, lim: Tensor, n_terms: Tensor, from_end: bool
) -> Tensor:
    """:func:`_ragged_sums` term by term in torch (the reference of ``_ties.reciprocal_sums``,
    which must equal it bit for bit): term x of every group with at least x terms at once; the
    groups sorted by their number of terms, those are a prefix."""
    order = torch.argsort(n_terms, descending=True, stable=True)
    t, r, a, lim, n_terms = (x.index_select(0, order) for x in (t, r, a, lim, n_terms))
    t64, r64, a64 = (x.to(torch.float64) for x in (t, r, a))
    p = r64 / t64
    total = torch.zeros_like(p)
    counts = np.bincount(n_terms.numpy(), minlength=1)
    with_terms = counts[::-1].cumsum()[::-1]  # groups with at least x terms, x = 0, 1, ...
    for x in range(1, with_terms.size):
        k = int(with_terms[x])
        if x > 1:
            p[:k] = p[:k] * ((t64[:k] - x - r64[:k] + 2.0) / (t64[:k] - x + 1.0))
        pos = (t[:k] - x + 1) if from_end else torch.full_like(t[:k], x)
        inside = a[:k] + pos <= lim[:k]
        total[:k] = torch.where(inside, total[:k] + p[:k] / (a64[:k] + pos), total[:k])
    return torch.empty_like(total).index_copy_(0, order, total)


def expected_reciprocal_first(groups: TieGroups, limit: Tensor) -> Tensor:
    """Per query's first group, E[1 / rank of the first relevant item] (0 beyond ``limit``)."""
    return _ragged_expectation(
        groups.first, groups.size, groups.relevant, groups.above, limit, from_end=False
    )


def expected_reciprocal_last(groups: TieGroups, limit: Tensor) -> Tensor:
    """Per query's last group, E[1 / rank of the last relevant item]."""
    return _ragged_expectation(
        groups.last, groups.size, groups.relevant, groups.above, limit, from_end=True
    )


def expected_first_position(above: Tensor, size: Tensor, relevant: Tensor) -> Tensor:
    """Per group: a + (t + 1) / (r + 1), the expected position of its first relevant item."""
    return above.to(torch.float64) + (size.to(torch.float64) + 1) / (
        relevant.to(torch.float64) + 1
    )
