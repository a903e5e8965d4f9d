"""No silent wrong number: inputs that cannot be scored as given are refused or warned about.

Each test is a mistake a user made in a trial of the library that used to give a number with no
word (ids that restart in every batch, int and str ids, a changing embedding width, torchmetrics'
positional call, a cut-off as large as the gallery). The multi-process case (image-text without
``text_ids``) is in test_distributed.py and test_lightning.py.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking.labels import canonical_id
from retrieval_metrics.metrics.distributed import EMBEDDING_REPEAT_TOLERANCE


def clustered(n: int, classes: int, dim: int = 16, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    centres = torch.randn(classes, dim, generator=gen)
    return centres[labels] + 0.5 * torch.randn(n, dim, generator=gen), labels


# ---------------------------------------------------------------------- repeated ids


def test_ids_that_restart_in_every_batch_raise_even_when_labels_agree():
    emb, labels = torch.randn(100, 16), torch.arange(100) % 10
    metric = rm.HitRateAtK(k=1)
    metric.update(emb[:50], labels[:50], ids=torch.arange(50))
    metric.update(emb[50:], labels[50:], ids=torch.arange(50))  # same ids, same labels
    with pytest.raises(ValueError, match=r"`ids`: 50 id\(s\).*embeddings that differ"):
        metric.compute()


def _hit_rate(batches) -> float:
    metric = rm.HitRateAtK(k=1)
    for emb, labels, ids in batches:
        metric.update(emb, labels, ids=ids)
    return float(metric.compute())


def test_identical_repeats_are_dropped_silently():
    """DistributedSampler pads with the same samples: same id, label and embedding."""
    emb, labels = clustered(60, 6)
    ids = torch.arange(60)
    expected = _hit_rate([(emb, labels, ids)])
    pad = torch.tensor([0, 1, 2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _hit_rate([(emb, labels, ids), (emb[pad], labels[pad], ids[pad])])
    assert got == expected


def test_repeats_within_rounding_are_dropped_and_beyond_it_raise():
    emb, labels = clustered(60, 6)
    ids = torch.arange(60)
    expected = _hit_rate([(emb, labels, ids)])
    pad = torch.tensor([5, 7])
    scale = emb[pad].abs().amax(1, keepdim=True)
    # float16 rounding of a forward pass in another batch: well inside the tolerance
    rounded = emb[pad].half().float()
    assert _hit_rate([(emb, labels, ids), (rounded, labels[pad], ids[pad])]) == expected
    # a coordinate moved by twice the tolerance of its row: another sample under the same id
    moved = emb[pad].clone()
    moved[:, 0] += 2 * EMBEDDING_REPEAT_TOLERANCE * scale[:, 0]
    with pytest.raises(ValueError, match=r"2 id\(s\).*e\.g\. 5, 7"):
        _hit_rate([(emb, labels, ids), (moved, labels[pad], ids[pad])])


def test_image_ids_that_name_different_images_raise():
    """Image-text: an image arriving once per caption is one gallery item, but two different
    images under one id (ids that restart per batch) would silently lose one of them."""
    images, captions = torch.eye(4), torch.eye(4) + 0.1
    metric = rm.CrossModalRetrieval(k=(1,))
    metric.update(images[:2], captions[:2], torch.tensor([0, 1]))
    metric.update(images[2:], captions[2:], torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="`image_ids`"):
        metric.compute()
    same = rm.CrossModalRetrieval(k=(1,))  # the same image once per caption is fine
    same.update(images[[0, 0, 1]], captions[:3], torch.tensor([0, 0, 1]))
    assert float(same.compute()["rsum"]) > 0


def _two_sets(seed: int = 21):
    """Queries and a gallery of separate samples (a re-id dataset's query and gallery files)."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(8, 12, generator=gen)
    q_labels = torch.randint(0, 8, (30,), generator=gen)
    g_labels = torch.randint(0, 8, (90,), generator=gen)
    q = centres[q_labels] + 2 * torch.randn(30, 12, generator=gen)
    g = centres[g_labels] + 2 * torch.randn(90, 12, generator=gen)
    return q, q_labels, g, g_labels


def _mrr_by_brute_force(q, q_labels, g, g_labels, excluded=None) -> float:
    """MRR by cosine, float64, no tie in this data; ``excluded[i]``: a gallery row query i skips."""
    scores = torch.nn.functional.normalize(q.double(), dim=1) @ torch.nn.functional.normalize(
        g.double(), dim=1).T
    rr = []
    for i in range(len(q)):
        keep = torch.ones(len(g), dtype=torch.bool)
        if excluded is not None and excluded[i] is not None:
            keep[excluded[i]] = False
        relevant = (g_labels == q_labels[i]) & keep
        if relevant.any():
            best = scores[i][relevant].max()
            rr.append(1.0 / (1 + int(((scores[i] > best) & keep).sum())))
    return sum(rr) / len(rr)


@pytest.mark.parametrize("how", ["updates", "set_gallery", "gallery_sharded"])
def test_query_and_gallery_ids_from_two_counters_are_refused(how):
    """Ids numbered from 0 in the queries and again in the gallery: gallery item i was left out
    of query i's ranking as if it were the query itself (MRR 0.5281 where the sets score
    0.5224), with no word. The same sample has one label: ids whose labels differ are refused."""
    q, q_labels, g, g_labels = _two_sets()
    metric = rm.MRR(gallery_sharded=how == "gallery_sharded")
    if how == "set_gallery":
        metric.set_gallery(g, g_labels, ids=torch.arange(90))
    else:
        metric.update(g, g_labels, ids=torch.arange(90), role="gallery")
    metric.update(q, q_labels, ids=torch.arange(30), role="query")
    with pytest.raises(ValueError, match=r"MRR: \d+ query id\(s\) are also ids of gallery items "
                       r"with another label \(e\.g\. 0, .*two counters"):
        metric.compute()
    # ids unique across both sets: every gallery item ranked, as without ids
    apart = rm.MRR()
    apart.update(g, g_labels, ids=torch.arange(90) + 30, role="gallery")
    apart.update(q, q_labels, ids=torch.arange(30), role="query")
    assert float(apart.compute()) == pytest.approx(
        _mrr_by_brute_force(q, q_labels, g, g_labels), abs=1e-6)


def test_the_command_line_refuses_query_and_gallery_files_numbered_alike(tmp_path, capsys):
    """A re-id dataset's query and gallery files, each with ids from 0: refused by name (exit 2)."""
    np = pytest.importorskip("numpy")
    from retrieval_metrics import cli

    q, q_labels, g, g_labels = _two_sets()
    np.savez(tmp_path / "q.npz", embeddings=q.numpy(), labels=q_labels.numpy(), ids=np.arange(30))
    np.savez(tmp_path / "g.npz", embeddings=g.numpy(), labels=g_labels.numpy(), ids=np.arange(90))
    capsys.readouterr()
    args = ["evaluate", "--query", str(tmp_path / "q.npz"), "--gallery", str(tmp_path / "g.npz"),
            "--metrics", "mrr", "--progress-delay", "-1"]
    assert cli.main(args) == 2
    assert re.search(r"query id\(s\) are also ids of gallery items with another label",
                     capsys.readouterr().err)


def test_a_gallery_that_holds_the_queries_still_leaves_each_one_out():
    """The queries are gallery items too (same ids, same labels): each leaves its own ranking."""
    q, q_labels, g, g_labels = _two_sets()
    metric = rm.MRR()
    metric.update(torch.cat([g, q]), torch.cat([g_labels, q_labels]),
                  ids=torch.arange(120), role="gallery")
    metric.update(q, q_labels, ids=torch.arange(90, 120), role="query")
    expected = _mrr_by_brute_force(q, q_labels, torch.cat([g, q]), torch.cat([g_labels, q_labels]),
                                   excluded=[90 + i for i in range(30)])
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)


