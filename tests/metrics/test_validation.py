"""Bad input raises a ValueError that names the argument; precision rules for the scores."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_embeddings, rank_lists, rank_scores
from retrieval_metrics.functional.ranking.labels import encode_labels
from retrieval_metrics.functional.table import RankTable

EMB = torch.randn(6, 3)
LABELS = torch.tensor([0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"query": torch.randn(6)}, "`query` must be 2-D"),
        ({"query": torch.full((6, 3), float("nan"))}, "`query` contains NaN"),
        ({"gallery": torch.randn(4, 5)}, "same dimension"),
        ({"gallery": torch.tensor([[float("inf"), 0.0, 0.0]])}, "`gallery` contains NaN"),
        ({"similarity": "manhattan"}, "`similarity` must be one of"),
        ({"depth": 0}, "`depth` must be a positive int"),
        ({"memory_budget": 10}, "`memory_budget`"),
        ({"query_labels": torch.tensor([0, 1])}, "`query_labels` must have 6 entries"),
        ({"query_labels": torch.tensor([0.5, 1, 1, 2, 2, 3])}, "whole numbers below 2\\*\\*24"),
        ({"relevance": "cosine"}, "`relevance` must be"),
        ({"relevance": "radius"}, "needs `positions`"),
        ({"relevance": "ids"}, "needs `relevant_ids`"),
        ({"relevance": "ids", "relevant_ids": [[0]]}, "one entry per query"),
        ({"relevance": "ids", "relevant_ids": [[9]] * 6}, r"relevant_ids\[0\]"),
        ({"block_size": (4, 100)}, "`block_size`"),
        ({"query_cameras": torch.zeros(6, dtype=torch.int64), "gallery": EMB,
          "gallery_labels": LABELS}, "`cameras` must be given for both"),
    ],
)
def test_rank_embeddings_errors_name_the_argument(kwargs, match):
    args = {"query": EMB, "query_labels": LABELS}
    args.update(kwargs)
    query = args.pop("query")
    gallery = args.pop("gallery", None)
    if "gallery_labels" not in args and gallery is not None:
        args["gallery_labels"] = torch.zeros(gallery.shape[0], dtype=torch.int64)
    with pytest.raises(ValueError, match=match):
        rank_embeddings(query, gallery, **args)


def test_string_labels_compare_exactly_and_large_ints_stay_distinct():
    q, g = encode_labels(["a", "b"], ["b", "a", "c"])
    assert (q[:, None] == g[None, :]).tolist() == [[False, True, False], [True, False, False]]
    big = torch.tensor([2**24, 2**24 + 1, 3, 3])  # float32 would merge the first two
    emb = torch.tensor([[0.0, 0.0], [10.0, 10.0], [0.0, 0.3], [0.0, 0.5]])
    table = rank_embeddings(emb, query_labels=big, similarity="euclidean")
    assert table.num_relevant.tolist() == [0, 0, 1, 1]
    # an integer tensor beside string labels compares as text, as everywhere: 2 is "2"
    q, g = encode_labels(torch.tensor([1, 2]), ["2", "a", "1", "01"])
    assert (q[:, None] == g[None, :]).tolist() == [
        [False, False, True, False], [True, False, False, False]
    ]


@pytest.mark.parametrize(
    ("name", "match"),
    [("cmc", "needs a cut-off"), ("hit_rate@0", "cut-off must be >= 1"),
     ("r_precision@5", "takes no cut-off"), ("precision@r", "only map@r"),
     ("accuracy", "unknown metric"),
     ("precision@100000000000000000000", r"cut-off must be >= 1 and below 2\*\*63")],
)
def test_metric_names(name, match):
    with pytest.raises(ValueError, match=match):
        M.parse_metric(name)


def test_measure_arguments():
    table = rank_lists([["a", "b"]], [{"a"}])
    with pytest.raises(ValueError, match="`ties` must be one of"):
        M.retrieval_measures(table, ["mrr"], ties="random")
    with pytest.raises(ValueError, match="`k` must be a positive int"):
        M.hit_rate_per_query(table, 0)
    with pytest.raises(ValueError, match="`ap` must be one of"):
        M.average_precision_per_query(table, ap="interpolated")
    with pytest.raises(ValueError, match="`empty_queries` must be one of"):
        M.retrieval_measures(table, ["mrr"], empty_queries="drop")
    with pytest.raises(ValueError, match="`average` must be one of"):
        M.retrieval_measures(table, ["mrr"], average="weighted")


def test_truncated_ranking_refuses_deeper_measures():
    emb = torch.randn(2000, 4)
    labels = torch.arange(2000) % 5
    table = rank_embeddings(emb, query_labels=labels, depth=2)
    assert bool((table.num_listed < table.num_relevant).any())  # some relevant lie deeper
    with pytest.raises(ValueError, match="truncated at depth 2"):
        M.recall_per_query(table, 5)
    with pytest.raises(ValueError, match="mINP needs every relevant"):
        M.minp_per_query(table)
    with pytest.raises(ValueError, match="AUROC needs positions down to"):
        M.auroc_per_query(table)


FIRST_ITEM_MEASURES = ["hit_rate@10", "mrr", "mrr@10", "cmc@10", "median_rank", "mean_rank"]


@pytest.mark.parametrize("name", FIRST_ITEM_MEASURES)
def test_measures_of_the_best_relevant_item_refuse_a_depth_that_never_reached_it(name):
    """A ranking with a ``depth`` and ``locate_first=False`` stops a query once its relevant
    items all lie deeper: where its best one lies between the depth and the cut-off is unknown.
    These measures refuse such a table (they read 0, or an infinite rank, before); by default
    (``locate_first=True``) each query's best item is located and they equal the whole
    ranking's."""
    gen = torch.Generator().manual_seed(3)
    query, gallery = torch.randn(40, 8, generator=gen), torch.randn(300, 8, generator=gen)
    labels = {"query_labels": torch.randint(0, 30, (40,), generator=gen),
              "gallery_labels": torch.randint(0, 30, (300,), generator=gen)}
    whole = rank_embeddings(query, gallery, **labels)
    short = rank_embeddings(query, gallery, depth=3, locate_first=False, **labels)
    unreached = (short.num_listed == 0) & (short.num_relevant > 0)
    assert bool(unreached.any()), "some query's relevant items all lie below the depth"
    first = int(unreached.nonzero()[0])
    assert float(M.first_rank_per_query(whole)[first]) > 3
    with pytest.raises(ValueError, match=f"stopped at depth 3 before any relevant item of "
                                         f"query {first}: rank with locate_first=True"):
        M.retrieval_measures(short, [name])
    located = rank_embeddings(query, gallery, depth=3, **labels)
    torch.testing.assert_close(M.retrieval_measures(located, [name])[name],
                               M.retrieval_measures(whole, [name])[name], rtol=0, atol=0)
    # within the depth the unreached items are known to lie below the cut-off: 0
    assert float(M.retrieval_measures(short, ["hit_rate@3"])["hit_rate@3"]) == float(
        M.retrieval_measures(whole, ["hit_rate@3"])["hit_rate@3"])


