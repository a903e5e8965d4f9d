"""The metric classes: torchmetrics contract, every input form, batch splits, errors."""

from __future__ import annotations

import itertools
import pickle
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from reference import reference_masks, reference_median_rank, reference_query, reference_scores

torch.manual_seed(0)
EMB = torch.randint(-1, 2, (40, 4)).float()  # integer embeddings: exact ties
LABELS = torch.randint(0, 6, (40,))
# small enough for the reference to enumerate every tie order, still with ties
SMALL = torch.randint(-3, 4, (12, 4), generator=torch.Generator().manual_seed(1)).float()
SMALL_LABELS = torch.randint(0, 4, (12,), generator=torch.Generator().manual_seed(2))
ALL = [
    "hit_rate@1",
    "hit_rate@4",
    "recall@3",
    "precision@2",
    "r_precision",
    "map@r",
    "map",
    "map@5",
    "mrr",
    "mrr@3",
    "ndcg@4",
    "cmc@3",
    "median_rank",
    "mean_rank",
    "minp",
]


def reference_values(emb, labels, ties="expected"):
    """Brute force: full score matrix, every permutation of ties, means over answerable queries."""
    e = emb.double().numpy()
    lab = labels.numpy()
    scores = reference_scores(e, e, "dot")
    relevant, excluded = reference_masks(
        len(e), len(e), query_labels=lab, gallery_labels=lab, same_source=True
    )
    rows = [reference_query(scores[q], relevant[q], excluded[q], ties=ties) for q in range(len(e))]
    rows = [r for r in rows if r is not None]
    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    firsts = np.array([r["first_rank"] for r in rows])
    return {
        "hit_rate@1": mean("hit_rate@1"),
        "hit_rate@4": mean("hit_rate@4"),
        "recall@3": mean("recall@3"),
        "precision@2": mean("precision@2"),
        "r_precision": mean("r_precision"),
        "map@r": mean("map@r"),
        "map": mean("ap"),
        "map@5": mean("ap@5/relevant"),
        "mrr": mean("rr"),
        "mrr@3": mean("rr@3"),
        "ndcg@4": mean("ndcg@4/exponential"),
        "cmc@3": np.mean([r["cmc"][:3] for r in rows], axis=0),
        "median_rank": reference_median_rank(firsts),
        "mean_rank": float(firsts.mean()),
        "minp": mean("minp"),
    }


def test_retrieval_metrics_against_brute_force():
    emb, labels = SMALL, SMALL_LABELS
    metric = rm.RetrievalMetrics(ALL, similarity="dot")
    metric.update(emb, labels)
    out = metric.compute()
    ref = reference_values(emb, labels)
    for name in ALL:
        np.testing.assert_allclose(out[name].numpy(), ref[name], atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    ("metric", "name"),
    [
        (rm.HitRateAtK(k=4, similarity="dot"), "hit_rate@4"),
        (rm.RecallAtK(k=3, similarity="dot"), "recall@3"),
        (rm.PrecisionAtK(k=2, similarity="dot"), "precision@2"),
        (rm.RPrecision(similarity="dot"), "r_precision"),
        (rm.MAPAtR(similarity="dot"), "map@r"),
        (rm.MeanAveragePrecision(similarity="dot"), "map"),
        (rm.MeanAveragePrecision(k=5, similarity="dot"), "map@5"),
        (rm.MRR(similarity="dot"), "mrr"),
        (rm.NDCGAtK(k=4, similarity="dot"), "ndcg@4"),
        (rm.CMC(max_rank=3, similarity="dot"), "cmc@3"),
        (rm.MedianRank(similarity="dot"), "median_rank"),
        (rm.MeanRank(similarity="dot"), "mean_rank"),
        (rm.MINP(similarity="dot"), "minp"),
    ],
)
def test_each_class_returns_one_tensor(metric, name):
    metric.update(SMALL, SMALL_LABELS)
    value = metric.compute()
    assert isinstance(value, torch.Tensor)
    assert value.dim() == (1 if name.startswith("cmc") else 0)
    np.testing.assert_allclose(
        value.numpy(), reference_values(SMALL, SMALL_LABELS)[name], atol=1e-6
    )


