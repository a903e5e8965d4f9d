"""Differential tests of the named protocols against each field's own evaluation code.

Peers (research/protocols.md sections 4, 6, 7 and 10):

* torchreid 0.2.5 ``evaluate_rank`` (``torchreid/reid/metrics/rank.py``, loaded alone by file
  path: the package itself imports OpenCV) for ``protocol="torchreid"``; fast-reid's mINP, which
  torchreid does not return, is written here from its definition;
* pytrec_eval (trec_eval 9.0.8), ranx and ir_measures for ``protocol="trec_eval"`` fed by
  :func:`trec_run_to_lists`;
* scikit-learn ``ndcg_score(ignore_ties=False)`` for tie-averaged graded NDCG;
* faiss exact kNN as the ground truth of ANN recall (faiss' ``1-recall@R`` and
  ann-benchmarks' ``k-recall@k``).

Every value is compared to 1e-6. Each difference in definition between a peer and our defaults
is written next to the test that meets it, with the option of ours that reproduces the peer.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import rank_embeddings, retrieval_measures
from retrieval_metrics.protocols import ann_benchmarks_ranks, trec_run_to_lists

TOL = 1e-6


def approx(value: float) -> object:
    return pytest.approx(value, abs=TOL, rel=TOL)


def values(metric) -> dict[str, float]:
    return {k: float(v) for k, v in metric.compute().items()}


# ============================================================================================
# 1. torchreid evaluate_rank (protocols.md 4.1, 4.2) -> protocol="torchreid"
# ============================================================================================
#
# torchreid eval_market1501 (use_cython=False), per query on an ascending distance matrix:
# - gallery items with the query's pid AND camera are removed (ours: cameras= on update);
# - a query with no remaining match is skipped: left out of the CMC and mAP denominators
#   (protocol sets empty_queries="skip");
# - CMC@k = share of valid queries whose first match is within k (our CMC(max_rank));
# - AP = sum_i rel(i) P(i) / #matches over the whole kept ranking: step AP (ap="step");
# - pid 0 (distractors) and pid -1 (junk, which torchreid drops at load time, not in the metric)
#   are ordinary non-matches: protocol sets ignore_label=None;
# - the distance is what the caller gives: a float64 Euclidean distmat here, so ours uses
#   similarity="euclidean" on the same float64 embeddings (the protocol does not fix it).
# - torchreid sums the CMC rows in float32; its value is within 1e-7 of the exact fraction.
# - if a kept list is shorter than max_rank, torchreid's Python path builds a ragged array; the
#   galleries below are far larger than max_rank.
# fast-reid mINP (not in torchreid): mean over valid queries of #matches / (1-based kept rank of
# the last match), i.e. our MINP with the same protocol.


def load_torchreid_rank():
    """torchreid's rank.py as a standalone module (numpy only), or skip."""
    spec = importlib.util.find_spec("torchreid")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchreid is not installed (pip install torchreid==0.2.5 --no-deps)")
    root = Path(next(iter(spec.submodule_search_locations)))
    for rel in ("reid/metrics/rank.py", "metrics/rank.py"):
        path = root / rel
        if path.is_file():
            break
    else:
        pytest.skip(f"torchreid's metrics/rank.py not found under {root}")
    module_spec = importlib.util.spec_from_file_location("_torchreid_rank_oracle", path)
    module = importlib.util.module_from_spec(module_spec)
    # rank.py tries the compiled Cython evaluator first; importing it would import the whole
    # torchreid package (and OpenCV). Make that import fail at once: the Python path is used.
    blocked = [
        "torchreid.reid.metrics.rank_cylib.rank_cy",
        "torchreid.metrics.rank_cylib.rank_cy",
    ]
    saved = {name: sys.modules.get(name) for name in blocked}
    try:
        for name in blocked:
            sys.modules[name] = None  # type: ignore[assignment]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module_spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


@pytest.fixture(scope="module")
def torchreid_rank():
    return load_torchreid_rank()


def fastreid_minp(distmat, q_pids, g_pids, q_camids, g_camids) -> float:
    """fast-reid's mINP (fastreid/evaluation/rank.py), from its definition."""
    indices = np.argsort(distmat, axis=1)
    all_inp = []
    for q in range(distmat.shape[0]):
        order = indices[q]
        keep = ~((g_pids[order] == q_pids[q]) & (g_camids[order] == q_camids[q]))
        raw_cmc = (g_pids[order][keep] == q_pids[q]).astype(np.int32)
        if not raw_cmc.any():
            continue
        cmc = raw_cmc.cumsum()
        max_pos_idx = np.max(np.where(raw_cmc == 1))
        all_inp.append(cmc[max_pos_idx] / (max_pos_idx + 1.0))
    return float(np.mean(all_inp))


