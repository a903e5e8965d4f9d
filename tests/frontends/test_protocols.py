"""Named protocols (docs/protocols.md) on hand-worked cases, where no installable code exists.

VSE++, NetVLAD/VPR, MSLS and the official Market-1501 code cannot be pip-installed; each case
below derives its expected values in comments from the field's evaluation code as quoted in
research/protocols.md (sections 2, 4.3, 5). Where the field's loop is short it is also written
here from that description and run on random data. PML's values on T10 are derived by hand too
(tests/frontends/test_peers.py runs PML itself). The peers that are installable are in
tests/frontends/test_field_peers.py.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import rank_embeddings
from retrieval_metrics.metrics.crossmodal import _NOT_APPLICABLE as NOT_APPLICABLE
from retrieval_metrics.metrics.protocols import HIT_RATE_RECALL_PROTOCOLS
from retrieval_metrics.protocols import DEFAULTS, PROTOCOL_DEFAULTS, PROTOCOLS, apply_protocol

TOL = 1e-6
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fields.py"


def approx(value: float) -> object:
    return pytest.approx(value, abs=TOL, rel=TOL)


def values(metric) -> dict[str, float]:
    out = metric.compute()
    return {k: float(v) for k, v in out.items()}


def scored(scores: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Query and gallery embeddings whose dot products are exactly ``scores`` (Q x N):
    query i = e_i, gallery j = scores[:, j]. Lets a case fix every ranking by hand."""
    q = torch.eye(scores.shape[0], dtype=torch.float64)
    return q, torch.from_numpy(np.ascontiguousarray(scores.T, dtype=np.float64))


# ============================================================================================
# VSE++ (research/protocols.md 2.1): protocol="vsepp" on CrossModalRetrieval
# ============================================================================================
#
# VSE++ evaluation.py: R@K = 100 * mean(rank0 < K) (percent), medr = floor(median(rank0)) + 1,
# meanr = mean(rank0) + 1, rsum = the six percent recalls; image-to-text rank = best of the
# image's captions. COCO 1K = 5 folds of consecutive images, every value averaged over folds;
# 5K = one gallery. Embeddings are unit vectors, so VSE++'s dot product is our cosine.
#
# Data: 10 images, image i = e_i (d = 10), 5 captions per image.


def vsepp_captions(confused: dict[int, tuple[int, list[int]]]) -> torch.Tensor:
    """Captions of image i are e_i, except that image i's captions listed in confused[i] =
    (j, which) are 0.6 e_i + 0.8 e_j (closer to image j than to their own image)."""
    caps = []
    for i in range(10):
        for c in range(5):
            v = torch.zeros(10, dtype=torch.float64)
            if i in confused and c in confused[i][1]:
                v[i], v[confused[i][0]] = 0.6, 0.8
            else:
                v[i] = 1.0
            caps.append(v)
    return torch.stack(caps)


def vsepp_values(captions: torch.Tensor, folds: int | None) -> dict[str, float]:
    m = rm.CrossModalRetrieval(k=(1, 5, 10), folds=folds, protocol="vsepp")
    images = torch.eye(10, dtype=torch.float64)
    m.update(
        images, captions, torch.arange(10), text_image_ids=torch.arange(10).repeat_interleave(5)
    )
    return {k: float(v) for k, v in m.compute_values().items()}


def test_vsepp_1k_versus_5k():
    """Every caption of each odd image i points to image i + 1 (mod 10), which lies in the NEXT
    fold of two images: 0.6 to its own image, 0.8 to image i + 1, 0 elsewhere.

    5K (one gallery of 10 images):
      i2t: even image e_i: own captions 1.0 (captions of image i - 1: 0.8): rank 1. Odd image
        e_i: own captions 0.6, every other caption 0: rank 1. R@1 = R@5 = R@10 = 100, medr 1,
        meanr 1.
      t2i: 25 even captions rank 1, 25 odd captions rank 2 (behind image i + 1):
        R@1 = 50, R@5 = R@10 = 100; 0-based ranks 25 x 0 and 25 x 1: median 0.5, so
        medr = floor(0.5) + 1 = 1 (the plain median of the 1-based ranks is 1.5);
        meanr = 1.5. rsum = 300 + 250 = 550.
    1K (folds=5 of images {2f, 2f + 1}): image i + 1 is in another fold, so every caption
      ranks its image first: all recalls 100, rsum 600, medr = meanr = 1.
    """
    caps = vsepp_captions({i: ((i + 1) % 10, [0, 1, 2, 3, 4]) for i in range(1, 10, 2)})
    five_k = vsepp_values(caps, None)
    assert five_k == {
        "i2t/hit_rate@1": approx(100.0),
        "i2t/hit_rate@5": approx(100.0),
        "i2t/hit_rate@10": approx(100.0),
        "i2t/median_rank": approx(1.0),
        "i2t/mean_rank": approx(1.0),
        "t2i/hit_rate@1": approx(50.0),
        "t2i/hit_rate@5": approx(100.0),
        "t2i/hit_rate@10": approx(100.0),
        "t2i/median_rank": approx(1.0),
        "t2i/mean_rank": approx(1.5),
        "rsum": approx(550.0),
    }
    one_k = vsepp_values(caps, 5)
    assert one_k["rsum"] == approx(600.0)
    for key, value in one_k.items():
        if key != "rsum":
            assert value == approx(1.0 if "rank" in key else 100.0), key
    # RSum reports the same single number
    m = rm.RSum(folds=5, protocol="vsepp")
    m.update(torch.eye(10), caps.float(), torch.arange(10), torch.arange(10).repeat_interleave(5))
    assert float(m.compute()) == approx(600.0)


