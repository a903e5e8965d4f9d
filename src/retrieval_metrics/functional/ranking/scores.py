"""Scores per query (torchmetrics' preds / target / indexes form).

The ranks are counted inside query groups of a flat list of candidates: for every relevant entry,
how many entries of its query score strictly higher and how many score exactly the same.

Only relevant entries need a rank, so nothing sorts all pairs by (query, score). Where the
compiled module is built (``_group.c``), each query's few relevant scores are sorted and one pass
over the entries, in the order they came, adds each entry to its query's histogram of places
among them (:func:`_counted_by_query`): no entry is moved. Elsewhere the candidates are grouped by
query (not at all when they already arrive in query order), each query's scores are sorted inside
its row of a padded matrix (a fast batched sort of short rows), and each relevant score is located
in its row by a vectorised binary search. Either way scores are compared in the input dtype, so
ties stay exactly the ties of the input (-0.0 and 0.0 compare equal, as they do everywhere).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts
from retrieval_metrics.functional.primitives import finite_flag, in_float64, masked
from retrieval_metrics.functional.ranking.table_build import ItemResults, table_from_items
from retrieval_metrics.functional.ranking.threads import pass_threads
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

try:  # the compiled grouping of entries by query (setup.py builds it; optional)
    from retrieval_metrics.functional.ranking import _group
except ImportError:  # pragma: no cover - a build without a C compiler
    _group = None


#: integer scores are compared as float64, which holds every integer up to this magnitude
#: exactly; beyond it neighbouring integers round to one score and would tie
EXACT_INTEGER_SCORES = 2**53

#: why a batch's ``preds`` or ``target`` is refused when :func:`scores_pass` or
#: :func:`target_passes` says it failed
PREDS_REFUSED = (
    "contains NaN or infinite values, or integers beyond 2**53 in magnitude (scores are "
    "compared as float64, in which such integers round together)"
)
TARGET_REFUSED = "must be non-negative numbers (0 = not relevant, > 0 = grade), not NaN"


def comparable_scores(preds: Tensor) -> Tensor:
    """``preds`` in the dtype its scores are compared in: integers as float64 (on the host
    where their device has no float64), half precision as float32 (widening is exact: same
    order, same ties); complex scores are refused."""
    if preds.is_complex():
        raise ValueError(f"`preds` must hold real scores, got {preds.dtype}")
    if not preds.is_floating_point():
        return in_float64(preds)
    if preds.dtype not in (torch.float32, torch.float64):
        return preds.to(torch.float32)
    return preds


def scores_pass(preds: Tensor) -> Tensor:
    """Whether ``preds`` (as given) holds finite scores that float64 tells apart: a 0-dim bool
    tensor on their device, not read (see :func:`~retrieval_metrics.functional.primitives.
    finite_flag`)."""
    if preds.is_floating_point():
        return finite_flag(preds)
    if preds.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=preds.device)
    low, high = torch.aminmax(preds)
    return (low >= -EXACT_INTEGER_SCORES) & (high <= EXACT_INTEGER_SCORES)


def target_passes(target: Tensor) -> Tensor:
    """Whether ``target`` holds grades (real, non-negative, no NaN): a 0-dim bool tensor on its
    device, not read. (``target < 0`` is False for NaN: a NaN grade was read as not relevant.)"""
    if target.is_complex():
        raise ValueError(f"`target` must hold real grades, got {target.dtype}")
    return (target >= 0).all()


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
    # (lists and numpy arrays, as the metric classes take them)
    preds, target, indexes = (torch.as_tensor(x) for x in (preds, target, indexes))
    if not (preds.shape == target.shape == indexes.shape) or preds.dim() != 1:
        raise ValueError(
            "`preds`, `target` and `indexes` must be 1-D and of the same length, got shapes "
            f"{tuple(preds.shape)}, {tuple(target.shape)} and {tuple(indexes.shape)}"
        )
    compared = comparable_scores(preds)
    if not bool(scores_pass(preds)):
        raise ValueError(f"`preds` {PREDS_REFUSED}")
    if indexes.is_floating_point():
        raise ValueError(f"`indexes` must hold integers, got {indexes.dtype}")
    if not bool(target_passes(target)):
        raise ValueError(f"`target` {TARGET_REFUSED}")
    return rank_checked_scores(compared, target, indexes)


def rank_checked_scores(preds: Tensor, target: Tensor, indexes: Tensor) -> RankTable:
    """:func:`rank_scores` on inputs it has checked (1-D, float32/float64 finite scores,
    non-negative targets, integer indexes): a metric checks each batch as it arrives."""
    scores = preds.detach().cpu().numpy()
    target = target.detach().cpu()
    if target.dtype in (torch.float16, torch.bfloat16):
        target = target.to(torch.float32)  # numpy has no bfloat16; widening is exact
    target_np = target.numpy()
    index = indexes.detach().cpu().to(torch.int64).numpy()
    # only the relevant entries' grades are widened to float64, not every entry's
    relevant = np.flatnonzero(target_np > 0)
    grades = target_np[relevant].astype(np.float64)
    counted = _counted_by_query(scores, index, relevant)
    if counted is None:
        codes, num_q, grouped = group_codes(index)
        above, tied, counts = count_in_groups(scores, codes, num_q, grouped, relevant)
        rel_code = codes[relevant]
    else:
        rel_code, num_q, counts, above, tied = counted
    binary = not target.is_floating_point() and bool(np.all(grades == 1))
    row = torch.from_numpy(rel_code)
    rel_counts = torch.bincount(row, minlength=num_q)
    ptr = ptr_from_counts(rel_counts)
    counts_t = torch.from_numpy(counts)
    items = ItemResults(
        ptr,
        torch.from_numpy(above),
        torch.from_numpy(tied),
        grade=None if binary else torch.from_numpy(grades),
        row=row,
    )
    return table_from_items(items, rel_counts, counts_t, counts_t.clone())


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
    return replace(
        table,
        ptr=ptr_from_counts(counts),
        above=masked(table.above, keep),
        tied=masked(table.tied, keep),
        grade=None if table.grade is None else masked(table.grade, keep),
        depth=torch.full_like(table.depth, UNBOUNDED),
    )


# ------------------------------------------------------------------ counting in query groups

# A padded row is at most twice as wide as the shortest query it holds; rows narrower than this
# go in one class anyway (padding a few slots costs less than another pass).
_MIN_CLASS_WIDTH = 16
# Entries copied per step when a class of queries is gathered into its padded matrix.
_CHUNK = 1 << 22


def group_codes(indexes: np.ndarray) -> tuple[np.ndarray, int, bool]:
    """Dense query codes in ascending ``indexes`` order, the number of queries and whether the
    entries already arrive grouped by query in that order (then no regrouping is needed)."""
    n = indexes.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0, True
    if _in_query_order(indexes):
        codes = np.cumsum(_query_starts(indexes), dtype=np.int64) - 1
        return codes, int(codes[-1]) + 1, True
    table = _code_table(indexes)
    if table is not None:
        # a table of codes over the index range replaces a sort of all entries
        lo, code_of, _ = table
        return code_of[indexes - lo], int(code_of[-1]) + 1, False
    uniq, codes = np.unique(indexes, return_inverse=True)
    return codes.reshape(-1).astype(np.int64, copy=False), int(uniq.size), False


def _in_query_order(indexes: np.ndarray) -> bool:
    """Whether the entries (at least one) arrive grouped by query, in ascending index order."""
    return indexes.size == 1 or bool(np.all(indexes[1:] >= indexes[:-1]))


def _query_starts(indexes: np.ndarray) -> np.ndarray:
    """Entries in query order (:func:`_in_query_order`): True at each query's first."""
    new = np.empty(indexes.size, dtype=bool)
    new[0] = True
    np.not_equal(indexes[1:], indexes[:-1], out=new[1:])
    return new