def test_an_item_of_the_ignore_label_may_carry_a_query_s_id():
    """Junk items (ignore_label, never ranked) whose ids are queries' change no ranking, and are
    not refused (a review found them refused as another label)."""
    q, q_labels, g, g_labels = _two_sets()
    junk = g_labels.clone()
    junk[:5] = -1
    metric = rm.MRR(ignore_label=-1)
    ids = torch.arange(90) + 30
    ids[:5] = torch.arange(5)  # the first five queries' ids, on junk items
    metric.update(g, junk, ids=ids, role="gallery")
    metric.update(q, q_labels, ids=torch.arange(30), role="query")
    expected = _mrr_by_brute_force(q, q_labels, g[5:], g_labels[5:])
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)


def test_one_id_for_two_cameras_is_refused():
    """Re-id: a query and a gallery image with one id and label but two cameras are two images."""
    q, _, g, g_labels = _two_sets()
    metric = rm.RetrievalMetrics(["map"])
    cameras = torch.zeros(90, dtype=torch.int64)
    metric.update(g, g_labels, ids=torch.arange(90) + 30, cameras=cameras, role="gallery")
    q_ids = torch.arange(30) + 30  # the gallery's first 30 ids, given the gallery's labels
    metric.update(q, g_labels[:30], ids=q_ids, cameras=torch.ones(30, dtype=torch.int64),
                  role="query")
    with pytest.raises(ValueError, match=r"30 query id\(s\).*another camera"):
        metric.compute()


