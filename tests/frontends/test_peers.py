"""Differential tests against the peer libraries that define a convention (docs/protocols.md).

Peers: pytorch-metric-learning 2.9 ``AccuracyCalculator`` (same-source MAP@R, R-precision,
precision@1, MAP, MRR), torchmetrics 1.9 functional retrieval metrics (one query at a time) and
scikit-learn ``ndcg_score`` (tie-averaged NDCG, McSherry and Najork). Every difference in
definition is written next to the test that meets it, with the option of ours that reproduces the
peer. Test vectors T1, T2, T5, T7, T9 and T10 are from research/protocols.md section 10.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch
import torchmetrics.functional.retrieval as tmr
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from pytorch_metric_learning.utils.inference import CustomKNN
from sklearn.metrics import ndcg_score

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional import (
    rank_embeddings,
    rank_lists,
    rank_scores,
    retrieval_measures,
)

TOL = 1e-6

logging.getLogger("PML").setLevel(logging.WARNING)


def approx(value: float) -> object:
    return pytest.approx(value, abs=TOL, rel=0)


def ours(table, names, **options) -> dict[str, float]:
    return {k: float(v) for k, v in retrieval_measures(table, names, **options).items()}


# ============================================================================================
# 1. pytorch-metric-learning AccuracyCalculator (research/protocols.md 3.1)
# ============================================================================================
#
# Definitions and how ours reproduces them:
# - Same source (``get_accuracy(emb, labels)``): PML searches k + 1 neighbours and removes the
#   self-match by index; ours with ``gallery=None`` excludes the query by position. Same.
# - "Lone" queries (no other item with their label) are left out of every kNN metric: our
#   default ``empty_queries="skip"``. The data below always holds two lone items.
# - precision_at_1 = rel(1): our hit_rate@1 (and precision@1).
# - r_precision = h(R) / R and mean_average_precision_at_r (Musgrave et al.): our r_precision
#   and map@r. k="max_bin_count" = (largest class size - 1) >= R for every query, so PML sees
#   enough neighbours.
# - mean_average_precision = (1/R) sum_{i<=k} rel(i) P(i): divisor R even when truncated, i.e.
#   our map@k with divisor="relevant"; with k=None (whole ranking) it is our "map".
# - mean_reciprocal_rank = 1/first relevant rank within k, else 0: our mrr@k; k=None: "mrr".
# - avg_of_avgs=True (mean over labels of the per-label mean): our average="class".
# - PML casts embeddings AND labels to float32 (labels >= 2^24 collide, protocols.md T11); the
#   labels here are small ints, which float32 holds exactly.
# - kNN: the default FaissKNN is faiss.IndexFlatL2, squared Euclidean distance, whose order is
#   that of our similarity="euclidean" (NOT our default cosine). With
#   knn_func=CustomKNN(CosineSimilarity()), PML normalises the rows and takes dot products
#   (torch.topk on the full matrix): our similarity="cosine".
# - Ties: faiss breaks exact distance ties by lower gallery index (see T10 below); none of our tie
#   rules is "by index", so the random data is built without ties that matter (next helper).


NOISE = 0.8  # noise scale around the class centres


def separated_embeddings(
    rng: np.random.Generator, labels: np.ndarray, dim: int, similarity: str, margin: float = 1e-5
) -> np.ndarray:
    """float32 embeddings (a random centre per class plus noise, so that the metrics are far from
    chance) whose rankings cannot flip between two float32 kernels.

    faiss (||x||^2 + ||y||^2 - 2 x.y, or a direct sum of squares for few queries), torch.topk on
    a normalised product, and our blocked ``2 q.g - |g|^2`` round differently, each with an error
    of a few float32 ulps of ||x||^2 + ||y||^2 (about 1e-7 relative). Two neighbours closer than
    that could swap between kernels and move a metric by about 1/N. Only swaps between a relevant
    and a non-relevant item change any metric, so for every query we look, in exact float64
    arithmetic on the float32 values, at each pair of consecutive neighbours whose relevance
    differs (and at the query versus its nearest neighbour), and redraw the lower one whenever the
    gap is under ``margin`` (about 100 ulps) of the score scale. Redrawing repeats until no such
    pair is left; it is deterministic for a given generator.
    """
    n = labels.shape[0]
    centres = rng.standard_normal((int(labels.max()) + 1, dim))[labels]

    def draw(rows: np.ndarray) -> np.ndarray:
        noise = rng.standard_normal((rows.size, dim))
        return (centres[rows] + NOISE * noise).astype(np.float32)

    x = draw(np.arange(n))
    for _ in range(500):
        xd = x.astype(np.float64)
        if similarity == "euclidean":
            sq = (xd * xd).sum(1)
            scores = -(sq[:, None] + sq[None, :] - 2.0 * xd @ xd.T)
            scores[np.arange(n), np.arange(n)] = 0.0
            delta = margin * (sq + sq.max())
        else:
            u = xd / np.linalg.norm(xd, axis=1, keepdims=True)
            scores = u @ u.T
            delta = np.full(n, margin)
        order = np.argsort(-scores, axis=1, kind="stable")
        ranked = np.take_along_axis(scores, order, axis=1)
        rel = (labels[order] == labels[:, None]).astype(np.int64)
        rel[order == np.arange(n)[:, None]] = 2  # the query itself differs from everything
        crossing = rel[:, 1:] != rel[:, :-1]
        close = (ranked[:, :-1] - ranked[:, 1:]) < delta[:, None]
        rows, cols = np.nonzero(crossing & close)
        if rows.size == 0:
            return x
        lower = order[rows, cols + 1]
        upper = order[rows, cols]
        redraw = np.unique(np.where(lower == rows, upper, lower))
        x[redraw] = draw(redraw)
    raise AssertionError("could not separate the embeddings; use a smaller case")


def dml_case(seed: int, n: int, dim: int, classes: int, similarity: str):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    labels[-2:] = [classes, classes + 1]  # two lone items: PML and ours both skip them
    emb = separated_embeddings(rng, labels, dim, similarity)
    return torch.from_numpy(emb), torch.from_numpy(labels)


def pml_calculator(similarity: str, k, **options) -> AccuracyCalculator:
    knn = None if similarity == "euclidean" else CustomKNN(CosineSimilarity())
    include = (
        "precision_at_1",
        "r_precision",
        "mean_average_precision_at_r",
        "mean_average_precision",
        "mean_reciprocal_rank",
    )
    return AccuracyCalculator(
        include=include, k=k, knn_func=knn, device=torch.device("cpu"), **options
    )


DML_SHAPES = [(40, 4, 8), (90, 8, 12), (150, 16, 20)]


@pytest.mark.parametrize("similarity", ["euclidean", "cosine"])
@pytest.mark.parametrize("shape", DML_SHAPES, ids=lambda s: "n{}-d{}-c{}".format(*s))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("avg_of_avgs", [False, True], ids=["macro", "class"])
def test_pml_accuracy_calculator(seed, shape, similarity, avg_of_avgs):
    n, dim, classes = shape
    emb, labels = dml_case(seed, n, dim, classes, similarity)
    table = rank_embeddings(emb, query_labels=labels, similarity=similarity)
    average = "class" if avg_of_avgs else "macro"

    # k = "max_bin_count": the protocol of Musgrave et al.
    k = int(torch.bincount(labels).max()) - 1
    pml = pml_calculator(similarity, "max_bin_count", avg_of_avgs=avg_of_avgs).get_accuracy(
        emb, labels
    )
    mine = ours(
        table,
        ["hit_rate@1", "precision@1", "r_precision", "map@r", f"map@{k}", f"mrr@{k}"],
        average=average,
    )
    assert mine["hit_rate@1"] == approx(pml["precision_at_1"])
    assert mine["precision@1"] == approx(pml["precision_at_1"])
    assert mine["r_precision"] == approx(pml["r_precision"])
    assert mine["map@r"] == approx(pml["mean_average_precision_at_r"])
    # PML's MAP with k neighbours divides by R: divisor="relevant" (the default).
    assert mine[f"map@{k}"] == approx(pml["mean_average_precision"])
    assert mine[f"mrr@{k}"] == approx(pml["mean_reciprocal_rank"])

    # k = None: the whole ranking.
    pml_all = pml_calculator(similarity, None, avg_of_avgs=avg_of_avgs).get_accuracy(emb, labels)
    mine_all = ours(table, ["map", "mrr", "map@r", "r_precision"], average=average)
    assert mine_all["map"] == approx(pml_all["mean_average_precision"])
    assert mine_all["mrr"] == approx(pml_all["mean_reciprocal_rank"])
    assert mine_all["map@r"] == approx(pml_all["mean_average_precision_at_r"])
    assert mine_all["r_precision"] == approx(pml_all["r_precision"])


@pytest.mark.parametrize("similarity", ["euclidean", "cosine"])
def test_pml_per_class(similarity):
    """return_per_class=True (a list ordered by the sorted labels of the non-lone queries)
    equals our per-query values averaged per class."""
    emb, labels = dml_case(7, 60, 6, 6, similarity)
    table = rank_embeddings(emb, query_labels=labels, similarity=similarity)
    pml = pml_calculator(similarity, "max_bin_count", return_per_class=True).get_accuracy(
        emb, labels
    )
    values = {
        "precision_at_1": M.hit_rate_per_query(table, 1),
        "r_precision": M.r_precision_per_query(table),
        "mean_average_precision_at_r": M.map_at_r_per_query(table),
    }
    counted = table.num_relevant > 0
    classes = torch.unique(labels[counted])
    for name, per_query in values.items():
        per_class = [float(per_query[counted & (labels == c)].mean()) for c in classes]
        assert per_class == pytest.approx(pml[name], abs=TOL), name


# T10: 1-D embeddings with exact distance ties. In float32 (PML) and float64 (ours):
# - query 2 (0.25, label 0): items 0 (0.0, label 0, relevant) and 3 (0.5, label 1) are both at
#   distance 0.25;
# - query 3 (0.5, label 1): items 0 (0.0, label 0) and 4 (1.0, label 1, relevant) are both at 0.5.
# faiss lists equal distances by increasing index, so PML ranks the relevant item first for
# query 2 (optimistic) and last for query 3 (pessimistic). No single tie rule of ours is
# "by index". Query 3's tie only decides its second relevant item (rank 3 or 4), which moves
# MAP over the whole ranking but nothing within R = 2 or the first relevant rank, so:
# - P@1, r_precision, MAP@R, MRR (k=None and k=2) and MAP@2 equal our ties="optimistic";
# - full MAP 0.447222 equals our ties="expected" only by coincidence: query 2's AP gains
#   exactly what query 3's loses (0.45 vs 0.3667 and 0.5833 vs 0.5, both 1/12), so
#   "optimistic on q2, pessimistic on q3" and "the average of both" sum to the same.
# Breaking the ties by index in explicit scores reproduces every PML value exactly.
T10_EMB = [0.0, 0.1, 0.25, 0.5, 1.0, 1.1, 3.0]
T10_LABELS = [0, 1, 0, 1, 1, 0, 2]


def test_t10_pml_values():
    emb = torch.tensor(T10_EMB).view(-1, 1)
    labels = torch.tensor(T10_LABELS)
    pml2 = pml_calculator("euclidean", "max_bin_count").get_accuracy(emb, labels)
    pml_all = pml_calculator("euclidean", None).get_accuracy(emb, labels)
    # The values measured in protocols.md T10 (guards against a PML change).
    assert pml2["precision_at_1"] == approx(0.0)
    assert pml2["r_precision"] == approx(1 / 3)
    assert pml2["mean_average_precision_at_r"] == approx(1 / 6)
    assert pml2["mean_average_precision"] == approx(1 / 6)
    assert pml2["mean_reciprocal_rank"] == approx(1 / 3)
    assert pml_all["mean_average_precision"] == pytest.approx(0.4472222222, abs=1e-9)
    assert pml_all["mean_reciprocal_rank"] == approx(4 / 9)

    table = rank_embeddings(emb, query_labels=labels, similarity="euclidean")
    assert table.num_relevant.tolist() == [2, 2, 2, 2, 2, 2, 0]  # label 2 is lone: skipped
    names = ["hit_rate@1", "r_precision", "map@r", "map@2", "mrr@2", "mrr", "map"]
    opt = ours(table, names, ties="optimistic")
    exp = ours(table, names, ties="expected")
    pes = ours(table, names, ties="pessimistic")
    assert opt["hit_rate@1"] == exp["hit_rate@1"] == pes["hit_rate@1"] == approx(0.0)
    assert opt["r_precision"] == approx(pml2["r_precision"])
    assert opt["map@r"] == approx(pml2["mean_average_precision_at_r"])
    assert opt["map@2"] == approx(pml2["mean_average_precision"])
    assert opt["mrr@2"] == approx(pml2["mean_reciprocal_rank"])
    assert opt["mrr"] == approx(pml_all["mean_reciprocal_rank"])
    assert exp["map"] == approx(pml_all["mean_average_precision"])
    # The tie rules really differ here (the ties matter):
    assert opt["map"] == approx(0.461111) and pes["map"] == approx(0.433333)
    assert exp["r_precision"] == approx(0.291667) and pes["r_precision"] == approx(0.25)
    assert exp["mrr"] == approx(0.430556) and pes["mrr"] == approx(0.416667)

    # Ties broken by gallery index (faiss' order), as explicit scores: every PML value.
    x = np.array(T10_EMB)
    n = len(x)
    preds, target, indexes = [], [], []
    for q in range(n):
        for j in range(n):
            if j != q:
                dist = round(abs(x[q] - x[j]) * 100)  # exact: positions are multiples of 0.01
                preds.append(-(dist * n + j))
                target.append(int(T10_LABELS[j] == T10_LABELS[q]))
                indexes.append(q)
    by_index = rank_scores(
        torch.tensor(preds, dtype=torch.float64), torch.tensor(target), torch.tensor(indexes)
    )
    mine = ours(by_index, names)
    assert mine["hit_rate@1"] == approx(pml2["precision_at_1"])
    assert mine["r_precision"] == approx(pml2["r_precision"])
    assert mine["map@r"] == approx(pml2["mean_average_precision_at_r"])
    assert mine["map@2"] == approx(pml2["mean_average_precision"])
    assert mine["mrr@2"] == approx(pml2["mean_reciprocal_rank"])
    assert mine["map"] == approx(pml_all["mean_average_precision"])
    assert mine["mrr"] == approx(pml_all["mean_reciprocal_rank"])


# ============================================================================================
# 2. torchmetrics functional retrieval metrics (research/protocols.md 7.4)
# ============================================================================================
#
# Definitions and how ours reproduces them (rank_scores(preds, target, indexes) + measures):
# - torchmetrics takes one query at a time; we loop over queries and average.
# - A query with no relevant candidate scores 0 in every torchmetrics function (the modular
#   metrics' default empty_target_action="neg"): our empty_queries="zero". Skipping those queries
#   (empty_target_action="skip") is our default empty_queries="skip". Both are tested.
# - retrieval_precision(top_k=k) divides by k even when the query has fewer candidates: our
#   precision@k (adaptive_k=True would be min(k, n), which we do not offer).
# - retrieval_recall divides by the relevant items among the given candidates. Every candidate
#   is in our input too, so m_q is the same (it differs for truncated lists: T7 below).
# - retrieval_hit_rate, retrieval_reciprocal_rank(top_k) (0 past k), retrieval_r_precision: our
#   hit_rate@k, mrr@k / mrr, r_precision.
# - retrieval_average_precision without top_k: our "map". With top_k it averages P(i) over the
#   hits within the top k, i.e. divides by h(k) (0 when h(k) = 0): our map@k with
#   divisor="retrieved" (the default divisor="relevant" divides by m_q, as trec_eval map_cut).
# - retrieval_normalized_dcg: linear gain g (our gain="linear"; our default is 2^g - 1),
#   tie-averaged (McSherry-Najork, our ties="expected"), IDCG from all the query's grades.
# - precision, recall, reciprocal rank and AP first zero the target of every candidate whose
#   score is <= 0 (torch.where(preds > 0, target, 0)); recall still divides by the unmasked count.
#   We do not: a score is only a rank. All scores below are > 0, where the two agree.
# - torchmetrics computes in float32: 1e-6 absolute is well above its rounding here.
# - P/R/MRR/AP/hit rate use topk/argsort, so with ties they depend on the input order (T1); the
#   random scores below are distinct, where every tie rule of ours gives the same value.

TM_KS = (1, 2, 5, 10)


def random_run(seed: int, n_queries: int, max_items: int, graded: bool, tied: bool = False):
    """Flat (preds, target, indexes) in shuffled entry order, query ids with gaps, some queries
    with nothing relevant. Distinct positive float32 scores unless ``tied`` (integers 1..4)."""
    rng = np.random.default_rng(seed)
    qids = np.sort(rng.choice(10 * n_queries, n_queries, replace=False))
    sizes = rng.integers(2 if tied else 1, max_items + 1, n_queries)
    indexes = np.repeat(qids, sizes)
    total = int(sizes.sum())
    if graded:
        target = rng.integers(0, 4, total) * (rng.random(total) < 0.5)
    else:
        target = (rng.random(total) < rng.uniform(0.1, 0.6)).astype(np.int64)
    if tied:
        preds = rng.integers(1, 5, total).astype(np.float32)
    else:
        preds = ((rng.permutation(total) + 1) / (total + 1)).astype(np.float32)
        assert np.unique(preds).size == total
    perm = rng.permutation(total)
    return (
        torch.from_numpy(preds[perm]),
        torch.from_numpy(target[perm].astype(np.int64)),
        torch.from_numpy(indexes[perm].astype(np.int64)),
    )


def per_query_peer(fn, preds, target, indexes, **kwargs) -> np.ndarray:
    """torchmetrics' value for each query, in ascending ``indexes`` order (as rank_scores)."""
    out = []
    for q in torch.unique(indexes):
        mask = indexes == q
        out.append(float(fn(preds[mask], target[mask], **kwargs)))
    return np.array(out)