def _code_table(indexes: np.ndarray) -> tuple[int, np.ndarray, np.ndarray] | None:
    """A code per index value (ascending, dense over the values present) from a count of the
    entries of each: ``(lo, code_of, per_index)``, the code of index ``i`` being
    ``code_of[i - lo]`` and its entries ``per_index[i - lo]``. None where the values spread too
    far for a table (more than about four per entry): a sort of them then costs less. Indexes
    that are all small and non-negative are counted as they are (``lo`` 0: no shifted copy)."""
    n = indexes.size
    lo, hi = int(indexes.min()), int(indexes.max())
    if hi - lo + 1 > 4 * n + 1024:
        return None
    if lo >= 0 and hi < 4 * n + 1024:
        lo = 0
    per_index = np.bincount(indexes if lo == 0 else indexes - lo, minlength=hi - lo + 1)
    code_of = np.cumsum(per_index > 0, dtype=np.int64) - 1
    return lo, code_of, per_index


def _grouping_order(codes: np.ndarray, num_q: int) -> np.ndarray:
    """A stable permutation that groups entries by code (codes in 0 .. num_q - 1)."""
    n = codes.size
    if _group is not None:
        # a counting sort: two linear passes (_group.c)
        order = np.empty(n, dtype=np.int64)
        _group.stable_order(np.ascontiguousarray(codes, dtype=np.int64), num_q, order)
        return order
    if n < 2**32:
        # One values-only sort of (code, position) keys is several times faster than a stable
        # argsort, and the low half of each sorted key is the permutation.
        key = (codes << 32) | np.arange(n, dtype=np.int64)
        key.sort()
        return key & 0xFFFFFFFF
    return np.argsort(codes, kind="stable")