# ---------------------------------------------------------------------- id and label types


def test_canonical_id_is_the_text_rule():
    assert [canonical_id(v) for v in ("7", 7, "-3", "0", "007", "7.0", "-0", "d7", " 7")] == [
        7, 7, -3, 0, "007", "7.0", "-0", "d7", " 7"
    ]
    assert canonical_id(str(2**63)) == str(2**63)  # beyond int64: stays text


def test_str_ids_get_the_codes_of_the_general_rule():
    """label_codes' path for lists of python strings against the rule it writes out: the decimal
    text of an int64 is that int, any other string its 64-bit hash (_text_hashes); numpy
    strings (ids taken one by one from an array) get the codes of their text."""
    import numpy as np

    from retrieval_metrics.functional.ranking.labels import _text_hashes, label_codes

    values = ["doc-1", "7", "-3", "007", "", "-", "-0", "d'q", 'a"b', "ü", "\n", str(2**63), "0"]
    rule = [c if isinstance(c := canonical_id(v), int) else int(_text_hashes([c])[0])
            for v in values]
    assert label_codes(values, "ids").tolist() == rule
    assert label_codes([np.str_(v) for v in values], "ids").tolist() == rule
    assert label_codes(np.array(values), "ids").tolist() == rule
    assert label_codes([*values, 5], "ids").tolist() == [*rule, 5]  # the general path


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("0123456789-a\x00\u00fc\U0001f600"), max_size=24)
                | st.text(max_size=8), min_size=1, max_size=40))
def test_str_codes_of_a_batch_are_each_strings_own(values):
    """The vectorised path (code points a column at a time, numbers parsed in numpy) gives each
    string the code it gets alone, whatever strings share its batch: decimal text of an int64 as
    that int (by Python's int), any other string by its hash; strings that differ by a trailing
    NUL differ."""
    from retrieval_metrics.functional.ranking.labels import _text_hashes, label_codes

    alone = [c if isinstance(c := canonical_id(v), int) else int(_text_hashes([c])[0])
             for v in values]
    assert label_codes(values, "ids").tolist() == alone
    for v in values:
        if isinstance(c := canonical_id(v), int):
            assert c == int(v)
        elif isinstance(canonical_id(v + "\x00"), str):
            assert int(_text_hashes([v])[0]) != int(_text_hashes([v + "\x00"])[0])


def test_int_and_str_ids_of_ranked_lists_compare_as_text():
    """SPEC vector 2's q1 with int ranked ids and str relevant ids: the CLI reads both as text
    and gives RR = 1/3; the API used to give 0."""
    mixed = rm.MRR()
    mixed.update(ranked_ids=[[3, 7, 1, 9, 2]], relevant_ids=[{"1"}])
    assert float(mixed.compute()) == pytest.approx(1 / 3)
    graded = rm.NDCGAtK(k=3, gain="linear")
    graded.update(ranked_ids=[["3", 7, 1]], relevant_ids=[{7: 1, "1": 1}])
    plain = rm.NDCGAtK(k=3, gain="linear")
    plain.update(ranked_ids=[["3", "7", "1"]], relevant_ids=[{"7": 1, "1": 1}])
    assert float(graded.compute()) == pytest.approx(float(plain.compute()))


def test_duplicates_error_sees_7_and_text_7_as_one_id():
    metric = rm.MRR(duplicates="error")
    with pytest.raises(ValueError, match="more than once"):
        metric.update(ranked_ids=[[7, "7", 1]], relevant_ids=[{1}])