def test_vsepp_every_value_averaged_over_folds():
    """Confusion inside fold 0 only: 3 captions of image 0 point to image 1 and all 5 captions
    of image 1 point to image 0 (0.6 own, 0.8 other).

    Fold 0 alone (images 0, 1; 10 captions):
      i2t: image 0 sees its 2 pure captions at 1.0: rank 1. Image 1 sees image 0's 3 confused
        captions at 0.8 above its own at 0.6: rank 4. R@1 = 50, R@5 = R@10 = 100;
        medr = floor(median(0, 3) = 1.5) + 1 = 2; meanr = 2.5.
      t2i: 2 captions rank 1, 8 rank 2: R@1 = 20, R@5 = R@10 = 100;
        0-based [0, 0, 1 x 8]: median 1, medr 2; meanr 1.8. rsum = 250 + 220 = 470.
    Folds 1-4: perfect (R@K 100, ranks 1, rsum 600).
    1K averages: i2t R@1 (50 + 400) / 5 = 90, medr (2 + 4) / 5 = 1.2, meanr (2.5 + 4) / 5 = 1.3;
      t2i R@1 (20 + 400) / 5 = 84, medr 1.2, meanr (1.8 + 4) / 5 = 1.16;
      rsum (470 + 2400) / 5 = 574 (= the sum of the fold-averaged recalls).
    5K pools the queries instead: the recalls and mean ranks are the same (equal folds), but
      i2t 0-based ranks [0, 3, 0 x 8] and t2i [0 x 42, 1 x 8] have medr 1, not 1.2.
    """
    caps = vsepp_captions({0: (1, [2, 3, 4]), 1: (0, [0, 1, 2, 3, 4])})
    one_k = vsepp_values(caps, 5)
    assert one_k == {
        "i2t/hit_rate@1": approx(90.0),
        "i2t/hit_rate@5": approx(100.0),
        "i2t/hit_rate@10": approx(100.0),
        "i2t/median_rank": approx(1.2),
        "i2t/mean_rank": approx(1.3),
        "t2i/hit_rate@1": approx(84.0),
        "t2i/hit_rate@5": approx(100.0),
        "t2i/hit_rate@10": approx(100.0),
        "t2i/median_rank": approx(1.2),
        "t2i/mean_rank": approx(1.16),
        "rsum": approx(574.0),
    }
    five_k = vsepp_values(caps, None)
    assert five_k["i2t/median_rank"] == approx(1.0) and five_k["t2i/median_rank"] == approx(1.0)
    assert five_k["i2t/mean_rank"] == approx(1.3) and five_k["t2i/mean_rank"] == approx(1.16)
    assert five_k["rsum"] == approx(574.0)


def test_vsepp_percent_and_medr_formula():
    """protocol="vsepp" reports percent (R@1 of the 5K case above is 50, not 0.5) and
    medr = floor(median(rank0)) + 1: 0-based ranks [0, 1] give medr 1, meanr 1.5 (T14)."""
    # Two text queries against two images: caption 0 ranks image 0 first, caption 1 ranks its
    # image 1 second (image 0 scores 0.8, image 1 0.6).
    images = torch.eye(2, dtype=torch.float64)
    caps = torch.tensor([[1.0, 0.0], [0.8, 0.6]], dtype=torch.float64)
    m = rm.CrossModalRetrieval(k=(1,), protocol="vsepp")
    m.update(images, caps, torch.arange(2))
    got = {k: float(v) for k, v in m.compute_values().items()}
    assert got["t2i/hit_rate@1"] == approx(50.0)
    assert got["t2i/median_rank"] == approx(1.0) and got["t2i/mean_rank"] == approx(1.5)
    plain = rm.CrossModalRetrieval(k=(1,), median="plain")
    plain.update(images, caps, torch.arange(2))
    assert float(plain.compute_values()["t2i/median_rank"]) == approx(1.5)
    assert float(plain.compute_values()["t2i/hit_rate@1"]) == approx(0.5)  # fraction


# ============================================================================================
# NetVLAD / VPR (research/protocols.md 5, T15): protocol="netvlad"
# ============================================================================================
#
# Positives = database items within 25 m (UTM, inclusive); recall@N = share of ALL queries with
# a positive in the top N (queries with no positive count as misses), in percent; N = 1, 5, 10,
# 20. NetVLAD ranks with faiss IndexFlatL2: the protocol sets similarity="euclidean".

T15_DB = [[0.0, 0.0], [25.0, 0.0], [25.0000001, 0.0], [100.0, 100.0]]
T15_QUERIES = [[0.0, 0.0], [500.0, 500.0]]


def angle_embeddings(angles) -> torch.Tensor:
    a = torch.tensor(angles, dtype=torch.float64)
    return torch.stack([torch.cos(a), torch.sin(a)], 1)


