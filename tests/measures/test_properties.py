"""Invariances (hypothesis): query order, gallery order, block size, batch split, depth."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.table import concat_tables

NAMES = [
    "hit_rate@1",
    "hit_rate@4",
    "recall@3",
    "precision@2",
    "r_precision",
    "map@r",
    "map",
    "mrr",
    "ndcg@5",
    "minp",
    "mean_rank",
    "median_rank",
]
SETTINGS = settings(max_examples=25, deadline=None)


@st.composite
def problems(draw):
    """Small same-source or query/gallery problems; integer embeddings make many exact ties."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["integer", "real"]))
    n_g = draw(st.integers(1, 150))
    n_q = draw(st.integers(1, 40))
    dim = draw(st.integers(1, 6))
    same_source = draw(st.booleans())
    if kind == "integer":
        g = rng.integers(-1, 2, (n_g, dim)).astype(np.float32)
        q = rng.integers(-1, 2, (n_q, dim)).astype(np.float32)
    else:
        g = rng.normal(size=(n_g, dim)).astype(np.float32)
        q = rng.normal(size=(n_q, dim)).astype(np.float32)
    n_classes = draw(st.integers(1, 12))
    gl = rng.integers(0, n_classes, n_g)
    ql = rng.integers(0, n_classes, n_q)
    sim = draw(
        st.sampled_from(
            ["dot", "euclidean"] if kind == "integer" else ["cosine", "dot", "euclidean"]
        )
    )
    if same_source:
        return {
            "query": torch.tensor(g),
            "gallery": None,
            "query_labels": torch.tensor(gl),
            "similarity": sim,
        }
    return {
        "query": torch.tensor(q),
        "gallery": torch.tensor(g),
        "query_labels": torch.tensor(ql),
        "gallery_labels": torch.tensor(gl),
        "similarity": sim,
    }