def test_int_labels_then_str_labels_compare_as_text():
    emb, labels = clustered(100, 10)
    as_ints = rm.HitRateAtK(k=1)
    as_ints.update(emb, labels)
    mixed = rm.HitRateAtK(k=1)
    mixed.update(emb[:50], labels[:50])
    mixed.update(emb[50:], [str(int(v)) for v in labels[50:]])
    assert float(mixed.compute()) == float(as_ints.compute())
    # "07" is not 7: text that differs is another label, which no integer label can match, so
    # integer labels beside such strings are refused by name (in one process as on several,
    # where processes given different kinds would otherwise score silently apart)
    other = rm.HitRateAtK(k=1)
    other.update(emb[:50], labels[:50])
    other.update(emb[50:], [f"0{int(v)}" for v in labels[50:]])
    with pytest.raises(ValueError, match="`labels` of the queries were integers"):
        other.compute()


# ---------------------------------------------------------------------- at update()


def test_a_changing_embedding_width_is_refused_at_update():
    metric = rm.HitRateAtK(k=1)
    metric.update(torch.randn(10, 8), torch.arange(10) % 2)
    with pytest.raises(ValueError, match=r"`embeddings` must have 8 columns.*got 6"):
        metric.update(torch.randn(10, 6), torch.arange(10) % 2)
    split = rm.HitRateAtK(k=1)
    split.update(torch.randn(10, 8), torch.arange(10) % 2, role="query")
    with pytest.raises(ValueError, match="`embeddings` must have 8 columns"):
        split.update(torch.randn(10, 4), torch.arange(10) % 2, role="gallery")
    fixed = rm.HitRateAtK(k=1)
    fixed.set_gallery(torch.randn(10, 8), torch.arange(10) % 2)
    with pytest.raises(ValueError, match="width of the gallery given to `set_gallery`"):
        fixed.update(torch.randn(3, 5), torch.arange(3) % 2, role="query")
    pairs = rm.RSum()
    pairs.update(torch.randn(4, 8), torch.randn(4, 8), torch.arange(4))
    with pytest.raises(ValueError, match="`image_embeddings` must have 8 columns"):
        pairs.update(torch.randn(4, 3), torch.randn(4, 3), torch.arange(4, 8))


def test_torchmetrics_positional_call_shape_is_the_scores_form():
    """``metric(preds, target, indexes=indexes)``, as torchmetrics' docs call it."""
    preds = torch.tensor([0.2, 0.3, 0.5, 0.1, 0.3, 0.5, 0.2])
    target = torch.tensor([False, False, True, False, True, False, True])
    indexes = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    positional, keywords = rm.MRR(), rm.MRR()
    positional.update(preds, target, indexes=indexes)
    keywords.update(preds=preds, target=target, indexes=indexes)
    # query 0: relevant at rank 1; query 1: best relevant (0.3) at rank 2
    assert float(positional.compute()) == pytest.approx((1 + 1 / 2) / 2)
    assert float(positional.compute()) == float(keywords.compute())
    with pytest.raises(ValueError, match="takes no \\['ids'\\]"):
        rm.MRR().update(preds, target, indexes=indexes, ids=torch.arange(7))


