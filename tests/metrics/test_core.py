"""The shared core: the rank table's flat form, dedupe by id, and image-text on the common base."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking import rank_embeddings, rank_lists, rank_scores
from retrieval_metrics.functional.table import (
    RankTable,
    concat_tables,
    table_from_parts,
    table_parts,
)


def tables_equal(a: RankTable, b: RankTable) -> None:
    for field in dataclasses.fields(a):
        name, value = field.name, getattr(a, field.name)
        other = getattr(b, name)
        assert (value is None) == (other is None), name
        if value is not None:
            torch.testing.assert_close(value, other, equal_nan=True, msg=name)


def every_kind_of_table() -> list[RankTable]:
    gen = torch.Generator().manual_seed(0)
    emb, labels = torch.randn(30, 4, generator=gen), torch.randint(0, 4, (30,), generator=gen)
    graded = rank_lists([["a", "b", "c"], ["c"], []], [{"a": 2, "c": 1}, {"d": 3}, {"a": 1}])
    with_ids = rank_scores(torch.rand(12, generator=gen), torch.randint(0, 3, (12,), generator=gen),
                           torch.arange(12) // 4)
    return [
        rank_embeddings(emb, query_labels=labels),  # query_class
        rank_embeddings(emb, query_labels=labels, depth=2),  # depth-limited
        graded,  # grades and ideal grades
        dataclasses.replace(with_ids, query_id=torch.tensor([7, 3, 5])),
        rank_lists([], []),  # no queries at all
    ]


@pytest.mark.parametrize("index", range(5))
def test_flat_form_round_trips_every_kind_of_table(index):
    table = every_kind_of_table()[index]
    tables_equal(table_from_parts(table_parts(table)), table)
    tables_equal(concat_tables([table, table]).select(torch.arange(table.num_queries)), table)


@pytest.mark.parametrize("index", range(5))
def test_a_table_moved_after_its_measures_keeps_its_fields_only(index):
    """A table caches what every measure reads (``without_relevant``); moving it carries its
    fields, not the cache."""
    table = every_kind_of_table()[index]
    rm.functional.measures.retrieval_measures(table, ["mean_rank"], empty_queries="nan")
    assert "without_relevant" in vars(table), "the measures read the cached mask"
    moved = table.to("cpu")
    tables_equal(moved, table)
    assert "without_relevant" not in vars(moved)


def test_select_keeps_items_and_ideal_grades_with_their_queries():
    table = every_kind_of_table()[2]
    picked = table.select(torch.tensor([2, 0]))
    assert picked.num_relevant.tolist() == [1, 2]
    assert picked.above.tolist() == [0, 2] and picked.grade.tolist() == [2.0, 1.0]
    assert picked.ideal_grade.tolist() == [1.0, 2.0, 1.0]


def test_tables_with_and_without_an_optional_part_do_not_mix():
    graded, binary = every_kind_of_table()[2], rank_lists([["a"]], [{"a"}])
    with pytest.raises(ValueError, match=r"with and without `ideal_ptr`"):
        concat_tables([graded, binary])


# ---------------------------------------------------------------------- repeated ids

E = torch.randn(20, 6, generator=torch.Generator().manual_seed(1))
L = torch.arange(20) % 4


@pytest.mark.parametrize("role", [None, "query", "gallery"])
def test_ids_that_restart_in_every_batch_raise_naming_them(role):
    m = rm.MAPAtR()
    if role == "gallery":
        m.update(E, L, role="query", ids=torch.arange(20))
    labels = torch.arange(20) % 7  # batch 2 repeats ids 0..9 with other labels
    m.update(E[:10], labels[:10], ids=torch.arange(10), role=role)
    m.update(E[10:], labels[10:], ids=torch.arange(10), role=role)
    if role == "query":
        m.update(E, L, role="gallery", ids=100 + torch.arange(20))
    with pytest.raises(ValueError, match=r"different labels \(e\.g\. 0, 1, 2, 3, 4\)"):
        m.compute()


def test_identical_repeats_are_dropped():
    once, twice = rm.MAPAtR(), rm.MAPAtR()
    once.update(E, L, ids=torch.arange(20))
    twice.update(E, L, ids=torch.arange(20))
    twice.update(E[:5], L[:5], ids=torch.arange(5))  # what DistributedSampler pads with
    assert twice.rank_table().num_queries == 20
    torch.testing.assert_close(twice.compute(), once.compute())


def test_repeated_query_ids_of_ranked_lists_must_agree():
    m = rm.RecallAtK(k=2)
    m.update(ranked_ids=[["a", "b"], ["c"]], relevant_ids=[{"a"}, {"c"}], ids=[0, 1])
    m.update(ranked_ids=[["a", "b"]], relevant_ids=[{"a"}], ids=[0])  # identical: dropped
    assert m.rank_table().num_queries == 2
    m.update(ranked_ids=[["x", "y", "z"]], relevant_ids=[{"x", "y"}], ids=[1])
    with pytest.raises(ValueError, match=r"`ids` of the queries: 1 id\(s\).*\(e\.g\. 1\)"):
        m.compute()


def test_ids_on_some_table_updates_only_raise():
    m = rm.MRR()
    m.update(relevant_ranks=[[1]], ids=[0])
    with pytest.raises(ValueError, match="`ids` must be given on every update or on none"):
        m.update(relevant_ranks=[[2]])


def test_caption_ids_repeated_for_another_image_raise():
    m = rm.RSum()
    m.update(torch.eye(4), torch.eye(4), torch.arange(4), text_ids=torch.arange(4))
    # the same four images (each id with its own embedding), the same caption ids for others
    order = torch.tensor([1, 0, 3, 2])
    m.update(torch.eye(4)[order], torch.eye(4), order, text_ids=torch.arange(4))
    with pytest.raises(ValueError, match=r"`text_ids`: 4 id\(s\).*different image_ids"):
        m.compute()


# ---------------------------------------------------------------------- image-text on the base


def crossmodal() -> rm.CrossModalRetrieval:
    gen = torch.Generator().manual_seed(2)
    owner = torch.arange(10).repeat_interleave(2)
    images = torch.randn(10, 8, generator=gen)
    m = rm.CrossModalRetrieval(k=(1, 2, 5))
    m.update(images[owner], images[owner] + torch.randn(20, 8, generator=gen), owner)
    return m


def test_crossmodal_has_a_table_per_direction_and_says_so():
    m = crossmodal()
    tables = m.rank_tables()
    assert list(tables) == ["i2t/", "t2i/"]
    assert tables["i2t/"].num_queries == 10 and tables["t2i/"].num_queries == 20
    with pytest.raises(ValueError, match=r"2 directions \(i2t, t2i\): use rank_tables"):
        m.rank_table()


def test_crossmodal_summary_interval_compare_and_plot():
    pytest.importorskip("matplotlib")
    a, b = crossmodal(), crossmodal()
    values = a.compute()
    summary = a.summary()
    assert summary["i2t/hit_rate@1"]["value"] == pytest.approx(float(values["i2t/hit_rate@1"]))
    assert set(a.confidence_interval()) == {row["name"] for row in summary.rows}
    comparison = rm.compare(a, b)
    assert comparison["t2i/hit_rate@2"].difference == 0.0
    _fig, ax = a.plot()
    assert {line.get_label() for line in ax.get_lines()} >= {
        "CrossModalRetrieval i2t", "CrossModalRetrieval t2i"
    }


def test_crossmodal_refuses_what_does_not_apply():
    with pytest.raises(ValueError, match="a fixed gallery does not apply"):
        crossmodal().set_gallery(torch.eye(3), torch.arange(3))
    with pytest.raises(ValueError, match="`average` does not apply to RSum"):
        rm.RSum(average="micro")


def test_crossmodal_carries_none_of_the_one_direction_states():
    states = set(rm.RSum()._defaults)
    # its items, and the base's record of whether each side's ids were integers or strings
    assert states == {"img_emb", "img_ids", "txt_emb", "txt_labels", "txt_ids", "key_kinds"}
