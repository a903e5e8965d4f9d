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
    # on PML's own logger, "PML": code that silences it silences both after the import swap
    emb, labels = data(2, 30, 3)
    with caplog.at_level(logging.WARNING, logger="PML"):
        AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=2).get_accuracy(emb, labels)
    warned = [r for r in caplog.records if "will be incorrect" in r.getMessage()]
    assert [r.name for r in warned] == ["PML"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="PML"):
        AccuracyCalculator(device=CPU, include=("precision_at_1",), k=2).get_accuracy(emb, labels)
    assert not caplog.records
    # silenced as the PML page silences PML (the fixture sets "PML" to ERROR), nothing shows,
    # whatever the level of this library's own loggers
    with caplog.at_level(logging.WARNING, logger="retrieval_metrics"):
        logging.getLogger("PML").setLevel(logging.ERROR)
        AccuracyCalculator(device=CPU, exclude=("NMI", "AMI"), k=2).get_accuracy(emb, labels)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------ documented differences


def test_two_column_labels_where_pml_compares_cells():
    # By hand: query 0 (labels (1, 2)) is nearest reference item 0 (labels (1, 9)), query 1
    # ((3, 4)) is nearest item 1 ((3, 4)). Rows compared whole: 1 hit of 2. PML's torch.eq
    # compares cells: 3 of 4 match; its MRR with k=1 counts a query whose neighbour matches
    # in any column. A whole-row label_comparison_fn gives PML this class's values.
    q, r = torch.tensor([[0.0], [10.0]]), torch.tensor([[0.1], [10.1], [50.0]])
    ql, rl = torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 9], [3, 4], [1, 2]])
    args = (q, ql, r, rl)
    include = ("precision_at_1", "mean_reciprocal_rank")
    theirs = pml_ac.AccuracyCalculator(include=include, k=1, device=CPU).get_accuracy(*args)
    ours = AccuracyCalculator(include=include, k=1, device=CPU).get_accuracy(*args)
    assert theirs["precision_at_1"] == 0.75 and theirs["mean_reciprocal_rank"] == 1.0
    assert ours["precision_at_1"] == 0.5 and ours["mean_reciprocal_rank"] == 0.5
    rows = pml_ac.AccuracyCalculator(
        include=include, k=1, device=CPU, label_comparison_fn=_rows_equal
    ).get_accuracy(*args)
    assert_same(rows, ours)
    with pytest.raises(RuntimeError):  # the other setups fail on the shapes in PML
        pml_ac.AccuracyCalculator(include=include, k=1, device=CPU).get_accuracy(q, ql)
    assert "fraction of matching" in AccuracyCalculator.__doc__


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


@pytest.mark.parametrize(
    ("distance", "power"),
    [("CosineSimilarity", 2), ("DotProductSimilarity", 2), ("CosineSimilarity", 0.5),
     ("DotProductSimilarity", 3)],
)
def test_a_similarity_to_a_power_is_refused_by_name(distance, power):
    # PML ranks by similarity ** power. By hand, for item 0 = (1, 0): cos to item 1 (-1, 0.05)
    # is -0.9988 and to item 2 (0.6, 0.8) is 0.6, so cos^2 puts item 1 (its own label) first
    # and cos puts item 2 first: precision_at_1 is 1.0 under power=2, 0.5 without the power.
    emb = torch.tensor([[1.0, 0.0], [-1.0, 0.05], [0.6, 0.8], [0.5, 0.9]])
    labels = torch.tensor([0, 0, 1, 1])
    make = getattr(pml_distances, distance)
    kwargs = {} if distance == "CosineSimilarity" else {"normalize_embeddings": False}
    if power == 2:
        theirs = pml_ac.AccuracyCalculator(
            include=("precision_at_1",), device=CPU,
            knn_func=pml_inference.CustomKNN(make(power=power, **kwargs)),
        ).get_accuracy(emb, labels)
        assert theirs["precision_at_1"] == 1.0
    with pytest.raises(ValueError, match=rf"CustomKNN\({distance}\(power={power}\)\).*power"):
        AccuracyCalculator(knn_func=pml_inference.CustomKNN(make(power=power, **kwargs)))
    ours = AccuracyCalculator(
        include=("precision_at_1",), device=CPU,
        knn_func=pml_inference.CustomKNN(make(power=1, **kwargs)),
    ).get_accuracy(emb, labels)
    assert ours["precision_at_1"] == 0.5


@pytest.mark.parametrize("power", [2, 0.5])
def test_a_distance_to_a_positive_power_ranks_as_the_distance(power):
    emb, labels = data(8, 40, 5, dim=6)
    knn = pml_inference.CustomKNN(pml_distances.LpDistance(normalize_embeddings=False, power=power))
    theirs, ours = both((emb, labels), knn_func=knn)
    assert_same(theirs, ours)
    _, plain = both((emb, labels))
    assert_same(plain, ours)


