"""The ranking engine against the brute-force reference: embeddings in, every measure out.

The reference builds the full score matrix in float64, decides relevance and exclusions by
direct definition, sorts each row and counts (enumerating every order of every tie group for
``ties="expected"``). Embeddings are chosen so that float32 and float64 agree on every tie:
small integers with dot / euclidean similarity are exact in both; cosine uses float64 inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import assert_query_matches, ours_per_query
from reference import reference_masks, reference_query, reference_scores
from retrieval_metrics.functional.ranking import rank_embeddings

TIES = ("optimistic", "pessimistic", "expected")


def make_embeddings(rng, n, kind, dim=3):
    if kind == "real":
        return rng.normal(size=(n, dim))
    if kind == "integer":
        return rng.integers(-2, 3, size=(n, dim)).astype(np.float64)
    if kind == "binary":
        return rng.integers(0, 2, size=(n, dim)).astype(np.float64)
    if kind == "duplicates":
        base = rng.normal(size=(max(1, n // 3), dim))
        return base[rng.integers(0, base.shape[0], n)]
    raise AssertionError(kind)


def check(query, gallery, table_kwargs, mask_kwargs, similarity, ties_modes=TIES, block=None):
    """Rank with the library and compare every query with the reference."""
    q_t = torch.tensor(query)
    g_t = None if gallery is None else torch.tensor(gallery)
    if similarity != "cosine":
        # exact small integers: float32 scores equal float64 scores, ties included
        q_t = q_t.float()
        g_t = None if g_t is None else g_t.float()
    kwargs = dict(table_kwargs, similarity=similarity)
    if block is not None:
        kwargs["block_size"] = block
    table = rank_embeddings(q_t, g_t, **kwargs)
    gal = query if gallery is None else gallery
    scores = reference_scores(query, gal, similarity)
    relevant, excluded = reference_masks(
        query.shape[0], gal.shape[0], same_source=gallery is None, **mask_kwargs
    )
    for ties in ties_modes:
        ours = ours_per_query(table, ties, cmc_len=gal.shape[0])
        for q in range(query.shape[0]):
            try:
                ref = reference_query(scores[q], relevant[q], excluded[q], ties=ties)
            except ValueError as err:  # too many orderings to enumerate: keep cases small
                assert "orderings" in str(err)
                continue
            assert_query_matches(ours[q], ref, f"query {q} ties {ties} sim {similarity}")
        gallery_size = (~excluded).sum(1)
        assert table.gallery_size.tolist() == gallery_size.tolist()
        assert table.num_relevant.tolist() == relevant.sum(1).tolist()


SIMS_FOR_KIND = {
    "real": ("cosine", "dot", "euclidean"),
    "integer": ("dot", "euclidean"),
    "binary": ("dot", "euclidean"),
    "duplicates": ("cosine",),
}


@pytest.mark.parametrize("kind", ["real", "integer", "binary", "duplicates"])
@pytest.mark.parametrize("seed", range(4))
def test_same_source_labels(seed, kind):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    emb = make_embeddings(rng, n, kind)
    labels = rng.integers(0, 3, n)
    for sim in SIMS_FOR_KIND[kind]:
        check(
            emb,
            None,
            {"query_labels": torch.tensor(labels)},
            {"query_labels": labels, "gallery_labels": labels},
            sim,
        )


@pytest.mark.parametrize("kind", ["real", "integer", "binary"])
@pytest.mark.parametrize("seed", range(4))
def test_query_gallery_with_ids_cameras_and_ignore_label(seed, kind):
    """Re-id style: separate sets, sample ids shared by some queries and gallery items."""
    rng = np.random.default_rng(100 + seed)
    nq, ng = int(rng.integers(1, 6)), int(rng.integers(1, 9))
    q, g = make_embeddings(rng, nq, kind), make_embeddings(rng, ng, kind)
    ql, gl = rng.integers(-1, 3, nq), rng.integers(-1, 3, ng)
    ql[ql == -1] = 0  # queries never carry the junk label in re-id
    qc, gc = rng.integers(0, 2, nq), rng.integers(0, 2, ng)
    gids = rng.permutation(20)[:ng]
    qids = np.where(rng.random(nq) < 0.5, rng.choice(gids, nq), 100 + np.arange(nq))
    table_kwargs = {
        "query_labels": torch.tensor(ql),
        "gallery_labels": torch.tensor(gl),
        "query_cameras": torch.tensor(qc),
        "gallery_cameras": torch.tensor(gc),
        "query_ids": torch.tensor(qids),
        "gallery_ids": torch.tensor(gids),
        "ignore_label": -1,
    }
    mask_kwargs = {
        "query_labels": ql,
        "gallery_labels": gl,
        "query_cameras": qc,
        "gallery_cameras": gc,
        "query_ids": qids,
        "gallery_ids": gids,
        "ignore_label": -1,
    }
    for sim in SIMS_FOR_KIND[kind]:
        check(q, g, table_kwargs, mask_kwargs, sim)


@pytest.mark.parametrize("seed", range(4))
def test_radius_relevance(seed):
    rng = np.random.default_rng(200 + seed)
    nq, ng = 4, 8
    q, g = make_embeddings(rng, nq, "integer"), make_embeddings(rng, ng, "integer")
    qp = rng.integers(0, 60, (nq, 2)).astype(np.float64)
    gp = rng.integers(0, 60, (ng, 2)).astype(np.float64)
    gp[0] = qp[0] + [25.0, 0.0]  # exactly on the radius: relevant (inclusive)
    check(
        q,
        g,
        {
            "relevance": "radius",
            "query_positions": torch.tensor(qp),
            "gallery_positions": torch.tensor(gp),
            "radius": 25.0,
        },
        {"query_positions": qp, "gallery_positions": gp, "radius": 25.0},
        "dot",
    )


@pytest.mark.parametrize("seed", range(4))
def test_explicit_relevant_ids(seed):
    rng = np.random.default_rng(300 + seed)
    nq, ng = 4, 8
    q, g = make_embeddings(rng, nq, "binary"), make_embeddings(rng, ng, "binary")
    gids = rng.permutation(50)[:ng]
    rel = [
        set(rng.choice(gids, int(rng.integers(0, 4)), replace=False).tolist()) for _ in range(nq)
    ]
    check(
        q,
        g,
        {"relevance": "ids", "relevant_ids": rel, "gallery_ids": torch.tensor(gids)},
        {"relevant_ids": rel, "gallery_ids": gids},
        "euclidean",
    )


def test_one_item_gallery_and_gallery_smaller_than_k():
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    g = np.array([[1.0, 0.0]])
    check(
        q,
        g,
        {"query_labels": torch.tensor([0, 1]), "gallery_labels": torch.tensor([0])},
        {"query_labels": np.array([0, 1]), "gallery_labels": np.array([0])},
        "dot",
    )


@pytest.mark.parametrize("seed", range(3))
def test_many_blocks_match_reference(seed):
    """Small blocks: many query and gallery blocks, and a padded last gallery block."""
    rng = np.random.default_rng(400 + seed)
    n = 300
    emb = rng.integers(-1, 2, size=(n, 4)).astype(np.float64)
    labels = rng.integers(0, 30, n)
    query, gallery = emb[:7], emb
    check(
        query,
        gallery,
        {"query_labels": torch.tensor(labels[:7]), "gallery_labels": torch.tensor(labels)},
        {"query_labels": labels[:7], "gallery_labels": labels},
        "dot",
        ties_modes=("optimistic", "pessimistic"),
        block=(3, 64),
    )