@pytest.mark.parametrize(("query_angle", "expected_at_1"), [(0.0, 0.0), (0.21, 50.0)])
def test_netvlad_t15(query_angle, expected_at_1):
    """T15: query 0 at (0, 0) has positives db0 (0 m) and db1 (exactly 25 m: inclusive); db2 at
    25.0000001 m is not; query 1 at (500, 500) has none. Database embeddings at angles
    db0 0.4, db1 0.2, db2 0.0, db3 1.0 (cosine).

    Query angle 0.0 ranks db2, db1, db0, db3: first positive at 2 -> R@1 = 0 %, R@5 = 50 %
    (query 1 is a miss that stays in the denominator: at most 50 %).
    Query angle 0.21 ranks db1 (0.01 away), db0 (0.19), db2 (0.21), db3: R@1 = 50 %.
    """
    m = rm.HitRateAtK(k=(1, 5, 10, 20), protocol="netvlad")
    m.update(angle_embeddings([query_angle, 2.5]), role="query", positions=T15_QUERIES)
    m.update(angle_embeddings([0.4, 0.2, 0.0, 1.0]), role="gallery", positions=T15_DB)
    assert m.rank_table().num_relevant.tolist() == [2, 0]
    assert values(m) == {
        "hit_rate@1": approx(expected_at_1),
        "hit_rate@5": approx(50.0),
        "hit_rate@10": approx(50.0),
        "hit_rate@20": approx(50.0),
    }


def netvlad_loop(q_emb, db_emb, q_pos, db_pos, radius=25.0, n_values=(1, 5, 10, 20)):
    """pytorch-NetVlad main.py test(), as quoted in protocols.md 5: exact L2 search, positives
    from sklearn NearestNeighbors.radius_neighbors, correct_at_n[i:] += 1 at the first N that
    hits, divided by the number of queries."""
    from sklearn.neighbors import NearestNeighbors

    knn = NearestNeighbors(n_jobs=1).fit(db_pos)
    _, gt = knn.radius_neighbors(q_pos, radius=radius)
    dist = ((q_emb[:, None, :] - db_emb[None, :, :]) ** 2).sum(-1)
    predictions = np.argsort(dist, axis=1)[:, : max(n_values)]
    correct_at_n = np.zeros(len(n_values))
    for q, pred in enumerate(predictions):
        for i, n in enumerate(n_values):
            if np.any(np.isin(pred[:n], gt[q])):
                correct_at_n[i:] += 1
                break
    return correct_at_n / len(q_emb) * 100


@pytest.mark.parametrize(("seed", "num_q", "num_db"), [(0, 40, 300), (1, 100, 800)])
def test_netvlad_random_against_the_loop(seed, num_q, num_db):
    rng = np.random.default_rng(seed)
    db_pos = rng.uniform(0, 400, size=(num_db, 2))
    q_pos = rng.uniform(-50, 450, size=(num_q, 2))  # some queries far from every db item
    # descriptors: a smooth function of position plus noise, so that recall is informative
    basis = rng.normal(size=(2, 16)) / 60
    db_emb = np.sin(db_pos @ basis) + 0.3 * rng.normal(size=(num_db, 16))
    q_emb = np.sin(q_pos @ basis) + 0.3 * rng.normal(size=(num_q, 16))
    expected = netvlad_loop(q_emb, db_emb, q_pos, db_pos)
    m = rm.HitRateAtK(k=(1, 5, 10, 20), protocol="netvlad", similarity="euclidean")
    m.update(torch.from_numpy(q_emb), role="query", positions=torch.from_numpy(q_pos))
    m.update(torch.from_numpy(db_emb), role="gallery", positions=torch.from_numpy(db_pos))
    got = values(m)
    assert [got[f"hit_rate@{n}"] for n in (1, 5, 10, 20)] == [approx(v) for v in expected]
    assert int((m.rank_table().num_relevant == 0).sum()) > 0  # misses kept in the denominator


def test_netvlad_ranks_by_l2_as_faiss_indexflatl2():
    """Descriptors that are not unit-length: the query (1, 0) is nearer (L2) to the positive
    (1.1, 0.2), 0.22 away, than to (3, 0), 2 away, but less aligned with it (cosine 0.98 vs 1).
    faiss' IndexFlatL2 ranks the positive first: recall@1 = 100 %."""
    m = rm.HitRateAtK(k=1, protocol="netvlad")
    m.update(torch.tensor([[1.0, 0.0]]), role="query", positions=[[0.0, 0.0]])
    m.update(
        torch.tensor([[3.0, 0.0], [1.1, 0.2]]), role="gallery", positions=[[900.0, 0.0], [5.0, 0.0]]
    )
    assert float(m.compute()) == approx(100.0)


def test_netvlad_exact_ties_in_faiss_order_with_ids():
    """Two identical database images, the first (index 0) no positive, the second one: faiss
    lists index 0 first, so recall@1 = 0 %. ties="id" with the database indices as ids gives
    that order; the default expectation over the tie's orders gives 50 %."""
    def run(**options):
        m = rm.HitRateAtK(k=1, protocol="netvlad", **options)
        m.update(torch.tensor([[0.0, 1.0]]), role="query", positions=[[0.0, 0.0]], ids=[100])
        m.update(
            torch.tensor([[0.0, 2.0], [0.0, 2.0], [5.0, 5.0]]), role="gallery",
            positions=[[900.0, 0.0], [10.0, 0.0], [0.0, 5.0]], ids=[0, 1, 2],
        )
        return float(m.compute())

    assert run(ties="id") == approx(0.0)
    assert run() == approx(50.0)