def reid_data(seed: int, num_q: int, num_g: int, dim: int):
    """Clustered float64 embeddings with pids and cameras: pid 0 distractors and -1 junk in the
    gallery, query pids absent from the gallery, and a pid seen only by the query's camera."""
    rng = np.random.default_rng(seed)
    num_ids = max(num_q // 2, 4)
    centres = rng.normal(size=(num_ids + 10, dim))
    g_pids = rng.integers(-1, num_ids + 1, size=num_g)  # -1 junk, 0 distractor, 1..num_ids
    g_cams = rng.integers(0, 6, size=num_g)
    q_pids = rng.integers(1, num_ids + 4, size=num_q)  # ids above num_ids: not in the gallery
    q_cams = rng.integers(0, 6, size=num_q)
    # one identity whose gallery images all come from its query's camera: no valid match
    lone = num_ids + 5
    q_pids[0], q_cams[0] = lone, 3
    g_pids[:3], g_cams[:3] = lone, 3
    q = centres[q_pids] + 0.9 * rng.normal(size=(num_q, dim))
    g = centres[np.clip(g_pids, 0, None)] + 0.9 * rng.normal(size=(num_g, dim))
    return q, g, q_pids, g_pids, q_cams, g_cams


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("num_q", "num_g", "dim", "max_rank"), [(20, 150, 8, 10), (60, 500, 16, 50)]
)
def test_torchreid_cmc_map_minp(torchreid_rank, seed, num_q, num_g, dim, max_rank):
    q, g, q_pids, g_pids, q_cams, g_cams = reid_data(seed, num_q, num_g, dim)
    distmat = ((q[:, None, :] - g[None, :, :]) ** 2).sum(-1)  # float64, ascending = better
    cmc, m_ap = torchreid_rank.evaluate_rank(
        distmat, q_pids, g_pids, q_cams, g_cams, max_rank=max_rank, use_cython=False
    )
    minp = fastreid_minp(distmat, q_pids, g_pids, q_cams, g_cams)

    # protocol="torchreid" alone: it ranks by euclidean distance, torchreid's default
    metric = rm.RetrievalMetrics([f"cmc@{max_rank}", "map", "minp"], protocol="torchreid")
    single = [
        rm.CMC(max_rank=max_rank, protocol="torchreid"),
        rm.MeanAveragePrecision(protocol="torchreid"),
        rm.MINP(protocol="torchreid"),
    ]
    for m in [metric, *single]:
        # two query batches, to exercise accumulation
        half = num_q // 2
        for sl in (slice(0, half), slice(half, None)):
            m.update(
                torch.from_numpy(q[sl]),
                torch.from_numpy(q_pids[sl]),
                role="query",
                cameras=torch.from_numpy(q_cams[sl]),
            )
        m.update(
            torch.from_numpy(g),
            torch.from_numpy(g_pids),
            role="gallery",
            cameras=torch.from_numpy(g_cams),
        )
    got = metric.compute()
    np.testing.assert_allclose(got[f"cmc@{max_rank}"].numpy(), cmc, atol=TOL, rtol=0)
    assert float(got["map"]) == approx(m_ap)
    assert float(got["minp"]) == approx(minp)
    np.testing.assert_allclose(single[0].compute().numpy(), cmc, atol=TOL, rtol=0)
    assert float(single[1].compute()) == approx(m_ap)
    assert float(single[2].compute()) == approx(minp)
    # the data really holds skipped queries (no valid match), as the protocol requires
    table = metric.rank_table()
    assert int((table.num_relevant == 0).sum()) >= 1


# T13 (protocols.md section 10): q_pids [1, 2, 3], q_cams [0, 0, 1];
# g_pids [1, 1, 2, 0, 2, 1, -1, 3], g_cams [0, 1, 1, 2, 0, 2, 1, 1]; the distmat below.
# Sorted kept rows (same pid + same camera removed):
#   q1 (pid 1, cam 0): g6 g3 g2 g1 g5 g7 g4 (g0 removed): matches at ranks 4, 5
#       AP = (1/4 + 2/5) / 2 = 0.325; INP = 2/5
#   q2 (pid 2, cam 0): g3 g5 g0 g6 g1 g7 g2 (g4 removed): match at rank 7: AP = 1/7; INP = 1/7
#   q3 (pid 3, cam 1): its only match g7 is same camera: skipped.
# CMC@1..5 = [0, 0, 0, 1/2, 1/2]; mAP = (0.325 + 1/7) / 2 = 0.233929; mINP = (0.4 + 1/7) / 2
# = 0.271429.
T13_DIST = np.array(
    [
        [0.1, 0.5, 0.3, 0.2, 0.9, 0.7, 0.05, 0.8],
        [0.4, 0.6, 0.9, 0.1, 0.2, 0.3, 0.5, 0.7],
        [0.3, 0.2, 0.1, 0.4, 0.5, 0.6, 0.7, 0.05],
    ]
)
T13_Q_PIDS, T13_Q_CAMS = np.array([1, 2, 3]), np.array([0, 0, 1])
T13_G_PIDS = np.array([1, 1, 2, 0, 2, 1, -1, 3])
T13_G_CAMS = np.array([0, 1, 1, 2, 0, 2, 1, 1])