def test_several_k_give_a_dict_and_ranks_are_lower_is_better():
    m = rm.HitRateAtK(k=(1, 2, 4, 8))
    m.update(EMB, LABELS)
    assert list(m.compute()) == ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8"]
    assert rm.MedianRank.higher_is_better is False and rm.MeanRank.higher_is_better is False
    assert rm.HitRateAtK.higher_is_better is True and rm.HitRateAtK.full_state_update is False
    assert rm.HitRateAtK.is_differentiable is False
    assert rm.MAPAtR().plot_upper_bound == 1.0


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6))
def test_batch_split_does_not_change_the_result(sizes):
    whole = rm.RetrievalMetrics(ALL)
    whole.update(EMB, LABELS)
    parts = rm.RetrievalMetrics(ALL)
    start = 0
    for size in sizes:
        if start >= 40:
            break
        parts.update(EMB[start : start + size], LABELS[start : start + size])
        start += size
    if start < 40:
        parts.update(EMB[start:], LABELS[start:])
    a, b = whole.compute(), parts.compute()
    for name in a:
        torch.testing.assert_close(a[name], b[name], equal_nan=True)


def test_query_gallery_roles_and_fixed_gallery_agree():
    q, g = EMB[:10], EMB[10:]
    ql, gl = LABELS[:10], LABELS[10:]
    roles = rm.RetrievalMetrics(ALL)
    roles.update(g[:15], gl[:15], role="gallery")
    roles.update(q, ql, role="query")
    roles.update(g[15:], gl[15:], role="gallery")
    fixed = rm.RetrievalMetrics(ALL)
    fixed.set_gallery(g, gl)
    fixed.update(q[:4], ql[:4], role="query")
    fixed.update(q[4:], ql[4:], role="query")
    # the fixed-gallery form keeps the queries as given; never the gallery
    assert fixed.g_emb == [] and torch.equal(torch.cat(fixed.q_emb), q)
    a, b = roles.compute(), fixed.compute()
    for name in a:
        torch.testing.assert_close(a[name], b[name], equal_nan=True)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000), n_q=st.integers(1, 30), n_g=st.integers(1, 50),
    cuts=st.lists(st.integers(0, 30), max_size=4), repeats=st.integers(0, 5),
    g_repeats=st.integers(0, 5), cameras=st.booleans(), ignore=st.booleans(),
    codes=st.booleans(),
)
def test_a_fixed_gallery_ranks_the_queries_of_any_updates_as_a_gallery_in_updates(
    seed, n_q, n_g, cuts, repeats, g_repeats, cameras, ignore, codes
):
    """Queries against a gallery given once, in updates cut anywhere, a few of them given
    again (the same id and embedding: a sampler's padding), a few gallery items given twice
    too, re-identification's cameras or an ignored label, binary codes full of ties: every
    per-query value and the mean are those of the same gallery given in updates (where a
    repeated item is kept once)."""
    gen = torch.Generator().manual_seed(seed)
    make = (lambda n: torch.randint(0, 2, (n, 6), generator=gen).double()) if codes else (
        lambda n: torch.randn(n, 6, generator=gen, dtype=torch.float64))
    q, g = make(n_q), make(n_g)
    ql, gl = torch.randint(0, 4, (n_q,), generator=gen), torch.randint(0, 4, (n_g,), generator=gen)
    qc, gc = torch.randint(0, 2, (n_q,), generator=gen), torch.randint(0, 2, (n_g,), generator=gen)
    options = {"ignore_label": 3} if ignore else {}
    keys = (lambda c: {"cameras": c}) if cameras else (lambda c: {})
    names = ["recall@1", "map", "ndcg@5", "mean_rank", "mrr"]
    given = torch.cat([torch.arange(n_g), torch.arange(min(g_repeats, n_g))])
    in_updates = rm.RetrievalMetrics(names, **options)
    in_updates.update(g[given], gl[given], role="gallery", ids=1000 + given, **keys(gc[given]))
    in_updates.update(q, ql, role="query", ids=torch.arange(n_q), **keys(qc))
    fixed = rm.RetrievalMetrics(names, **options)
    fixed.set_gallery(g[given], gl[given], ids=1000 + given, **keys(gc[given]))
    bounds = sorted({0, n_q, *(min(c, n_q) for c in cuts)})
    for lo, hi in itertools.pairwise(bounds):
        fixed.update(q[lo:hi], ql[lo:hi], role="query", ids=torch.arange(lo, hi),
                     **keys(qc[lo:hi]))
    again = torch.arange(min(repeats, n_q))
    fixed.update(q[again], ql[again], role="query", ids=again, **keys(qc[again]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (all skipped, a cut-off past the gallery)
        expected, values = in_updates.compute(), fixed.compute()
        for name in names:
            torch.testing.assert_close(values[name], expected[name], equal_nan=True)
        want, got = in_updates.per_query(), fixed.per_query()
    for name in names:
        torch.testing.assert_close(got[name], want[name], equal_nan=True)


def test_duplicate_ids_are_dropped():
    once = rm.RetrievalMetrics(ALL)
    once.update(EMB, LABELS, ids=torch.arange(40))
    twice = rm.RetrievalMetrics(ALL)
    twice.update(EMB, LABELS, ids=torch.arange(40))
    twice.update(EMB[:7], LABELS[:7], ids=torch.arange(7))  # repeated samples
    a, b = once.compute(), twice.compute()
    for name in a:
        torch.testing.assert_close(a[name], b[name], equal_nan=True)
    # without ids, the same repeat changes the result
    plain = rm.RetrievalMetrics(ALL)
    plain.update(EMB, LABELS)
    plain.update(EMB[:7], LABELS[:7])
    assert not torch.equal(plain.compute()["map"], a["map"])


@pytest.mark.parametrize("differs", ["label", "embedding"])
def test_a_gallery_given_once_refuses_an_id_for_two_samples_as_updates_do(differs):
    """An id given to set_gallery for two different samples (another label, or an embedding
    apart) is refused with the message a gallery in updates gets, not ranked as two items."""
    g, gl = EMB[:12].clone(), LABELS[:12].clone()
    ids = torch.arange(12)
    ids[11] = 3  # (the 12th item named as the 4th)
    if differs == "label":
        gl[11] = gl[3] + 1
    messages = []
    for fixed in (True, False):
        metric = rm.HitRateAtK(k=1)
        with pytest.raises(ValueError, match="id must name one sample") as refused:
            if fixed:
                metric.set_gallery(g, gl, ids=ids)
            metric.update(EMB[20:25], LABELS[20:25], ids=100 + torch.arange(5), role="query")
            if not fixed:
                metric.update(g, gl, ids=ids, role="gallery")
            metric.compute()
        messages.append(str(refused.value))
    assert messages[0] == messages[1]


def test_a_refused_text_id_is_named_as_given_or_said_to_be_a_code():
    """Text ids are held as 64-bit codes: set_gallery, which still has the ids given, names
    the refused ones as given; a refusal at compute(), whose states hold the codes only, says
    that the numbers it shows are the codes of text ids (they named nothing before)."""
    g, gl = EMB[:12], LABELS[:12].clone()
    ids = [f"doc-{i}" for i in range(12)]
    ids[11] = "doc-3"
    gl[11] = gl[3] + 1
    fixed = rm.HitRateAtK(k=1)
    with pytest.raises(ValueError, match=r"different labels \(e\.g\. 'doc-3'\)"):
        fixed.set_gallery(g, gl, ids=ids)
    in_updates = rm.HitRateAtK(k=1)
    in_updates.update(g, gl, ids=ids, role="gallery")
    in_updates.update(EMB[20:25], LABELS[20:25], ids=[f"q{i}" for i in range(5)], role="query")
    with pytest.raises(ValueError, match=r"\(e\.g\. -?\d+: the 64-bit codes that text ids are"):
        in_updates.compute()


def test_ranked_lists_preds_and_precomputed_ranks_agree():
    lists = [
        ["d3", "d7", "d1", "d9", "d2"],
        ["d4", "d5", "d8", "d6", "d0"],
        ["d2", "d0", "d5", "d1", "d3"],
    ]
    relevant = [{"d1"}, {"d4", "d6"}, {"d8"}]
    names = ["recall@3", "precision@3", "hit_rate@3", "mrr", "map", "ndcg@3"]
    from_lists = rm.RetrievalMetrics(names)
    from_lists.update(ranked_ids=lists[:2], relevant_ids=relevant[:2])
    from_lists.update(ranked_ids=lists[2:], relevant_ids=relevant[2:])
    from_ranks = rm.RetrievalMetrics(names)
    from_ranks.update(relevant_ranks=[[3], [1, 4], []], num_relevant=[1, 2, 1])
    a, b = from_lists.compute(), from_ranks.compute()
    for name in names:
        torch.testing.assert_close(a[name], b[name])
    assert float(a["recall@3"]) == pytest.approx(0.5)
    assert float(a["mrr"]) == pytest.approx(4 / 9, abs=1e-6)
    # torchmetrics' form: each list as scores 5, 4, ... with the relevant ids marked
    preds = torch.tensor([5.0, 4, 3, 2, 1] * 2)
    target = torch.tensor([0, 0, 1, 0, 0, 1, 0, 0, 1, 0])
    scored = rm.RetrievalMetrics(names)
    scored.update(preds=preds, target=target, indexes=torch.tensor([0] * 5 + [1] * 5))
    # torchmetrics only knows the candidates given, so q2's m is 2 here as in the lists
    out = scored.compute()
    assert float(out["hit_rate@3"]) == 1.0 and float(out["recall@3"]) == pytest.approx(0.75)


def test_graded_ranked_lists_ndcg():
    m = rm.NDCGAtK(k=3, gain="linear")
    m.update(ranked_ids=[["d3", "d2", "d1"]], relevant_ids=[{"d1": 2, "d2": 1, "d3": 0}])
    assert float(m.compute()) == pytest.approx(0.619906, abs=1e-6)


def test_torchmetrics_contract_state_dict_pickle_clone_reset():
    m = rm.RetrievalMetrics(["hit_rate@1", "map@r"], prefix="val/")
    m.update(EMB, LABELS, ids=torch.arange(40))
    expected = m.compute()
    assert m.state_dict() == {}  # states are not persistent by default
    restored = pickle.loads(pickle.dumps(m))
    assert restored.compute() == expected
    cloned = m.clone()
    assert cloned.compute() == expected
    m.persistent(True)
    state = m.state_dict()
    assert "q_emb" in state
    fresh = rm.RetrievalMetrics(["hit_rate@1", "map@r"], prefix="val/")
    fresh.persistent(True)
    fresh.load_state_dict(state)
    assert fresh.compute() == expected
    m.to("cpu")
    m.reset()
    assert m.q_emb == [] and m.t_above == []
    with pytest.raises(ValueError, match="no data"), pytest.warns(UserWarning, match="before"):
        m.compute()


def test_kwargs_reach_torchmetrics():
    m = rm.HitRateAtK(k=1, compute_with_cache=False, sync_on_compute=False)
    assert m.compute_with_cache is False
    with pytest.raises(ValueError, match="Unexpected keyword arguments"):
        rm.HitRateAtK(k=1, not_an_option=3)


def test_forward_returns_the_batch_value_and_keeps_accumulating():
    m = rm.HitRateAtK(k=1)
    with pytest.warns(UserWarning, match="batch alone"):
        batch_value = m(EMB[:20], LABELS[:20])
    alone = rm.HitRateAtK(k=1)
    alone.update(EMB[:20], LABELS[:20])
    assert batch_value == alone.compute()
    m(EMB[20:], LABELS[20:])
    whole = rm.HitRateAtK(k=1)
    whole.update(EMB, LABELS)
    assert m.compute() == whole.compute()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: m.update(EMB[:, :2][0], LABELS[:1]), "`embeddings` must be 2-D"),
        (lambda m: m.update(EMB, LABELS[:3]), "`labels` must have 40 entries"),
        (lambda m: m.update(EMB * float("nan"), LABELS), "`embeddings` contains NaN"),
        (lambda m: m.update(EMB, LABELS.float() + 0.5), "whole numbers below 2\\*\\*24"),
        (lambda m: m.update(EMB, LABELS, role="both"), "`role` must be"),
        (lambda m: m.update(), "exactly one input form"),
        (lambda m: m.update(EMB, LABELS, preds=torch.ones(2)), "exactly one input form"),
        (lambda m: m.update(ranked_ids=[["a"]]), "need both `ranked_ids`"),
        (
            lambda m: m.update(preds=torch.ones(2), target=torch.ones(2), indexes=torch.ones(3)),
            "same shape",
        ),
        (lambda m: m.update(relevant_ranks=[[0]]), "1-based"),
        (lambda m: (m.update(EMB, LABELS), m.update(EMB, LABELS, role="query")), "one input form"),
        (
            lambda m: (m.update(EMB, LABELS, ids=torch.arange(40)), m.update(EMB, LABELS)),
            "`ids` must be given on every update",
        ),
        (lambda m: (m.update(EMB, LABELS, role="query"), m.compute()), "no gallery"),
    ],
)
def test_update_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call(rm.HitRateAtK(k=1))


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: rm.HitRateAtK(k=0), "`k` must be a positive int"),
        (lambda: rm.HitRateAtK(k=()), "`k` must be a positive int"),
        (lambda: rm.CMC(max_rank=0), "`max_rank`"),
        (lambda: rm.RetrievalMetrics(["recall@10", "bogus"]), "unknown metric 'bogus'"),
        (lambda: rm.RetrievalMetrics([]), "non-empty list"),
        (lambda: rm.RetrievalMetrics(["mrr", "mrr"]), "twice"),
        (lambda: rm.MAPAtR(ties="random"), "`ties` must be one of"),
        (lambda: rm.MAPAtR(similarity="l1"), "`similarity` must be one of"),
        (lambda: rm.MAPAtR(empty_queries="drop"), "`empty_queries` must be one of"),
        (lambda: rm.MAPAtR(memory_budget=5), "`memory_budget`"),
    ],
)
def test_constructor_errors(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


def test_summary_reports_counts_chance_and_interval():
    m = rm.RetrievalMetrics(["hit_rate@1", "map@r", "median_rank"])
    labels = LABELS.clone()
    labels[0] = 99  # a query with no other item of its class: skipped
    m.update(EMB, labels)
    s = m.summary()
    row = s["hit_rate@1"]
    assert row["queries"] == 39 and row["skipped"] == 1 and row["gallery"] == "39"
    lo, hi = row["interval"]
    assert lo <= float(row["value"]) <= hi
    assert 0 < float(row["chance"]) < 1
    text = str(s)
    assert "hit_rate@1" in text and "chance" in text and "95% interval" in text


def test_per_query_is_in_id_order():
    m = rm.MRR()
    perm = torch.randperm(40)
    m.update(EMB[perm], LABELS[perm], ids=perm)
    ordered = rm.MRR()
    ordered.update(EMB, LABELS, ids=torch.arange(40))
    torch.testing.assert_close(m.per_query()["mrr"], ordered.per_query()["mrr"], equal_nan=True)


def test_sharded_gallery_process_without_gallery_items():
    """A process of the sharded-gallery mode may hold no gallery item at all; with radius
    relevance (no labels) its empty shard must not invent labels."""
    m = rm.RetrievalMetrics(["hit_rate@1"], relevance="radius", gallery_sharded=True,
                            empty_queries="zero")
    m.update(EMB[:3], role="query", positions=torch.zeros(3, 2, dtype=torch.float64))
    assert float(m.compute()["hit_rate@1"]) == 0.0


def test_cmc_curves_computed_a_part_of_the_queries_at_a_time_are_the_same(monkeypatch):
    """CMC's per-query curves are made a part of the queries at a time (their temporaries were
    four times the Q x max_rank output, 2.2 GB for 80,000 queries to rank 1,000): the same
    values to the bit, and each query's curve is P(first relevant rank <= k) by brute force
    (binary codes: ties, scored as the expectation over their orders)."""
    from retrieval_metrics.functional.measures.per_query import ranks

    gen = torch.Generator().manual_seed(5)
    emb = torch.randint(0, 2, (120, 6), generator=gen).float()
    labels = torch.arange(120) % 30

    def curves():
        m = rm.CMC(max_rank=40, similarity="dot")
        m.set_dtype(torch.float64)
        m.update(emb, labels)
        return m.compute(), m.per_query()

    whole, whole_rows = curves()
    monkeypatch.setattr(ranks, "CMC_CELLS", 100)  # 2 queries a part
    parts, part_rows = curves()
    assert torch.equal(whole, parts)
    for key in whole_rows:
        assert torch.equal(whole_rows[key], part_rows[key])
    # brute force: the first relevant item's rank over every order of the ties, in expectation
    scores = emb @ emb.T
    expected = torch.zeros(40, dtype=torch.float64)
    for i in range(120):
        others = [j for j in range(120) if j != i]
        s = scores[i, others]
        rel = labels[others] == labels[i]
        best = float(s[rel].max())
        above = int((s > best).sum())
        t, r = int((s == best).sum()), int((rel & (s == best)).sum())
        for k in range(1, 41):
            u = min(max(k - above, 0), t)
            miss = float(np.prod([(t - u - j) / (t - j) for j in range(r)])) if u < t else 0.0
            expected[k - 1] += 1 - miss
    torch.testing.assert_close(whole.double(), expected / 120, rtol=0, atol=1e-12)