def assert_peer(name, mine: torch.Tensor, peer: np.ndarray, table, options: dict):
    """Per query (answerable queries), then the means under "skip" and under "zero"."""
    answerable = (table.num_relevant > 0).numpy()
    assert answerable.any() and not answerable.all()  # both kinds of query are present
    np.testing.assert_allclose(mine.numpy()[answerable], peer[answerable], atol=TOL, err_msg=name)
    skip = float(retrieval_measures(table, [name], **options)[name])
    zero = float(retrieval_measures(table, [name], empty_queries="zero", **options)[name])
    assert skip == approx(peer[answerable].mean()), name
    assert zero == approx(peer.mean()), name  # torchmetrics scores an empty query 0


@pytest.mark.parametrize(
    "seed,n_queries,max_items", [(0, 20, 6), (1, 30, 12), (2, 15, 25), (3, 40, 3)]
)
def test_torchmetrics_binary(seed, n_queries, max_items):
    preds, target, indexes = random_run(seed, n_queries, max_items, graded=False)
    table = rank_scores(preds, target, indexes)
    assert table.num_queries == n_queries
    # The scores are distinct, so every tie rule gives the same table values.
    lin = {"gain": "linear"}
    checks = [
        ("r_precision", tmr.retrieval_r_precision, {}, {}),
        ("mrr", tmr.retrieval_reciprocal_rank, {}, {}),
        ("map", tmr.retrieval_average_precision, {}, {}),
        ("ndcg", tmr.retrieval_normalized_dcg, {}, lin),
    ]
    for k in TM_KS:
        checks += [
            (f"precision@{k}", tmr.retrieval_precision, {"top_k": k}, {}),
            (f"recall@{k}", tmr.retrieval_recall, {"top_k": k}, {}),
            (f"hit_rate@{k}", tmr.retrieval_hit_rate, {"top_k": k}, {}),
            (f"mrr@{k}", tmr.retrieval_reciprocal_rank, {"top_k": k}, {}),
            (f"map@{k}", tmr.retrieval_average_precision, {"top_k": k}, {"divisor": "retrieved"}),
            (f"ndcg@{k}", tmr.retrieval_normalized_dcg, {"top_k": k}, lin),
        ]
    for name, fn, peer_kwargs, options in checks:
        peer = per_query_peer(fn, preds, target, indexes, **peer_kwargs)
        spec = M.parse_metric(name)
        for ties in ("expected", "optimistic"):
            mine = M.per_query_values(table, spec, ties=ties, **options)
            assert_peer(name, mine, peer, table, {"ties": ties, **options})


