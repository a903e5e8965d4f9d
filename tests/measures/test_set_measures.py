"""Hit rate, recall, precision and F1 without a cut-off (the whole ranking: trec_eval's set
measures), F1@K, granular MRR and NDCG's binary gain, against the brute-force reference
(tests/reference.py): on ranked lists with repeats, empty lists and grades, and on scores with
many ties under every tie rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from measures.test_measures_reference import CASES, make_case
from reference import KS, reference_query, reference_ranked_list
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_lists, rank_scores

# our name -> the reference's key
NAMES = {
    "hit_rate": "hit_rate",
    "recall": "recall",
    "precision": "precision",
    "f1": "f1",
    "granular_mrr": "granular_rr",
    **{f"f1@{k}": f"f1@{k}" for k in KS},
}


def random_lists(seed: int, n_queries: int = 40):
    """Lists of 0-12 str ids drawn with replacement (repeats), relevant ids as sets or graded
    dicts (grade 0 entries included), some relevant ids never returned."""
    rng = np.random.default_rng(seed)
    ranked, relevant = [], []
    for _ in range(n_queries):
        pool = [f"d{i}" for i in range(int(rng.integers(3, 15)))]
        ranked.append([pool[i] for i in rng.integers(0, len(pool), int(rng.integers(0, 13)))])
        chosen = list(rng.choice(pool, int(rng.integers(1, len(pool))), replace=False))
        if seed % 2:
            relevant.append({d: int(rng.integers(0, 4)) for d in chosen})
        else:
            relevant.append(set(chosen))
    return ranked, relevant


def per_query(table, names, **options):
    opts = M.MeasureOptions(**options)
    return {
        name: M.per_query_values(table, M.parse_metric(name), options=opts).tolist()
        for name in names
    }


@pytest.mark.parametrize("seed", range(6))
def test_lists_match_reference(seed):
    ranked, relevant = random_lists(seed)
    table = rank_lists(ranked, relevant)
    ours = per_query(table, [*NAMES, "ndcg"], gain="binary")
    for q, (ids, rel) in enumerate(zip(ranked, relevant, strict=True)):
        ref = reference_ranked_list(ids, rel)
        for name, key in NAMES.items():
            if ref is None:  # nothing relevant: unanswerable
                assert math.isnan(ours[name][q]), (name, q)
            else:
                assert ours[name][q] == pytest.approx(ref[key], abs=1e-12), (name, q, ids, rel)
        if ref is not None:
            assert ours["ndcg"][q] == pytest.approx(ref["ndcg/binary"], abs=1e-12), q


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "expected"])
@pytest.mark.parametrize(("kind", "seed"), CASES)
def test_scores_with_ties_match_reference(kind, seed, ties):
    """On a whole ranking the set measures are trivial (everything is retrieved); F1@K and
    granular MRR are not, and their expectation over tie orders is exact."""
    preds, target, indexes = make_case(kind, seed)
    table = rank_scores(preds, target, indexes)
    ours = per_query(table, list(NAMES), ties=ties)
    for q in range(table.num_queries):
        sel = indexes == q
        ref = reference_query(preds[sel].numpy(), target[sel].numpy() > 0, ties=ties)
        for name, key in NAMES.items():
            if ref is None:
                assert math.isnan(ours[name][q]), (name, q)
            else:
                assert ours[name][q] == pytest.approx(ref[key], abs=1e-12), (kind, seed, name, q)


def test_hand_worked():
    """[a, x, b, a] against {a, b, c}: hits at 1 and 3, three distinct ids returned."""
    table = rank_lists([["a", "x", "b", "a"]], [{"a", "b", "c"}])
    values = {k: float(v[0]) for k, v in per_query(
        table, ["precision", "recall", "f1", "f1@2", "granular_mrr", "hit_rate"]).items()}
    assert values == pytest.approx({
        "precision": 2 / 3,            # 2 relevant of 3 distinct ids
        "recall": 2 / 3,
        "f1": 2 / 3,                   # 2PR/(P+R) with P = R = 2/3
        "f1@2": 0.4,                   # P = 1/2, R = 1/3: 2 * (1/6) / (5/6)
        "granular_mrr": (1 + 1 / 3) / 2,
        "hit_rate": 1.0,
    })


def test_empty_list_and_empty_judgments():
    """An empty list: precision 0 by default, NaN (left out) under empty_queries="nan"; a query
    with nothing relevant: NaN by default, precision 0 under "nan"."""
    table = rank_lists([[], ["y"]], [["b"], []])
    default = per_query(table, ["precision", "recall", "f1"])
    assert default["precision"][0] == 0.0 and math.isnan(default["precision"][1])
    assert default["recall"][0] == 0.0 and math.isnan(default["recall"][1])
    assert default["f1"][0] == 0.0 and math.isnan(default["f1"][1])
    nan = per_query(table, ["precision", "recall"], empty_queries="nan")
    assert math.isnan(nan["precision"][0]) and nan["precision"][1] == 0.0
    assert nan["recall"][0] == 0.0 and math.isnan(nan["recall"][1])


def test_precision_without_cutoff_needs_list_lengths():
    from retrieval_metrics.metrics.inputs import table_from_ranks

    table = table_from_ranks([[1, 3]], [4])
    with pytest.raises(ValueError, match="precomputed ranks do not give"):
        per_query(table, ["precision"])
    assert per_query(table, ["precision@3"])["precision@3"] == [pytest.approx(2 / 3)]


def test_ap_divisor_retrieved_without_cutoff():
    """divisor="retrieved" divides AP over the whole list by the relevant items it returned
    (Haystack before 3.1): [a, x, b] against {a, b, c} is (1 + 2/3) / 2."""
    table = rank_lists([["a", "x", "b"], ["x"]], [{"a", "b", "c"}, {"z"}])
    values = per_query(table, ["map"], divisor="retrieved")["map"]
    assert values == pytest.approx([(1 + 2 / 3) / 2, 0.0])
    assert per_query(table, ["map"])["map"] == pytest.approx([(1 + 2 / 3) / 3, 0.0])


def test_binary_gain_ignores_grades():
    graded = rank_lists([["b", "a"]], [{"a": 2, "b": 1}])
    binary = rank_lists([["b", "a"]], [{"a", "b"}])
    for gain in ("exponential", "linear"):
        assert per_query(graded, ["ndcg"], gain=gain)["ndcg"][0] < 1.0
    assert per_query(graded, ["ndcg", "ndcg@1"], gain="binary") == per_query(
        binary, ["ndcg", "ndcg@1"], gain="binary")
    assert per_query(graded, ["ndcg"], gain="binary")["ndcg"] == [1.0]


def test_duplicates_warn_only_for_relevant_repeats():
    with pytest.warns(UserWarning, match="repeat a relevant id"):
        rank_lists([["a", "a", "x"]], [{"a"}], duplicates="warn")
    with pytest.warns(UserWarning, match="repeat a relevant id"):
        rank_lists([["a", "x"]], [["a", "a"]], duplicates="warn")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = rank_lists([["x", "x", "a"]], [{"a"}], duplicates="warn")  # x is not relevant
    assert table.above.tolist() == [2] and table.num_retrieved.tolist() == [2]
    with pytest.raises(ValueError, match="more than once"):
        rank_lists([["x", "x"]], [{"a"}], duplicates="error")


def test_num_retrieved_survives_concatenation():
    from retrieval_metrics.functional.table import concat_tables

    a = rank_lists([["a", "a"]], [{"a"}])
    b = rank_lists([["b", "c", "d"]], [{"d"}])
    both = concat_tables([a, b])
    assert both.num_retrieved.tolist() == [1, 3]
    assert per_query(both, ["precision"])["precision"] == pytest.approx([1.0, 1 / 3])
    assert torch.equal(both.select(torch.tensor([1])).num_retrieved, torch.tensor([3]))


def test_the_duplicates_warning_names_the_query_by_its_id():
    """A metric fed ranked lists in batches named the query that repeats an id by its position
    in its batch ("first: query 0"), which names no query of the caller's; the command line
    mapped that position into the whole run, naming another query for any batch but the first.
    With ids, the warning names the query by its id."""
    import warnings

    import retrieval_metrics as rm

    metric = rm.RetrievalMetrics(["mrr"], duplicates="warn")
    metric.update(ranked_ids=[["a", "b"], ["c"]], relevant_ids=[{"a"}, {"c"}], ids=["q1", "q2"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metric.update(ranked_ids=[["d", "d"]], relevant_ids=[{"d"}], ids=["q3"])
    assert len(caught) == 1 and "first: query 'q3', id 'd'" in str(caught[0].message)
    with pytest.warns(UserWarning, match="first: query 0, id 'd'"):  # no ids: its position
        rm.RetrievalMetrics(["mrr"], duplicates="warn").update(
            ranked_ids=[["d", "d"]], relevant_ids=[{"d"}]
        )