# UTM coordinates of a database image 25.2 m north of the query: no positive in float64, but
# float32 keeps half a metre at northings of 4.5e6 (25.0 m), enough to make it one
UTM_QUERY = [[584000.0, 4477000.4]]
UTM_DB = [[584000.0, 4477025.6], [584500.0, 4477500.0]]


def test_positions_from_python_lists_are_read_as_float64():
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    m = rm.HitRateAtK(k=1, protocol="netvlad")
    m.update(q, role="query", positions=UTM_QUERY)
    m.update(g, role="gallery", positions=UTM_DB)
    assert float(m.compute()) == 0.0
    table = rank_embeddings(
        q, g, relevance="radius", radius=25.0, query_positions=UTM_QUERY,
        gallery_positions=UTM_DB,
    )
    assert table.num_relevant.tolist() == [0]
    # the same positions in float32 read 25.0 m (a positive), and warn
    with pytest.warns(UserWarning, match="`query_positions` arrived as float32"):
        table = rank_embeddings(
            q, g, relevance="radius", radius=25.0,
            query_positions=np.array(UTM_QUERY, dtype=np.float32),
            gallery_positions=np.array(UTM_DB, dtype=np.float32),
        )
    assert table.num_relevant.tolist() == [1]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, torch.float32, torch.bfloat16])
def test_low_precision_positions_warn(dtype):
    pos = np.array([[100.0, 200.0]])  # (float16 cannot hold a UTM coordinate at all)
    given = pos.astype(dtype) if isinstance(dtype, type) else torch.from_numpy(pos).to(dtype)
    m = rm.HitRateAtK(k=1, protocol="netvlad")
    with pytest.warns(UserWarning, match="`positions` arrived as .*pass float64 positions"):
        m.update(torch.ones(1, 2), role="query", positions=given)


@pytest.mark.parametrize(
    ("query_positions", "gallery_positions", "message"),
    [
        ([["a", "b"]], [[0.0, 0.0]], r"`positions` must be numbers, an \(1, P\) array"),
        ([[0.0, 0.0]], [[0.0, 0.0, 0.0]], "same number of coordinates, got 2 and 3"),
    ],
)
def test_bad_positions_name_the_argument(query_positions, gallery_positions, message):
    m = rm.HitRateAtK(k=1, protocol="netvlad")
    with pytest.raises(ValueError, match=message):
        m.update(torch.ones(1, 2), role="query", positions=query_positions)
        m.update(torch.ones(1, 2), role="gallery", positions=gallery_positions)
        m.compute()


@pytest.mark.parametrize("protocol", ["vsepp", "pml", "torchreid", "market1501_official",
                                      "netvlad", "msls"])
def test_recall_is_refused_where_the_field_means_the_hit_rate(protocol):
    """Under these fields' protocols "Recall@K" is the hit rate: one query with 4 relevant
    items, the first ranked one of them, has NetVLAD's recall@1 = 1 but IR recall@1 = 0.25.
    The library's recall@K is refused there rather than printed under the field's name."""
    for make in (
        lambda: rm.RetrievalMetrics(["recall@1", "hit_rate@1"], protocol=protocol),
        lambda: rm.RecallAtK(k=(1, 5), protocol=protocol),
        lambda: rm.RetrievalMetrics(["recall"], protocol=protocol),
    ):
        with pytest.raises(ValueError, match=f"under protocol='{protocol}'.*hit_rate@"):
            make()
    m = rm.RetrievalMetrics(["hit_rate@1"], protocol=protocol)
    m.update(ranked_ids=[["a", "x", "b"]], relevant_ids=[["a", "b", "c", "d"]])
    assert float(m.compute()["hit_rate@1"]) in (1.0, 100.0)


@pytest.mark.parametrize("protocol", [None, "trec_eval", "beir", "ann_benchmarks"])
def test_recall_stays_the_ir_measure_elsewhere(protocol):
    m = rm.RetrievalMetrics(["recall@1"], protocol=protocol)
    m.update(ranked_ids=[["a", "x", "b"]], relevant_ids=[["a", "b", "c", "d"]])
    assert float(m.compute()["recall@1"]) == approx(0.25)


# ============================================================================================
# MSLS (research/protocols.md 5): protocol="msls"
# ============================================================================================
#
# mapillary_sls: positives within 25 m; only queries with >= 1 positive are kept; recall@K as
# hit rate; map@K = Kaggle apk: sum over the top K of P(i) at each (first) hit, divided by
# min(#positives, K). Ours: empty_queries="skip", divisor="min".
#
# Case (dot-product scores fix the rankings; positions fix the positives):
#   q0 at (0, 0): positives db0 (10 m), db1 (20 m): m = 2.
#   q1 at (1000, 0): positives db2..db7 at (1000, 0..25 step 5), the last exactly 25 m: m = 6.
#   q2 at (5000, 5000): no positive -> skipped.
#   q0 ranks db3 db0 db4 db1 db2 ...: hits at 2, 4 -> apk@5 = (1/2 + 2/4) / min(2, 5) = 0.5.
#   q1 ranks db2 db0 db3 db1 db4 db5 db6 db7: hits at 1, 3, 5 within 5 ->
#     apk@5 = (1 + 2/3 + 3/5) / min(6, 5) = 0.453333 (divided by m = 6 it would be 0.377778).
#   mAP@5 = (0.5 + 0.453333) / 2 = 0.476667; recall@1 = 1/2, recall@5 = 1.
#   netvlad on the same data keeps q2 as a miss: recall@1 = 1/3 -> 33.33 %.