def _brute_force_p1_and_map_at_r(emb: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """precision_at_1 and MAP@R of the same-source euclidean ranking, in float64 (no ties)."""
    d = torch.cdist(emb.double(), emb.double())
    d.fill_diagonal_(float("inf"))
    order = d.argsort(1)[:, :-1]
    p1, ap = [], []
    for i in range(len(emb)):
        hits = (labels[order[i]] == labels[i]).double()
        r = int(hits.sum())
        if r == 0:
            continue  # a lone query, left out as PML leaves it out
        p1.append(float(hits[0]))
        first = hits[:r]
        precision = torch.cumsum(first, 0) / torch.arange(1, r + 1)
        ap.append(float((precision * first).sum()) / r)
    return float(np.mean(p1)), float(np.mean(ap))


@pytest.mark.parametrize(("dim", "n", "offset"), [(16, 60, 1000.0), (128, 300, 100.0)])
def test_euclidean_far_from_the_origin_keeps_pmls_values(dim, n, offset):
    # PML's faiss computes |q - g|^2 directly (below its BLAS threshold of 128,000 queries), so
    # its values do not move with a translation; the expansion 2 q.g - |g|^2 in float32 did.
    gen = torch.Generator().manual_seed(1)
    emb = torch.randn(n, dim, generator=gen)
    labels = torch.randint(0, 8, (n,), generator=gen)
    far = emb + offset
    include = ("precision_at_1", "mean_average_precision_at_r")
    p1, map_r = _brute_force_p1_and_map_at_r(far, labels)
    theirs, ours = both((far, labels), include=include)
    assert_same(theirs, ours)
    assert ours["precision_at_1"] == pytest.approx(p1, abs=1e-12)
    assert ours["mean_average_precision_at_r"] == pytest.approx(map_r, abs=1e-9)
    query, reference = far[:20], far[20:]
    args = (query, labels[:20], reference, labels[20:])
    assert_same(*both(args, include=include))


def test_data_near_the_origin_is_ranked_as_given():
    from retrieval_metrics.compat.pml.knn import FAR_FROM_ORIGIN, near_origin

    gen = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 2, (50, 32), generator=gen).float()  # binary codes
    pixels = torch.randint(0, 256, (50, 32), generator=gen).float()  # integers from 0
    for x in (codes, pixels, torch.randn(50, 32, generator=gen)):
        q, r = near_origin(x, x[:10])
        assert q is x  # not copied, not moved
    # far: the mean's norm is 1e5 * sqrt(32), the spread sqrt(32 * 2/3): moved, and exactly (the
    # centre is a multiple of a power of two, here 1/2, so the differences are exact and ties
    # stay ties)
    far = torch.randint(0, 3, (50, 32), generator=gen).float() + 100000
    spread = (far - far.mean(0)).norm(dim=1).pow(2).mean().sqrt()
    assert far.mean(0).norm() > FAR_FROM_ORIGIN * spread
    q, r = near_origin(far, far[:10])
    assert q.dtype == torch.float32 and torch.equal(2 * q, (2 * q).round())
    assert torch.equal(q[:10], r)
    assert torch.equal(torch.cdist(q.double(), q.double()), torch.cdist(far.double(), far.double()))
    assert q.abs().max() <= 3


def test_far_data_on_a_device_without_float64_is_ranked_as_on_the_cpu():
    """Apple's MPS (emulated) has no float64: the translation of data far from the origin is
    worked out on the host and applied to the device's tensors, the CPU's values."""
    from emulated_cuda import emulated_cuda

    gen = torch.Generator().manual_seed(4)
    far = torch.randint(0, 3, (60, 16), generator=gen).float() + 100000
    labels = torch.arange(60) % 6
    include = ("precision_at_1", "mean_average_precision_at_r", "r_precision")
    want = AccuracyCalculator(include=include).get_accuracy(far, labels)
    with emulated_cuda(mps=True):
        calculator = AccuracyCalculator(include=include, device=torch.device("cuda"))
        got = calculator.get_accuracy(far.to("cuda"), labels.to("cuda"))
    assert got == want


def _nearest_distances(base):
    return type(
        "Calculator",
        (base,),
        {
            "calculate_nearest": lambda self, knn_distances, **kwargs: knn_distances[:, 0].tolist(),
            "calculate_distances": lambda self, knn_distances, **kwargs: knn_distances.tolist(),
            "requires_knn": lambda self: [*base.requires_knn(self), "nearest", "distances"],
        },
    )