@pytest.mark.parametrize("seed,n_queries,max_items", [(10, 20, 6), (11, 30, 12), (12, 15, 25)])
def test_torchmetrics_ndcg_graded(seed, n_queries, max_items):
    preds, target, indexes = random_run(seed, n_queries, max_items, graded=True)
    table = rank_scores(preds, target, indexes)
    assert table.ideal_grade is not None  # graded, not binary
    for k in (None, *TM_KS):
        name = "ndcg" if k is None else f"ndcg@{k}"
        peer = per_query_peer(tmr.retrieval_normalized_dcg, preds, target, indexes, top_k=k)
        mine = M.ndcg_per_query(table, k, gain="linear")
        assert_peer(name, mine, peer, table, {"gain": "linear"})


def sklearn_ndcg_per_query(preds, target, indexes, k) -> np.ndarray:
    out = []
    for q in torch.unique(indexes):
        mask = indexes == q
        y_true = target[mask].numpy()[None, :].astype(np.float64)
        y_score = preds[mask].numpy()[None, :].astype(np.float64)
        out.append(ndcg_score(y_true, y_score, k=k, ignore_ties=False))
    return np.array(out)


@pytest.mark.parametrize("graded", [False, True], ids=["binary", "graded"])
@pytest.mark.parametrize("seed,n_queries,max_items", [(20, 25, 6), (21, 20, 15), (22, 30, 30)])
def test_ndcg_with_ties(seed, n_queries, max_items, graded):
    """Integer scores 1..4: many ties. torchmetrics' NDCG (a port of sklearn's
    _tie_averaged_dcg) and sklearn's ndcg_score(ignore_ties=False) average the gain over each
    tie group (McSherry and Najork): our ties="expected" with gain="linear"."""
    preds, target, indexes = random_run(seed, n_queries, max_items, graded=graded, tied=True)
    table = rank_scores(preds, target, indexes)
    assert bool((table.tied > 1).any())  # relevant items do tie
    for k in (None, 1, 2, 3, 5, 10):
        name = "ndcg" if k is None else f"ndcg@{k}"
        mine = M.ndcg_per_query(table, k, ties="expected", gain="linear")
        peer = per_query_peer(tmr.retrieval_normalized_dcg, preds, target, indexes, top_k=k)
        assert_peer(name, mine, peer, table, {"gain": "linear"})
        answerable = (table.num_relevant > 0).numpy()
        sk = sklearn_ndcg_per_query(preds, target, indexes, k)
        np.testing.assert_allclose(mine.numpy()[answerable], sk[answerable], atol=TOL)
    # The tie rule matters on this data: optimistic NDCG differs somewhere.
    opt = M.ndcg_per_query(table, 3, ties="optimistic", gain="linear")
    exp = M.ndcg_per_query(table, 3, ties="expected", gain="linear")
    assert float((opt - exp).nan_to_num().abs().max()) > 1e-3