MSLS_SCORES = np.array(
    [
        [7, 5, 4, 8, 6, 3, 2, 1],
        [7, 5, 8, 6, 4, 3, 2, 1],
        [1, 2, 3, 4, 5, 6, 7, 8],
    ],
    dtype=np.float64,
)
MSLS_Q_POS = [[0.0, 0.0], [1000.0, 0.0], [5000.0, 5000.0]]
MSLS_DB_POS = [[0.0, 10.0], [20.0, 0.0]] + [[1000.0, 5.0 * j] for j in range(6)]


def msls_update(m) -> None:
    q, g = scored(MSLS_SCORES)
    m.update(q, role="query", positions=torch.tensor(MSLS_Q_POS, dtype=torch.float64))
    m.update(g, role="gallery", positions=torch.tensor(MSLS_DB_POS, dtype=torch.float64))


def test_msls_hand_case():
    m = rm.RetrievalMetrics(
        ["hit_rate@1", "hit_rate@5", "map@5"], protocol="msls", similarity="dot"
    )
    msls_update(m)
    assert m.rank_table().num_relevant.tolist() == [2, 6, 0]
    assert values(m) == {
        "hit_rate@1": approx(0.5),
        "hit_rate@5": approx(1.0),
        "map@5": approx((0.5 + (1 + 2 / 3 + 3 / 5) / 5) / 2),
    }
    single = rm.MeanAveragePrecision(k=5, protocol="msls", similarity="dot")
    msls_update(single)
    assert float(single.compute()) == approx(0.476667)
    # trec_eval's map_cut divisor (m_q) for contrast: (0.5 + 2.266667 / 6) / 2
    by_m = rm.MeanAveragePrecision(k=5, similarity="dot", relevance="radius")
    msls_update(by_m)
    assert float(by_m.compute()) == approx((0.5 + (1 + 2 / 3 + 3 / 5) / 6) / 2)
    # netvlad's options but its L2 ranking (these cases fix the ranking by dot products)
    vpr = rm.HitRateAtK(
        k=(1, 5), relevance="radius", radius=25.0, empty_queries="zero", percent=True,
        similarity="dot",
    )
    msls_update(vpr)
    assert values(vpr) == {"hit_rate@1": approx(100 / 3), "hit_rate@5": approx(200 / 3)}


def kaggle_apk(actual, predicted, k):
    """ml_metrics apk as used by mapillary_sls (hits counted once, / min(len(actual), k))."""
    predicted = list(predicted[:k])
    score, num_hits = 0.0, 0.0
    for i, p in enumerate(predicted):
        if p in actual and p not in predicted[:i]:
            num_hits += 1.0
            score += num_hits / (i + 1.0)
    if not actual:
        return 0.0
    return score / min(len(actual), k)


@pytest.mark.parametrize("seed", [0, 1])
def test_msls_random_against_apk(seed):
    rng = np.random.default_rng(seed)
    num_q, num_db, k = 60, 400, 5
    db_pos = rng.uniform(0, 300, size=(num_db, 2))
    q_pos = rng.uniform(-40, 340, size=(num_q, 2))
    basis = rng.normal(size=(2, 8)) / 40
    db_emb = np.sin(db_pos @ basis) + 0.3 * rng.normal(size=(num_db, 8))
    q_emb = np.sin(q_pos @ basis) + 0.3 * rng.normal(size=(num_q, 8))
    dpos = np.sqrt(((q_pos[:, None] - db_pos[None]) ** 2).sum(-1))
    dist = ((q_emb[:, None] - db_emb[None]) ** 2).sum(-1)
    aps, hits1 = [], []
    for q in range(num_q):
        positives = set(np.flatnonzero(dpos[q] <= 25.0).tolist())
        if not positives:
            continue  # mapillary_sls keeps only queries with a positive
        ranking = np.argsort(dist[q])
        aps.append(kaggle_apk(positives, ranking.tolist(), k))
        hits1.append(float(ranking[0] in positives))
    assert len(aps) < num_q
    m = rm.RetrievalMetrics(["map@5", "hit_rate@1"], protocol="msls", similarity="euclidean")
    m.update(torch.from_numpy(q_emb), role="query", positions=torch.from_numpy(q_pos))
    m.update(torch.from_numpy(db_emb), role="gallery", positions=torch.from_numpy(db_pos))
    got = values(m)
    assert got["map@5"] == approx(float(np.mean(aps)))
    assert got["hit_rate@1"] == approx(float(np.mean(hits1)))


# ============================================================================================
# Official Market-1501 code (research/protocols.md 4.3, T13): protocol="market1501_official"
# ============================================================================================
#
# good = same pid, other camera; junk = same pid and camera, or gallery pid -1: removed from the
# ranking; pid 0 stays as a negative. AP is trapezoidal: at the i-th good hit (0-based row r_i),
# (old_precision + precision) / 2 / ngood with precision = (i + 1) / (r_i + 1) and
# old_precision = i / r_i (1 if r_i = 0). Queries without a good match count 0: CMC and mAP are
# divided by the number of all queries.
#
# T13 (same data as tests/frontends/test_field_peers.py):
#   q1 (pid 1, cam 0): kept g3 g2 g1 g5 g7 g4 (g0 same cam, g6 junk): good at rows 2, 3:
#     (0 + 1/3)/2 / 2 + (1/3 + 2/4)/2 / 2 = 1/12 + 5/24 = 7/24.
#   q2 (pid 2, cam 0): kept g3 g5 g0 g1 g7 g2: good at row 5: (0 + 1/6)/2 = 1/12.
#   q3: no good match: 0.
#   mAP = (7/24 + 2/24) / 3 = 0.125; CMC@1..5 = [0, 0, 1/3, 1/3, 1/3] (q1 first at rank 3).
#   (torchreid on the same data: mAP 0.233929 and CMC [0, 0, 0, 1/2, 1/2].)