def t13_embeddings() -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings whose squared Euclidean distances are 2 * T13_DIST + const.

    Query i = (e_i, 0); gallery j = (-D[:, j], s_j) with s_j = sqrt(C - |D[:, j]|^2), so every
    gallery row has norm^2 C and |q_i - g_j|^2 = 1 + C + 2 D[i, j]: the same order per query.
    """
    g = -T13_DIST.T
    c = float((g**2).sum(1).max()) + 1.0
    g = np.concatenate([g, np.sqrt(c - (g**2).sum(1))[:, None]], 1)
    q = np.concatenate([np.eye(3), np.zeros((3, 1))], 1)
    return torch.from_numpy(q), torch.from_numpy(g)


def test_t13_torchreid(torchreid_rank):
    cmc, m_ap = torchreid_rank.evaluate_rank(
        T13_DIST, T13_Q_PIDS, T13_G_PIDS, T13_Q_CAMS, T13_G_CAMS, max_rank=5, use_cython=False
    )
    np.testing.assert_allclose(cmc, [0, 0, 0, 0.5, 0.5], atol=TOL)
    assert m_ap == approx(0.233929)
    assert fastreid_minp(T13_DIST, T13_Q_PIDS, T13_G_PIDS, T13_Q_CAMS, T13_G_CAMS) == approx(
        0.271429
    )

    # (a) embeddings that reproduce the distmat's order, with cameras: the protocol removes the
    # same-pid-same-camera items itself.
    q, g = t13_embeddings()
    m = rm.RetrievalMetrics(["cmc@5", "map", "minp"], protocol="torchreid")
    m.update(q, torch.from_numpy(T13_Q_PIDS), role="query", cameras=torch.from_numpy(T13_Q_CAMS))
    m.update(g, torch.from_numpy(T13_G_PIDS), role="gallery", cameras=torch.from_numpy(T13_G_CAMS))
    got = m.compute()
    np.testing.assert_allclose(got["cmc@5"].numpy(), cmc, atol=TOL)
    assert float(got["map"]) == approx(m_ap)
    assert float(got["minp"]) == approx(0.271429)
    assert m.rank_table().num_relevant.tolist() == [2, 1, 0]

    # (b) torchmetrics' form: preds = -distance, the same-pid-same-camera entries removed by hand
    # (preds/target/indexes carries no cameras).
    preds, target, indexes = [], [], []
    for i in range(3):
        for j in range(8):
            same_pid = T13_G_PIDS[j] == T13_Q_PIDS[i]
            if same_pid and T13_G_CAMS[j] == T13_Q_CAMS[i]:
                continue
            preds.append(-T13_DIST[i, j])
            target.append(int(same_pid))
            indexes.append(i)
    m2 = rm.RetrievalMetrics(["cmc@5", "map", "minp"], protocol="torchreid")
    m2.update(preds=torch.tensor(preds), target=torch.tensor(target), indexes=torch.tensor(indexes))
    got2 = m2.compute()
    np.testing.assert_allclose(got2["cmc@5"].numpy(), cmc, atol=TOL)
    assert float(got2["map"]) == approx(m_ap)
    assert float(got2["minp"]) == approx(0.271429)


# ============================================================================================
# 2. trec_eval (pytrec_eval), ranx and ir_measures (protocols.md 7.1-7.3) -> "trec_eval"
# ============================================================================================
#
# Ours: trec_run_to_lists(run, qrels) -> update(ranked_ids=..., relevant_ids=...) on
# RetrievalMetrics([...], protocol="trec_eval"). Names:
#   pytrec_eval P_k / ranx precision@k           -> precision@k (divides by k, short runs too)
#   recall_k / recall@k                           -> recall@k (m_q = all judged relevant docs)
#   recip_rank / mrr                              -> mrr (no cut-off)
#   map / map                                     -> map (step AP over the run, divided by m_q)
#   ndcg_cut_k / ndcg@k (linear gain = grade)     -> ndcg@k with gain="linear" (set by protocol)
#   ranx ndcg_burges@k (gain 2^g - 1)             -> ndcg@k with gain="exponential" (no protocol)
#   Rprec / r-precision                           -> r_precision
#   success_k / hit_rate@k                        -> hit_rate@k
# Queries: ours are the qrels' queries; one missing from the run scores 0 and one with no relevant
# document scores 0 (empty_queries="zero"): trec_eval -c, ranx make_comparable=True and
# ir_measures. pytrec_eval returns per-query values only (missing run queries absent), so its
# mean here is sum / number of qrels queries (= -c). Run queries without qrels are dropped by all.
# Ties: trec_eval orders tied scores by docno descending (T1, T6); ranx's tie order is
# implementation-defined, so the random runs have distinct scores.

TREC_KS = (1, 3, 5, 10)


def trec_names(ks=TREC_KS) -> list[str]:
    names = ["mrr", "map", "r_precision", "ndcg"]
    for k in ks:
        names += [f"precision@{k}", f"recall@{k}", f"ndcg@{k}", f"hit_rate@{k}"]
    return names


def pytrec_key(name: str) -> str:
    simple = {"mrr": "recip_rank", "map": "map", "r_precision": "Rprec", "ndcg": "ndcg"}
    if name in simple:
        return simple[name]
    base, k = name.split("@")
    return {"precision": "P", "recall": "recall", "ndcg": "ndcg_cut", "hit_rate": "success"}[
        base
    ] + f"_{k}"


def ranx_key(name: str) -> str:
    simple = {"mrr": "mrr", "map": "map", "r_precision": "r-precision", "ndcg": "ndcg"}
    return simple.get(name, name)


def ours_trec(run, qrels, names, **options) -> tuple[dict[str, float], dict[str, list[float]]]:
    ranked, relevant, _ = trec_run_to_lists(run, qrels)
    m = rm.RetrievalMetrics(names, protocol="trec_eval", **options)
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    per_query = {
        k: [0.0 if math.isnan(x) else x for x in v.tolist()] for k, v in m.per_query().items()
    }
    return values(m), per_query


def pytrec_eval_values(run, qrels, names) -> tuple[dict[str, float], dict[str, list[float]]]:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    ks = ",".join(str(k) for k in TREC_KS)
    measures = {"recip_rank", "map", "Rprec", "ndcg", f"P.{ks}", f"recall.{ks}",
                f"ndcg_cut.{ks}", f"success.{ks}"}  # fmt: skip
    result = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    qids = sorted(qrels)
    per_query = {
        name: [result[q][pytrec_key(name)] if q in result else 0.0 for q in qids] for name in names
    }
    return {n: sum(v) / len(qids) for n, v in per_query.items()}, per_query


def random_trec(seed: int, num_q: int, num_docs: int, run_len: int, ties: bool = False):
    """qrels with grades -1..3 (-1, as for spam: not relevant, no gain) and some queries with
    nothing relevant; a run over judged and unjudged docs; one qrels query missing from the run
    and one run query missing from the qrels. Scores are distinct, or (``ties``) take 4 values,
    with docnos whose byte order differs from numeric and length order ("9" > "10")."""
    rng = np.random.default_rng(seed)
    if ties:
        docs = [
            str(i) if i % 3 == 0 else f"doc-{i}" if i % 3 == 1 else "d" + "x" * (i % 5) + str(i % 7)
            for i in range(num_docs)
        ]
    else:
        docs = [f"doc-{i:03d}" if i % 3 else f"D{i}" for i in range(num_docs)]
    assert len(set(docs)) == num_docs
    qrels, run = {}, {}
    for q in range(num_q):
        qid = f"q{q}"
        judged = rng.choice(num_docs, size=int(rng.integers(1, 12)), replace=False)
        grades = rng.integers(-1, 4, size=judged.size) if q % 4 else np.zeros(judged.size, int)
        qrels[qid] = {docs[d]: int(gr) for d, gr in zip(judged, grades, strict=True)}
        n = int(rng.integers(1, run_len + 1))
        pool = np.unique(np.concatenate([judged, rng.choice(num_docs, size=n, replace=False)]))
        picked = rng.permutation(pool)[:n]
        if ties:
            scores = rng.integers(0, 4, size=picked.size) / 2.0
        else:
            scores = rng.permutation(10 * num_docs)[: picked.size] / 7.0  # distinct
        run[qid] = {docs[d]: float(s) for d, s in zip(picked, scores, strict=True)}
    run.pop("q1")  # in the qrels, not in the run: 0 (trec_eval -c)
    run["extra"] = {docs[0]: 1.0}  # in the run, not in the qrels: dropped
    return run, qrels


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(
    ("seed", "num_q", "num_docs", "run_len"), [(0, 12, 40, 15), (1, 30, 80, 25)]
)
def test_trec_eval_pytrec_eval(seed, num_q, num_docs, run_len, ties):
    """With ties, trec_eval's docno-descending order (trec_run_to_lists) must match exactly."""
    run, qrels = random_trec(seed, num_q, num_docs, run_len, ties)
    names = trec_names()
    ours, ours_q = ours_trec(run, qrels, names)
    ref, ref_q = pytrec_eval_values(run, qrels, names)
    for name in names:
        np.testing.assert_allclose(ours_q[name], ref_q[name], atol=1e-9, err_msg=name)
        assert ours[name] == approx(ref[name]), name