def test_a_cut_off_reaching_the_whole_gallery_warns_once():
    images = torch.eye(3)
    metric = rm.RSum()
    metric.update(images[[0, 0, 1, 1, 2, 2]], torch.eye(3)[[0, 0, 1, 1, 2, 2]] + 0.1,
                  torch.tensor([0, 0, 1, 1, 2, 2]))
    with pytest.warns(UserWarning, match=r"t2i/hit_rate@5 \(gallery of 3\)") as caught:
        metric.compute()
    assert sum("reaches the whole gallery" in str(w.message) for w in caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metric.compute()  # once per metric

    small = rm.HitRateAtK(k=(1, 4))
    small.update(torch.randn(5, 3), torch.tensor([0, 0, 1, 1, 1]))  # same source: 4 others
    with pytest.warns(UserWarning, match=r"hit_rate@4 \(gallery of 4\)"):
        small.compute()
    large = rm.HitRateAtK(k=(1, 4))
    large.update(torch.randn(6, 3), torch.tensor([0, 0, 1, 1, 1, 0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        large.compute()  # 5 others: K = 4 does not reach them all

    # nothing to find, nothing found "by construction": a set of one item (a gallery of 0) or
    # labels all distinct is said by the all-skipped warning alone, not by this one too
    for x, labels in ((torch.randn(1, 3), torch.tensor([3])),
                      (torch.randn(3, 3), torch.tensor([0, 1, 2]))):
        alone = rm.RetrievalMetrics(["hit_rate@1", "hit_rate@2"])
        alone.update(x, labels)
        with pytest.warns(UserWarning) as caught:
            assert math.isnan(float(alone.compute()["hit_rate@1"]))
        said = [str(w.message) for w in caught]
        assert any("were skipped" in text for text in said), said
        assert not any("reaches the whole gallery" in text for text in said), said


# ---------------------------------------------------------------------- found by audits


def test_a_repeated_cut_off_is_refused():
    """rsum adds each cut-off's value: k=(1, 1) made a perfect model score 400, not 200."""
    for make in (lambda: rm.CrossModalRetrieval(k=(1, 1)), lambda: rm.RSum(k=(1, 5, 5)),
                 lambda: rm.HitRateAtK(k=(5, 5))):
        with pytest.raises(ValueError, match="`k` must not repeat a cut-off"):
            make()


def test_ids_given_as_a_matrix_are_refused_and_a_column_is_read():
    emb = torch.randn(4, 8)
    m = rm.CrossModalRetrieval(k=(1,))
    with pytest.raises(ValueError, match=r"`image_ids` must be 1-D.*\(2, 2\)"):
        m.update(emb, emb, image_ids=torch.arange(4).view(2, 2))
    column, flat = rm.CrossModalRetrieval(k=(1,)), rm.CrossModalRetrieval(k=(1,))
    column.update(emb, emb, image_ids=torch.arange(4).view(4, 1))
    flat.update(emb, emb, image_ids=torch.arange(4))
    assert column.compute() == flat.compute()


def test_folds_refuse_string_image_ids():
    """Folds take consecutive images by ascending id; string ids are compared by a hash, whose
    order scored arbitrary subsets (images "a" and "b", tied, landed in different folds: rsum
    200 where the folds {a, b}, {c, d} give 150)."""
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    m = rm.CrossModalRetrieval(k=(1,), folds=2)
    with pytest.raises(ValueError, match="string `image_ids`"):
        m.update(emb, emb, image_ids=["a", "b", "c", "d"])
    by_int = rm.CrossModalRetrieval(k=(1,), folds=2)
    by_int.update(emb, emb, image_ids=[0, 1, 2, 3])
    assert float(by_int.compute()["rsum"]) == pytest.approx(150.0)
    whole = rm.CrossModalRetrieval(k=(1,))
    whole.update(emb, emb, image_ids=["a", "b", "c", "d"])  # no folds: no order needed
    assert float(whole.compute()["rsum"]) == pytest.approx(150.0)


@pytest.mark.parametrize("grade, match", [
    (float("nan"), "must be finite"), (float("inf"), "must be finite"),
    ("2", "must be a number"), (True, "must be a number"),
])
def test_grades_of_relevant_ids_are_checked_as_qrels_grades_are(grade, match):
    """A NaN grade read as judged not relevant, inf gave a NaN nDCG, the text "2" grade 2;
    qrels= refused each, naming the query and document."""
    m = rm.RetrievalMetrics(["nDCG@2"])
    with pytest.raises(ValueError, match=re.escape("`relevant_ids[0]['d0']` ") + match):
        m.update(ranked_ids=[["d0", "d1"]], relevant_ids=[{"d0": grade, "d1": 1}])


def test_a_grade_too_large_for_the_exponential_gain_is_refused():
    """2^g - 1 overflows float64 from g = 1024: NDCG read NaN. The linear gain takes it (one
    relevant document at position 2 of 2: 1 / log2(3) over 1)."""
    m = rm.RetrievalMetrics(["ndcg@2", "dcg@2"])
    m.update(ranked_ids=[["d1", "d0"]], relevant_ids=[{"d0": 2000}])
    with pytest.raises(ValueError, match="too large for the exponential gain"):
        m.compute()
    linear = rm.RetrievalMetrics(["ndcg(gain=linear)@2"])
    linear.set_dtype(torch.float64)
    linear.update(ranked_ids=[["d1", "d0"]], relevant_ids=[{"d0": 2000}])
    assert float(linear.compute()["ndcg(gain=linear)@2"]) == pytest.approx(1 / math.log2(3))