def test_relevant_items_the_gallery_lacks_leave_no_measure_unknown():
    """Judged documents missing from the corpus (``num_absent``) lie nowhere: a query whose
    relevant items are all absent, or all listed but for the absent ones, is known at any
    cut-off however shallow the ranking (hand-worked: query 0 has 1 of its 2 relevant listed
    at position 2, query 1 its only relevant item absent)."""
    table = RankTable(
        ptr=torch.tensor([0, 1, 1]), above=torch.tensor([1]), tied=torch.tensor([1]),
        num_relevant=torch.tensor([2, 1]), gallery_size=torch.tensor([50, 50]),
        depth=torch.tensor([3, 3]), num_absent=torch.tensor([1, 1]),
    )
    values = M.retrieval_measures(table, ["recall@10", "hit_rate@10", "mrr", "mean_rank"])
    assert float(values["recall@10"]) == (1 / 2 + 0) / 2
    assert float(values["hit_rate@10"]) == (1 + 0) / 2
    assert float(values["mrr"]) == (1 / 2 + 0) / 2
    assert float(values["mean_rank"]) == math.inf  # query 1's relevant item is nowhere
    # a relevant item of the gallery unlisted below the depth still makes recall@10 unknown
    deeper = dataclasses.replace(table, num_absent=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="truncated at depth 3"):
        M.retrieval_measures(deeper, ["recall@10"])


PER_QUERY_CUTOFF = [M.hit_rate_per_query, M.recall_per_query, M.reciprocal_rank_per_query,
                    M.average_precision_per_query]