def tie_orders(preds: np.ndarray):
    """Every total order of the candidates consistent with ``preds`` (decreasing score), as
    distinct scores n, n-1, ..., 1 in that order."""
    levels = sorted(set(preds.tolist()), reverse=True)
    groups = [np.nonzero(preds == v)[0].tolist() for v in levels]
    n = preds.size
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        order = [i for part in parts for i in part]
        distinct = np.empty(n, dtype=np.float32)
        distinct[order] = np.arange(n, 0, -1)
        yield torch.from_numpy(distinct)


@pytest.mark.parametrize("seed", [30, 31])
def test_expected_ties_equal_mean_over_tie_orders(seed):
    """ties="expected" is the exact mean over every order of each tie group: break the ties
    every possible way, score each order with torchmetrics (no ties left), and average."""
    preds, target, indexes = random_run(seed, 12, 6, graded=False, tied=True)
    table = rank_scores(preds, target, indexes)
    names = [
        ("precision@2", tmr.retrieval_precision, {"top_k": 2}, {}),
        ("recall@3", tmr.retrieval_recall, {"top_k": 3}, {}),
        ("hit_rate@2", tmr.retrieval_hit_rate, {"top_k": 2}, {}),
        ("mrr", tmr.retrieval_reciprocal_rank, {}, {}),
        ("mrr@2", tmr.retrieval_reciprocal_rank, {"top_k": 2}, {}),
        ("map", tmr.retrieval_average_precision, {}, {}),
        ("map@3", tmr.retrieval_average_precision, {"top_k": 3}, {"divisor": "retrieved"}),
        ("r_precision", tmr.retrieval_r_precision, {}, {}),
    ]
    queries = torch.unique(indexes)
    for name, fn, peer_kwargs, options in names:
        mine = M.per_query_values(table, M.parse_metric(name), ties="expected", **options)
        for row, q in enumerate(queries):
            mask = indexes == q
            if int(target[mask].sum()) == 0:
                assert torch.isnan(mine[row])
                continue
            values = [
                float(fn(p, target[mask], **peer_kwargs)) for p in tie_orders(preds[mask].numpy())
            ]
            assert float(mine[row]) == approx(float(np.mean(values))), (name, int(q))