@pytest.mark.parametrize(
    ("seed", "num_q", "num_docs", "run_len"), [(2, 12, 40, 15), (3, 30, 80, 25)]
)
def test_trec_eval_ranx(seed, num_q, num_docs, run_len):
    ranx = pytest.importorskip("ranx")
    run, qrels = random_trec(seed, num_q, num_docs, run_len)
    # f1@k: ranx's 2PR/(P+R) with P = hits/k (issue 29: equal to ranx on this oracle data)
    names = [*trec_names((1, 5, 10)), "f1@1", "f1@5", "f1@10"]
    ranx_names = [ranx_key(n) for n in names] + ["ndcg_burges@5", "ndcg_burges@10"]
    run_ranx = {q: d for q, d in run.items() if d}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run_ranx), ranx_names, make_comparable=True)
    ours, _ = ours_trec(run, qrels, names)
    for name in names:
        assert ours[name] == approx(float(ref[ranx_key(name)])), name
    # ndcg_burges: exponential gain, our default gain (so no protocol; every other option of the
    # protocol is irrelevant to ranked lists without ties except empty_queries="zero").
    ranked, relevant, _ = trec_run_to_lists(run, qrels)
    m = rm.RetrievalMetrics(["ndcg@5", "ndcg@10"], gain="exponential", empty_queries="zero")
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    got = values(m)
    assert got["ndcg@5"] == approx(float(ref["ndcg_burges@5"]))
    assert got["ndcg@10"] == approx(float(ref["ndcg_burges@10"]))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("seed", "num_q", "num_docs", "run_len"), [(4, 20, 60, 20)])