@pytest.mark.parametrize("measure", PER_QUERY_CUTOFF, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("k", "match"),
    [
        (torch.tensor([1, 2, 3]), r"shape \(5,\); got torch.int64 of shape \(3,\)"),
        (torch.tensor([[1, 2, 3, 4, 5]]), r"got torch.int64 of shape \(1, 5\)"),
        (torch.tensor([1.5, 2, 3, 4, 5]), "got 1.5"),
        (torch.tensor([-1, 2, 3, 4, 5]), "got -1"),
        (torch.tensor([True] * 5), "got torch.bool"),
    ],
)
def test_a_cutoff_a_query_must_be_whole_non_negative_and_one_a_query(measure, k, match):
    """Before, a fractional K was truncated, a negative one read as 0 and a wrong shape failed
    with an index error far from the call."""
    table = rank_embeddings(EMB[:5], EMB, query_labels=LABELS[:5], gallery_labels=LABELS)
    with pytest.raises(ValueError, match="`k` as a tensor must hold one whole, non-negative "
                                         "cut-off a query.*" + match):
        measure(table, k)


def test_a_cutoff_a_query_reads_each_query_at_its_own_cutoff():
    """Hand-worked: the gallery is EMB itself, so each query finds itself first, then its
    class's other item at some rank; K = 0 reads nothing, whole floats are read as ints, NDCG
    takes one K for all (its ideal DCG is cut there) and says so."""
    table = rank_embeddings(EMB[:5], EMB, query_labels=LABELS[:5], gallery_labels=LABELS)
    at_one = M.hit_rate_per_query(table, 1)
    assert at_one.tolist() == [1.0] * 5
    k = torch.tensor([0, 1, 1, 0, 6])
    assert M.hit_rate_per_query(table, k).tolist() == [0.0, 1.0, 1.0, 0.0, 1.0]
    assert torch.equal(M.recall_per_query(table, k), M.recall_per_query(table, k.double()))
    assert float(M.recall_per_query(table, k)[4]) == 1.0  # both of its class in the top 6
    with pytest.raises(ValueError, match="`k` must be a positive int"):
        M.ndcg_per_query(table, k)


def test_rank_scores_and_lists_validation():
    with pytest.raises(ValueError, match="same length"):
        rank_scores(torch.rand(3), torch.ones(2), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="`preds` contains NaN"):
        rank_scores(torch.tensor([float("nan")]), torch.ones(1), torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="`target` must be non-negative"):
        rank_scores(torch.rand(1), -torch.ones(1), torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="one entry per query"):
        rank_lists([["a"]], [{"a"}, {"b"}])
    with pytest.raises(ValueError, match=r"`ranked_ids\[0\]` must be a list"):
        rank_lists(["abc"], [{"a"}])


def _scores_refused(preds, target, match: str) -> None:
    """``preds``/``target`` of one query refused by ``rank_scores`` and by a metric's update."""
    indexes = torch.zeros(len(preds), dtype=torch.int64)
    with pytest.raises(ValueError, match=match):
        rank_scores(preds, target, indexes)
    with pytest.raises(ValueError, match=match):
        rm.MRR().update(preds, target, indexes=indexes)


def test_scores_that_would_be_read_wrongly_are_refused():
    """A NaN grade was read as not relevant (``target < 0`` is False for NaN: MRR 0.4167 where
    the NaN stood beside a 1), a complex score was read by its real part with a warning, and
    integer scores past 2**53 rounded together in float64 and tied."""
    nan_target = torch.tensor([float("nan"), 0.0, 1.0])
    _scores_refused(torch.tensor([0.9, 0.5, 0.1]), nan_target, "`target` must be non-negative")
    _scores_refused(torch.tensor([0.9 + 0j, 0.1 + 5j]), torch.tensor([0, 1]), "real scores")
    _scores_refused(torch.tensor([0.9, 0.1]), torch.tensor([0j, 1 + 0j]), "real grades")
    big = torch.tensor([2**60 + 1, 2**60], dtype=torch.int64)
    _scores_refused(big, torch.tensor([0, 1]), "integers beyond 2\\*\\*53")
    # up to 2**53 integers are exact in float64: the relevant one is second
    edge = torch.tensor([2**53, 2**53 - 1], dtype=torch.int64)
    table = rank_scores(edge, torch.tensor([0, 1]), torch.zeros(2, dtype=torch.int64))
    assert table.above.tolist() == [1] and table.tied.tolist() == [1]


def test_half_precision_is_scored_in_float32():
    emb = torch.randn(40, 8)
    labels = torch.arange(40) % 7
    for dtype in (torch.float16, torch.bfloat16):
        low = emb.to(dtype)
        a = rank_embeddings(low, query_labels=labels)
        b = rank_embeddings(low.float(), query_labels=labels)
        assert torch.equal(a.above, b.above) and torch.equal(a.tied, b.tied)