# --------------------------------------------------------------------------------------------
# Test vectors of research/protocols.md section 10 that involve torchmetrics or sklearn
# --------------------------------------------------------------------------------------------


def test_t1_torchmetrics_ties_depend_on_input_order():
    """preds [1, 1], target [1, 0]: torchmetrics P@1 and MRR follow the input order (1.0/1.0 one
    way, 0.0/0.5 the other); NDCG is tie-averaged, 0.8155 both ways. Ours: "optimistic" and
    "pessimistic" are the two orders, "expected" their mean, and no value depends on the order."""
    target = torch.tensor([1, 0])
    for preds, tgt in (
        (torch.tensor([1.0, 1.0]), target),
        (torch.tensor([1.0, 1.0]), target.flip(0)),
    ):
        table = rank_scores(preds, tgt, torch.zeros(2, dtype=torch.long))
        opt = ours(table, ["precision@1", "mrr", "ndcg"], ties="optimistic", gain="linear")
        pes = ours(table, ["precision@1", "mrr", "ndcg"], ties="pessimistic", gain="linear")
        exp = ours(table, ["precision@1", "mrr", "ndcg"], ties="expected", gain="linear")
        assert (opt["precision@1"], opt["mrr"]) == (1.0, 1.0)
        assert (pes["precision@1"], pes["mrr"]) == (0.0, 0.5)
        assert (exp["precision@1"], exp["mrr"]) == (approx(0.5), approx(0.75))
        assert exp["ndcg"] == approx(float(tmr.retrieval_normalized_dcg(preds, tgt)))
        assert exp["ndcg"] == approx((1 + 1 / np.log2(3)) / 2)  # 0.815465
    # torchmetrics itself, for the record: the two orders give the two extreme values.
    tm = sorted(
        (
            float(tmr.retrieval_precision(torch.tensor([1.0, 1.0]), t, top_k=1)),
            float(tmr.retrieval_reciprocal_rank(torch.tensor([1.0, 1.0]), t)),
        )
        for t in (target, target.flip(0))
    )
    assert tm == [(0.0, 0.5), (1.0, 1.0)]


