"""The scores form (``rank_scores``) and the ranked-list form (``rank_lists``) against the
brute-force reference, on random inputs (hypothesis).

``rank_scores`` groups candidates by query (or not, when they arrive in query order), pads each
class of similar query sizes into a matrix and binary-searches each relevant score in its sorted
row; ``rank_lists`` finds each list's relevant ids with one set intersection and ``list.index``
(a dict of first positions when many are found). The cases below reach every one of those
branches: shuffled and query-ordered entries, equal and ragged query sizes (several width
classes), sparse, negative and far-apart query indexes, float32 and float64 scores with ties and
-0.0 next to 0.0, binary, graded and all-ones float targets, queries with nothing relevant, lists
with repeated ids and with more than a handful of relevant hits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_query_matches, ours_per_query
from reference import reference_query, reference_ranked_list
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_lists, rank_scores

SETTINGS = settings(max_examples=40, deadline=None)
TIES = ("optimistic", "pessimistic", "expected")


# ------------------------------------------------------------------------------ scores form


@st.composite
def score_problems(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    n_queries = draw(st.integers(0, 7))
    equal_sizes = draw(st.booleans())
    # small sizes keep the exact enumeration of tie orders cheap; up to 70 crosses width classes
    large = draw(st.booleans())
    sizes = (
        np.full(n_queries, int(rng.integers(1, 71 if large else 9)))
        if equal_sizes
        else rng.integers(1, 71 if large else 9, n_queries)
    )
    score_kind = draw(st.sampled_from(["levels", "signed_zero", "real"]))
    target_kind = draw(st.sampled_from(["binary", "bool", "graded", "float_ones", "float_graded"]))
    order = draw(st.sampled_from(["query_order", "shuffled"]))
    index_kind = draw(st.sampled_from(["dense", "sparse", "far_apart"]))
    preds, target, indexes = [], [], []
    query_index = {
        "dense": np.arange(n_queries),
        "sparse": np.sort(rng.choice(np.arange(-50, 50), n_queries, replace=False)),
        # a span far beyond the number of entries: the sort-based code path
        "far_apart": np.sort(rng.choice(2**40, n_queries, replace=False)) - 2**39,
    }[index_kind]
    for q, n in enumerate(sizes):
        if score_kind == "levels":
            s = rng.integers(0, int(rng.integers(1, 4)) + 1, n).astype(dtype)
        elif score_kind == "signed_zero":
            s = rng.choice(np.array([-1.0, -0.0, 0.0, 0.5], dtype=dtype), n)
        else:
            s = rng.normal(size=n).astype(dtype)
        if target_kind in ("graded", "float_graded"):
            t = rng.integers(0, 4, n) * (rng.random(n) < 0.5)
        else:
            t = (rng.random(n) < rng.uniform(0.0, 0.6)).astype(np.int64)
        preds.append(s)
        target.append(t)
        indexes.append(np.full(n, query_index[q]))
    preds = np.concatenate(preds) if preds else np.zeros(0, dtype=dtype)
    target = np.concatenate(target) if target else np.zeros(0, dtype=np.int64)
    indexes = np.concatenate(indexes) if indexes else np.zeros(0, dtype=np.int64)
    if order == "shuffled":
        perm = rng.permutation(preds.size)
        preds, target, indexes = preds[perm], target[perm], indexes[perm]
    target_t = torch.tensor(target)
    if target_kind == "bool":
        target_t = target_t > 0
    elif target_kind.startswith("float"):
        target_t = target_t.to(torch.float64)
    return torch.from_numpy(preds.copy()), target_t, torch.tensor(indexes, dtype=torch.int64)


def brute_force_counts(preds, target, indexes):
    """Per query (ascending index), the sorted (above, tied, grade) of its relevant entries."""
    out = []
    for q in sorted(set(indexes.tolist())):
        mine = [i for i in range(len(indexes)) if int(indexes[i]) == q]
        items = []
        for i in mine:
            if float(target[i]) > 0:
                s = float(preds[i])
                above = sum(1 for j in mine if float(preds[j]) > s)
                tied = sum(1 for j in mine if float(preds[j]) == s)
                items.append((above, tied, -float(target[i])))
        out.append((sorted(items), len(mine), sum(1 for i in mine if float(target[i]) > 0)))
    return out


def assert_brute_force_table(table, preds, target, indexes):
    """``table`` (of rank_scores) holds the brute force's counts, sizes and grades."""
    expected = brute_force_counts(preds, target, indexes)
    assert table.num_queries == len(expected)
    for q, (items, size, m) in enumerate(expected):
        lo, hi = int(table.ptr[q]), int(table.ptr[q + 1])
        grade = table.grade[lo:hi].tolist() if table.grade is not None else [1.0] * (hi - lo)
        ours = list(zip(table.above[lo:hi].tolist(), table.tied[lo:hi].tolist(),
                        [-g for g in grade], strict=True))
        assert ours == items, f"query {q}"
        assert int(table.gallery_size[q]) == size
        assert int(table.num_relevant[q]) == m
        assert int(table.depth[q]) == size


