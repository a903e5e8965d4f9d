"""``_ties.c`` equals the torch path it replaces. Its tie groups of a binary table equal
``ties._binary_runs`` then ``ties._merge_full_runs`` (the readable reference), field by field, on
tables full of ties, runs of relevant items, empty queries and truncated rankings. Its precision
sums (AP's and MAP@R's numerators) equal ``ties._precision_sum_in_torch`` bit for bit, and an
enumeration of the arrangements of a tie group."""

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction
from math import comb

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.ranking import rank_embeddings, rank_scores
from retrieval_metrics.functional.table import UNBOUNDED

needs_compiled = pytest.mark.skipif(T._ties is None, reason="_ties.c is not built here")


def reference_groups(table, **kwargs):
    saved = T._ties
    try:
        T._ties = None
        return T.tie_groups(table, **kwargs)
    finally:
        T._ties = saved


def assert_same_groups(got: T.TieGroups, want: T.TieGroups) -> None:
    for field in dataclasses.fields(T.TieGroups):
        a, b = getattr(got, field.name), getattr(want, field.name)
        assert a.dtype == b.dtype, field.name
        assert torch.equal(a, b), (field.name, a, b)


@st.composite
def scored_tables(draw):
    """torchmetrics' form with few distinct scores (ties everywhere), relevant entries dense
    or sparse (runs of relevant items, tie groups wholly relevant), some queries with nothing
    relevant or nothing at all."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    n = draw(st.integers(0, 400))
    levels = draw(st.sampled_from([2, 4, 20, 10_000]))
    density = draw(st.sampled_from([0.05, 0.3, 0.7, 0.95, 1.0]))
    queries = draw(st.integers(1, 30))
    preds = torch.from_numpy(rng.integers(0, levels, n).astype(np.float32))
    target = torch.from_numpy((rng.random(n) < density).astype(np.int64))
    indexes = torch.from_numpy(rng.integers(0, queries, n).astype(np.int64))
    return rank_scores(preds, target, indexes)


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(scored_tables())
def test_the_compiled_groups_are_the_reference_groups(table):
    assert_same_groups(T.tie_groups(table), reference_groups(table))


@needs_compiled
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([None, 1, 3]), st.booleans())
def test_the_compiled_groups_of_rankings_with_and_without_depth(seed, depth, locate_first):
    """Integer embeddings (exact ties) ranked whole or to a depth: the tables the metric
    classes build, and the measures read from them the same either way."""
    rng = np.random.default_rng(seed)
    gallery = torch.from_numpy(rng.integers(-1, 2, (120, 3)).astype(np.float32))
    query = torch.from_numpy(rng.integers(-1, 2, (25, 3)).astype(np.float32))
    labels = {"query_labels": torch.from_numpy(rng.integers(0, 4, 25)),
              "gallery_labels": torch.from_numpy(rng.integers(0, 4, 120))}
    options = {} if depth is None else {"depth": depth, "locate_first": locate_first}
    table = rank_embeddings(query, gallery, similarity="dot", **labels, **options)
    assert_same_groups(T.tie_groups(table), reference_groups(table))
    names = ["hit_rate@1", "recall@1", "mrr@1"] if depth else ["hit_rate@1", "map", "mrr", "ndcg"]
    saved = T._ties
    try:
        T._ties = None
        want = M.retrieval_measures(table, names)
    finally:
        T._ties = saved
    got = M.retrieval_measures(table, names)
    for name in names:
        assert torch.equal(got[name].nan_to_num(-1.0), want[name].nan_to_num(-1.0)), name


def test_a_hand_worked_table():
    """One query, ranked items 1..9 with relevant at positions 1, 2 (a run), 4-5 (a tie group
    of 2, both relevant: merged with nothing, position 3 is not relevant), 6-8 (a tie group of
    3 holding 1 relevant) and 9 (alone, right after the tie group: its own group). A second
    query has nothing listed; a third one relevant item at 1 next to a wholly relevant tie
    group at 2-3, merged into one group of 3."""
    preds = torch.tensor([9.0, 8.0, 7.0, 6.0, 6.0, 5.0, 5.0, 5.0, 4.0, 1.0, 9.0, 8.0, 8.0])
    target = torch.tensor([1, 1, 0, 1, 1, 0, 1, 0, 1, 0, 1, 1, 1])
    indexes = torch.tensor([0] * 9 + [1] + [2] * 3)
    groups = T.tie_groups(rank_scores(preds, target, indexes))
    assert groups.query.tolist() == [0, 0, 0, 0, 2]
    assert groups.above.tolist() == [0, 3, 5, 8, 0]
    assert groups.size.tolist() == [2, 2, 3, 1, 3]
    assert groups.relevant.tolist() == [2, 2, 1, 1, 3]
    assert groups.relevant_before.tolist() == [0, 2, 4, 5, 0]
    assert groups.first.tolist() == [True, False, False, False, True]
    assert groups.last.tolist() == [False, False, False, True, True]
    assert groups.first_index.tolist() == [0, 4]
    assert groups.gain.dtype == torch.float64 and groups.gain.tolist() == [2, 2, 1, 1, 3]
    assert_same_groups(groups, reference_groups(rank_scores(preds, target, indexes)))


@needs_compiled
def test_the_compiled_pass_refuses_what_is_not_a_table():
    out = [np.empty(4, dtype=np.int64) for _ in range(5)] + [np.empty(4, dtype=np.bool_)] * 2
    above, tied = np.zeros(4, dtype=np.int64), np.ones(4, dtype=np.int64)
    with pytest.raises(ValueError, match="not a valid CSR pointer"):
        T._ties.binary_groups(np.array([0, 5], dtype=np.int64), above, tied, *out,
                              np.empty(1, dtype=np.int64))
    with pytest.raises(ValueError, match="int64 ptr"):
        T._ties.binary_groups(np.array([0, 4], dtype=np.int32), above, tied, *out,
                              np.empty(1, dtype=np.int64))


def precision_sum_parts(rng: np.random.Generator, n: int) -> list[torch.Tensor]:
    """``n`` groups (above, size, relevant, relevant_before, cutoff): short and long groups
    (more positions than the direct sum takes), wholly relevant ones at the top of their
    ranking, cut-offs before, inside and past a group, and unbounded."""
    size = torch.from_numpy(rng.choice([1, 2, 3, 7, 16, 17, 40, 500], n))
    relevant = torch.from_numpy(rng.integers(1, size.numpy() + 1))
    relevant = torch.where(torch.from_numpy(rng.random(n) < 0.3), size, relevant)
    above = torch.from_numpy(rng.integers(0, 60, n))
    before = torch.minimum(torch.from_numpy(rng.integers(0, 60, n)), above)
    before = torch.where(torch.from_numpy(rng.random(n) < 0.3), above, before)
    cutoff = above + torch.from_numpy(rng.integers(-3, 600, n)).clamp_min(0)
    cutoff = torch.where(torch.from_numpy(rng.random(n) < 0.2), UNBOUNDED, cutoff)
    return [above, size, relevant, before, cutoff]


@needs_compiled
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(0, 300))
def test_the_compiled_precision_sums_are_the_torch_sums(seed, n):
    parts = precision_sum_parts(np.random.default_rng(seed), n)
    got = T._precision_sum_of(*parts)
    want = T._precision_sum_in_torch(*parts)
    assert got.dtype == want.dtype == torch.float64
    assert torch.equal(got, want)


def enumerated_precision_sum(above: int, size: int, relevant: int, before: int, cutoff: int):
    """Every placement of the group's relevant items on its positions, equally likely: the mean
    of the sum of precisions at those within the cut-off (exact fractions)."""
    total, placements = Fraction(0), list(itertools.combinations(range(size), relevant))
    for chosen in placements:
        for hits, offset in enumerate(chosen, start=1):
            position = above + offset + 1
            if position <= cutoff:
                total += Fraction(before + hits, position)
    return total / len(placements)


@pytest.mark.parametrize("compiled", [True, False])
def test_precision_sums_against_an_enumeration(compiled):
    """Above 2, three positions holding two relevant items, one relevant above: the placements
    {3, 4}, {3, 5}, {4, 5} give 2/3 + 3/4, 2/3 + 3/5 and 2/4 + 3/5, a mean of 227/180. Then
    groups of every shape up to 18 positions (long sums included), against the enumeration."""
    if compiled and T._ties is None:
        pytest.skip("_ties.c is not built here")
    groups = [(2, 3, 2, 1, 1000), (0, 4, 4, 0, 3), (5, 5, 5, 5, 7), (1, 1, 1, 0, 1)]
    groups.append((4, 2, 1, 2, 4))
    rng = np.random.default_rng(0)
    for _ in range(60):
        size = int(rng.integers(1, 19))
        above = int(rng.integers(0, 30))
        groups.append((above, size, int(rng.integers(1, min(size, 4) + 1)) if size > 4 else size,
                       int(rng.integers(0, above + 1)), above + int(rng.integers(0, size + 3))))
    parts = [torch.tensor(column, dtype=torch.int64) for column in zip(*groups, strict=True)]
    saved = T._ties
    try:
        T._ties = T._ties if compiled else None
        got = T._precision_sum_of(*parts)
    finally:
        T._ties = saved
    assert enumerated_precision_sum(*groups[0]) == Fraction(227, 180)
    want = torch.tensor([float(enumerated_precision_sum(*g)) for g in groups], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


@needs_compiled
def test_the_compiled_sums_refuse_mismatched_arrays():
    ints = [np.zeros(3, dtype=np.int64) for _ in range(5)]
    with pytest.raises(ValueError, match="float64 out"):
        T._ties.precision_sums(*ints, np.zeros(3, np.float32), np.zeros(3, np.int64), 16)
    with pytest.raises(ValueError, match="one length"):
        T._ties.precision_sums(*ints, np.zeros(2), np.zeros(3, dtype=np.int64), 16)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(3, 400), st.integers(0, 50), st.integers(0, 500)),
        min_size=1, max_size=12,
    ),
    st.data(),
    st.booleans(),
)
def test_the_compiled_reciprocal_sums_are_the_torch_reference_to_the_bit(groups, data, from_end):
    """``_ties.reciprocal_sums`` against ``_reciprocal_sums_in_torch``: the same float64
    operations in the same order, so the same bits, for any sizes, relevant items, items above
    and limits (a cut-off that splits the group, or none)."""
    size = torch.tensor([g[0] for g in groups])
    relevant = torch.tensor([data.draw(st.integers(2, g[0] - 1)) for g in groups])
    above = torch.tensor([g[1] for g in groups])
    limit = torch.tensor([g[2] if g[2] else 2**62 for g in groups])
    saved = T._ties
    try:
        compiled = T._ragged_sums(size, relevant, above, limit, from_end)
        T._ties = None
        reference = T._ragged_sums(size, relevant, above, limit, from_end)
    finally:
        T._ties = saved
    assert torch.equal(compiled, reference)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_expectation_over_a_large_tie_group_is_the_hand_sum(compiled, monkeypatch):
    """Collapsed embeddings: every item ties, so each query's first relevant item is spread over
    599 positions and MRR and mINP sum a term a position. Against the sums written out: the
    first relevant of r among t tied positions is at x with chance C(t - x, r - 1) / C(t, r),
    the last at y with chance C(y - 1, r - 1) / C(t, r) (exact fractions)."""
    import retrieval_metrics as rm

    if not compiled:
        monkeypatch.setattr(T, "_ties", None)
    m = rm.RetrievalMetrics(["mrr", "minp"])
    m.set_dtype(torch.float64)
    m.update(torch.ones(600, 4), torch.arange(600) % 150)  # classes of 4: 3 relevant each
    values = m.compute()
    t, r = 599, 3
    first = sum(Fraction(comb(t - x, r - 1), comb(t, r) * x) for x in range(1, t - r + 2))
    last = sum(Fraction(comb(y - 1, r - 1), comb(t, r) * y) for y in range(r, t + 1))
    assert float(values["mrr"]) == pytest.approx(float(first), rel=1e-13)
    assert float(values["minp"]) == pytest.approx(float(r * last), rel=1e-13)
