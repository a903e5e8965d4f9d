"""One product per pair of blocks serving both sides: the same-source (symmetric) pass and
``rank_two_ways`` (image-text in both directions), against the brute-force reference and against
the one-sided pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ranking_reference import check

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_embeddings, rank_two_ways
from retrieval_metrics.functional.ranking.engine import schedule as S

FIELDS = ("ptr", "above", "tied", "num_relevant", "gallery_size", "depth")
DEPTH_NAMES = ["hit_rate@1", "hit_rate@5", "recall@10", "r_precision", "map@r", "mrr"]


@pytest.fixture
def two_sided_calls(monkeypatch):
    """Counts the calls of the two-sided pass, so a test knows which path it exercised."""
    calls = []
    original = S.two_sided_pass

    def spy(*args, **kwargs):
        calls.append(args[1] is None)  # True: the symmetric (same-source) form
        return original(*args, **kwargs)

    monkeypatch.setattr(S, "two_sided_pass", spy)
    return calls


def tables_equal(a, b):
    for name in FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("seed", range(3))
def test_symmetric_pass_matches_the_reference_with_labels_and_cameras(seed, two_sided_calls):
    """Same-source re-id: identity labels spread over several 64-item blocks (classes cross
    block boundaries), exact ties from small integers, and same-camera exclusions off the
    diagonal blocks, which the columns of a block must see and the rows must not."""
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(150, 260))
    emb = rng.integers(-1, 2, size=(n, 4)).astype(np.float64)
    labels = rng.integers(0, 25, n)
    cameras = rng.integers(0, 3, n)
    check(
        emb,
        None,
        {"query_labels": torch.tensor(labels), "query_cameras": torch.tensor(cameras)},
        {
            "query_labels": labels,
            "gallery_labels": labels,
            "query_cameras": cameras,
            "gallery_cameras": cameras,
        },
        "dot",
        ties_modes=("optimistic", "pessimistic"),
        block=(64, 64),
    )
    assert two_sided_calls == [True]


@pytest.mark.parametrize("seed", range(2))
def test_symmetric_pass_matches_the_reference_without_labels(seed, two_sided_calls):
    """Radius relevance: no label to group by, so relevant items lie in every block pair."""
    rng = np.random.default_rng(600 + seed)
    n = 200
    emb = rng.integers(-1, 2, size=(n, 3)).astype(np.float64)
    positions = rng.integers(0, 100, (n, 2)).astype(np.float64)
    check(
        emb,
        None,
        {"relevance": "radius", "query_positions": torch.tensor(positions), "radius": 20.0},
        {"query_positions": positions, "gallery_positions": positions, "radius": 20.0},
        "dot",
        ties_modes=("optimistic", "pessimistic"),
        block=(64, 64),
    )
    assert two_sided_calls == [True]


@st.composite
def same_source_problems(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 330))
    dim = draw(st.integers(1, 6))
    labels = rng.integers(0, draw(st.integers(1, 40)), n)
    centres = rng.normal(size=(int(labels.max()) + 1, dim))
    emb = centres[labels] + draw(st.sampled_from([0.3, 1.0, 3.0])) * rng.normal(size=(n, dim))
    if draw(st.booleans()):
        emb, sim = np.round(emb), "dot"  # exact ties
    else:
        sim = "cosine"
    kwargs = {"query_labels": torch.tensor(labels), "similarity": sim}
    if draw(st.booleans()):
        kwargs["query_cameras"] = torch.tensor(rng.integers(0, 2, n))
    return torch.tensor(emb, dtype=torch.float32), kwargs


@settings(max_examples=30, deadline=None)
@given(same_source_problems(), st.sampled_from([64, 128]), st.integers(1, 100))
def test_symmetric_pass_equals_the_one_sided_pass(problem, block, block_q):
    emb, kwargs = problem
    calls = []
    original = S.two_sided_pass

    def spy(*args, **kw):
        calls.append(True)
        return original(*args, **kw)

    S.two_sided_pass = spy
    try:
        symmetric = rank_embeddings(emb, block_size=(block, block), **kwargs)
        limited = rank_embeddings(
            emb, block_size=(block, block), depth=10, cover_relevant=True, **kwargs
        )
    finally:
        S.two_sided_pass = original
    assert calls == [True, True]
    # a query block of another height takes the one-sided pass
    block_q = block_q if block_q != block else block + 1
    one_sided = rank_embeddings(emb, block_size=(block_q, block), **kwargs)
    tables_equal(symmetric, one_sided)
    full = M.retrieval_measures(one_sided, DEPTH_NAMES)
    for name, value in M.retrieval_measures(limited, DEPTH_NAMES).items():
        torch.testing.assert_close(value, full[name], equal_nan=True, rtol=0, atol=0)


@st.composite
def image_text_problems(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    num_images = draw(st.integers(1, 150))
    num_captions = draw(st.integers(1, 300))
    dim = draw(st.integers(1, 6))
    images = rng.normal(size=(num_images, dim))
    owner = rng.integers(0, num_images, num_captions)
    captions = images[owner] + draw(st.sampled_from([0.3, 1.0, 3.0])) * rng.normal(
        size=(num_captions, dim)
    )
    sim = draw(st.sampled_from(["cosine", "dot", "euclidean"]))
    if sim == "dot" and draw(st.booleans()):
        images, captions = np.round(images), np.round(captions)  # exact ties
    return (
        torch.tensor(images, dtype=torch.float32),
        torch.tensor(captions, dtype=torch.float32),
        torch.arange(num_images),
        torch.tensor(owner),
        sim,
    )


@settings(max_examples=30, deadline=None)
@given(image_text_problems(), st.sampled_from([None, 64, 128]))
def test_rank_two_ways_equals_two_rankings(problem, block):
    images, captions, image_ids, owner, sim = problem
    calls = []
    original = S.two_sided_pass

    def spy(*args, **kw):
        calls.append(args[1] is None)
        return original(*args, **kw)

    S.two_sided_pass = spy
    try:
        i2t, t2i = rank_two_ways(
            images, captions, a_labels=image_ids, b_labels=owner, similarity=sim, block_size=block
        )
        limited = rank_two_ways(
            images,
            captions,
            a_labels=image_ids,
            b_labels=owner,
            similarity=sim,
            block_size=block,
            depth=10,
        )
    finally:
        S.two_sided_pass = original
    # euclidean scores are not one product for both directions: two one-sided passes
    assert calls == ([] if sim == "euclidean" else [False, False])
    expected = (
        rank_embeddings(
            images, captions, query_labels=image_ids, gallery_labels=owner, similarity=sim
        ),
        rank_embeddings(
            captions, images, query_labels=owner, gallery_labels=image_ids, similarity=sim
        ),
    )
    names = ["hit_rate@1", "hit_rate@5", "hit_rate@10", "recall@10"]
    for ours, ours_limited, theirs in zip((i2t, t2i), limited, expected, strict=True):
        tables_equal(ours, theirs)
        full = M.retrieval_measures(theirs, names)
        for name, value in M.retrieval_measures(ours_limited, names).items():
            torch.testing.assert_close(value, full[name], equal_nan=True, rtol=0, atol=0)


def test_rank_two_ways_by_hand():
    """Two images, three captions: caption 1 (image 1) scores 0.2 with image 0, caption 2
    (image 0) 1.0 with image 0, so image 0 sees one other caption above its second one."""
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    captions = torch.tensor([[0.9, 0.0], [0.2, 0.8], [1.0, 0.0]])
    i2t, t2i = rank_two_ways(
        images,
        captions,
        a_labels=torch.tensor([0, 1]),
        b_labels=torch.tensor([0, 1, 0]),
        similarity="dot",
    )
    # image 0: captions 2 (1.0) and 0 (0.9) relevant, at 0 and 1 above; image 1: caption 1 first
    assert i2t.ptr.tolist() == [0, 2, 3]
    assert i2t.above.tolist() == [0, 1, 0]
    # each caption's image is its best: caption 1 scores 0.8 with image 1 and 0.2 with image 0
    assert t2i.above.tolist() == [0, 0, 0]
    assert t2i.tied.tolist() == [1, 1, 1]