def test_float64_stays_float64():
    # 1 + 2^-30 and 1 are equal in float32 but not in float64
    q = torch.tensor([[1.0]], dtype=torch.float64)
    g = torch.tensor([[1.0 + 2**-30], [1.0]], dtype=torch.float64)
    labels = dict(query_labels=torch.tensor([0]), gallery_labels=torch.tensor([1, 0]))
    t64 = rank_embeddings(q, g, similarity="dot", **labels)
    t32 = rank_embeddings(q.float(), g.float(), similarity="dot", **labels)
    assert (t64.above.tolist(), t64.tied.tolist()) == ([1], [1])
    assert (t32.above.tolist(), t32.tied.tolist()) == ([0], [2])


def test_labels_and_ids_are_integers_or_strings():
    """None, bytes and other objects were hashed by their repr into labels of their own
    (``[None] * 12`` scored as one class: hit rate@1 1.0); they are refused by name. A list of
    a tensor's elements (0-d tensors) is read as the integers it holds, in both the codes and
    the kind of key (a tensor batch then such a list was refused as a mix of ints and strings)."""
    emb = torch.eye(4)[[0, 0, 1, 1, 2, 2]] + 0.01 * torch.arange(6.0)[:, None]
    for bad, shown in (([None] * 6, "None"), ([b"a"] * 6, "decode bytes"), ([1.0j] * 6, "1j")):
        with pytest.raises(ValueError, match=f"`labels` must hold integers or strings.*{shown}"):
            rm.MAPAtR().update(emb, bad)
        with pytest.raises(ValueError, match="`query_labels` must hold integers or strings"):
            rank_embeddings(emb, query_labels=bad)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    as_tensor, as_list = rm.MAPAtR(), rm.MAPAtR()
    as_tensor.update(emb, labels)
    as_list.update(emb[:3], labels[:3])
    as_list.update(emb[3:], list(labels[3:]))
    assert float(as_tensor.compute()) == float(as_list.compute()) == 1.0


def test_relevant_ranks_and_counts_are_whole_numbers_given_once():
    """relevant_ranks were read through int() and a set: 2.7 became rank 2, a repeated rank
    was dropped with its relevant item (recall@5 0.75 read 0.5), "23" became two rows, True
    rank 1; num_relevant 1.9 became 1. A tensor of ranks failed inside torch."""
    def update(ranks, counts=None):
        metric = rm.RetrievalMetrics(["mrr", "recall@5"])
        metric.update(relevant_ranks=ranks, num_relevant=counts)
        return {k: float(v) for k, v in metric.compute().items()}

    # by hand: query 0 finds 1 of 1 at rank 2, query 1 finds 1 of 2 at rank 3
    expected = {"mrr": (1 / 2 + 1 / 3) / 2, "recall@5": (1 + 1 / 2) / 2}
    assert update([[2], [3]], [1, 2]) == pytest.approx(expected)
    assert update(torch.tensor([[2], [3]]), torch.tensor([1, 2])) == pytest.approx(expected)
    for ranks, counts, match in (
        ([[2.7], [3]], None, r"`relevant_ranks\[0\]` must hold integers, got 2.7"),
        ([[2, 2], [3]], [2, 2], r"`relevant_ranks\[0\]` holds a rank twice"),
        ([["2"], [3]], None, r"`relevant_ranks\[0\]` must hold integers, got '2'"),
        ("23", None, "`relevant_ranks` must be a list, got str"),
        ([[True], [3]], None, r"`relevant_ranks\[0\]` must hold integers, got True"),
        ([[2], [3]], [1.9, 2.5], "`num_relevant` must hold integers, got 1.9"),
        ([[2], [3]], [[1], [2]], "`num_relevant` must hold integers"),
    ):
        with pytest.raises(ValueError, match=match):
            update(ranks, counts)