T13_DIST = np.array(
    [
        [0.1, 0.5, 0.3, 0.2, 0.9, 0.7, 0.05, 0.8],
        [0.4, 0.6, 0.9, 0.1, 0.2, 0.3, 0.5, 0.7],
        [0.3, 0.2, 0.1, 0.4, 0.5, 0.6, 0.7, 0.05],
    ]
)
T13_Q = (torch.tensor([1, 2, 3]), torch.tensor([0, 0, 1]))
T13_G = (torch.tensor([1, 1, 2, 0, 2, 1, -1, 3]), torch.tensor([0, 1, 1, 2, 0, 2, 1, 1]))


def t13_update(m) -> None:
    q, g = scored(-T13_DIST)  # score = -distance, the same order
    m.update(q, T13_Q[0], role="query", cameras=T13_Q[1])
    m.update(g, T13_G[0], role="gallery", cameras=T13_G[1])


def test_market1501_official_t13():
    m = rm.RetrievalMetrics(["cmc@5", "map"], protocol="market1501_official", similarity="dot")
    t13_update(m)
    got = m.compute()
    np.testing.assert_allclose(got["cmc@5"].numpy(), [0, 0, 1 / 3, 1 / 3, 1 / 3], atol=TOL)
    assert float(got["map"]) == approx(0.125)
    single = rm.MeanAveragePrecision(protocol="market1501_official", similarity="dot")
    t13_update(single)
    assert float(single.compute()) == approx(0.125)
    cmc = rm.CMC(max_rank=5, protocol="market1501_official", similarity="dot")
    t13_update(cmc)
    np.testing.assert_allclose(cmc.compute().numpy(), [0, 0, 1 / 3, 1 / 3, 1 / 3], atol=TOL)
    # torchreid's options but its distance: these embeddings reproduce the distance matrix's
    # order by dot product, while protocol="torchreid" itself ranks by euclidean distance
    torchreid = {k: v for k, v in PROTOCOLS["torchreid"][0].items() if k != "similarity"}
    reid = rm.RetrievalMetrics(["cmc@5", "map"], similarity="dot", **torchreid)
    t13_update(reid)
    np.testing.assert_allclose(reid.compute()["cmc@5"].numpy(), [0, 0, 0, 0.5, 0.5], atol=TOL)
    assert float(reid.compute()["map"]) == approx(0.233929)


def layumi_evaluate(dist, q_pids, q_cams, g_pids, g_cams, max_rank):
    """The official Market-1501 evaluation as ported in layumi's evaluate_gpu.py
    (compute_mAP and the loop that divides by len(query_label)), on an ascending distance."""
    cmc_sum = np.zeros(dist.shape[1])
    ap_sum = 0.0
    for q in range(dist.shape[0]):
        index = np.argsort(dist[q])
        query_index = np.argwhere(g_pids == q_pids[q]).flatten()
        camera_index = np.argwhere(g_cams == q_cams[q]).flatten()
        good = np.setdiff1d(query_index, camera_index, assume_unique=True)
        junk = np.append(
            np.intersect1d(query_index, camera_index), np.argwhere(g_pids == -1).flatten()
        )
        if good.size == 0:
            continue  # CMC_tmp[0] == -1: skipped, but still counted in len(query_label)
        index = index[np.isin(index, junk, invert=True)]
        rows_good = np.argwhere(np.isin(index, good)).flatten()
        cmc = np.zeros(dist.shape[1])
        cmc[rows_good[0] :] = 1
        ap = 0.0
        for i in range(good.size):
            precision = (i + 1) / (rows_good[i] + 1)
            old_precision = i / rows_good[i] if rows_good[i] != 0 else 1.0
            ap += (old_precision + precision) / 2 / good.size
        cmc_sum += cmc
        ap_sum += ap
    return cmc_sum[:max_rank] / dist.shape[0], ap_sum / dist.shape[0]