def test_t2_short_run():
    """pytrec_eval and ranx (measured): P@5 0.4, recall@5 0.6667, success@5 1, map 0.5556,
    Rprec 0.6667, recip_rank 1, ndcg_cut_5 (linear gain) 0.703918. A run shorter than k keeps
    the divisor k; d9 is relevant but never retrieved and counts in m = 3."""
    table = rank_lists([["d1", "d5", "d2"]], [{"d1", "d2", "d9"}])
    names = ["precision@5", "recall@5", "hit_rate@5", "map", "r_precision", "mrr", "ndcg@5"]
    got = ours(table, names, gain="linear")
    assert got == {
        "precision@5": approx(0.4),
        "recall@5": approx(2 / 3),
        "hit_rate@5": approx(1.0),
        "map": approx(5 / 9),
        "r_precision": approx(2 / 3),
        "mrr": approx(1.0),
        "ndcg@5": approx(0.703918),
    }


def test_t5_ap_at_k_divisors():
    """Relevant d1, d5; ranking d1, d4, d3, d2, d5; k = 3. torchmetrics AP@3 = 1.0 (divided by
    the hits in the top 3) is our divisor="retrieved"; trec_eval map_cut_3 = ranx map@3 = 0.5 is
    our default divisor="relevant"; "min" (PyG, MSLS) divides by min(m, k) = 2: 0.5. Full AP 0.7."""
    table = rank_lists([["d1", "d4", "d3", "d2", "d5"]], [{"d1", "d5"}])
    preds = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])
    target = torch.tensor([1, 0, 0, 0, 1])
    tm3 = float(tmr.retrieval_average_precision(preds, target, top_k=3))
    tm_all = float(tmr.retrieval_average_precision(preds, target))
    assert tm3 == approx(1.0) and tm_all == approx(0.7)
    assert ours(table, ["map@3"], divisor="retrieved")["map@3"] == approx(tm3)
    assert ours(table, ["map@3"], divisor="relevant")["map@3"] == approx(0.5)
    assert ours(table, ["map@3"], divisor="min")["map@3"] == approx(0.5)
    assert ours(table, ["map"])["map"] == approx(tm_all)
    # The same through rank_scores, torchmetrics' own input form.
    scored = rank_scores(preds, target, torch.zeros(5, dtype=torch.long))
    assert ours(scored, ["map@3"], divisor="retrieved")["map@3"] == approx(tm3)