@SETTINGS
@given(score_problems())
def test_rank_scores_table_matches_brute_force(problem):
    assert_brute_force_table(rank_scores(*problem), *problem)


@SETTINGS
@given(score_problems(), st.sampled_from(TIES))
def test_rank_scores_measures_match_reference(problem, ties):
    preds, target, indexes = problem
    if preds.numel() and int(torch.unique(indexes, return_counts=True)[1].max()) > 8:
        return  # the reference enumerates tie orders: kept to small queries
    table = rank_scores(preds, target, indexes)
    ours = ours_per_query(table, ties, cmc_len=8)
    graded = target.is_floating_point() or bool((target.to(torch.int64) > 1).any())
    for q, index in enumerate(sorted(set(indexes.tolist()))):
        sel = indexes == index
        grades = target[sel].to(torch.float64).numpy() if graded else None
        ref = reference_query(
            preds[sel].to(torch.float64).numpy(), target[sel].numpy() > 0, grades=grades,
            ties=ties,
        )
        assert_query_matches(ours[q], ref, f"query {q} ties {ties}")


def test_rank_scores_signed_zero_and_float32_ties():
    """-0.0 ties with 0.0, and float32 scores that differ only in float32 stay apart."""
    a = np.float32(0.1)
    b = np.nextafter(a, np.float32(1))
    preds = torch.tensor([-0.0, 0.0, 0.0, a, b], dtype=torch.float32)
    target = torch.tensor([1, 0, 0, 1, 0])
    table = rank_scores(preds, target, torch.zeros(5, dtype=torch.int64))
    assert table.above.tolist() == [1, 2]
    assert table.tied.tolist() == [1, 3]


# ------------------------------------------------------------------------------ ranked lists


