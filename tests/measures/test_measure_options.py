"""MeasureOptions: the measure options as one object, defaults and checks from OPTIONS."""

from __future__ import annotations

import dataclasses

import pytest

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.ranking import rank_lists


def test_defaults_are_the_declared_ones():
    options = M.MeasureOptions()
    for field in dataclasses.fields(options):
        assert OPTIONS[field.name].layer == "measures"
        assert getattr(options, field.name) == OPTIONS[field.name].default


@pytest.mark.parametrize(
    ("name", "value"),
    [("ties", "random"), ("empty_queries", "drop"), ("average", "weighted"), ("percent", 1),
     ("ap", "interpolated"), ("divisor", "k"), ("gain", "cubic"), ("median", "mean")],
)
def test_every_option_is_checked_with_the_declared_message(name, value):
    with pytest.raises(ValueError, match=f"`{name}` must be (one of|a bool)"):
        M.MeasureOptions(**{name: value})


def test_frozen_and_replace_checks_again():
    options = M.MeasureOptions(ties="optimistic")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.ties = "expected"  # type: ignore[misc]
    assert options.replace(ap="trapezoid").ap == "trapezoid"
    with pytest.raises(ValueError, match="`ap` must be one of"):
        options.replace(ap="bad")


def test_options_or_keywords_give_the_same_values():
    table = rank_lists([["d3", "d7", "d1"], ["d4", "d5"], ["x"]], [{"d1"}, {"d4", "d6"}, set()])
    names = ["recall@3", "mrr", "map@2", "median_rank", "ndcg@2"]
    keywords = {"ties": "pessimistic", "empty_queries": "zero", "percent": True,
                "divisor": "min", "median": "plain"}
    by_keywords = M.retrieval_measures(table, names, **keywords)
    by_options = M.retrieval_measures(table, names, options=M.MeasureOptions(**keywords))
    assert by_keywords.keys() == by_options.keys()
    for name in names:
        assert float(by_keywords[name]) == float(by_options[name])
    spec = M.parse_metric("map@2")
    a = M.per_query_values(table, spec, ties="pessimistic", divisor="min")
    b = M.per_query_values(table, spec, options=M.MeasureOptions(ties="pessimistic",
                                                                  divisor="min"))
    assert a.tolist()[:2] == b.tolist()[:2]


def test_an_option_given_twice_is_refused():
    table = rank_lists([["a", "b"]], [{"a"}])
    options = M.MeasureOptions(ties="optimistic")
    with pytest.raises(ValueError, match="`ties` is given both as a keyword"):
        M.retrieval_measures(table, ["mrr"], ties="pessimistic", options=options)
    # the same value twice, or a keyword left at its default, is no conflict
    M.retrieval_measures(table, ["mrr"], ties="optimistic", options=options)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tie'"):
        M.MeasureOptions.of(tie="expected")
    with pytest.raises(TypeError, match="`options` must be a MeasureOptions"):
        M.retrieval_measures(table, ["mrr"], options={"ties": "optimistic"})  # type: ignore


def test_summarize_takes_the_options_either_way():
    from retrieval_metrics.functional.measures import stats

    table = rank_lists([["d3", "d7", "d1"], ["d4", "d5"]], [{"d1"}, {"d4", "d6"}])
    names = ["recall@3", "mrr"]
    a = stats.summarize(table, names, percent=True, ties="optimistic", num_bootstrap=50)
    b = stats.summarize(table, names, options=M.MeasureOptions(percent=True, ties="optimistic"),
                        num_bootstrap=50)
    assert a.rows == b.rows
    with pytest.raises(TypeError, match="unexpected keyword argument 'tie'"):
        stats.summarize(table, names, tie="expected")
