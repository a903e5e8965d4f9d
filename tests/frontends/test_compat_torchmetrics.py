"""retrieval_metrics.compat.torchmetrics against the installed torchmetrics (the peer is the
oracle): random inputs, every option, all-zero and all-negative scores, empty targets with every
``empty_target_action``, ``ignore_index``, integer, boolean and float targets; two gloo processes
with uneven batches; the errors; ``protocol="torchmetrics"`` on the library's own classes.

Ties: torchmetrics orders tied scores as topk/argsort happen to, so the random scores here are
distinct. All-zero scores tie everything: they are compared only where the peer's order cannot
matter (MAP, MRR, precision and recall never count an item scored <= 0; NDCG averages ties; AUROC
over the whole list counts a tied pair one half).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchmetrics.functional.retrieval as TF
import torchmetrics.retrieval as TR
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
import retrieval_metrics.compat.torchmetrics as C

HERE = Path(__file__).resolve().parents[1] / "distributed"

CLASSES = [
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalRPrecision",
    "RetrievalRecall",
    "RetrievalFallOut",
    "RetrievalAUROC",
]
FUNCTIONS = {
    "RetrievalHitRate": "retrieval_hit_rate",
    "RetrievalMAP": "retrieval_average_precision",
    "RetrievalMRR": "retrieval_reciprocal_rank",
    "RetrievalNormalizedDCG": "retrieval_normalized_dcg",
    "RetrievalPrecision": "retrieval_precision",
    "RetrievalRPrecision": "retrieval_r_precision",
    "RetrievalRecall": "retrieval_recall",
    "RetrievalFallOut": "retrieval_fall_out",
    "RetrievalAUROC": "retrieval_auroc",
}
# the peer's value with all scores tied does not depend on its tie order
ORDER_FREE_WHEN_TIED = {"RetrievalMAP", "RetrievalMRR", "RetrievalPrecision", "RetrievalRecall",
                        "RetrievalNormalizedDCG"}


def _squares(values, dim=None):
    return (values**2).mean() if dim is None else (values**2).mean(dim=dim)


@st.composite
def inputs(draw, scores: str, graded: bool = False):
    """(preds, target, indexes) of a few queries of a few items each, pairs shuffled."""
    sizes = draw(st.lists(st.integers(1, 7), min_size=1, max_size=5))
    ids = draw(st.lists(st.integers(0, 50), min_size=len(sizes), max_size=len(sizes),
                        unique=True))
    n = sum(sizes)
    indexes = torch.tensor([i for i, s in zip(ids, sizes, strict=True) for _ in range(s)])
    grades = st.sampled_from([0, 1, 2, 3]) if graded else st.integers(0, 1)
    target = torch.tensor(draw(st.lists(grades, min_size=n, max_size=n)))
    rank = torch.tensor(draw(st.permutations(range(n))), dtype=torch.float32)
    if scores == "distinct":
        preds = (rank - n / 2 + 0.5) / n  # both signs, some exactly 0 when n is odd
    elif scores == "negative":
        preds = -(rank + 1) / n
    else:
        preds = torch.zeros(n)
    order = torch.tensor(draw(st.permutations(range(n))))
    return preds[order], target[order], indexes[order]


@st.composite
def options(draw, name: str):
    out = {
        "empty_target_action": draw(st.sampled_from(["neg", "pos", "skip", "error"])),
        "aggregation": draw(st.sampled_from(["mean", "median", "min", "max", _squares])),
    }
    if name != "RetrievalRPrecision":
        out["top_k"] = draw(st.sampled_from([None, 1, 2, 5, 9]))
    if name == "RetrievalPrecision":
        out["adaptive_k"] = draw(st.booleans())
    if name == "RetrievalAUROC":
        out["max_fpr"] = draw(st.sampled_from([None, 0.3, 0.5, 1.0]))
    return out


def _outcome(fn):
    try:
        return fn()
    except (ValueError, RuntimeError, TypeError) as err:
        return type(err)


def _class_value(module, name, opts, batches):
    metric = getattr(module, name)(**opts)
    for preds, target, indexes in batches:
        metric.update(preds, target, indexes=indexes)
    return metric.compute()


def assert_same(ours, peer, context):
    if isinstance(peer, type):
        assert ours is peer, f"{context}: peer raised {peer.__name__}, ours gave {ours}"
        return
    assert not isinstance(ours, type), f"{context}: ours raised {ours.__name__}, peer {peer}"
    assert ours.dtype == peer.dtype, context
    np.testing.assert_allclose(float(ours), float(peer), atol=1e-6, rtol=0, err_msg=context)


def _target_as(target, kind):
    return {"int64": target, "int32": target.to(torch.int32), "bool": target.bool(),
            "float": target.float()}[kind]


def _check_class(name, data, opts, kind, ignore, split):
    preds, target, indexes = data
    target = _target_as(target, kind)
    if ignore and kind != "bool":
        target = target.clone()
        target[::3] = -1
        opts = {**opts, "ignore_index": -1}
    cut = split % (preds.numel() + 1)
    batches = [(p[:cut], t[:cut], i[:cut]) for p, t, i in [(preds, target, indexes)]] + [
        (preds[cut:], target[cut:], indexes[cut:])
    ]
    batches = [b for b in batches if b[0].numel()]
    ours = _outcome(lambda: _class_value(C, name, opts, batches))
    peer = _outcome(lambda: _class_value(TR, name, opts, batches))
    if peer is TypeError and kind == "float" and name == "RetrievalRPrecision":
        # torchmetrics' R-precision slices by a float sum and fails on float targets; the
        # same targets as integers are the reference
        batches = [(p, t.long(), i) for p, t, i in batches]
        peer = _outcome(lambda: _class_value(TR, name, opts, batches))
    if isinstance(peer, type) and ignore:
        # a batch left empty by ignore_index: both raise at update
        assert ours is peer
        return
    assert_same(ours, peer, f"{name} {opts} target={kind}")


KINDS = st.sampled_from(["int64", "int32", "bool", "float"])


@pytest.mark.parametrize("name", CLASSES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_classes_equal_torchmetrics(name, data):
    scores = data.draw(st.sampled_from(["distinct", "negative"]))
    graded = name == "RetrievalNormalizedDCG" and data.draw(st.booleans())
    values = data.draw(inputs(scores, graded))
    kind = "int64" if graded else data.draw(KINDS)
    _check_class(name, values, data.draw(options(name)), kind, data.draw(st.booleans()),
                 data.draw(st.integers(0, 40)))


@pytest.mark.parametrize("name", [*sorted(ORDER_FREE_WHEN_TIED), "RetrievalAUROC"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_all_zero_scores_equal_torchmetrics(name, data):
    opts = data.draw(options(name))
    if name == "RetrievalAUROC":
        opts["top_k"] = None  # which tied items fall in the peer's top k is its own order
    _check_class(name, data.draw(inputs("zero")), opts, data.draw(KINDS), False, 0)


@pytest.mark.parametrize("name", CLASSES)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_functions_equal_torchmetrics(name, data):
    scores = data.draw(st.sampled_from(["distinct", "negative", "zero"]))
    if scores == "zero" and name not in ORDER_FREE_WHEN_TIED:
        scores = "negative"
    graded = name == "RetrievalNormalizedDCG" and data.draw(st.booleans())
    preds, target, _ = data.draw(inputs(scores, graded))
    kwargs = {}
    if name != "RetrievalRPrecision":
        # 0 is "the whole list" for AP, MRR and AUROC there, an error for the others
        kwargs["top_k"] = data.draw(st.sampled_from([None, 0, 1, 3, 9]))
    if name == "RetrievalPrecision":
        kwargs["adaptive_k"] = data.draw(st.booleans())
    if name == "RetrievalAUROC":
        kwargs["max_fpr"] = data.draw(st.sampled_from([None, 0.25, 0.6]))
    if not graded:
        target = _target_as(target, data.draw(KINDS))
    fn = FUNCTIONS[name]
    ours = _outcome(lambda: getattr(C, fn)(preds, target, **kwargs))
    peer_target = target.long() if name == "RetrievalRPrecision" else target  # as above
    peer = _outcome(lambda: getattr(TF, fn)(preds, peer_target, **kwargs))
    assert_same(ours, peer, f"{fn} {kwargs}")


# ---------------------------------------------------------------------------- hand-worked


def test_score_zero_is_never_a_hit_where_torchmetrics_says_so():
    # three tied items scored 0, two relevant: no hit for MAP, MRR, precision and recall; hit
    # rate and R-precision count the relevant items (expected over the tie: 2/3 at rank 1)
    preds, target, indexes = torch.zeros(3), torch.tensor([1, 0, 1]), torch.zeros(3, dtype=int)
    for name in ("RetrievalMAP", "RetrievalMRR", "RetrievalPrecision", "RetrievalRecall"):
        m = getattr(C, name)()
        m.update(preds, target, indexes=indexes)
        assert float(m.compute()) == 0.0, name
    hit = C.RetrievalHitRate(top_k=1)
    hit.update(preds, target, indexes=indexes)
    assert float(hit.compute()) == pytest.approx(2 / 3)
    # the library's own classes: every tie order averaged; 0.0 with protocol="torchmetrics"
    native = rm.RetrievalMetrics(["map", "mrr", "recall@2", "hit_rate@1"])
    tm = rm.RetrievalMetrics(["map", "mrr", "recall@2", "hit_rate@1"], protocol="torchmetrics")
    for m in (native, tm):
        m.update(preds=preds, target=target, indexes=indexes)
    # the relevant pair lands on positions {1,2}, {1,3} or {2,3}, equally likely: AP 1, 5/6,
    # 7/12 (mean 29/36); first relevant at 1, 1, 2 (MRR (1 + 1 + 1/2) / 3)
    assert float(native.compute()["map"]) == pytest.approx(29 / 36)
    assert float(native.compute()["mrr"]) == pytest.approx((1 + 1 + 1 / 2) / 3)
    assert {k: float(v) for k, v in tm.compute().items()} == pytest.approx(
        {"map": 0.0, "mrr": 0.0, "recall@2": 0.0, "hit_rate@1": 2 / 3}
    )


def test_all_negative_scores_perfect_ranking():
    # logits: a perfect ranking, all scores < 0 -> torchmetrics reports MAP = MRR = 0
    preds, target = torch.tensor([-0.1, -0.5, -0.9]), torch.tensor([1, 0, 0])
    indexes = torch.zeros(3, dtype=torch.int64)
    for name in ("RetrievalMAP", "RetrievalMRR"):
        m = getattr(C, name)()
        m.update(preds, target, indexes=indexes)
        assert float(m.compute()) == 0.0
    ndcg = C.RetrievalNormalizedDCG()
    ndcg.update(preds, target, indexes=indexes)
    assert float(ndcg.compute()) == 1.0


def test_every_query_skipped_is_zero():
    preds, target = torch.tensor([0.3, 0.2]), torch.tensor([0, 0])
    indexes = torch.tensor([0, 1])
    m = C.RetrievalMAP(empty_target_action="skip")
    m.update(preds, target, indexes=indexes)
    assert float(m.compute()) == 0.0
    native = rm.MeanAveragePrecision(protocol="torchmetrics")
    native.update(preds=preds, target=target, indexes=indexes)
    assert float(native.compute()) == 0.0
    plain = rm.MeanAveragePrecision()
    plain.update(preds=preds, target=target, indexes=indexes)
    with pytest.warns(UserWarning, match="skipped"):
        assert np.isnan(float(plain.compute()))


# ---------------------------------------------------------------------------- protocol


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_protocol_torchmetrics_equals_the_peer(data):
    preds, target, indexes = data.draw(inputs(data.draw(st.sampled_from(["distinct", "zero",
                                                                          "negative"]))))
    ties = bool((preds == 0).all())
    k = data.draw(st.integers(1, 6))
    action = data.draw(st.sampled_from(["neg", "skip"]))
    names = {f"map@{k}": ("RetrievalMAP", {"top_k": k}), "map": ("RetrievalMAP", {}),
             f"mrr@{k}": ("RetrievalMRR", {"top_k": k}), "mrr": ("RetrievalMRR", {}),
             f"recall@{k}": ("RetrievalRecall", {"top_k": k}),
             f"precision@{k}": ("RetrievalPrecision", {"top_k": k}),
             f"ndcg@{k}": ("RetrievalNormalizedDCG", {"top_k": k})}
    if not ties:
        names.update({f"hit_rate@{k}": ("RetrievalHitRate", {"top_k": k}),
                      "r_precision": ("RetrievalRPrecision", {})})
    native = rm.RetrievalMetrics(list(names), protocol="torchmetrics",
                                 empty_queries="zero" if action == "neg" else "skip")
    native.update(preds=preds, target=target, indexes=indexes)
    values = native.compute()
    for key, (cls, opts) in names.items():
        peer = _class_value(TR, cls, {**opts, "empty_target_action": action},
                            [(preds, target, indexes)])
        np.testing.assert_allclose(float(values[key]), float(peer), atol=1e-6, err_msg=key)


def test_protocol_torchmetrics_needs_scores():
    m = rm.MeanAveragePrecision(protocol="torchmetrics")
    m.update(ranked_ids=[["a", "b"]], relevant_ids=[{"b"}])
    with pytest.raises(ValueError, match="applies to update\\(preds="):
        m.compute()
    with pytest.raises(ValueError, match="summary"):
        s = rm.MeanAveragePrecision(protocol="torchmetrics")
        s.update(preds=torch.tensor([0.5]), target=torch.tensor([1]), indexes=torch.tensor([0]))
        s.summary()


# ---------------------------------------------------------------------------- errors


BAD_CALLS = {
    "indexes None": (lambda m: m(torch.rand(4), torch.tensor([0, 1, 0, 1]), indexes=None), {}),
    "shapes": (lambda m: m(torch.rand(4), torch.tensor([0, 1, 0]),
                           indexes=torch.zeros(4, dtype=torch.int64)), {}),
    "indexes dtype": (lambda m: m(torch.rand(2), torch.tensor([0, 1]),
                                  indexes=torch.zeros(2, dtype=torch.int32)), {}),
    "preds dtype": (lambda m: m(torch.tensor([1, 2]), torch.tensor([0, 1]),
                                indexes=torch.zeros(2, dtype=torch.int64)), {}),
    "target dtype": (lambda m: m(torch.rand(2), torch.tensor([0, 1], dtype=torch.uint8),
                                 indexes=torch.zeros(2, dtype=torch.int64)), {}),
    "empty": (lambda m: m(torch.rand(0), torch.zeros(0, dtype=torch.int64),
                          indexes=torch.zeros(0, dtype=torch.int64)), {}),
    "all ignored": (lambda m: m(torch.rand(2), torch.tensor([-1, -1]),
                                indexes=torch.zeros(2, dtype=torch.int64)), {"ignore_index": -1}),
    "action": (lambda m: None, {"empty_target_action": "casual"}),
    "ignore_index": (lambda m: None, {"ignore_index": -1.0}),
    "aggregation": (lambda m: None, {"aggregation": "sum"}),
    "error action": (lambda m: m(torch.rand(2), torch.tensor([0, 0]),
                                 indexes=torch.zeros(2, dtype=torch.int64)),
                     {"empty_target_action": "error"}),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
@pytest.mark.parametrize("name", CLASSES)
def test_bad_input_raises_what_torchmetrics_raises(name, case):
    call, opts = BAD_CALLS[case]
    if case == "error action" and name == "RetrievalFallOut":
        call = lambda m: m(torch.rand(2), torch.tensor([1, 1]),  # noqa: E731
                           indexes=torch.zeros(2, dtype=torch.int64))
    peer = _outcome(lambda: call(getattr(TR, name)(**opts)))
    ours = _outcome(lambda: call(getattr(C, name)(**opts)))
    assert isinstance(peer, type), f"the peer accepts {case}"
    assert ours is peer, (case, ours, peer)


@pytest.mark.parametrize("name", ["RetrievalHitRate", "RetrievalRecall", "RetrievalPrecision",
                                  "RetrievalNormalizedDCG", "RetrievalFallOut", "RetrievalAUROC"])
@pytest.mark.parametrize("top_k", [-1, 0, 2.0, True])
def test_bad_top_k_raises_like_torchmetrics(name, top_k):
    peer = _outcome(lambda: getattr(TR, name)(top_k=top_k))
    ours = _outcome(lambda: getattr(C, name)(top_k=top_k))
    if top_k is True:  # bool is an int to torchmetrics; here it is refused
        assert ours is ValueError
        return
    assert ours is peer is ValueError


def test_errors_torchmetrics_lets_through_are_value_errors_here():
    # torchmetrics' MAP/MRR take top_k=-1 and fail in torch.topk at compute; NDCG takes negative
    # grades; NaN scores go through. Here each is a ValueError naming the argument.
    with pytest.raises(ValueError, match="`top_k` has to be a positive integer"):
        C.RetrievalMAP(top_k=-1)
    with pytest.raises(ValueError, match="`max_fpr`"):
        C.RetrievalAUROC(max_fpr=1.5)
    with pytest.raises(ValueError, match="non-negative"):
        C.retrieval_normalized_dcg(torch.rand(3), torch.tensor([1, -1, 0]))
    with pytest.raises(ValueError, match="NaN"):
        C.retrieval_recall(torch.tensor([0.5, float("nan")]), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="0 and 1"):
        C.retrieval_recall(torch.tensor([0.5, 0.4]), torch.tensor([0.5, 0.0]))


# ---------------------------------------------------------------------------- the Metric side


def test_forward_script_pickle_like_torchmetrics():
    import pickle

    gen = torch.Generator().manual_seed(3)
    preds, target = torch.rand(40, generator=gen), torch.randint(0, 2, (40,), generator=gen)
    indexes = torch.randint(0, 6, (40,), generator=gen)
    ours, peer = C.RetrievalMAP(top_k=4), TR.RetrievalMAP(top_k=4)
    torch.jit.script(ours)
    ours = pickle.loads(pickle.dumps(ours))
    for half in (slice(0, 20), slice(20, 40)):
        batch = (preds[half], target[half])
        assert_same(ours(*batch, indexes=indexes[half]), peer(*batch, indexes=indexes[half]),
                    "forward")
    assert_same(ours.compute(), peer.compute(), "compute")
    assert ours.state_dict() == {}
    assert not C.RetrievalFallOut.higher_is_better and C.RetrievalMAP.higher_is_better


def test_no_torchmetrics_retrieval_code_runs(monkeypatch):
    import importlib

    def refuse(*args, **kwargs):
        raise AssertionError("torchmetrics' retrieval code ran")

    for module in ("average_precision", "hit_rate", "ndcg", "precision", "recall",
                   "reciprocal_rank", "r_precision", "fall_out", "auroc"):
        mod = importlib.import_module(f"torchmetrics.functional.retrieval.{module}")
        for attr in dir(mod):
            if attr.startswith("retrieval_"):
                monkeypatch.setattr(mod, attr, refuse)
    monkeypatch.setattr(TR.RetrievalMAP, "compute", refuse)
    tree = ast.parse(Path(C.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names}
    assert {m for m in imported if m.startswith("torchmetrics")} == {"torchmetrics"}
    for name in CLASSES:
        m = getattr(C, name)()
        m.update(torch.tensor([0.4, 0.3]), torch.tensor([1, 0]), indexes=torch.tensor([0, 0]))
        m.compute()
        getattr(C, FUNCTIONS[name])(torch.tensor([0.4, 0.3]), torch.tensor([1, 0]))


def test_per_query_values():
    m = C.RetrievalRecall(top_k=1)
    m.update(torch.tensor([0.9, 0.1, 0.5, 0.7, 0.2]), torch.tensor([0, 1, 0, 0, 0]),
             indexes=torch.tensor([5, 5, 2, 2, 7]))
    values = m.per_query()["RetrievalRecall"]
    # queries in ascending index order: 2 (no relevant), 5 (relevant ranked 2nd), 7 (none)
    assert torch.isnan(values[0]) and values[1] == 0.0 and torch.isnan(values[2])


# ---------------------------------------------------------------------------- processes


@pytest.mark.timeout(300)
def test_two_gloo_processes_uneven_batches_equal_torchmetrics_single_process(tmp_path):
    # (on the path while the workers start too: a spawned worker imports `launch` by name)
    sys.path.insert(0, str(HERE))
    try:
        import launch
        from compat_data import CASES, data

        results = launch.run_workers(HERE / "compat_ddp.py", [], 2, tmp_path)
    finally:
        sys.path.remove(str(HERE))
    for key, (name, opts) in CASES.items():
        preds, target, indexes = data(ignored="ignore_index" in opts)
        peer = _class_value(TR, name, opts, [(preds, target, indexes)])
        for rank, result in enumerate(results):
            np.testing.assert_allclose(result[key], float(peer), atol=1e-6,
                                       err_msg=f"{key} rank {rank}")


def test_auroc_ranks_large_logits_as_given_where_torchmetrics_ties_them():
    """torchmetrics' AUROC passes scores outside [0, 1] through a float32 sigmoid, which makes
    30 and 20 both 1.0 (a tie: 0.5); the compat module ranks them as given (the documented
    difference, coming-from/torchmetrics.md), and agrees where the sigmoid keeps them apart."""
    target = torch.tensor([1, 0])
    large, small = torch.tensor([30.0, 20.0]), torch.tensor([3.0, 2.0])
    assert float(TF.retrieval_auroc(large, target)) == 0.5
    assert float(C.retrieval_auroc(large, target)) == 1.0
    assert float(C.retrieval_auroc(small, target)) == float(
        TF.retrieval_auroc(small, target)) == 1.0