def test_t7_truncated_list_recall():
    """Three retrieved [rel, non, rel] with 3 relevant in total, k = 2. torchmetrics can only see
    the candidates, so recall@2 = 1/2; the IR recall is 1/3, which rank_lists gives because the
    third relevant id counts in m_q. Given only the candidates (rank_scores), ours is 1/2 too."""
    preds, target = torch.tensor([3.0, 2.0, 1.0]), torch.tensor([1, 0, 1])
    tm = float(tmr.retrieval_recall(preds, target, top_k=2))
    assert tm == approx(0.5)
    listed = rank_lists([["a", "b", "c"]], [{"a", "c", "z"}])
    assert ours(listed, ["recall@2"])["recall@2"] == approx(1 / 3)
    scored = rank_scores(preds, target, torch.zeros(3, dtype=torch.long))
    assert ours(scored, ["recall@2"])["recall@2"] == approx(tm)


def test_torchmetrics_masks_nonpositive_scores():
    """Documents a torchmetrics convention we do not follow: candidates scored <= 0 lose their
    relevance in precision, recall, MRR and AP. With the same ranking shifted to positive scores
    torchmetrics agrees with us; with negative scores it does not."""
    target = torch.tensor([0, 1, 0, 1])
    negative = torch.tensor([0.5, -0.1, -0.2, -0.3])
    positive = negative + 1.0
    table = rank_scores(negative, target, torch.zeros(4, dtype=torch.long))
    assert ours(table, ["mrr"])["mrr"] == approx(0.5)
    assert float(tmr.retrieval_reciprocal_rank(positive, target)) == approx(0.5)
    assert float(tmr.retrieval_reciprocal_rank(negative, target)) == approx(0.0)
    assert ours(table, ["recall@4"])["recall@4"] == approx(1.0)
    assert float(tmr.retrieval_recall(negative, target, top_k=4)) == approx(0.0)