@st.composite
def list_problems(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_queries = draw(st.integers(0, 6))
    id_kind = draw(st.sampled_from(["str", "int"]))
    graded = draw(st.sampled_from(["binary", "graded", "mixed"]))
    vocab_size = draw(st.integers(1, 60))
    vocab = [f"d{i}" if id_kind == "str" else int(i) - 5 for i in range(vocab_size)]
    ranked, relevant = [], []
    for _ in range(n_queries):
        length = int(rng.integers(0, 45))
        # drawing with replacement from a small vocabulary repeats ids
        ranked.append([vocab[j] for j in rng.integers(0, vocab_size, length)])
        k = int(rng.integers(0, min(vocab_size, 30) + 1))
        chosen = [vocab[j] for j in rng.choice(vocab_size, k, replace=False)]
        chosen.append("never" if id_kind == "str" else 10**6)  # relevant but never returned
        if graded == "graded" or (graded == "mixed" and rng.random() < 0.5):
            relevant.append({c: int(rng.integers(-1, 4)) for c in chosen})
        else:
            relevant.append(set(chosen[: int(rng.integers(0, len(chosen) + 1))]))
    return ranked, relevant


@SETTINGS
@given(list_problems(), st.sampled_from(TIES))
def test_rank_lists_match_reference(problem, ties):
    ranked, relevant = problem
    table = rank_lists(ranked, relevant)
    ours = ours_per_query(table, ties, cmc_len=45)
    assert table.gallery_size.tolist() == [len(r) for r in ranked]
    for q, (ids, rel) in enumerate(zip(ranked, relevant, strict=True)):
        ref = reference_ranked_list(ids, rel)
        assert_query_matches(ours[q], ref, f"query {q}")


@SETTINGS
@given(list_problems())
def test_rank_lists_duplicates_error_names_the_first_repeat(problem):
    ranked, relevant = problem
    first_repeat = None
    for q, ids in enumerate(ranked):
        seen = set()
        for item in ids:
            if item in seen:
                first_repeat = (q, item)
                break
            seen.add(item)
        if first_repeat:
            break
    if first_repeat is None:
        table = rank_lists(ranked, relevant, duplicates="error")
        assert torch.equal(table.above, rank_lists(ranked, relevant).above)
        return
    q, item = first_repeat
    with pytest.raises(ValueError, match=rf"`ranked_ids\[{q}\]` returns id {item!r} more"):
        rank_lists(ranked, relevant, duplicates="error")


def test_rank_lists_many_hits_use_first_positions():
    """More relevant ids found than list.index handles: each still counts at its first place."""
    ids = [f"d{i}" for i in range(30)]
    ranked = [ids[::-1] + ids]  # every id twice, the second copy non-relevant
    table = rank_lists(ranked, [set(ids)])
    assert table.above.tolist() == list(range(30))
    assert float(M.minp_per_query(table)[0]) == pytest.approx(30 / 30)
    assert math.isclose(float(M.recall_per_query(table, 30)[0]), 1.0)


@SETTINGS
@given(score_problems())
def test_rank_scores_without_the_compiled_pass_matches_brute_force(problem):
    """The Python path (entries grouped by query, each query's row sorted and searched) where
    the compiled module is not built: the same table as the brute force, which the compiled
    pass (scores._counted_by_query) meets in the test above."""
    assert_brute_force_table(_ranked_in_python(problem), *problem)


def _ranked_in_python(problem):
    """rank_scores of ``problem`` by the Python path, as where the compiled module is not
    built."""
    from retrieval_metrics.functional.ranking import scores as S

    saved = S._group
    try:
        S._group = None
        return rank_scores(*problem)
    finally:
        S._group = saved


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3000), st.integers(1, 300), st.integers(0, 2**31 - 1))
def test_sorting_by_query_then_score_is_a_lexsort(n, q, seed):
    """scores._by_query_then_score (float32 scores packed with their query's code into one key)
    orders as numpy's lexsort by code then score: negative scores, -0.0 and 0.0 (equal, in
    either order), infinities and ties among them."""
    from retrieval_metrics.functional.ranking import scores as S

    rng = np.random.default_rng(seed)
    code = rng.integers(0, q, n).astype(np.int64)
    levels = np.array([-np.inf, -2.5, -1e-30, -0.0, 0.0, 1e-30, 0.25, 3.0, np.inf], np.float32)
    value = np.where(rng.random(n) < 0.5, rng.choice(levels, n),
                     rng.normal(size=n)).astype(np.float32)
    order = S._by_query_then_score(code, value)
    assert sorted(order.tolist()) == list(range(n))
    expected = np.lexsort((value, code))
    np.testing.assert_array_equal(code[order], code[expected])
    np.testing.assert_array_equal(value[order], value[expected])  # (-0.0 == 0.0)


def test_the_compiled_count_refuses_an_index_outside_its_table():
    """_group.count_by_query reads each entry's code from a table by its index, and each
    query's relevant scores through rel_ptr: an index outside the table, and a rel_ptr that
    does not run from 0 to the scores' length without falling, are refused by name, not read
    past the arrays' ends."""
    from retrieval_metrics.functional.ranking import scores as S

    if S._group is None:
        pytest.skip("the compiled module is not built")
    index = np.array([0, 1, 5], dtype=np.int64)
    code_of = np.array([0, 1], dtype=np.int64)
    ptr = np.array([0, 1, 1], dtype=np.int64)
    hist = np.zeros(2 * (1 + 2), dtype=np.int64)
    with pytest.raises(ValueError, match="out of range"):
        S._group.count_by_query(index, 0, code_of, np.ones(3, np.float32), ptr,
                                np.ones(1, np.float32), hist)
    for bad_ptr in ([0, 2, 1], [1, 1, 1], [0, 0, 0]):
        with pytest.raises(ValueError, match="rel_ptr"):
            S._group.count_by_query(index[:2], 0, None, np.ones(2, np.float32),
                                    np.array(bad_ptr, dtype=np.int64), np.ones(1, np.float32),
                                    hist)


@settings(max_examples=8, deadline=None)
@given(st.integers(1 << 16, 3 << 16), st.integers(1, 2000), st.integers(0, 2**31 - 1),
       st.sampled_from([np.float32, np.float64]))