@pytest.mark.parametrize(("seed", "num_q", "num_g"), [(0, 30, 200), (1, 80, 600)])
def test_market1501_official_random(seed, num_q, num_g):
    rng = np.random.default_rng(seed)
    num_ids, dim = num_q // 2 + 3, 12
    centres = rng.normal(size=(num_ids + 6, dim))
    g_pids = rng.integers(-1, num_ids + 1, size=num_g)
    g_cams = rng.integers(0, 6, size=num_g)
    q_pids = rng.integers(1, num_ids + 4, size=num_q)  # some absent from the gallery
    q_cams = rng.integers(0, 6, size=num_q)
    q = centres[q_pids] + 0.9 * rng.normal(size=(num_q, dim))
    g = centres[np.clip(g_pids, 0, None)] + 0.9 * rng.normal(size=(num_g, dim))
    dist = ((q[:, None] - g[None]) ** 2).sum(-1)
    # rows_good[0] == 0 happens here (old_precision = 1 branch)
    cmc, m_ap = layumi_evaluate(dist, q_pids, q_cams, g_pids, g_cams, 20)
    m = rm.RetrievalMetrics(
        ["cmc@20", "map"], protocol="market1501_official", similarity="euclidean"
    )
    m.update(
        torch.from_numpy(q),
        torch.from_numpy(q_pids),
        role="query",
        cameras=torch.from_numpy(q_cams),
    )
    m.update(
        torch.from_numpy(g),
        torch.from_numpy(g_pids),
        role="gallery",
        cameras=torch.from_numpy(g_cams),
    )
    got = m.compute()
    np.testing.assert_allclose(got["cmc@20"].numpy(), cmc, atol=TOL)
    assert float(got["map"]) == approx(m_ap)
    assert cmc[0] > 0 and int((m.rank_table().num_relevant == 0).sum()) > 0


# ============================================================================================
# PML (research/protocols.md 3.1, T10): protocol="pml"
# ============================================================================================
#
# T10: 1-D embeddings [0, .1, .25, .5, 1.0, 1.1, 3.0], labels [0, 1, 0, 1, 1, 0, 2]; same
# source, Euclidean, self removed, the lone label 2 skipped; every other query has m = 2.
# Rankings (distance; R = relevant):
#   i0 (0):    i1 .1, i2 .25 R, i3 .5, i4 1, i5 1.1 R         -> R at 2, 5
#   i1 (.1):   i0 .1, i2 .15, i3 .4 R, i4 .9 R, i5 1          -> R at 3, 4
#   i2 (.25):  i1 .15, {i0 R, i3} tied at .25, i4 .75, i5 .85 R -> R at 2 or 3, and 5
#   i3 (.5):   i2 .25, i1 .4 R, {i0, i4 R} tied at .5, i5 .6    -> R at 2, and 3 or 4
#   i4 (1.0):  i5 .1, i3 .5 R, i2 .75, i1 .9 R, i0 1          -> R at 2, 4
#   i5 (1.1):  i4 .1, i3 .6, i2 .85 R, i1 1, i0 1.1 R         -> R at 3, 5
# Ours averages over the orders of tied items (ties="expected"); PML (faiss) breaks ties by
# lower gallery index, i.e. i0 first in both ties (a hit for i2, a miss for i3). No tie rule of
# ours is "by index", so protocol="pml" matches PML only where no tie touches a relevant item
# (tests/frontends/test_peers.py reproduces every PML value with index-broken scores).
#   precision@1: no query's nearest item is relevant: 0 (PML 0).
#   r_precision (hits in top 2 / 2): .5, 0, E = .25, .5, .5, 0 -> 1.75/6 = 0.291667 (PML 1/3).
#   map@r (1/2 sum_{i<=2} P(i) rel(i)): .25, 0, E = .5 * .25 = .125, .25, .25, 0 -> 0.145833
#     (PML 1/6).
#   map (full step AP): .45, (1/3 + 1/2)/2, (E[1/pos] = 5/12 + 2/5)/2 = 49/120, (1/2 + E[2/pos]
#     = 7/12)/2 = 13/24, .5, (1/3 + 2/5)/2 -> 0.447222 (PML k=None: 0.447222, the ties cancel).
#   mrr: 1/2, 1/3, E = 5/12, 1/2, 1/2, 1/3 -> 0.430556 (PML k=None: 0.444444).

T10_EMB = [0.0, 0.1, 0.25, 0.5, 1.0, 1.1, 3.0]
T10_LABELS = [0, 1, 0, 1, 1, 0, 2]


def test_pml_t10():
    m = rm.RetrievalMetrics(["precision@1", "r_precision", "map@r", "map", "mrr"], protocol="pml")
    m.update(torch.tensor(T10_EMB, dtype=torch.float64).view(-1, 1), torch.tensor(T10_LABELS))
    assert m.similarity == "euclidean" and m.empty_queries == "skip"
    assert values(m) == {
        "precision@1": approx(0.0),
        "r_precision": approx(1.75 / 6),
        "map@r": approx(0.875 / 6),
        "map": approx(0.447222),
        "mrr": approx(0.430556),
    }
    assert m.rank_table().num_relevant.tolist() == [2, 2, 2, 2, 2, 2, 0]  # lone query skipped
    # the single classes agree
    for cls, expected in ((rm.MAPAtR, 0.875 / 6), (rm.RPrecision, 1.75 / 6)):
        single = cls(protocol="pml")
        single.update(
            torch.tensor(T10_EMB, dtype=torch.float64).view(-1, 1), torch.tensor(T10_LABELS)
        )
        assert float(single.compute()) == approx(expected)


# ============================================================================================
# apply_protocol and construction
# ============================================================================================