def _width_classes(counts: np.ndarray) -> np.ndarray:
    """Per query, a class such that widths within a class differ by at most a factor of two."""
    _, exponent = np.frexp(counts.astype(np.float64))
    smallest = int(np.frexp(float(_MIN_CLASS_WIDTH))[1])
    return np.maximum(exponent, smallest)


def _count_sorted_rows(
    rows_sorted: np.ndarray, row: np.ndarray, value: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Entries of ``rows_sorted[row]`` (ascending) that are > ``value`` and == ``value``.

    A branchless binary search for every value at once: after the loop ``below`` counts the
    entries < value and ``upto`` those <= value.
    """
    width = rows_sorted.shape[1]
    flat = rows_sorted.reshape(-1)
    base = row * width
    below = np.zeros(row.size, dtype=np.int64)
    upto = np.zeros(row.size, dtype=np.int64)
    step = 1 << (width.bit_length() - 1)
    while step:
        for pos, strict in ((below, True), (upto, False)):
            cand = pos + step
            fits = cand <= width
            probe = flat[base + np.minimum(cand, width) - 1]
            move = fits & ((probe < value) if strict else (probe <= value))
            np.copyto(pos, cand, where=move)
        step >>= 1
    return width - upto, upto - below


def count_in_groups(
    scores: np.ndarray, codes: np.ndarray, num_q: int, grouped: bool, relevant: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each entry in ``relevant`` (positions into ``scores``): entries of the same query with
    a strictly higher score (``above``) and with exactly its score, itself included (``tied``).

    Returns ``(above, tied, counts)``, ``counts`` being the entries per query.
    """
    counts = np.bincount(codes, minlength=num_q).astype(np.int64)
    above = np.zeros(relevant.size, dtype=np.int64)
    tied = np.zeros(relevant.size, dtype=np.int64)
    if relevant.size == 0:
        return above, tied, counts
    in_order = scores if grouped else scores[_grouping_order(codes, num_q)]
    starts = np.cumsum(counts) - counts
    rel_code = codes[relevant]
    rel_value = scores[relevant]
    cls = _width_classes(counts)
    rel_cls = cls[rel_code]
    row_in_class = np.zeros(num_q, dtype=np.int64)
    for c in np.unique(rel_cls):
        queries = np.flatnonzero(cls == c)
        row_in_class[queries] = np.arange(queries.size)
        lengths = counts[queries]
        width = int(lengths.max())
        first = int(starts[queries[0]])
        if int(lengths.min()) == width and int(starts[queries[-1]]) - first == (
            queries.size - 1
        ) * width:
            # the class is a contiguous block of equal rows: a view, no copy
            matrix = in_order[first : first + queries.size * width].reshape(queries.size, width)
        else:
            matrix = _padded(in_order, starts[queries], lengths, width)
        rows_sorted = np.sort(matrix, axis=1)
        sel = np.flatnonzero(rel_cls == c)
        a, t = _count_sorted_rows(rows_sorted, row_in_class[rel_code[sel]], rel_value[sel])
        above[sel] = a
        tied[sel] = t
    return above, tied, counts


def _counted_by_query(
    scores: np.ndarray, index: np.ndarray, relevant: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`count_in_groups` in one compiled pass over the entries in the order they came
    (``_group.count_by_query``), with no query code written per entry: the relevant entries'
    query codes, the number of queries, the entries per query, and each relevant entry's
    ``above`` and ``tied``. None where the module is not built, the scores are neither float32
    nor float64, or the indexes spread too far for a table of their codes (``group_codes``
    then takes them).

    Each query's relevant scores are sorted, and every entry is added to its query's histogram
    at its place among them (how many it beats, and how many it beats or ties); a relevant
    score's counts are the entries in the bins after its own. No entry is moved: grouping 10
    million shuffled entries by query (a counting sort, then a gather of the scores) and sorting
    each query's row took most of the form's time."""
    n = index.size
    if _group is None or scores.dtype not in (np.float32, np.float64) or n == 0:
        return None
    lo, code_of = 0, None
    if _in_query_order(index):
        # grouped in ascending order (as a dataloader of whole queries gives them): a query
        # starts where the index changes, and the pass counts the codes up itself
        starts = np.flatnonzero(_query_starts(index))
        counts = np.diff(np.append(starts, n))
        rel_code = np.searchsorted(starts, relevant, side="right") - 1
    else:
        table = _code_table(index)
        if table is None:
            return None  # (indexes too far apart for a table of codes: group_codes sorts them)
        lo, code_of, per_index = table
        counts = per_index[per_index > 0]
        rel_code = code_of[index[relevant] - lo]
    num_q = counts.size
    rel_value = scores[relevant]
    order = _by_query_then_score(rel_code, rel_value)
    sorted_code = rel_code[order]
    ptr = np.zeros(num_q + 1, dtype=np.int64)
    np.cumsum(np.bincount(sorted_code, minlength=num_q), out=ptr[1:])
    # query q's bins: ptr[q] + q, ..., ptr[q + 1] + q (one more than its relevant scores), each a
    # pair: the entries beating that many of them, and beating or tying that many
    hist = np.zeros((relevant.size + num_q, 2), dtype=np.int64)
    # (the entries on torch's threads, a part each: 10M shuffled ones 0.29 -> 0.19 s, their
    # reads waiting on memory, a thread's on its own; grouped ones 0.10 -> 0.06 s)
    _group.count_by_query(
        np.ascontiguousarray(index), lo, code_of, np.ascontiguousarray(scores), ptr,
        np.ascontiguousarray(rel_value[order]), hist.reshape(-1),
        threads=pass_threads(n, 0),
    )
    # the relevant score at sorted place p of query q: beaten by the entries in bins
    # p + q + 1 .. ptr[q + 1] + q, a difference of the histograms' running totals
    first = np.arange(relevant.size, dtype=np.int64) + sorted_code + 1
    past = ptr[1:][sorted_code] + sorted_code + 1
    total = np.zeros((hist.shape[0] + 1, 2), dtype=np.int64)
    np.cumsum(hist, axis=0, out=total[1:])
    above_sorted = total[past, 0] - total[first, 0]
    above = np.empty(relevant.size, dtype=np.int64)
    tied = np.empty(relevant.size, dtype=np.int64)
    above[order] = above_sorted
    tied[order] = total[past, 1] - total[first, 1] - above_sorted
    return (rel_code.astype(np.int64, copy=False), num_q, counts.astype(np.int64, copy=False),
            above, tied)


def _by_query_then_score(code: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The permutation that sorts entries by query code, then by score ascending: float32
    scores as one 64-bit key each (the code above the score's bits, mapped to keep their
    order), one sort, twice as fast as a lexsort of the two."""
    if value.dtype != np.float32 or code.size == 0 or int(code.max()) >= 2**31:
        return np.lexsort((value, code))
    bits = value.view(np.uint32).astype(np.int64)
    # (a negative float's bits inverted, a positive one's sign bit set: ascending as integers;
    # -0.0 just below 0.0, which the counts compare as equal anyway)
    ordered = np.where(bits >> 31 == 1, ~bits & 0xFFFFFFFF, bits | 0x80000000)
    return np.argsort((code << 32) | ordered, kind="stable")


def _padded(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Rows ``values[starts[i] : starts[i] + lengths[i]]``, padded with -inf to ``width``.

    -inf never equals nor beats a finite score, so padding never counts.
    """
    out = np.full((starts.size, width), -np.inf, dtype=values.dtype)
    flat = out.reshape(-1)
    rows_per_chunk = max(1, _CHUNK // width)
    for r0 in range(0, starts.size, rows_per_chunk):
        s, n = starts[r0 : r0 + rows_per_chunk], lengths[r0 : r0 + rows_per_chunk]
        row = np.repeat(np.arange(r0, r0 + s.size), n)
        offset = np.cumsum(n) - n
        within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(offset, n)
        flat[row * width + within] = values[np.repeat(s, n) + within]
    return out