def test_entries_count_alike_on_any_number_of_threads(n, q, seed, dtype):
    """Many entries, shuffled or grouped by query, are cut into a part a thread
    (``threads=``), each counted into histograms of its own, then added: the same histograms
    as one thread's pass, and the same table as the Python path (grouped and sorted); scores
    full of ties, queries without relevant entries, an index out of range refused in any
    part."""
    from retrieval_metrics.functional.ranking import scores as S

    if S._group is None:
        pytest.skip("the compiled module is not built")
    assert S._group.shares_rows()  # (torch's OpenMP pool found: the parts are shared out)
    rng = np.random.default_rng(seed)
    index = rng.integers(-5, q, n).astype(np.int64) * 3  # (sparse, negative query indexes)
    index[0] = index.min() - 3  # (a query of one entry, first once grouped)
    scores = rng.integers(0, 40, n).astype(dtype)  # (ties everywhere)
    relevant = np.flatnonzero(rng.random(n) < 0.05)
    lo, code_of, per_index = S._code_table(index)
    num_q = int((per_index > 0).sum())
    rel_code = code_of[index[relevant] - lo]
    order = S._by_query_then_score(rel_code, scores[relevant]) if dtype == np.float32 else (
        np.lexsort((scores[relevant], rel_code)))
    ptr = np.zeros(num_q + 1, dtype=np.int64)
    np.cumsum(np.bincount(rel_code, minlength=num_q), out=ptr[1:])
    hists = []
    for threads in (1, 2, 3):
        hist = np.zeros(2 * (relevant.size + num_q), dtype=np.int64)
        S._group.count_by_query(index, lo, code_of, scores, ptr, scores[relevant][order], hist,
                                threads=threads)
        hists.append(hist)
        if threads > 1:
            broken = index.copy()
            broken[-1 - int(rng.integers(0, n // threads))] = index.max() + 1
            with pytest.raises(ValueError, match="out of range"):
                S._group.count_by_query(broken, lo, code_of, scores, ptr,
                                        scores[relevant][order], hist.copy(), threads=threads)
    np.testing.assert_array_equal(hists[1], hists[0])
    np.testing.assert_array_equal(hists[2], hists[0])
    # the same entries grouped by query (a dataloader of whole queries): no table of codes,
    # each part's codes counted up from the changes of index before it
    by_query = np.argsort(index, kind="stable")
    in_order = []
    for threads in (1, 2, 3):
        hist = np.zeros(2 * (relevant.size + num_q), dtype=np.int64)
        S._group.count_by_query(index[by_query], 0, None, scores[by_query], ptr,
                                scores[relevant][order], hist, threads=threads)
        in_order.append(hist)
    np.testing.assert_array_equal(in_order[1], in_order[0])
    np.testing.assert_array_equal(in_order[2], in_order[0])
    target = np.zeros(n, dtype=np.int64)
    target[relevant] = 1
    for entries in (np.arange(n), by_query):
        problem = (torch.from_numpy(scores[entries]), torch.from_numpy(target[entries]),
                   torch.from_numpy(index[entries]))
        table, grouped = rank_scores(*problem), _ranked_in_python(problem)
        for name in ("ptr", "above", "tied", "gallery_size", "num_relevant"):
            assert torch.equal(getattr(table, name), getattr(grouped, name)), name


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2000), st.integers(1, 50), st.integers(0, 2**31 - 1))
def test_grouping_by_query_is_the_stable_sort_with_and_without_the_compiled_one(n, q, seed):
    """The scores form groups entries by query with a counting sort in C (_group.c) where it is
    built: the same permutation as the stable sort of the Python path."""
    from retrieval_metrics.functional.ranking import scores as S

    codes = np.random.default_rng(seed).integers(0, q, n).astype(np.int64)
    expected = np.argsort(codes, kind="stable")
    saved = S._group
    try:
        S._group = None
        np.testing.assert_array_equal(S._grouping_order(codes, q), expected)
    finally:
        S._group = saved
    np.testing.assert_array_equal(S._grouping_order(codes, q), expected)
    if S._group is not None and n:
        with pytest.raises(ValueError, match="out of range"):
            S._group.stable_order(codes, int(codes.max()), np.empty(n, dtype=np.int64))