def tables_equal(a, b):
    for name in ("ptr", "above", "tied", "num_relevant", "gallery_size", "depth"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def rank(p, **kwargs):
    args = dict(p)
    return rank_embeddings(args.pop("query"), args.pop("gallery"), **args, **kwargs)


@SETTINGS
@given(problems(), st.integers(1, 50), st.sampled_from([64, 128, 192, 2048]))
def test_block_size_does_not_change_the_table(p, block_q, block_g):
    tables_equal(rank(p), rank(p, block_size=(block_q, block_g)))


@SETTINGS
@given(problems(), st.data())
def test_gallery_order_does_not_change_the_table(p, data):
    """The table is order-free, so every tie rule's values are unchanged by a shuffled gallery."""
    if p["gallery"] is None:
        # same source: shuffling the items permutes queries and gallery together
        perm = torch.tensor(data.draw(st.permutations(range(p["query"].shape[0]))))
        shuffled = dict(p, query=p["query"][perm], query_labels=p["query_labels"][perm])
        base, moved = rank(p), rank(shuffled)
        base = base.select(perm)
    else:
        perm = torch.tensor(data.draw(st.permutations(range(p["gallery"].shape[0]))))
        shuffled = dict(p, gallery=p["gallery"][perm], gallery_labels=p["gallery_labels"][perm])
        base, moved = rank(p), rank(shuffled)
    tables_equal(base, moved)
    for ties in ("expected", "optimistic", "pessimistic"):
        a = M.retrieval_measures(base, NAMES, ties=ties)
        b = M.retrieval_measures(moved, NAMES, ties=ties)
        for name in NAMES:
            torch.testing.assert_close(a[name], b[name], equal_nan=True, rtol=0, atol=0)


@SETTINGS
@given(problems(), st.data())
def test_query_order_permutes_rows(p, data):
    if p["gallery"] is None:
        return  # covered by the gallery-order test (same source permutes both)
    perm = torch.tensor(data.draw(st.permutations(range(p["query"].shape[0]))))
    moved = rank(dict(p, query=p["query"][perm], query_labels=p["query_labels"][perm]))
    tables_equal(rank(p).select(perm), moved)


@SETTINGS
@given(problems(), st.data())
def test_batches_of_queries_concatenate(p, data):
    if p["gallery"] is None:
        return
    n_q = p["query"].shape[0]
    cuts = sorted(set(data.draw(st.lists(st.integers(0, n_q), max_size=4))) | {0, n_q})
    parts = []
    for lo, hi in itertools.pairwise(cuts):
        if hi > lo:
            parts.append(
                rank(dict(p, query=p["query"][lo:hi], query_labels=p["query_labels"][lo:hi]))
            )
    tables_equal(rank(p), concat_tables(parts))


@st.composite
def many_block_problems(draw):
    """Same-source problems spread over 5-13 gallery blocks of 64, so that the depth threshold
    is merged from several pending blocks."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(300, 800))
    dim = draw(st.integers(2, 8))
    # Class centres plus noise, so that several relevant items reach the top positions.
    labels = rng.integers(0, draw(st.integers(20, 150)), n)
    centres = rng.normal(size=(int(labels.max()) + 1, dim))
    if draw(st.booleans()):
        emb = np.round(centres[labels] + 0.5 * rng.normal(size=(n, dim))).astype(np.float32)
        sim = "dot"
    else:
        emb = (centres[labels] + 0.5 * rng.normal(size=(n, dim))).astype(np.float32)
        sim = "cosine"
    return {
        "query": torch.tensor(emb),
        "gallery": None,
        "query_labels": torch.tensor(labels),
        "similarity": sim,
    }


DEPTH_NAMES = [
    "hit_rate@1",
    "hit_rate@8",
    "recall@5",
    "precision@3",
    "r_precision",
    "map@r",
    "mrr",
    "ndcg@4",
    "median_rank",
    "mean_rank",
    "cmc@6",
    "map@5",
]


@settings(max_examples=8, deadline=None)
@given(
    many_block_problems(),
    st.sampled_from([["hit_rate@1"], ["recall@10", "map@r"], DEPTH_NAMES]),
    st.integers(1, 200),
    st.sampled_from([2**28, 2**16]),
)
def test_depth_limited_ranking_over_many_gallery_blocks(p, names, block_q, budget):
    """The 64 KiB budget keeps few or (over 128 queries a block) no score blocks between the
    passes and cuts the candidates into small chunks; 256 MiB keeps every block that seeds the
    depth threshold."""
    depth, cover = M.depth_for(names)
    full = M.retrieval_measures(rank(p), names)
    limited = M.retrieval_measures(
        rank(
            p,
            depth=depth,
            cover_relevant=cover,
            block_size=(block_q, 64),
            memory_budget=budget,
        ),
        names,
    )
    for name in names:
        torch.testing.assert_close(full[name], limited[name], equal_nan=True, rtol=0, atol=0)


@SETTINGS
@given(problems(), st.sampled_from(["expected", "optimistic", "pessimistic"]))
def test_depth_limited_ranking_gives_the_same_values(p, ties):
    names = DEPTH_NAMES
    depth, cover = M.depth_for(names)
    full = M.retrieval_measures(rank(p), names, ties=ties)
    limited = M.retrieval_measures(rank(p, depth=depth, cover_relevant=cover), names, ties=ties)
    for name in names:
        torch.testing.assert_close(full[name], limited[name], equal_nan=True)


@SETTINGS
@given(problems())
def test_spec_identities(p):
    """Identities between measures (test vectors 4 and 5), on random problems (expected ties)."""
    table = rank(p)
    per = {k: M.hit_rate_per_query(table, k) for k in range(1, 6)}
    p1 = M.precision_per_query(table, 1)
    torch.testing.assert_close(p1, per[1], equal_nan=True)  # P@1 = hit@1 for any m
    # mean rank = sum over K >= 0 of (1 - hit rate @K)
    n_max = int(table.gallery_size.max()) if table.num_queries else 0
    answerable = (table.num_relevant > 0) & (table.num_listed > 0)
    if bool(answerable.any()):
        total = torch.zeros(table.num_queries, dtype=torch.float64)
        for k in range(0, n_max + 1):
            hit = M.hit_rate_per_query(table, k) if k else torch.zeros_like(total)
            total += 1 - hit
        ranks = M.first_rank_per_query(table)
        torch.testing.assert_close(total[answerable], ranks[answerable])
    single = table.num_relevant == 1
    if bool(single.any()):
        one = table.select(single)
        torch.testing.assert_close(M.map_at_r_per_query(one), M.hit_rate_per_query(one, 1))
        for k in (1, 3, 7):
            torch.testing.assert_close(M.hit_rate_per_query(one, k), M.recall_per_query(one, k))
