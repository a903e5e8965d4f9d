"""Ties by ascending gallery id (``ties_by_id=True``; ``ties="id"`` of the metric classes).

The engine counts, per relevant pair, the tied items of a smaller id in every gallery block it
counts (on the CPU only in the rows where the block ties a relevant score). Checked against the
reference's full sort with the same products (bit for bit), against a plain Python sort by
``(-score, id)`` on hand-made cases, for gallery order (no effect), on the emulated CUDA device,
and the refusals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from emulated_cuda import fake_cuda_fixture, to_fake_cuda  # noqa: F401
from retrieval_metrics.functional.measures.ties import tie_groups
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.reference import rank_embeddings_by_full_sort
from retrieval_metrics.functional.ranking.tie_order import id_order_rows, order_ranks

BLOCKS = (None, (1, 64), (8, 64), (16, 128))


def rows_of(rng: np.random.Generator, n: int, dim: int, kind: str) -> torch.Tensor:
    """Float32 rows full of exact ties: a few distinct rows repeated, one row, 0/1 codes."""
    if kind == "duplicates":
        base = rng.normal(size=(max(1, n // 5), dim))
        x = base[rng.integers(0, base.shape[0], n)]
    elif kind == "collapsed":
        x = np.repeat(rng.normal(size=(1, dim)), n, axis=0)
    elif kind == "binary":
        x = rng.integers(0, 2, size=(n, dim)).astype(np.float64)
    else:
        x = rng.normal(size=(n, dim))
    return torch.tensor(x.astype(np.float32))


def id_names(rng: np.random.Generator, n: int, as_str: bool) -> list[Any]:
    """Distinct ids in no particular order; str ids whose text order is not their number's."""
    numbers = rng.permutation(10 * n + 10)[:n].tolist()
    return [f"d{v}" for v in numbers] if as_str else [v - 5 * n for v in numbers]


@st.composite
def problems(draw: Any) -> dict[str, Any]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(("duplicates", "collapsed", "binary", "normal")))
    n_q, n_g, dim = draw(st.integers(1, 40)), draw(st.integers(1, 300)), draw(st.integers(1, 6))
    gallery_ids = id_names(rng, n_g, draw(st.booleans()))
    query_ids = [f"q{i}" for i in range(n_q)]
    graded = draw(st.booleans())
    qrels: dict[str, Any] = {}
    for q in query_ids:
        # (up to 16 relevant items: past tie_keys.COMPARED_RELEVANT, counted by sorting)
        picked = rng.choice(n_g, size=int(rng.integers(0, min(n_g, 16) + 1)), replace=False)
        docs = [gallery_ids[j] for j in picked.tolist()]
        qrels[q] = {d: int(rng.integers(0, 3)) for d in docs} if graded else docs
    return {
        "query": rows_of(rng, n_q, dim, kind),
        "gallery": rows_of(rng, n_g, dim, kind),
        "query_ids": query_ids,
        "gallery_ids": gallery_ids,
        "qrels": qrels,
        "relevance": "qrels",
        "similarity": draw(st.sampled_from(("cosine", "dot", "euclidean"))),
        "block_size": draw(st.sampled_from(BLOCKS)),
    }


def assert_same(engine, expected) -> None:
    for name in ("ptr", "above", "tied", "num_relevant", "gallery_size"):
        assert torch.equal(getattr(engine, name), getattr(expected, name)), name
    assert (engine.grade is None) == (expected.grade is None)
    assert engine.grade is None or torch.equal(engine.grade, expected.grade)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_engine_equals_the_full_sort_reference(args):
    expected = rank_embeddings_by_full_sort(**args, gallery_order=args["gallery_ids"])
    engine = rank_embeddings(**args, ties_by_id=True)
    assert_same(engine, expected)
    assert bool((engine.tied == 1).all())


@settings(max_examples=25, deadline=None)
@given(problems(), st.integers(0, 2**32 - 1))
def test_gallery_order_does_not_matter(args, seed):
    """Placed by id, each relevant item's rank is a function of the scores and ids only."""
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(args["gallery_ids"])))
    moved = dict(args, gallery=args["gallery"][perm],
                 gallery_ids=[args["gallery_ids"][i] for i in perm.tolist()])

    def ranks(table):
        return [sorted(table.above[table.ptr[q] : table.ptr[q + 1]].tolist())
                for q in range(table.ptr.numel() - 1)]

    assert ranks(rank_embeddings(**moved, ties_by_id=True)) == ranks(
        rank_embeddings(**args, ties_by_id=True)
    )


