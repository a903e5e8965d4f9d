"""AUROC with a cut-off inside a tie group: which of the group's items enter the top K is
random, and the value is the expectation over the tie orders. Checked against every order of
small scored lists, each order scored as torchmetrics scores its top K (the items' own scores,
tied pairs counting one half, 0 where the top K lacks relevant or non-relevant items; NaN where
every order's does), with and without ``max_fpr``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.measures import auroc_per_query
from retrieval_metrics.functional.ranking import rank_scores


def roc_area(scores: list[float], labels: list[int], max_fpr: float | None) -> float:
    """The area under the ROC curve of one list (a point per distinct score: tied items join
    by a straight segment), McClish-standardised up to ``max_fpr``; 0 without both kinds."""
    positives, negatives = sum(labels), len(labels) - sum(labels)
    if positives == 0 or negatives == 0:
        return 0.0
    points, tp, fp = [(0.0, 0.0)], 0, 0
    for score in sorted(set(scores), reverse=True):
        tp += sum(1 for s, y in zip(scores, labels, strict=True) if s == score and y)
        fp += sum(1 for s, y in zip(scores, labels, strict=True) if s == score and not y)
        points.append((fp / negatives, tp / positives))
    limit = 1.0 if max_fpr is None else max_fpr
    area = 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 >= limit:
            break
        if x1 > limit:  # the segment cut at the limit
            y1 = y0 + (y1 - y0) * (limit - x0) / (x1 - x0)
            x1 = limit
        area += (x1 - x0) * (y0 + y1) / 2
    if max_fpr is None or max_fpr == 1:
        return area
    low = 0.5 * limit**2
    return 0.5 * (1 + (area - low) / (limit - low))


def expected_over_orders(scores, labels, k, max_fpr):
    """The mean over every order of the tied items of the area of the order's top K."""
    values, lacking = [], []
    for order in itertools.permutations(range(len(scores))):
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], order.index(i)))[:k]
        top_labels = [labels[i] for i in ranked]
        lacking.append(len(set(top_labels)) < 2)
        values.append(roc_area([scores[i] for i in ranked], top_labels, max_fpr))
    return math.nan if all(lacking) else sum(values) / len(values)


def test_a_cut_off_inside_a_tie_group_by_hand():
    """Four items tied, two relevant, K = 3: every order's top 3 is tied, each pair counts one
    half, 0.5. One negative above three tied items holding one relevant, K = 3: the relevant
    item is in the top 3 in two orders of three, where it sits below one negative and tied with
    another: 1/4; so 2/3 x 1/4 = 1/6."""
    ones = torch.zeros(4, dtype=torch.int64)
    tied = rank_scores(torch.full((4,), 0.5), torch.tensor([1, 1, 0, 0]), ones)
    assert auroc_per_query(tied, 3).item() == pytest.approx(0.5, abs=1e-12)
    below = rank_scores(torch.tensor([0.9, 0.5, 0.5, 0.5]), torch.tensor([0, 1, 0, 0]), ones)
    assert auroc_per_query(below, 3).item() == pytest.approx(1 / 6, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.sampled_from([None, 0.5, 0.8]))
def test_auroc_is_the_expectation_over_tie_orders(seed, n, max_fpr):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, n).astype(np.float32).tolist()
    labels = rng.integers(0, 2, n).tolist()
    k = int(rng.integers(1, n + 1))
    table = rank_scores(torch.tensor(scores), torch.tensor(labels),
                        torch.zeros(n, dtype=torch.int64))
    got = auroc_per_query(table, k, max_fpr=max_fpr).item()
    want = expected_over_orders(scores, labels, k, max_fpr)
    if math.isnan(want):
        assert math.isnan(got), (scores, labels, k, got)
    else:
        assert got == pytest.approx(want, abs=1e-12), (scores, labels, k)
