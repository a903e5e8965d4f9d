"""Inputs that used to be taken silently, now refused or warned by name: a qrels file that
judges one (query, document) twice at different grades, and zero vectors under cosine."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.formats import FormatError, read_qrels


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("qrels.txt", "q1 0 d1 1\nq1 0 d2 0\nq1 0 d1 2\n", 3),
        ("qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td1\t0\n", 3),
        ("qrels.jsonl", '{"id": "q0", "relevant": ["d1"]}\n'
                        '{"id": "q1", "relevant": {"d1": 1, "d2": 0, "d1": 2}}\n', 2),
    ],
)
def test_a_document_judged_twice_at_different_grades_is_refused_by_line(
    tmp_path, name, text, line
):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(FormatError) as err:
        read_qrels(path)
    message = str(err.value)
    assert f"{path}, line {line}" in message
    assert "'d1'" in message and ("given twice" in message or "judged again" in message)
    if not name.endswith(".jsonl"):
        assert "'q1'" in message


def test_the_same_judgment_repeated_is_kept_once(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 2\nq1 0 d2 0\nq1 0 d1 2\n")
    assert read_qrels(path) == {"q1": {"d1": 2, "d2": 0}}
    path = tmp_path / "qrels.jsonl"
    path.write_text('{"id": "q1", "relevant": {"d1": 2, "d2": 0, "d1": 2}}\n')
    assert read_qrels(path) == {"q1": {"d1": 2, "d2": 0}}


# Two queries against three gallery items, cosine. q0 = [1, 0] (label 0) meets g0 = [1, 0]
# (label 0) first: a hit at 1. q1 = [0, 0] (label 1) has no direction: every cosine is 0, one
# tie group of 3 items holding its 2 relevant ones (g1, g2): expected hit@1 = 2/3 (SPEC 3).
QUERIES = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
GALLERY = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]])


def test_a_zero_query_vector_under_cosine_is_warned_and_scored_as_a_tie():
    metric = rm.HitRateAtK(k=1)
    metric.update(QUERIES, torch.tensor([0, 1]), role="query")
    metric.update(GALLERY, torch.tensor([0, 1, 1]), role="gallery")
    with pytest.warns(UserWarning, match=r'similarity="cosine": 1 query embedding is a zero'):
        value = float(metric.compute())
    assert value == pytest.approx((1 + 2 / 3) / 2)


def test_a_zero_gallery_vector_under_cosine_is_warned():
    gallery = torch.cat([GALLERY, torch.zeros(1, 2)])
    metric = rm.HitRateAtK(k=1)
    metric.update(QUERIES[:1], torch.tensor([0]), role="query")
    metric.update(gallery, torch.tensor([0, 1, 1, 1]), role="gallery")
    with pytest.warns(UserWarning, match=r"1 gallery embedding is a zero vector"):
        assert float(metric.compute()) == 1.0


def test_a_zero_vector_in_a_set_ranked_against_itself_is_warned():
    metric = rm.HitRateAtK(k=1)
    metric.update(torch.cat([GALLERY, torch.zeros(2, 2)]), torch.tensor([0, 1, 1, 2, 2]))
    with pytest.warns(UserWarning, match=r"2 query and gallery embeddings are zero vectors"):
        metric.compute()


def test_no_zero_vector_no_warning_and_dot_is_not_warned():
    metric = rm.HitRateAtK(k=1)
    metric.update(GALLERY, torch.tensor([0, 1, 1]))
    dot = rm.HitRateAtK(k=1, similarity="dot")
    dot.update(QUERIES, torch.tensor([0, 1]), role="query")
    dot.update(GALLERY, torch.tensor([0, 1, 1]), role="gallery")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metric.compute()
        dot.compute()


def test_relevant_ids_grading_one_id_twice_under_two_spellings_are_refused():
    # 7 and "7" are one id (ids compare as text): two grades for it cannot both hold
    metric = rm.RetrievalMetrics(["ndcg@2"])
    with pytest.raises(ValueError, match=r"`relevant_ids\[1\]` grades one id twice: 7 at 1 and "
                                         r"'7' at 3"):
        metric.update(ranked_ids=[["a"], ["7", "a"]], relevant_ids=[{"a": 1}, {7: 1, "7": 3}])
    # one grade under both spellings is one judgment: NDCG@2 of its list is 1 (found first)
    same = rm.RetrievalMetrics(["ndcg@2"])
    same.update(ranked_ids=[["7", "a"]], relevant_ids=[{7: 2, "7": 2}])
    assert float(same.compute()["ndcg@2"]) == 1.0