def test_hand_worked_against_a_python_sort():
    """Three documents tie for the query; by id "a" < "b" < "c", with "b" and "c" relevant:
    ranks 2 and 3 (0-based above 1 and 2), the shared place of the default being 1-3."""
    query = torch.tensor([[1.0, 0.0]])
    gallery = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.5, 0.5]])
    ids = ["z", "c", "a", "b", "y"]
    scores = torch.nn.functional.normalize(gallery, dim=1) @ query[0]
    order = sorted(range(5), key=lambda j: (-float(scores[j]), ids[j]))
    python_ranks = sorted(order.index(ids.index(d)) for d in ("b", "c"))
    table = rank_embeddings(query, gallery, query_ids=["q"], gallery_ids=ids,
                            qrels={"q": ["b", "c"]}, relevance="qrels", ties_by_id=True)
    assert sorted(table.above.tolist()) == python_ranks == [1, 2]
    shared = rank_embeddings(query, gallery, query_ids=["q"], gallery_ids=ids,
                             qrels={"q": ["b", "c"]}, relevance="qrels")
    assert shared.above.tolist() == [0, 0] and shared.tied.tolist() == [3, 3]


def test_id_rows_sort_as_python_sorts():
    texts = ["d10", "d9", "", "A", "a", "ab", "é", "\uffff", "d1"]
    assert [texts[i] for i in order_ranks(id_order_rows(texts, "x")).argsort()] == sorted(texts)
    ints = [5, -3, 2**62, -(2**63), 0, 2**63 - 1, 7]
    assert [ints[i] for i in order_ranks(id_order_rows(ints, "x")).argsort()] == sorted(ints)


@pytest.mark.parametrize("relevant", [4, 12])
def test_on_the_emulated_cuda_device(fake_cuda, relevant):
    """A device compares every row (no histogram test): the same table as the CPU's, with
    relevant items per query compared one by one (4) and counted by sorting (12)."""
    rng = np.random.default_rng(5)
    q, g = rows_of(rng, 30, 4, "duplicates"), rows_of(rng, 260, 4, "duplicates")
    ids = id_names(rng, 260, True)
    qrels = {
        f"q{i}": [ids[j] for j in rng.choice(260, relevant, replace=False)] for i in range(30)
    }
    kw = dict(query_ids=[f"q{i}" for i in range(30)], gallery_ids=ids, qrels=qrels,
              relevance="qrels", block_size=(8, 64), ties_by_id=True)
    assert_same(rank_embeddings(to_fake_cuda(q), to_fake_cuda(g), **kw),
                rank_embeddings(q, g, **kw))


def test_refused_by_name():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="mix integers and strings"):
        rank_embeddings(x, x, query_ids=["q", "r"], gallery_ids=[1, "b"],
                        qrels={"q": [1]}, relevance="qrels", ties_by_id=True)
    with pytest.raises(ValueError, match="`ties_by_id=True` orders tied gallery items"):
        rank_embeddings(x, x, query_labels=[0, 0], gallery_labels=[0, 0], ties_by_id=True)
    with pytest.raises(ValueError, match="NUL"):
        id_order_rows(["a\x00"], "gallery_ids")
    with pytest.raises(ValueError, match="at most 63 bytes"):
        id_order_rows(["x" * 64], "gallery_ids")
    shared = rank_embeddings(x, x, query_labels=[0, 1], gallery_labels=[0, 0])
    with pytest.raises(ValueError, match="ties='id'"):
        tie_groups(shared, "id")


@pytest.mark.parametrize(
    "ids",
    [["d10", "é", "", "x" * 63], [3, -(2**63), 2**63 - 1], torch.tensor([4, -1, 0]),
     np.array([9, -9], dtype=np.int32), ["mixed", 7]],
)
def test_every_form_of_ids_gives_the_rows_of_the_one_rule(ids):
    """The joined paths (all str, all int, tensors, arrays) write what the per-id rule writes."""
    from retrieval_metrics.functional.ranking.tie_order import ORDER_WIDTH, _row

    values = ids.tolist() if hasattr(ids, "tolist") else ids
    one_by_one = [list(_row(v, "ids", i).ljust(ORDER_WIDTH, b"\x00")) for i, v in enumerate(values)]
    assert id_order_rows(ids, "ids").tolist() == one_by_one
