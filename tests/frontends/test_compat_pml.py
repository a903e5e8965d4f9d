"""retrieval_metrics.compat.pml.AccuracyCalculator against the installed pytorch-metric-learning.

Differential tests: the same inputs go to PML's AccuracyCalculator (faiss kNN) and to the compat
class, and every key must agree. Embeddings are Gaussian floats, so no two distances tie (exact
ties are the documented difference; they have their own hand-worked test).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from retrieval_metrics.compat.pml import AccuracyCalculator
from retrieval_metrics.compat.pml import calculator as compat

pytest.importorskip("faiss")
pml_ac = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
pml_inference = pytest.importorskip("pytorch_metric_learning.utils.inference")
pml_distances = pytest.importorskip("pytorch_metric_learning.distances")

CPU = torch.device("cpu")
KNN_KEYS = (
    "precision_at_1",
    "r_precision",
    "mean_average_precision_at_r",
    "mean_average_precision",
    "mean_reciprocal_rank",
)
SETTINGS = settings(max_examples=12, deadline=None)


@pytest.fixture(autouse=True)
def _quiet():
    # both libraries log their kNN runs and k warnings at every call
    loggers = [logging.getLogger("PML"), logging.getLogger("retrieval_metrics")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    yield
    for log, level in zip(loggers, levels, strict=True):
        log.setLevel(level)


def assert_same(theirs: dict, ours: dict, context: str = "", rtol: float = 1e-6) -> None:
    """Same keys in the same order, values equal (PML computes MRR in float32: rtol 1e-6)."""
    assert list(ours) == list(theirs), context
    for key, expected in theirs.items():
        got = ours[key]
        if isinstance(expected, list):
            assert isinstance(got, list) and len(got) == len(expected), f"{context} {key}"
        np.testing.assert_allclose(
            np.asarray(got, dtype=float),
            np.asarray(expected, dtype=float),
            rtol=rtol,
            atol=1e-9,
            err_msg=f"{context} {key}",
        )


def data(seed: int, n: int, num_classes: int, dim: int = 4, columns: int = 0):
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, dim, generator=gen)
    if columns:
        labels = torch.randint(0, num_classes, (n, columns), generator=gen)
    else:
        labels = torch.randint(0, num_classes, (n,), generator=gen)
    return emb, labels


def both(args: tuple, **options) -> tuple[dict, dict]:
    options.setdefault("exclude", ("NMI", "AMI"))
    theirs = pml_ac.AccuracyCalculator(device=CPU, **options).get_accuracy(*args)
    ours = AccuracyCalculator(device=CPU, **options).get_accuracy(*args)
    return theirs, ours


# ------------------------------------------------------------------------ differential


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(4, 40),
    classes=st.integers(1, 8),
    k=st.sampled_from([None, "max_bin_count", 1, 2, 3, "all"]),
    averaging=st.sampled_from(["mean", "avg_of_avgs", "return_per_class"]),
    columns=st.sampled_from([0, 2]),
)
def test_same_source_matches_pml(seed, n, classes, k, averaging, columns):
    emb, labels = data(seed, n, classes, columns=columns)
    k = n - 1 if k == "all" else k  # the largest k PML answers correctly (every other item)
    averages = {
        "avg_of_avgs": averaging == "avg_of_avgs",
        "return_per_class": averaging == "return_per_class",
    }
    theirs, ours = both(
        (emb, labels),
        k=k,
        # PML's default torch.eq compares label rows column by column and then fails on the
        # shapes; rows compared whole need this comparison there
        label_comparison_fn=_rows_equal if columns else None,
        **averages,
    )
    assert_same(theirs, ours, f"k={k} {averaging} columns={columns}")
    if columns:
        # here the default compares label rows whole
        default = AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=k, **averages)
        assert_same(theirs, default.get_accuracy(emb, labels), "default comparison")


def _rows_equal(x, y):
    return (x == y).all(-1)


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(2, 25),
    extra=st.integers(1, 25),
    classes=st.integers(1, 6),
    k=st.sampled_from([None, "max_bin_count", 1, 2, 4, "all"]),
    ref_includes_query=st.booleans(),
    averaging=st.sampled_from(["mean", "avg_of_avgs", "return_per_class"]),
    include=st.sampled_from([(), ("precision_at_1",), ("r_precision", "mean_reciprocal_rank")]),
)
def test_separate_reference_matches_pml(
    seed, n, extra, classes, k, ref_includes_query, averaging, include
):
    query, query_labels = data(seed, n, classes)
    more, more_labels = data(seed + 1, extra, classes + 2)
    if ref_includes_query:
        reference = torch.cat([query, more])
        reference_labels = torch.cat([query_labels, more_labels])
    else:
        reference, reference_labels = more, more_labels
    available = len(reference) - int(ref_includes_query)
    k = available if k == "all" else k
    # an int k past the reference set is a documented difference (PML's faiss pads with index
    # -1, read as the last reference item: MAP can exceed 1); test_large_k_counts_the_whole_ranking
    assume(not isinstance(k, int) or k <= available)
    # "max_bin_count" with no query label in the reference makes PML search k = 0 neighbours,
    # which its faiss refuses ('k > 0' failed) before anything is compared
    assume(k != "max_bin_count" or bool(torch.isin(query_labels, reference_labels).any()))
    args = (query, query_labels, reference, reference_labels, ref_includes_query)
    theirs, ours = both(
        args,
        k=k,
        include=include,
        avg_of_avgs=averaging == "avg_of_avgs",
        return_per_class=averaging == "return_per_class",
    )
    assert_same(theirs, ours, f"k={k} {averaging} ref_includes_query={ref_includes_query}")


@pytest.mark.parametrize("ref_includes_query", [False, True])
def test_include_and_exclude_per_call(ref_includes_query):
    emb, labels = data(3, 30, 5)
    args = (emb, labels, emb, labels, ref_includes_query)
    theirs_calc = pml_ac.AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=3)
    ours_calc = AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=3)
    for include, exclude in [((), ("r_precision",)), (("mean_average_precision",), ()), ((), ())]:
        theirs = theirs_calc.get_accuracy(*args, include=include, exclude=exclude)
        ours = ours_calc.get_accuracy(*args, include=include, exclude=exclude)
        assert_same(theirs, ours, f"{include} {exclude}")
        assert ours_calc.get_curr_metrics() == theirs_calc.get_curr_metrics()


def test_numpy_inputs_and_float64_labels():
    emb, labels = data(5, 25, 4)
    theirs, ours = both((emb.numpy(), labels.numpy().astype(np.float64)), k="max_bin_count")
    assert_same(theirs, ours)


def test_large_k_counts_the_whole_ranking():
    # PML's faiss pads neighbours past the reference size with index -1 (the last reference
    # label), so its values for such a k are not comparable; here they equal k=None's.
    emb, labels = data(11, 20, 3)
    theirs, _ = both((emb, labels), k=None)
    ours = AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=500).get_accuracy(emb, labels)
    assert_same(theirs, ours)


# ------------------------------------------------------------------------ k truncation


def test_truncation_by_k_hand_worked():
    # 1-D items 0..5 with labels A A B A B A, query = item 0 (self removed): its ranking is
    # items 1 (A), 2 (B), 3 (A), 4 (B), 5 (A); R = 3 relevant at positions 1, 3, 5.
    emb = torch.tensor([[0.0], [1.0], [2.1], [3.3], [4.6], [6.0]])
    labels = torch.tensor([0, 0, 1, 0, 1, 0])
    query, query_labels = emb[:1], labels[:1]
    args = (query, query_labels, emb, labels, True)
    expected = {
        # k=2: positions 1, 2 are seen; r_precision divides by min(R, k) = 2
        2: {"r_precision": 1 / 2, "mean_average_precision_at_r": (1 / 1) / 3,
            "mean_average_precision": (1 / 1) / 3, "mean_reciprocal_rank": 1.0},
        # k=4: MAP@R stops at R = 3; MAP sums to k = 4
        4: {"r_precision": 2 / 3, "mean_average_precision_at_r": (1 + 2 / 3) / 3,
            "mean_average_precision": (1 + 2 / 3) / 3, "mean_reciprocal_rank": 1.0},
        None: {"r_precision": 2 / 3, "mean_average_precision_at_r": (1 + 2 / 3) / 3,
               "mean_average_precision": (1 + 2 / 3 + 3 / 5) / 3, "mean_reciprocal_rank": 1.0},
    }  # fmt: skip
    for k, values in expected.items():
        ours = AccuracyCalculator(device=CPU, include=tuple(values), k=k).get_accuracy(*args)
        for key, value in values.items():
            assert ours[key] == pytest.approx(value, rel=1e-12), (k, key)
        theirs = pml_ac.AccuracyCalculator(device=CPU, include=tuple(values), k=k)
        assert_same(theirs.get_accuracy(*args), ours, f"k={k}")


def test_mrr_depends_on_k_as_in_pml():
    # the first relevant item of query 0 is at position 3; with k=2 its reciprocal rank is 0
    emb = torch.tensor([[0.0], [1.0], [2.1], [3.3], [10.0]])
    labels = torch.tensor([0, 1, 2, 0, 1])
    keys = ("precision_at_1", "mean_reciprocal_rank")
    for k in (2, 3, None):
        theirs, ours = both((emb[:1], labels[:1], emb, labels, True), include=keys, k=k)
        assert ours["mean_reciprocal_rank"] == pytest.approx(0.0 if k == 2 else 1 / 3)
        assert_same(theirs, ours, f"k={k}")


def test_warns_like_pml_when_k_truncates_r(caplog):
    emb, labels = data(2, 30, 3)
    with caplog.at_level(logging.WARNING, logger="retrieval_metrics"):
        AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=2).get_accuracy(emb, labels)
    assert any("will be incorrect" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="retrieval_metrics"):
        AccuracyCalculator(device=CPU, include=("precision_at_1",), k=2).get_accuracy(emb, labels)
    assert not caplog.records


# ------------------------------------------------------------------------ documented differences


def test_exact_ties_count_as_expected_where_pml_keeps_index_order():
    # Item 0 is at the same distance from items 1 and 2 (which coincide); one of them shares its
    # label. PML ranks the lower index first; here the tie counts as 1/2 hit. Item 2's (or 1's)
    # nearest item is the other, of the other label: 0. So precision_at_1 is (0 + 1/2) / 2.
    emb = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    for labels, pml_value in ((torch.tensor([0, 1, 0]), 0.0), (torch.tensor([0, 0, 1]), 0.5)):
        theirs, ours = both((emb, labels), include=("precision_at_1",))
        assert theirs["precision_at_1"] == pml_value
        assert ours["precision_at_1"] == pytest.approx(0.25)


def test_labels_are_cast_to_float32_as_in_pml():
    # 2**24 and 2**24 + 1 are the same float32: PML (and this class) take them as one label
    emb = torch.tensor([[0.0, 0.0], [0.0, 0.1], [0.0, 5.0]])
    labels = torch.tensor([2**24, 2**24 + 1, 2**24])
    theirs, ours = both((emb, labels), include=("precision_at_1",))
    assert ours["precision_at_1"] == theirs["precision_at_1"] == 1.0


def test_mrr_alone_works_where_pml_raises():
    emb, labels = data(4, 30, 4)
    with pytest.raises(TypeError):
        pml_ac.AccuracyCalculator(device=CPU, include=("mean_reciprocal_rank",)).get_accuracy(
            emb, labels
        )
    ours = AccuracyCalculator(device=CPU, include=("mean_reciprocal_rank",)).get_accuracy(
        emb, labels
    )
    theirs, _ = both((emb, labels), include=("precision_at_1", "mean_reciprocal_rank"))
    assert ours["mean_reciprocal_rank"] == pytest.approx(theirs["mean_reciprocal_rank"], rel=1e-6)


def test_all_queries_lone_give_nan():
    emb, labels = data(6, 6, 1)
    labels = torch.arange(6)
    for return_per_class in (False, True):
        theirs, ours = both((emb, labels), return_per_class=return_per_class)
        assert_same(theirs, ours)
        flat = np.asarray(list(ours.values()), dtype=float)
        assert np.isnan(flat).all()


# ------------------------------------------------------------------------ knn_func and labels


@pytest.mark.parametrize(
    "make_knn",
    [
        lambda: pml_inference.CustomKNN(pml_distances.CosineSimilarity()),
        lambda: pml_inference.CustomKNN(pml_distances.DotProductSimilarity(), batch_size=7),
        lambda: pml_inference.CustomKNN(pml_distances.LpDistance(normalize_embeddings=False)),
        lambda: pml_inference.CustomKNN(pml_distances.LpDistance()),
        lambda: pml_inference.FaissKNN(index_init_fn=__import__("faiss").IndexFlatIP),
    ],
)
@pytest.mark.parametrize("ref_includes_query", [False, True])
def test_supported_knn_funcs_match_pml(make_knn, ref_includes_query):
    emb, labels = data(8, 40, 5, dim=6)
    args = (emb, labels, emb, labels, ref_includes_query)
    theirs = pml_ac.AccuracyCalculator(
        device=CPU, exclude=("NMI", "AMI"), knn_func=make_knn()
    ).get_accuracy(*args)
    ours = AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), knn_func=make_knn()).get_accuracy(
        *args
    )
    assert_same(theirs, ours)


@pytest.mark.parametrize(
    "make_knn",
    [
        lambda: pml_inference.CustomKNN(pml_distances.LpDistance(p=1)),
        lambda: pml_inference.CustomKNN(pml_distances.SNRDistance()),
        lambda: pml_inference.FaissKNN(index_init_fn=lambda d: __import__("faiss").IndexLSH(d, 8)),
        lambda: lambda query, k, reference, ref_includes_query: None,
    ],
)
def test_other_knn_funcs_are_refused(make_knn):
    with pytest.raises(ValueError, match="knn_func"):
        AccuracyCalculator(knn_func=make_knn())


def _first_equal_second_differs(x, y):
    return (x[..., 0] == y[..., 0]) & (x[..., 1] != y[..., 1])


def _close(x, y):
    return torch.abs(x - y) < 1


@pytest.mark.parametrize(
    ("fn", "columns"), [(_first_equal_second_differs, 2), (_close, 0), (torch.eq, 0)]
)
@pytest.mark.parametrize("ref_includes_query", [False, True])
@pytest.mark.parametrize("k", [None, "max_bin_count", 2])
def test_custom_label_comparison_matches_pml(fn, columns, ref_includes_query, k):
    emb, labels = data(9, 36, 4, columns=columns)
    if columns == 0 and fn is _close:
        labels = labels.to(torch.float32) * 0.7  # neighbouring labels compare equal
    for avg_of_avgs in (False, True):
        theirs, ours = both(
            (emb, labels, emb, labels, ref_includes_query),
            label_comparison_fn=fn,
            k=k,
            avg_of_avgs=avg_of_avgs,
        )
        assert_same(theirs, ours, f"{fn.__name__} avg_of_avgs={avg_of_avgs}")


# ------------------------------------------------------------------------ clustering


def test_nmi_ami_match_pml_with_the_same_kmeans():
    emb, labels = data(10, 60, 4)

    def by_sign(x, num_clusters):  # deterministic clusters, the same for both
        return ((x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()) % num_clusters

    theirs, ours = both((emb, labels), include=("NMI", "AMI"), kmeans_func=by_sign)
    assert_same(theirs, ours, rtol=1e-12)


def test_nmi_ami_default_faiss_kmeans_match_pml():
    emb, labels = data(12, 80, 5, dim=8)
    emb = emb + 3 * torch.nn.functional.one_hot(labels, 8).float()
    theirs, ours = both((emb, labels), include=("NMI", "AMI"))
    assert_same(theirs, ours, rtol=1e-12)


# ------------------------------------------------------------------------ bad arguments


def _fn(x, y):
    return x == y


BAD_CONSTRUCTION = [
    {"k": -1},
    {"k": 0},
    {"k": 1.5},
    {"k": "max"},
    {"avg_of_avgs": True, "return_per_class": True},
    {"include": "precision_at_1"},
    {"exclude": "NMI"},
    {"include": ("precision_at_2",)},
    {"label_comparison_fn": _fn},  # with the default NMI / AMI
    {"label_comparison_fn": _fn, "include": ("AMI",)},
]


@pytest.mark.parametrize("options", BAD_CONSTRUCTION)
def test_bad_constructor_arguments_raise_like_pml(options):
    with pytest.raises(Exception) as theirs:
        pml_ac.AccuracyCalculator(**options)
    with pytest.raises(theirs.type):
        AccuracyCalculator(**options)


def test_bad_get_accuracy_arguments_raise_like_pml():
    emb, labels = data(1, 10, 2)
    cases = [
        (emb, labels[:-1]),  # lengths differ
        (emb, labels, emb, labels[:-1], False),
        (emb[:5], labels[:5], emb.flip(0), labels.flip(0), True),  # query is not reference[:5]
    ]
    for args in cases:
        with pytest.raises(Exception) as theirs:
            pml_ac.AccuracyCalculator(device=CPU, exclude=("NMI", "AMI")).get_accuracy(*args)
        with pytest.raises(theirs.type):
            AccuracyCalculator(device=CPU, exclude=("NMI", "AMI")).get_accuracy(*args)


def test_bad_inputs_name_the_argument():
    calc = AccuracyCalculator(device=CPU, include=("precision_at_1",))
    with pytest.raises(ValueError, match="`query` must be 2-D"):
        calc.get_accuracy(torch.zeros(5), torch.zeros(5))
    with pytest.raises(ValueError, match="same dimension"):
        calc.get_accuracy(torch.zeros(5, 2), torch.zeros(5), torch.zeros(5, 3), torch.zeros(5))
    with pytest.raises(ValueError, match="reference_labels"):
        calc.get_accuracy(torch.zeros(5, 2), torch.zeros(5), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="Primary metrics"):
        calc.get_accuracy(torch.zeros(5, 2), torch.zeros(5), include=("precision_at_5",))


# ------------------------------------------------------------------------ PML's other methods


def test_bookkeeping_methods_match_pml():
    for options in ({}, {"include": ("precision_at_1", "NMI")}, {"avg_of_avgs": True}):
        theirs = pml_ac.AccuracyCalculator(device=CPU, **options)
        ours = AccuracyCalculator(device=CPU, **options)
        assert ours.get_curr_metrics() == theirs.get_curr_metrics()
        assert ours.requires_clustering() == theirs.requires_clustering()
        assert set(ours.requires_knn()) == {*theirs.requires_knn(), "mean_reciprocal_rank"}
        assert ours.description() == theirs.description()
        assert list(ours.get_function_dict()) == list(theirs.get_function_dict())
        counts = torch.tensor([3, 5, 2])
        for k_options in (None, "max_bin_count", 2, 9):
            theirs.k = ours.k = k_options
            for same in (False, True):
                assert ours.determine_k(counts, 40, same) == theirs.determine_k(counts, 40, same)


def test_builtin_keys_never_build_a_neighbour_matrix(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a queries x k neighbour matrix was built")

    monkeypatch.setattr(compat, "blocked_knn", refuse)
    emb, labels = data(13, 50, 5)
    AccuracyCalculator(device=CPU, exclude=("NMI", "AMI")).get_accuracy(emb, labels)


def test_calculate_methods_accept_pmls_knn_labels():
    # PML's own calculate_* methods take the neighbour labels; so do these
    gen = torch.Generator().manual_seed(14)
    query_labels = torch.randint(0, 4, (12,), generator=gen).float()
    knn_labels = torch.randint(0, 4, (12, 6), generator=gen).float()
    label_counts = (torch.arange(4.0), torch.tensor([5, 6, 7, 8]))
    kwargs = {
        "query_labels": query_labels,
        "knn_labels": knn_labels,
        "label_counts": label_counts,
        "not_lone_query_mask": torch.arange(12) % 5 != 0,
    }
    for ref_includes_query in (False, True):
        kwargs["ref_includes_query"] = ref_includes_query
        for averaging in ({}, {"avg_of_avgs": True}, {"return_per_class": True}):
            theirs_calc = pml_ac.AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), **averaging)
            ours_calc = AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), **averaging)
            theirs = theirs_calc._get_accuracy(theirs_calc.get_function_dict(), **kwargs)
            ours = ours_calc._get_accuracy(ours_calc.get_function_dict(), **kwargs)
            assert_same(theirs, ours, f"{averaging} {ref_includes_query}")


def _precision_at_2(self, knn_labels, query_labels, **kwargs):
    return pml_ac.precision_at_k(
        knn_labels,
        query_labels[:, None],
        2,
        self.avg_of_avgs,
        self.return_per_class,
        self.label_comparison_fn,
    )


def _fancy_mutual_info(self, query_labels, cluster_labels, **kwargs):
    return float(np.mean(np.asarray(cluster_labels) == 0))


def _subclass(base):
    return type(
        "Calculator",
        (base,),
        {
            "calculate_precision_at_2": _precision_at_2,
            "calculate_fancy_mutual_info": _fancy_mutual_info,
            "requires_clustering": lambda self: [
                *base.requires_clustering(self),
                "fancy_mutual_info",
            ],
            "requires_knn": lambda self: [*base.requires_knn(self), "precision_at_2"],
        },
    )


@pytest.mark.parametrize("k", [None, "max_bin_count", 3])
def test_subclass_with_extra_keys_as_in_pmls_documentation(k):
    # PML's documented way to add keys: calculate_<name> plus requires_knn/requires_clustering
    emb, labels = data(15, 40, 5)

    def kmeans(x, n):
        return (x[:, 0] > 0).long()

    args = (emb, labels)
    options = {"k": k, "kmeans_func": kmeans, "device": CPU}
    theirs = _subclass(pml_ac.AccuracyCalculator)(**options).get_accuracy(*args)
    ours = _subclass(AccuracyCalculator)(**options).get_accuracy(*args)
    assert "precision_at_2" in ours and "fancy_mutual_info" in ours
    assert_same(theirs, ours, f"k={k}")


def test_faiss_knn_state_as_pml_leaves_it():
    import faiss

    emb, labels = data(16, 30, 3)
    for reset_after in (False, True):
        theirs = pml_inference.FaissKNN(reset_after=reset_after, index_init_fn=faiss.IndexFlatIP)
        ours = pml_inference.FaissKNN(reset_after=reset_after, index_init_fn=faiss.IndexFlatIP)
        pml_ac.AccuracyCalculator(device=CPU, knn_func=theirs, exclude=("NMI", "AMI")).get_accuracy(
            emb, labels
        )
        AccuracyCalculator(device=CPU, knn_func=ours, exclude=("NMI", "AMI")).get_accuracy(
            emb, labels
        )
        assert type(ours.index) is type(theirs.index)
        if not reset_after:
            assert ours.index.ntotal == theirs.index.ntotal == 30
    with pytest.raises(ValueError, match="reset_before"):
        AccuracyCalculator(knn_func=pml_inference.FaissKNN(reset_before=False))


def test_ties_are_pmls_value_averaged_over_every_storage_order():
    # PML breaks exact ties by storage order; averaged over all orders of the items, that is the
    # expectation over tie orders this class computes.
    import itertools

    # item 0 has items 1 (relevant) and 2 at distance 1; item 3 has items 1 and 2 at 1 too
    emb = torch.tensor([[0.0], [1.0], [1.0], [2.0]])
    labels = torch.tensor([0, 0, 1, 1])
    keys = KNN_KEYS
    for k in (None, 1, 2):
        total = dict.fromkeys(keys, 0.0)
        orders = list(itertools.permutations(range(4)))
        for order in orders:
            o = torch.tensor(order)
            theirs = pml_ac.AccuracyCalculator(device=CPU, include=keys, k=k).get_accuracy(
                emb[o], labels[o]
            )
            for key in keys:
                total[key] += theirs[key] / len(orders)
        ours = AccuracyCalculator(device=CPU, include=keys, k=k).get_accuracy(emb, labels)
        for key in keys:
            assert ours[key] == pytest.approx(total[key], rel=1e-6), (k, key)


@pytest.mark.parametrize("k", [1, 2, 3, "max_bin_count"])
def test_ranking_stopped_at_k_equals_the_whole_ranking(monkeypatch, k):
    # a cut-off k lets the ranking stop at depth k; with many exact ties that must not matter
    gen = torch.Generator().manual_seed(17)
    emb = torch.randint(0, 3, (40, 2), generator=gen).float()
    labels = torch.randint(0, 4, (40,), generator=gen)
    calc = AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=k, return_per_class=True)
    stopped = calc.get_accuracy(emb, labels)
    whole_ranking = compat.rank_embeddings

    def whole(*args, **kwargs):
        kwargs["depth"] = None
        return whole_ranking(*args, **kwargs)

    monkeypatch.setattr(compat, "rank_embeddings", whole)
    assert_same(calc.get_accuracy(emb, labels), stopped, rtol=1e-12)


def test_a_nan_embedding_is_refused_as_such():
    """With the query as the reference, NaN != NaN made the check of ref_includes_query fail
    first, with a message about the reference's first elements; the embeddings' own check
    names the NaN."""
    x = torch.randn(12, 4)
    x[3, 1] = float("nan")
    with pytest.raises(ValueError, match="`query` contains NaN or infinite values"):
        AccuracyCalculator().get_accuracy(x, torch.arange(12) % 3)