CLASSES = [
    lambda **kw: rm.HitRateAtK(k=(1, 5), **kw),
    lambda **kw: rm.RecallAtK(k=5, **kw),
    lambda **kw: rm.PrecisionAtK(k=5, **kw),
    lambda **kw: rm.RPrecision(**kw),
    lambda **kw: rm.MAPAtR(**kw),
    lambda **kw: rm.MeanAveragePrecision(**kw),
    lambda **kw: rm.MRR(**kw),
    lambda **kw: rm.NDCGAtK(k=10, **kw),
    lambda **kw: rm.CMC(max_rank=10, **kw),
    lambda **kw: rm.MedianRank(**kw),
    lambda **kw: rm.MeanRank(**kw),
    lambda **kw: rm.MINP(**kw),
    lambda **kw: rm.RetrievalMetrics(["hit_rate@1", "map"], **kw),
    lambda **kw: rm.CrossModalRetrieval(**kw),
    lambda **kw: rm.RSum(**kw),
]


def test_every_metric_class_is_listed():
    exported = {
        name
        for name in rm.__all__
        if inspect.isclass(getattr(rm, name))
        and issubclass(getattr(rm, name), rm.RetrievalMetricBase)
    }
    listed = {type(make()).__name__ for make in CLASSES}
    assert exported - {"RetrievalMetric", "RetrievalMetricBase"} == listed


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("make", CLASSES, ids=lambda f: type(f()).__name__)
def test_every_protocol_constructs_on_every_class(make, protocol):
    if isinstance(make(), rm.RecallAtK) and protocol in HIT_RATE_RECALL_PROTOCOLS:
        # these fields' Recall@K is the hit rate: the IR measure is refused under their name
        with pytest.raises(ValueError, match="the field's Recall@5 is the hit rate"):
            make(protocol=protocol)
        return
    metric = make(protocol=protocol)
    assert metric.protocol == protocol
    fixed, description = PROTOCOLS[protocol]
    assert description
    for name, value in fixed.items():
        assert getattr(metric, name) == value, (protocol, name)
    # what the protocol does not fix keeps the default, or the evaluator's own default of an
    # option it takes (image-text has no one-direction option)
    for name, value in DEFAULTS.items():
        if name in fixed or (isinstance(metric, rm.CrossModalRetrieval) and name in NOT_APPLICABLE):
            continue
        expected = PROTOCOL_DEFAULTS.get(protocol, {}).get(name, value)
        assert getattr(metric, name) == expected, (protocol, name)
    # and passing the protocol's own value explicitly is accepted (ignore_identical_ids is
    # passed with qrels= only, which these classes are made without)
    again = make(
        protocol=protocol, **{k: v for k, v in fixed.items() if k != "ignore_identical_ids"}
    )
    for name, value in fixed.items():
        assert getattr(again, name) == value


@pytest.mark.parametrize(
    ("protocol", "option"),
    [
        ("vsepp", {"similarity": "euclidean"}),
        ("vsepp", {"median": "plain"}),
        ("pml", {"empty_queries": "zero"}),
        ("pml", {"average": "micro"}),
        ("torchreid", {"ap": "trapezoid"}),
        ("torchreid", {"similarity": "dot"}),
        ("torchreid", {"ignore_label": -1}),
        ("market1501_official", {"ignore_label": -2}),
        ("market1501_official", {"empty_queries": "error"}),
        ("netvlad", {"radius": 10.0}),
        ("netvlad", {"empty_queries": "error"}),
        ("netvlad", {"similarity": "dot"}),
        ("msls", {"divisor": "retrieved"}),
        ("msls", {"radius": 50.0}),
        ("ann_benchmarks", {"ties": "pessimistic"}),
        ("trec_eval", {"empty_queries": "error"}),
        ("trec_eval", {"ties": "pessimistic"}),
    ],
)
def test_conflicting_explicit_option_raises(protocol, option):
    """An explicit option (other than the default) that differs from the protocol's raises."""
    name, value = next(iter(option.items()))
    fixed = PROTOCOLS[protocol][0]
    assert value != DEFAULTS[name] and fixed[name] != value
    with pytest.raises(ValueError, match=f"protocol='{protocol}' sets {name}"):
        apply_protocol(protocol, {name: value})
    with pytest.raises(ValueError, match=f"protocol='{protocol}' sets {name}"):
        rm.HitRateAtK(k=1, protocol=protocol, **option)


def test_unknown_protocol_and_none():
    with pytest.raises(ValueError, match="`protocol` must be one of"):
        rm.HitRateAtK(protocol="market1501")
    resolved = apply_protocol(None, {"ties": "pessimistic", "gain": None})
    assert resolved["ties"] == "pessimistic" and resolved["gain"] == "exponential"


def test_explicit_default_that_conflicts_raises():
    # a protocol never silently changes what you asked for, even the default value
    with pytest.raises(ValueError, match="sets gain"):
        rm.NDCGAtK(k=10, protocol="trec_eval", gain="exponential")
    with pytest.raises(ValueError, match="sets ignore_label"):
        rm.MeanAveragePrecision(protocol="market1501_official", ignore_label=None)
    assert rm.NDCGAtK(k=10, protocol="trec_eval", gain="linear").gain == "linear"


# ============================================================================================
# examples/fields.py
# ============================================================================================

FIELD_HEADINGS = [
    "image-text",
    "metric learning",
    "person re-identification",
    "visual place recognition",
    "ANN search",
    "RAG",
]


def test_fields_example_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for heading in FIELD_HEADINGS:
        assert f"== {heading}" in out, heading
    for needle in ("rsum", "R@1", "MAP@R", "mAP", "mINP", "recall@20", "1-recall@", "10-recall@10",
                   "hit@4", "NDCG@10"):  # fmt: skip
        assert needle in out, needle
    assert "nan" not in out.lower()