# ============================================================================================
# 3. T9: tie-aware closed forms (McSherry and Najork; research/protocols.md 8 and 10)
# ============================================================================================


def test_t9_expected_ties():
    """scores [0.9, 0.5, 0.5, 0.5, 0.1], relevance [0, 1, 0, 1, 1] (R = 3), ties="expected"."""
    preds = torch.tensor([0.9, 0.5, 0.5, 0.5, 0.1])
    target = torch.tensor([0, 1, 0, 1, 1])
    table = rank_scores(preds, target, torch.zeros(5, dtype=torch.long))
    names = [
        "precision@2", "recall@2", "precision@3", "recall@3", "precision@5",
        "hit_rate@1", "hit_rate@2", "map", "mrr", "ndcg@3",
    ]  # fmt: skip
    got = ours(table, names, ties="expected", gain="linear")
    assert got["precision@2"] == approx(1 / 3)
    assert got["recall@2"] == approx(2 / 9)
    assert got["precision@3"] == approx(4 / 9)
    assert got["recall@3"] == approx(4 / 9)
    assert got["precision@5"] == approx(0.6)
    assert got["hit_rate@1"] == approx(0.0)
    assert got["hit_rate@2"] == approx(2 / 3)  # 1 - C(1, 1) / C(3, 1)
    assert got["map"] == approx(8 / 15)
    assert got["mrr"] == approx(4 / 9)
    assert got["ndcg@3"] == approx(0.353814)
    sk = ndcg_score(target[None].numpy(), preds[None].numpy(), k=3, ignore_ties=False)
    assert got["ndcg@3"] == approx(sk)
    assert got["ndcg@3"] == approx(float(tmr.retrieval_normalized_dcg(preds, target, top_k=3)))
    # The same ranking with a different storage order of the tie group: same values.
    perm = torch.tensor([3, 0, 4, 2, 1])
    shuffled = rank_scores(preds[perm], target[perm], torch.zeros(5, dtype=torch.long))
    again = ours(shuffled, names, ties="expected", gain="linear")
    assert again == {k: approx(v) for k, v in got.items()}
