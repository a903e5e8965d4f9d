"""The rough edges a new user hit (issue 13, items 1 to 10), each with its reproduction."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest
import torch

import retrieval_metrics as rm

# four classes of three items; the items of a class are near each other
EMB = torch.tensor(
    [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.9, 0.0, 0.1],
     [0.0, 1.0, 0.0], [0.1, 0.9, 0.0], [0.0, 0.9, 0.1],
     [0.0, 0.0, 1.0], [0.1, 0.0, 0.9], [0.0, 0.1, 0.9],
     [-1.0, 0.0, 0.0], [-0.9, -0.1, 0.0], [-0.9, 0.0, -0.1]]
)
LABELS = torch.arange(12) // 3


def every_metric() -> list[rm.RetrievalMetricBase]:
    """One object of every metric class the package exports."""
    return [
        rm.HitRateAtK(k=(1, 5)), rm.RecallAtK(k=2), rm.PrecisionAtK(k=2), rm.RPrecision(),
        rm.MAPAtR(), rm.MeanAveragePrecision(), rm.MRR(), rm.NDCGAtK(), rm.CMC(max_rank=5),
        rm.MedianRank(), rm.MeanRank(), rm.MINP(), rm.RetrievalMetrics(["hit_rate@1", "map@r"]),
        rm.CrossModalRetrieval(), rm.RSum(),
    ]


# ---------------------------------------------------------------------------- 1. forward


def test_forward_warns_once_per_object_and_names_the_remedy():
    m = rm.HitRateAtK(k=1)
    with pytest.warns(UserWarning, match=r"this batch alone.*update.*log the metric object"):
        m(EMB[:6], LABELS[:6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(EMB[6:], LABELS[6:])  # the same object: no second warning
    # forward still accumulates: the whole is the two halves together
    whole = rm.HitRateAtK(k=1)
    whole.update(EMB, LABELS)
    assert m.compute() == whole.compute()
    with pytest.warns(UserWarning, match="this batch alone"):
        rm.HitRateAtK(k=1)(EMB, LABELS)  # a new object warns again


def test_update_and_compute_do_not_warn():
    m = rm.HitRateAtK(k=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.update(EMB, LABELS)
        m.compute()


# ---------------------------------------------------------------------------- 10. TorchScript


@pytest.mark.parametrize("metric", every_metric(), ids=lambda m: type(m).__name__)
def test_every_metric_can_be_scripted(metric):
    # torchmetrics' test harness scripts every metric; scripting must neither fail nor warn about
    # the metric (recent torch deprecates TorchScript itself with a DeprecationWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        scripted = torch.jit.script(metric)
    assert isinstance(scripted, torch.jit.ScriptModule)


# ---------------------------------------------------------------------------- 3. nothing given

Z, ZL = torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64)


@pytest.mark.parametrize(
    ("feed", "match"),
    [
        (lambda m: m.update(Z, ZL), "no items were given"),
        (lambda m: m.update(Z, ZL, ids=ZL), "no items were given"),
        (lambda m: (m.update(Z, ZL, role="query"), m.update(EMB, LABELS, role="gallery")),
         "no items were given"),
        (lambda m: (m.update(EMB, LABELS, role="query"), m.update(Z, ZL, role="gallery")),
         "the gallery is empty"),
        (lambda m: m.update(ranked_ids=[], relevant_ids=[]), "no items were given"),
        (lambda m: m.update(preds=torch.zeros(0), target=torch.zeros(0), indexes=ZL),
         "no items were given"),
    ],
)
def test_zero_rows_say_what_is_empty(feed, match):
    m = rm.HitRateAtK(k=1)
    feed(m)
    with pytest.raises(ValueError, match=match):
        m.compute()


def test_an_empty_fixed_gallery_is_refused_when_set():
    with pytest.raises(ValueError, match="the gallery is empty"):
        rm.HitRateAtK(k=1).set_gallery(Z, ZL)


def test_image_text_with_zero_rows_says_no_items():
    m = rm.CrossModalRetrieval()
    m.update(Z, Z, ZL)
    with pytest.raises(ValueError, match="no items were given"):
        m.compute()


# ---------------------------------------------------------------------------- 4. cut-offs


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: rm.HitRateAtK(k=1.5), r"`k` must be a positive int .*got 1\.5 \(float\)"),
        (lambda: rm.NDCGAtK(k=4.0), r"`k` must be a positive int .*got 4\.0 \(float\)"),
        (lambda: rm.HitRateAtK(k=(1, 2.0)), r"`k` must be a positive int"),
        (lambda: rm.HitRateAtK(k="5"), r"`k` must be a positive int .*\(str\)"),
        (lambda: rm.MRR(k=4.0), r"`k` must be None \(the whole ranking\) or a positive int"),
        (lambda: rm.MeanAveragePrecision(k=(5, 10)), r"`k` must be None .*\(tuple\)"),
        (lambda: rm.CMC(max_rank=10.0), r"`max_rank` must be a positive int"),
        (lambda: rm.HitRateAtK(top_k=4), r"takes the cut-off as `k` \(torchmetrics' `top_k`\)"),
        (lambda: rm.CrossModalRetrieval(k=1.5), r"`k` must be a positive int"),
    ],
)
def test_a_bad_cut_off_is_a_value_error_naming_it(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


# ---------------------------------------------------------------------------- 9. inputs


def test_numpy_embeddings_are_accepted_like_tensors():
    expected = rm.MAPAtR()
    expected.update(EMB, LABELS)
    from_numpy = rm.MAPAtR()
    from_numpy.update(EMB.numpy(), LABELS.numpy())
    assert from_numpy.compute() == expected.compute()
    pairs = rm.CrossModalRetrieval(k=(1,))
    pairs.update(EMB.numpy(), EMB.numpy() + 0.01, LABELS.numpy() * 3 + torch.arange(12).numpy() % 3)
    assert float(pairs.compute()["rsum"]) == 200.0  # every image's own caption is nearest
    with pytest.raises(ValueError, match=r"`embeddings` must be a torch\.Tensor or a numpy array"):
        rm.MAPAtR().update(EMB.tolist(), LABELS)


@pytest.mark.parametrize(
    "labels",
    [LABELS.float(), LABELS.double(), LABELS.numpy().astype("float32"), LABELS.double().tolist()],
    ids=["float32 tensor", "float64 tensor", "float32 array", "list of floats"],
)
def test_whole_number_float_labels_are_the_integer_labels(labels):
    expected = rm.MAPAtR()
    expected.update(EMB, LABELS)
    m = rm.MAPAtR()
    m.update(EMB, labels)
    assert m.compute() == expected.compute()


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        (LABELS.float() + 0.5, r"whole numbers below 2\*\*24 \(torch.float32.*got 0\.5"),
        (torch.full((12,), 2.0**24), r"below 2\*\*24.*got 16777216\.0"),
        (torch.full((12,), float("nan")), r"whole numbers.*got nan"),
    ],
)
def test_other_float_labels_are_refused_saying_the_rule(labels, match):
    # 2**24 + 1 stored as float32 reads 2**24: beyond the bound two labels may already be one
    with pytest.raises(ValueError, match=match):
        rm.MAPAtR().update(EMB, labels)


def test_cli_applies_the_same_float_rule(tmp_path, capsys):
    from retrieval_metrics import cli

    np.savez(tmp_path / "whole.npz", embeddings=EMB.numpy(), labels=LABELS.numpy() * 1.0)
    assert cli.main(["evaluate", str(tmp_path / "whole.npz"), "--metrics", "map@r", "--json",
                     str(tmp_path / "out.json"), "--progress-delay", "-1"]) == 0  # fmt: skip
    expected = rm.MAPAtR()
    expected.update(EMB, LABELS)
    value = json.loads((tmp_path / "out.json").read_text())["runs"][0]["metrics"]["map@r"]
    assert value["value"] == pytest.approx(float(expected.compute()), abs=1e-6)
    big = np.full(12, 2.0**24, dtype=np.float32)
    np.savez(tmp_path / "big.npz", embeddings=EMB.numpy(), labels=big)
    capsys.readouterr()
    assert cli.main(["evaluate", str(tmp_path / "big.npz"), "--progress-delay", "-1"]) == 2
    err = capsys.readouterr().err
    assert "big.npz" in err and "'labels'" in err and "below 2**24" in err


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("R@1", "did you mean hit_rate@1"),
        ("R@10", "or recall@10"),
        ("rank-1", "did you mean hit_rate@1"),
        ("top5", "did you mean hit_rate@5"),
        ("Hits@10", "did you mean hit_rate@10"),
        ("p@10", "did you mean precision@10"),
        ("recall_100", "did you mean recall@100"),
        ("ndcg_cut_10", "did you mean ndcg@10"),
        # pytrec_eval's spellings of its measure sets (no suggestion before; an audit)
        ("ndcg_cut.10", "did you mean ndcg@10"),
        ("P.10", "did you mean precision@10"),
        ("recall.100", "did you mean recall@100"),
        ("map_cut.100", "did you mean map@100"),
        ("success.1", "did you mean hit_rate@1"),
        ("recip_rank", "did you mean mrr"),
        ("rprec", "did you mean r_precision"),
        ("medr", "did you mean median_rank"),
        ("hitrate@1", "did you mean hit_rate@1"),
        ("recal@5", "did you mean recall@5"),
        ("rsum", "CrossModalRetrieval and RSum"),
    ],
)
def test_unknown_metric_names_get_a_suggestion(name, suggestion):
    with pytest.raises(ValueError, match=re.escape(f"unknown metric {name!r}: ")) as info:
        rm.RetrievalMetrics([name])
    assert suggestion in str(info.value)
    assert "Known names: hit_rate@K" in str(info.value)


def test_names_other_tools_spell_differently_are_accepted_as_they_are():
    # lower-cased, these are already the library's names: no suggestion needed
    m = rm.RetrievalMetrics(["Recall@5", "mAP", "MAP@R", "NDCG@10", "MRR@10"])
    assert m.metric_names() == ["recall@5", "map", "map@r", "ndcg@10", "mrr@10"]


def test_ir_measures_names_are_read_as_written_and_r_at_k_only_where_it_is_recall():
    # ir_measures' spellings keep their case and their conventions (nDCG: trec_eval's gain)
    m = rm.RetrievalMetrics(["nDCG@10", "P@10", "Rprec", "RR@10"])
    assert m.metric_names() == ["nDCG@10", "P@10", "Rprec", "RR@10"]
    # "R@1" is recall in ir_measures and the hit rate in image-text papers: read as written
    # with judgments or under an IR protocol only
    with pytest.raises(ValueError, match="did you mean hit_rate@1"):
        rm.RetrievalMetrics(["R@1"], protocol="vsepp")
    assert rm.RetrievalMetrics(["R@1"], qrels={"q": ["d"]}).metric_names() == ["R@1"]
    assert rm.RetrievalMetrics(["R@1"], protocol="trec_eval").metric_names() == ["R@1"]


def test_a_text_file_named_npz_is_reported_as_not_an_npz_archive(tmp_path, capsys):
    from retrieval_metrics import cli

    (tmp_path / "emb.npz").write_text("embeddings,labels\n0.1,3\n")
    (tmp_path / "emb.npy").write_text("0.1 0.2\n")
    for path, what in (("emb.npz", "not an npz archive"), ("emb.npy", "not a .npy file")):
        assert cli.main(["evaluate", str(tmp_path / path), "--progress-delay", "-1"]) == 2
        err = capsys.readouterr().err
        assert path in err and what in err and "pickle" not in err


# ---------------------------------------------------------------------------- 2. all skipped


def test_every_query_skipped_warns_how_many_and_why():
    m = rm.MAPAtR()
    m.update(torch.randn(5, 3), torch.arange(5))  # five items, five labels: nothing relevant
    with pytest.warns(UserWarning, match=r"all 5 queries were skipped .*no other gallery item "
                                         r"has its label.*empty_queries=\"zero\"") as record:
        value = m.compute()
    assert torch.isnan(value)
    assert sum("were skipped" in str(w.message) for w in record) == 1  # once per compute


@pytest.mark.parametrize(
    ("feed", "why"),
    [
        (lambda m: m.update(ranked_ids=[["a", "b"]], relevant_ids=[set()]), "`relevant_ids`"),
        (lambda m: m.update(preds=torch.ones(3), target=torch.zeros(3),
                            indexes=torch.zeros(3, dtype=torch.int64)), "`target`"),
        (lambda m: (m.set_gallery(EMB[:6], LABELS[:6]), m.update(EMB[6:], LABELS[6:],
                                                                 role="query")), "its label"),
    ],
)
def test_the_warning_says_why_for_every_input_form(feed, why):
    m = rm.HitRateAtK(k=1)
    feed(m)
    with pytest.warns(UserWarning, match="were skipped") as record:
        m.compute()
    assert why in str(record[0].message)


def test_some_skipped_or_skipped_on_purpose_do_not_warn():
    labels = LABELS.clone()
    labels[0] = 99  # one query of twelve has nothing relevant: reported by summary(), no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = rm.MAPAtR()
        m.update(EMB, labels)
        m.compute()
        zero = rm.MAPAtR(empty_queries="zero")
        zero.update(torch.randn(5, 3), torch.arange(5))
        assert float(zero.compute()) == 0.0


def test_a_cmc_curve_gets_a_pointwise_interval_at_every_k():
    # under ties="optimistic" every per-query CMC value is 0 or 1, so each K gets Wilson's
    # interval, the one the hit rate @K gets
    m = rm.CMC(max_rank=4, ties="optimistic")
    m.update(EMB, LABELS)
    lo, hi = m.summary()["cmc@4"]["interval"]
    curve = m.compute()
    for k in range(1, 5):
        hits = rm.HitRateAtK(k=k, ties="optimistic")
        hits.update(EMB, LABELS)
        row = hits.summary()[f"hit_rate@{k}"]
        assert float(curve[k - 1]) == pytest.approx(float(row["value"]))
        assert (float(lo[k - 1]), float(hi[k - 1])) == pytest.approx(row["interval"])
    assert "nan" not in str(m.summary())


def test_a_cmc_curve_with_fractional_values_gets_a_bootstrap_interval_per_k():
    gen = torch.Generator().manual_seed(0)
    emb = torch.randint(-1, 2, (40, 3), generator=gen).float()  # many exact ties
    labels = torch.randint(0, 5, (40,), generator=gen)
    m = rm.CMC(max_rank=5)
    m.update(emb, labels)
    per_query = m.per_query()["cmc@5"]
    assert bool(((per_query > 0) & (per_query < 1)).any())  # ties give fractional values
    lo, hi = m.summary(num_bootstrap=300, seed=1)["cmc@5"]["interval"]
    curve = m.compute().double()
    assert bool((lo <= curve + 1e-6).all()) and bool((curve <= hi + 1e-6).all())
    assert bool((lo <= hi).all()) and bool((hi - lo > 0).any())
    # each K's interval: the percentile bootstrap of that column's mean, the queries (their
    # rows sorted, so that their order does not matter) resampled with the generator the
    # summary seeds
    counted = per_query[~torch.isnan(per_query).any(1)].double()
    counted = torch.tensor(sorted(counted.tolist()), dtype=torch.float64)
    n = counted.shape[0]
    idx = torch.randint(0, n, (300, n), generator=torch.Generator().manual_seed(1))
    for k in range(5):
        means = counted[:, k][idx].mean(1)
        expected = (float(torch.quantile(means, 0.025)), float(torch.quantile(means, 0.975)))
        assert (float(lo[k]), float(hi[k])) == pytest.approx(expected, abs=1e-12)


# ---------------------------------------------------------------------------- 5. averages

GEN = torch.Generator().manual_seed(5)
FLOAT_EMB = torch.randn(30, 4, generator=GEN)  # continuous: no ties
FLOAT_LABELS = torch.tensor([0] * 10 + [1] * 6 + [2] * 6 + [3] * 4 + [4] * 4)


def brute_force(k: int) -> tuple[list[int], list[int], list[int]]:
    """Per query: relevant items in the top k, relevant items in all, 1-based rank of the first."""
    unit = torch.nn.functional.normalize(FLOAT_EMB, dim=1)
    hits, relevant, first = [], [], []
    for q in range(len(FLOAT_LABELS)):
        scores = unit @ unit[q]
        scores[q] = -math.inf  # the query itself is excluded
        order = [int(i) for i in torch.argsort(scores, descending=True)[:-1]]
        same = [int(FLOAT_LABELS[i] == FLOAT_LABELS[q]) for i in order]
        hits.append(sum(same[:k]))
        relevant.append(sum(same))
        first.append(same.index(1) + 1)
    return hits, relevant, first


def test_micro_applies_where_defined_and_leaves_per_query_measures_alone():
    hits, relevant, first = brute_force(5)
    names = ["recall@5", "precision@5", "hit_rate@3", "mrr", "map@r", "median_rank"]
    micro = rm.RetrievalMetrics(names, average="micro")
    macro = rm.RetrievalMetrics(names)
    for m in (micro, macro):
        m.update(FLOAT_EMB, FLOAT_LABELS)
    a, b = micro.compute(), macro.compute()
    assert float(a["recall@5"]) == pytest.approx(sum(hits) / sum(relevant), abs=1e-6)
    assert float(b["recall@5"]) == pytest.approx(
        sum(h / r for h, r in zip(hits, relevant, strict=True)) / 30, abs=1e-6
    )
    assert float(a["recall@5"]) != pytest.approx(float(b["recall@5"]), abs=1e-4)
    # precision@5 has the same denominator for every query: micro equals macro
    assert float(a["precision@5"]) == pytest.approx(sum(hits) / (5 * 30), abs=1e-6)
    assert float(a["mrr"]) == pytest.approx(sum(1 / r for r in first) / 30, abs=1e-6)
    for name in ("hit_rate@3", "mrr", "map@r", "median_rank"):
        assert a[name] == b[name]


def test_a_name_may_fix_its_own_average():
    hits, relevant, _ = brute_force(5)
    m = rm.RetrievalMetrics(["recall@5/micro", "recall@5", "recall@5/class"], prefix="val/")
    m.update(FLOAT_EMB, FLOAT_LABELS)
    out = m.compute()
    per_query = [h / r for h, r in zip(hits, relevant, strict=True)]
    assert float(out["val/recall@5/micro"]) == pytest.approx(sum(hits) / sum(relevant), abs=1e-6)
    assert float(out["val/recall@5"]) == pytest.approx(sum(per_query) / 30, abs=1e-6)
    by_class = [
        sum(v for v, c in zip(per_query, FLOAT_LABELS.tolist(), strict=True) if c == label)
        / int((FLOAT_LABELS == label).sum())
        for label in range(5)
    ]
    assert float(out["val/recall@5/class"]) == pytest.approx(sum(by_class) / 5, abs=1e-6)
    # a name's average wins over the metric's
    fixed = rm.RetrievalMetrics(["recall@5/macro"], average="micro")
    fixed.update(FLOAT_EMB, FLOAT_LABELS)
    assert float(fixed.compute()["recall@5/macro"]) == pytest.approx(sum(per_query) / 30, abs=1e-6)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("hit_rate@1/micro", r"defined for recall, precision and r_precision"),
        ("median_rank/macro", r"no average applies"),
        ("recall@5/mikro", r"did you mean recall@5/micro"),
    ],
)
def test_an_average_a_name_cannot_take_is_refused(name, match):
    with pytest.raises(ValueError, match=match):
        rm.RetrievalMetrics([name])


def test_cli_takes_average(tmp_path):
    from retrieval_metrics import cli

    hits, relevant, _ = brute_force(5)
    np.savez(tmp_path / "e.npz", embeddings=FLOAT_EMB.numpy(), labels=FLOAT_LABELS.numpy())
    assert cli.main(["evaluate", str(tmp_path / "e.npz"), "--metrics", "recall@5,hit_rate@3",
                     "--average", "micro", "--json", str(tmp_path / "o.json"),
                     "--progress-delay", "-1"]) == 0  # fmt: skip
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["options"]["average"] == "micro"
    value = report["runs"][0]["metrics"]["recall@5"]["value"]
    assert value == pytest.approx(sum(hits) / sum(relevant), abs=1e-6)


# ---------------------------------------------------------------------------- 6. duplicates

# "a" is returned twice before the relevant "b": under "first" the repeat keeps its slot (b at
# rank 3), the id itself counts once
DUP_LISTS = [["a", "a", "b", "c"], ["d", "e"]]
DUP_RELEVANT = [{"b"}, {"d"}]


@pytest.mark.parametrize("metric_class", [rm.HitRateAtK, rm.RetrievalMetrics])
def test_duplicates_default_first_and_error_on_the_metric_classes(metric_class):
    def make(**kwargs):
        if metric_class is rm.RetrievalMetrics:
            return rm.RetrievalMetrics(["hit_rate@2", "hit_rate@3", "precision@3"], **kwargs)
        return rm.HitRateAtK(k=(2, 3), **kwargs)

    m = make()
    m.update(ranked_ids=DUP_LISTS, relevant_ids=DUP_RELEVANT)
    out = m.compute()
    assert float(out["hit_rate@2"]) == 0.5  # b at rank 3: only query 2 hits in the top 2
    assert float(out["hit_rate@3"]) == 1.0
    if "precision@3" in out:
        assert float(out["precision@3"]) == pytest.approx((1 / 3 + 1 / 3) / 2)
    strict = make(duplicates="error")
    with pytest.raises(ValueError, match=r"`ranked_ids\[0\]` returns id 'a' more than once"):
        strict.update(ranked_ids=DUP_LISTS, relevant_ids=DUP_RELEVANT)
    allowed = r"\('first', 'error', 'warn'\)"
    with pytest.raises(ValueError, match=rf"`duplicates` must be one of {allowed}"):
        make(duplicates="drop")


def test_the_cli_and_the_jsonl_reader_follow_the_same_default(tmp_path, capsys):
    from retrieval_metrics import cli
    from retrieval_metrics.formats import FormatError, read_ranked_lists

    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(
        json.dumps({"id": f"q{i}", "retrieved": ranked, "relevant": sorted(relevant)})
        for i, (ranked, relevant) in enumerate(zip(DUP_LISTS, DUP_RELEVANT, strict=True))
    ) + "\n")  # fmt: skip
    lists = read_ranked_lists(path)
    assert lists.ranked_ids == DUP_LISTS  # kept as given; the metric counts "a" once
    out = str(tmp_path / "o.json")
    assert cli.main(["evaluate", "--run", str(path), "--metrics", "hit_rate@2,hit_rate@3",
                     "--json", out, "--progress-delay", "-1"]) == 0  # fmt: skip
    metrics = json.loads((tmp_path / "o.json").read_text())["runs"][0]["metrics"]
    assert metrics["hit_rate@2"]["value"] == 0.5 and metrics["hit_rate@3"]["value"] == 1.0
    with pytest.raises(FormatError, match=r"line 1: question 'q0' retrieves 'a' twice"):
        read_ranked_lists(path, duplicates="error")
    capsys.readouterr()
    assert cli.main(["evaluate", "--run", str(path), "--duplicates", "error",
                     "--progress-delay", "-1"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "questions.jsonl, line 1" in err and "'a' twice" in err


# ---------------------------------------------------------------------------- 7. torchreid


def test_torchreid_protocol_ranks_by_euclidean_distance():
    from retrieval_metrics.protocols import PROTOCOLS

    # query (1, 0); gallery: a far item in the query's direction (cosine 1, euclidean 9) of
    # another identity, and a near item at an angle (cosine 0.89, euclidean 0.5) of its own
    q = torch.tensor([[1.0, 0.0]])
    g = torch.tensor([[10.0, 0.0], [0.6, 0.3]])
    distances = (g - q).norm(dim=1)
    assert bool(distances[1] < distances[0])  # euclidean: the own identity first
    values = {}
    for options in ({"protocol": "torchreid"}, {"similarity": "cosine"}):
        m = rm.HitRateAtK(k=1, **options)
        m.update(q, torch.tensor([1]), role="query")
        m.update(g, torch.tensor([2, 1]), role="gallery")
        values[next(iter(options.values()))] = float(m.compute())
    assert values == {"torchreid": 1.0, "cosine": 0.0}
    assert rm.HitRateAtK(protocol="torchreid").similarity == "euclidean"
    assert "euclidean" in PROTOCOLS["torchreid"][1]
    with pytest.raises(ValueError, match="protocol='torchreid' sets similarity='euclidean'"):
        rm.HitRateAtK(protocol="torchreid", similarity="cosine")


# ---------------------------------------------------------------------------- 8. DDP logging


def _logged_compute_calls(path) -> list[tuple[int, bool]]:
    """(line, passes sync_dist=True) for every self.log / self.log_dict of a .compute() result."""
    import ast

    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("log", "log_dict"):
            continue
        value = node.args[1] if node.func.attr == "log" and len(node.args) > 1 else (
            node.args[0] if node.args else None
        )
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                and value.func.attr == "compute"):
            continue
        synced = any(
            k.arg == "sync_dist" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in node.keywords
        )
        calls.append((node.lineno, synced))
    return calls


def test_examples_log_computed_values_with_sync_dist():
    # under DDP Lightning warns once per key for a value logged at epoch end without
    # sync_dist=True, although compute() already returns the same value on every process
    from pathlib import Path

    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))
    found = {path.name: _logged_compute_calls(path) for path in examples}
    assert any(found.values())  # the check looks at something
    unsynced = {name: [line for line, ok in calls if not ok] for name, calls in found.items()}
    assert not any(unsynced.values()), unsynced


def test_cosine_of_rows_whose_squares_overflow_float32():
    """float32 rows with entries near 2**64 (norm beyond float32's range): their unit rows were
    0, every score tied and the values were chance's (hit_rate@1 0.5 for 1.0, found by an
    audit). Cosine does not depend on scale: the values of the rows scaled down."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 8, generator=g)
    labels = torch.arange(40) % 4
    x = x + 3 * torch.eye(8)[labels]
    values = []
    for scale in (1.0, 2.0**64, 2.0**-64):
        m = rm.RetrievalMetrics(["hit_rate@1", "map"], similarity="cosine")
        m.update(x * scale, labels)
        values.append({k: float(v) for k, v in m.compute().items()})
    assert values[1] == values[0] == values[2]
    assert torch.isinf(torch.linalg.vector_norm(x * 2.0**64, dim=1)).all()  # the case


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_embeddings_without_a_dimension_are_refused(similarity):
    """Width 0: every score 0 under dot and cosine, and a crash deep in the product under
    euclidean (found by an audit); refused by name."""
    m = rm.RetrievalMetrics(["mrr"], similarity=similarity)
    with pytest.raises(ValueError, match="`embeddings` must have at least one dimension"):
        m.update(torch.zeros(5, 0), torch.tensor([0, 0, 1, 1, 2]))


def test_a_fixed_gallery_refuses_a_query_id_given_for_two_samples():
    """set_gallery kept the first copy of a repeated query id whatever its embedding, so the
    value depended on the update order (MRR 1.0 one way, 0.33 the other; found by an audit).
    Refused as update(role="gallery") refuses it; an identical repeat (padding) still counts
    once."""
    gallery = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    values = []
    for first, second in (([1.0, 0.0], [0.0, 1.0]), ([1.0, 0.0], [1.0, 0.0])):
        m = rm.MRR()
        m.set_gallery(gallery, torch.tensor([0, 1, 2]), ids=["g0", "g1", "g2"])
        m.update(torch.tensor([first]), torch.tensor([0]), ids=["q0"], role="query")
        m.update(torch.tensor([second]), torch.tensor([0]), ids=["q0"], role="query")
        if first != second:
            with pytest.raises(ValueError, match="`ids` of the queries: 1 id"):
                m.compute()
        else:
            values.append(float(m.compute()))
    assert values == [1.0]