@pytest.mark.parametrize(
    ("make_knn", "expected"),
    [
        # by hand: items (0, 0), (3, 4), (0, 1); nearest of each is 1, sqrt(18), 1 away
        (lambda: None, [1.0, 18.0, 1.0]),  # faiss' IndexFlatL2: squared
        (lambda: pml_distances.LpDistance(normalize_embeddings=False), [1.0, 18**0.5, 1.0]),
        (lambda: pml_distances.LpDistance(normalize_embeddings=False, power=2), [1.0, 18.0, 1.0]),
        # unit vectors (0, 0) (normalisation leaves it), (0.6, 0.8), (0, 1): a zero vector is
        # 1 from any unit vector, and (0.6, 0.8) is sqrt(0.36 + 0.04) from (0, 1)
        (lambda: pml_distances.LpDistance(), [1.0, 0.4**0.5, 0.4**0.5]),
        (lambda: pml_distances.LpDistance(power=2), [1.0, 0.4, 0.4]),
        (lambda: pml_distances.CosineSimilarity(), [0.0, 0.8, 0.8]),  # largest first
    ],
)
def test_knn_distances_are_pmls_for_the_knn_func(make_knn, expected):
    emb, labels = torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]), torch.tensor([0, 0, 1])

    def knn():
        distance = make_knn()
        return None if distance is None else pml_inference.CustomKNN(distance)

    options = {"include": ("nearest",), "device": CPU}
    theirs = _nearest_distances(pml_ac.AccuracyCalculator)(knn_func=knn(), **options)
    ours = _nearest_distances(AccuracyCalculator)(knn_func=knn(), **options)
    got = ours.get_accuracy(emb, labels)["nearest"]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, theirs.get_accuracy(emb, labels)["nearest"], rtol=1e-6)


@pytest.mark.parametrize(
    "make_knn",
    [
        lambda: None,
        lambda: pml_inference.FaissKNN(index_init_fn=__import__("faiss").IndexFlatIP),
        lambda: pml_inference.CustomKNN(pml_distances.LpDistance(normalize_embeddings=False)),
        lambda: pml_inference.CustomKNN(pml_distances.LpDistance(power=0.5)),
        lambda: pml_inference.CustomKNN(pml_distances.CosineSimilarity()),
        lambda: pml_inference.CustomKNN(
            pml_distances.DotProductSimilarity(normalize_embeddings=False)
        ),
    ],
)
@pytest.mark.parametrize("separate", [False, True])
def test_knn_distances_match_pml_and_a_float64_brute_force(make_knn, separate):
    emb, labels = data(5, 30, 4, dim=6)
    ref, ref_labels = data(6, 50, 5, dim=6)
    args = (emb, labels, ref, ref_labels) if separate else (emb, labels)
    options = {"include": ("distances",), "device": CPU, "k": 4}
    theirs = _nearest_distances(pml_ac.AccuracyCalculator)(knn_func=make_knn(), **options)
    got = np.asarray(
        _nearest_distances(AccuracyCalculator)(knn_func=make_knn(), **options).get_accuracy(
            *args
        )["distances"]
    )
    expected = np.asarray(theirs.get_accuracy(*args)["distances"])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    if make_knn() is None:
        # faiss' squared L2 of the 4 nearest, by brute force in float64
        q = emb.double()
        r = ref.double() if separate else q
        d = torch.cdist(q, r) ** 2
        if not separate:
            d.fill_diagonal_(float("inf"))
        np.testing.assert_allclose(got, d.sort(1).values[:, :4].numpy(), rtol=1e-5, atol=1e-6)


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


@pytest.mark.parametrize(
    "make_knn",
    [lambda: None, lambda: pml_inference.CustomKNN(pml_distances.CosineSimilarity())],
)
def test_a_querys_knn_does_not_depend_on_the_queries_with_it_nor_the_budget(make_knn):
    # Real-valued near-copies (a unit in the last place apart) in a reference of 4,100 rows:
    # a BLAS rounds a score by the panel its row and column fell in, so products of 1 to 3
    # query rows (alone, or the last of a small budget's blocks), or a near-copy in the last
    # columns, gave a query other neighbours or other distances
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(4100, 64)).astype(np.float32)
    ref[4096:] = ref[:4] * (1 + 3e-7 * rng.normal(size=(4, 64))).astype(np.float32)
    ref_labels = torch.arange(4100) % 7
    queries = torch.from_numpy(ref[:17] + 0.01 * rng.normal(size=(17, 64)).astype(np.float32))
    query_labels = torch.zeros(17, dtype=torch.int64)
    reference = torch.from_numpy(ref)

    def knn(num_queries, **options):
        calculator = _nearest_distances(AccuracyCalculator)(
            include=("distances",), k=3, knn_func=make_knn(), device=CPU, **options)
        got = calculator.get_accuracy(queries[:num_queries], query_labels[:num_queries],
                                      reference, ref_labels)["distances"]
        return np.asarray(got)

    every = knn(17)
    assert np.array_equal(knn(1), every[:1])
    assert np.array_equal(knn(3), every[:3])
    assert np.array_equal(knn(17, memory_budget=16 * 4100 * 8 + 1), every)  # blocks of 8, 8, 1