def test_the_functional_layer_checks_what_the_classes_check():
    """Each of these gave a number: ignore_label=1.5 ignored nothing and True ignored label 1,
    aggregate took 3 values for 5 queries (0.333), median_rank took rank 0, a confidence level
    of -0.5 gave an inverted interval, top_k took 4 ids for 9 items, and a repeated name came
    back once."""
    from retrieval_metrics.functional.measures.aggregation import aggregate, median_rank
    from retrieval_metrics.functional.ranking import top_k

    emb, labels = EMB[:6], LABELS[:6]
    for bad in (1.5, True, "1"):
        with pytest.raises(ValueError, match="`ignore_label` must be an int or None"):
            rank_embeddings(emb, query_labels=labels, ignore_label=bad)
    table = rank_embeddings(emb, query_labels=labels)
    with pytest.raises(ValueError, match=r"one value \(or one row\) per query of `table` \(6\)"):
        aggregate(torch.ones(3, dtype=torch.float64), table)
    with pytest.raises(ValueError, match="1-based"):
        median_rank(torch.tensor([0.0, 2.0, 3.0]))
    metric = rm.MRR()
    metric.update(relevant_ranks=[[1], [2], [3]])
    for level in (-0.5, 0, 1.5, "0.9"):
        with pytest.raises(ValueError, match="`level` must be a number between 0 and 1"):
            metric.confidence_interval(level=level)
    with pytest.raises(ValueError, match="`num_bootstrap` must be a positive int"):
        metric.confidence_interval(num_bootstrap=0)
    with pytest.raises(ValueError, match=r"`gallery_ids` must hold one id per gallery item \(6\)"):
        top_k(emb, emb, 2, gallery_ids=range(4))
    with pytest.raises(ValueError, match="more than once"):
        M.retrieval_measures(table, ["mrr", "mrr"])
    with pytest.raises(ValueError, match="must be a list of metric names"):
        M.retrieval_measures(table, "mrr")


def test_bool_embeddings_are_0_1_from_torch_and_numpy_alike():
    """A torch bool tensor was ranked as 0/1, a numpy bool array refused."""
    codes = torch.tensor(
        [[1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1]],
        dtype=torch.bool,
    )
    labels = torch.tensor([0, 0, 1, 1])
    values = []
    for given in (codes, codes.numpy(), codes.float()):
        metric = rm.MAPAtR(similarity="dot")
        metric.update(given, labels)
        values.append(float(metric.compute()))
    # by hand (dot products of the 0/1 codes): each item scores 2 against the other of its
    # class and 0 against the other class: MAP@R is 1
    assert values == [1.0, 1.0, 1.0]


def test_the_functional_rankings_take_what_the_classes_take():
    """Embeddings that require grad (a model's output outside no_grad) failed inside a product
    with out=; lists and numpy arrays in rank_scores failed on a missing attribute; a
    block_size of the wrong form failed while being unpacked."""
    from retrieval_metrics.functional.ranking import rank_two_ways, top_k

    emb = EMB.clone().requires_grad_()
    table = rank_embeddings(emb, query_labels=LABELS)
    assert torch.equal(table.above, rank_embeddings(EMB, query_labels=LABELS).above)
    rank_two_ways(emb, EMB, a_labels=LABELS, b_labels=LABELS)
    assert torch.equal(top_k(emb, EMB, 2).indices, top_k(EMB, EMB, 2).indices)
    preds, target, indexes = [0.9, 0.5, 0.1], [0, 1, 0], [0, 0, 0]
    for given in ((preds, target, indexes), tuple(np.array(x) for x in (preds, target, indexes))):
        assert rank_scores(*given).above.tolist() == [1]
    with pytest.raises(ValueError, match="`block_size` must be a pair of ints"):
        rank_embeddings(EMB, query_labels=LABELS, block_size=3)
    with pytest.raises(ValueError, match="`block_size` must be an int"):
        rank_two_ways(EMB, EMB, a_labels=LABELS, b_labels=LABELS, block_size=(2, 64))


@pytest.mark.parametrize(
    ("argument", "value", "shown"),
    [("ids", "abc", "str 'abc'"), ("ids", {"q0", "q1", "q2"}, "set"), ("labels", "aab", "str"),
     ("labels", 5, "int 5"), ("ids", "sample_17", "str 'sample_17'")],
)
def test_a_string_a_set_or_a_scalar_is_no_list_of_entries(argument, value, shown):
    """One entry per item, in the items' order: a bare string was split into its characters
    (``ids="abc"`` three ids; one id ``"sample_17"`` "must have 1 entries, got 9"), a set
    taken in hash order (which differs between processes), an int refused by Python's
    TypeError naming no argument. Each is refused naming the argument and what it got."""
    n = 9 if value == "sample_17" else 3
    given = {"labels": torch.arange(n) % 2, "ids": list(range(n)), argument: value}
    metric = rm.RetrievalMetrics(["mrr"])
    with pytest.raises(ValueError, match=rf"`{argument}` must be a sequence with one entry per "
                                         rf"item .*got {shown}"):
        metric.update(torch.randn(n, 4), **given)