def test_set_measures_match_pytrec_eval(seed, num_q, num_docs, run_len, ties):
    """precision, recall and f1 without a cut-off are trec_eval's set_P, set_recall and set_F
    (beta 1) over every document the run returned, per query and on average."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = random_trec(seed, num_q, num_docs, run_len, ties)
    ranked, relevant, qids = trec_run_to_lists(run, qrels)
    m = rm.RetrievalMetrics(["precision", "recall", "f1"], protocol="trec_eval")
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    ours = {k: [0.0 if math.isnan(x) else x for x in v.tolist()] for k, v in m.per_query().items()}
    result = pytrec_eval.RelevanceEvaluator(qrels, {"set_P", "set_recall", "set_F"}).evaluate(run)
    for name, key in (("precision", "set_P"), ("recall", "set_recall"), ("f1", "set_F")):
        ref = [result[q][key] if q in result else 0.0 for q in qids]
        np.testing.assert_allclose(ours[name], ref, atol=1e-9, err_msg=name)
        assert float(m.compute()[name]) == approx(sum(ref) / len(qids)), name


def test_t1_trec_eval_tie_order():
    """T1: qrels {a: 0, b: 1, c: 0}. run1 b = a = 1.0: docno descending puts b first (ndcg 1,
    P_1 1, recip_rank 1); run2 b = c = 1.0 puts c first (ndcg 0.6309, P_1 0, recip_rank 0.5)."""
    qrels = {"1": {"a": 0, "b": 1, "c": 0}}
    names = ["ndcg", "precision@1", "mrr"]
    expected = {
        "run1": {"ndcg": 1.0, "precision@1": 1.0, "mrr": 1.0},
        "run2": {"ndcg": 1 / math.log2(3), "precision@1": 0.0, "mrr": 0.5},
    }
    runs = {"run1": {"1": {"b": 1.0, "a": 1.0}}, "run2": {"1": {"b": 1.0, "c": 1.0}}}
    for label, run in runs.items():
        assert trec_run_to_lists(run, qrels)[0] == [["b", "a"] if label == "run1" else ["c", "b"]]
        ours, _ = ours_trec(run, qrels, names)
        ref, _ = pytrec_eval_values(run, qrels, names)
        for name in names:
            assert ours[name] == approx(expected[label][name]), (label, name)
            assert ref[name] == approx(expected[label][name]), (label, name)


def test_t6_numeric_docnos_tied():
    """T6: qrels {"10": 1}, run "9" = "10" = "2" = 1.0. Byte order descending: "9" > "2" > "10",
    so "10" is third: P_1 0, recip_rank 1/3 (ranx: 0.5, its own tie order)."""
    qrels, run = {"q": {"10": 1}}, {"q": {"9": 1.0, "10": 1.0, "2": 1.0}}
    assert trec_run_to_lists(run, qrels)[0] == [["9", "2", "10"]]
    names = ["precision@1", "mrr"]
    ours, _ = ours_trec(run, qrels, names)
    ref, _ = pytrec_eval_values(run, qrels, names)
    assert ours == {"precision@1": approx(0.0), "mrr": approx(1 / 3)}
    assert ref == {"precision@1": approx(0.0), "mrr": approx(1 / 3)}


def test_t3_missing_and_empty_queries():
    """T3: qrels q1 {d1: 1}, q2 {d1: 0, d2: 0}, q3 {d7: 1}; run q1 {d1: 1, d2: 0.5}, q2 {d1: 1},
    q4 {d1: 1}. Per query (pytrec_eval): q1 map 1, P_5 0.2, recall_5 1; q2 all 0 (no relevant);
    q3 absent (not in the run); q4 absent (not in the qrels). trec_eval -c averages over the 3
    qrels queries: map 1/3, P@5 0.2/3 = 0.0667; ir_measures agrees (and ranx with
    make_comparable=True, measured in protocols.md T3; not rerun here: its JIT compile of new
    input shapes costs ~15 s). Ours: empty_queries="zero" (set by the protocol) and q3's empty
    list."""
    qrels = {"q1": {"d1": 1}, "q2": {"d1": 0, "d2": 0}, "q3": {"d7": 1}}
    run = {"q1": {"d1": 1.0, "d2": 0.5}, "q2": {"d1": 1.0}, "q4": {"d1": 1.0}}
    ranked, _, qids = trec_run_to_lists(run, qrels)
    assert qids == ["q1", "q2", "q3"] and ranked == [["d1", "d2"], ["d1"], []]
    names = ["map", "precision@5", "recall@5", "mrr", "ndcg@5", "hit_rate@5"]
    ours, ours_q = ours_trec(run, qrels, names)
    expected = {"map": 1 / 3, "precision@5": 0.2 / 3, "recall@5": 1 / 3, "mrr": 1 / 3,
                "ndcg@5": 1 / 3, "hit_rate@5": 1 / 3}  # fmt: skip
    assert ours == {k: approx(v) for k, v in expected.items()}
    assert ours_q["map"] == [1.0, 0.0, 0.0]
    ref, _ = pytrec_eval_values(run, qrels, names)
    assert ref == {k: approx(v) for k, v in expected.items()}

    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import AP, RR, P, R, Success, nDCG

    agg = ir_measures.calc_aggregate([AP, P @ 5, R @ 5, RR, nDCG @ 5, Success @ 5], qrels, run)
    assert {str(k): v for k, v in agg.items()} == {
        "AP": approx(expected["map"]),
        "P@5": approx(expected["precision@5"]),
        "R@5": approx(expected["recall@5"]),
        "RR": approx(expected["mrr"]),
        "nDCG@5": approx(expected["ndcg@5"]),
        "Success@5": approx(expected["hit_rate@5"]),
    }


# ============================================================================================
# 3. scikit-learn ndcg_score (tie-averaged NDCG, McSherry & Najork)
# ============================================================================================
#
# sklearn ndcg_score(y_true, y_score, k, ignore_ties=False): linear gain (the grade), DCG averaged
# over the orders of tied scores, IDCG from the true grades; a query whose grades are all 0 scores
# 0. Ours: update(preds=, target=, indexes=) with ties="expected", gain="linear" and
# empty_queries="zero". sklearn takes one query (a 1 x n row) per call; we average the calls.


@pytest.mark.parametrize(("seed", "num_q", "max_items", "k"), [(0, 15, 12, 5), (1, 40, 30, 10)])
def test_sklearn_ndcg_tie_averaged(seed, num_q, max_items, k):
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(seed)
    preds, target, indexes, ref = [], [], [], []
    for q in range(num_q):
        n = int(rng.integers(2, max_items + 1))
        score = np.round(rng.random(n) * 4) / 4  # 5 levels: many ties
        grade = rng.integers(0, 4, size=n) * (rng.random(n) < 0.5)
        ref.append(ndcg_score(grade[None, :], score[None, :], k=k, ignore_ties=False))
        preds.append(score)
        target.append(grade)
        indexes.append(np.full(n, q))
    m = rm.NDCGAtK(k=k, ties="expected", gain="linear", empty_queries="zero")
    m.update(
        preds=torch.from_numpy(np.concatenate(preds)),
        target=torch.from_numpy(np.concatenate(target)),
        indexes=torch.from_numpy(np.concatenate(indexes)),
    )
    assert float(m.compute()) == approx(float(np.mean(ref)))
    per_query = np.nan_to_num(m.per_query()[f"ndcg@{k}"].numpy(), nan=0.0)
    np.testing.assert_allclose(per_query, ref, atol=1e-9)


# ============================================================================================
# 4. ANN recall against faiss exact kNN (protocols.md section 6, T16)
# ============================================================================================
#
# Ground truth: faiss.IndexFlatL2 (exact). Two "approximate" systems: an IVF index
# (faiss.IndexIVFFlat, nprobe=1) and exhaustive search over fewer dimensions (a crude
# compression). Integer-valued embeddings (|x| <= 300, d = 8) keep every squared distance an
# integer below 2^24, so faiss' float32 and our float64 distances are exact and equal.
# - 1-recall@R (Jegou et al.; faiss benchs: (I[:, :R] == gt[:, :1]).sum() / nq) is our hit rate
#   @R with the true first neighbour as the one relevant id: relevance="ids" with
#   rank_embeddings for the compressed search, ranked_ids for the IVF run.
# - k-recall@k of ann-benchmarks counts a returned item (among the first k) whose TRUE distance
#   (recomputed by the harness) is <= the k-th true distance + 1e-3: ann_benchmarks_ranks feeds
#   RecallAtK(k, protocol="ann_benchmarks") through update(relevant_ranks=, num_relevant=).
# - faiss knn_intersection_measure (|run top-k & true top-k| / k, no tie tolerance) is plain
#   recall@k with the true top-k ids as relevant.


def ann_data(seed: int, num_q: int, num_g: int, dim: int = 8):
    rng = np.random.default_rng(seed)
    centres = rng.integers(-200, 201, size=(8, dim))
    g = np.clip(
        centres[rng.integers(0, 8, num_g)] + rng.integers(-100, 101, (num_g, dim)), -300, 300
    )
    q = np.clip(
        centres[rng.integers(0, 8, num_q)] + rng.integers(-100, 101, (num_q, dim)), -300, 300
    )
    return q.astype(np.float32), g.astype(np.float32)


def ann_benchmarks_recall(dataset_distances, run_distances, count, epsilon=1e-3) -> float:
    """ann-benchmarks plotting/metrics.py get_recall_values with knn_threshold, by hand."""
    recalls = np.zeros(len(run_distances))
    for i in range(len(run_distances)):
        t = dataset_distances[i][count - 1] + epsilon
        recalls[i] = sum(1 for d in run_distances[i][:count] if d <= t)
    return float(np.mean(recalls) / float(count))


@pytest.mark.parametrize(("seed", "num_q", "num_g"), [(0, 60, 1500), (1, 120, 3000)])
def test_faiss_ann_recall(seed, num_q, num_g):
    faiss = pytest.importorskip("faiss")
    from faiss.contrib.evaluation import knn_intersection_measure

    q, g = ann_data(seed, num_q, num_g)
    dim, depth, k = q.shape[1], 100, 10
    exact = faiss.IndexFlatL2(dim)
    exact.add(g)
    true_sq, true_ids = exact.search(q, depth)
    true_d = np.sqrt(true_sq.astype(np.float64))
    assert (true_sq[:, 0] < true_sq[:, 1]).all()  # a unique true first neighbour

    # --- compressed search: the first 5 dimensions only -> relevance="ids"
    cut = 5
    comp = faiss.IndexFlatL2(cut)
    comp.add(np.ascontiguousarray(g[:, :cut]))
    _, comp_ids = comp.search(np.ascontiguousarray(q[:, :cut]), depth)
    table = rank_embeddings(
        torch.from_numpy(q[:, :cut]).double(),
        torch.from_numpy(g[:, :cut]).double(),
        relevance="ids",
        relevant_ids=[[int(i)] for i in true_ids[:, 0]],
        similarity="euclidean",
    )
    assert int(table.tied.max()) == 1  # no tie touches the true neighbour: faiss' order is ours
    for r in (1, 10, 100):
        faiss_1r = float((comp_ids[:, :r] == true_ids[:, :1]).sum() / num_q)
        got = retrieval_measures(table, [f"hit_rate@{r}"])[f"hit_rate@{r}"]
        assert float(got) == approx(faiss_1r), r
    # the exact ranking finds faiss' ground truth: 1-recall@1 = 1 and recall@k of the true top k
    exact_table = rank_embeddings(
        torch.from_numpy(q).double(),
        torch.from_numpy(g).double(),
        relevance="ids",
        relevant_ids=[[int(i)] for i in true_ids[:, 0]],
        similarity="euclidean",
    )
    assert float(retrieval_measures(exact_table, ["hit_rate@1"])["hit_rate@1"]) == 1.0

    # --- IVF run -> ranked_ids
    nlist = 32
    quantizer = faiss.IndexFlatL2(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist)
    ivf.train(g)
    ivf.add(g)
    ivf.nprobe = 1
    _, run_ids = ivf.search(q, depth)
    ranked = [[int(i) for i in row if i >= 0] for row in run_ids]
    ones = rm.HitRateAtK(k=(1, 10, 100), protocol="ann_benchmarks")
    ones.update(ranked_ids=ranked, relevant_ids=[[int(i)] for i in true_ids[:, 0]])
    got = values(ones)
    for r in (1, 10, 100):
        faiss_1r = float((run_ids[:, :r] == true_ids[:, :1]).sum() / num_q)
        assert got[f"hit_rate@{r}"] == approx(faiss_1r), r
    assert got["hit_rate@1"] < 1.0  # the IVF run really is approximate

    # k-recall@k, ann-benchmarks: true distances of the returned ids, recomputed from the data
    run_d = np.full((num_q, k), np.inf)
    for i, row in enumerate(ranked):
        ids = np.array(row[:k])
        diff = g[ids].astype(np.float64) - q[i].astype(np.float64)
        run_d[i, : ids.size] = np.sqrt((diff**2).sum(1))
    expected = ann_benchmarks_recall(true_d, run_d, k)
    ranks, num_relevant = ann_benchmarks_ranks(torch.from_numpy(run_d), torch.from_numpy(true_d), k)
    rec = rm.RecallAtK(k=k, protocol="ann_benchmarks")
    rec.update(relevant_ranks=ranks, num_relevant=num_relevant)
    assert float(rec.compute()) == approx(expected)
    # plain intersection recall (faiss), which ties at the k-th distance can only lower
    inter = rm.RecallAtK(k=k, protocol="ann_benchmarks")
    inter.update(ranked_ids=ranked, relevant_ids=[[int(i) for i in row[:k]] for row in true_ids])
    padded = np.array([(row + [-1] * k)[:k] for row in ranked])
    assert float(inter.compute()) == approx(knn_intersection_measure(padded, true_ids[:, :k]))
    assert float(inter.compute()) <= expected + TOL


def test_t16_ann():
    """T16: true ids [10, 11, 12, 13] at distances [1, 2, 2, 3]; the run returns [10, 12] at
    [1, 2]; k = 2. Intersection |{10, 12} & {10, 11}| / 2 = 0.5; ann-benchmarks: both returned
    distances <= 2 + 1e-3, so 2 / 2 = 1.0; 1-recall@1 = 1-recall@2 = 1 (10 is first)."""
    assert ann_benchmarks_recall([[1.0, 2.0, 2.0, 3.0]], [[1.0, 2.0]], 2) == 1.0
    ranks, num_relevant = ann_benchmarks_ranks([[1.0, 2.0]], [[1.0, 2.0, 2.0, 3.0]], 2)
    assert ranks == [[1, 2]] and num_relevant == [2]
    ab = rm.RecallAtK(k=2, protocol="ann_benchmarks")
    ab.update(relevant_ranks=ranks, num_relevant=num_relevant)
    assert float(ab.compute()) == approx(1.0)
    inter = rm.RecallAtK(k=2, protocol="ann_benchmarks")
    inter.update(ranked_ids=[[10, 12]], relevant_ids=[[10, 11]])
    assert float(inter.compute()) == approx(0.5)
    one = rm.HitRateAtK(k=(1, 2), protocol="ann_benchmarks")
    one.update(ranked_ids=[[10, 12]], relevant_ids=[[10]])
    assert values(one) == {"hit_rate@1": approx(1.0), "hit_rate@2": approx(1.0)}
    # epsilon is absolute: a run distance 2.0005 still counts, 2.0015 does not
    assert ann_benchmarks_ranks([[1.0, 2.0005]], [[1.0, 2.0, 2.0, 3.0]], 2)[0] == [[1, 2]]
    assert ann_benchmarks_ranks([[1.0, 2.0015]], [[1.0, 2.0, 2.0, 3.0]], 2)[0] == [[1]]


@pytest.mark.parametrize(
    ("run", "true", "name"),
    [
        ([[1.0], [1.0, 2.0]], [[1.0, 2.0], [1.0, 2.0]], "run_distances"),
        ([[1.0, 2.0]], [["a", "b"]], "true_distances"),
    ],
)
def test_ann_ragged_or_non_numeric_distances_name_the_argument(run, true, name):
    with pytest.raises(ValueError, match=f"`{name}` must be a \\(queries, items\\) matrix"):
        ann_benchmarks_ranks(run, true, 2)
