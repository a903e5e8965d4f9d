"""The metric layer's options are one object, built once from the declared options."""

from dataclasses import fields

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.measures import MeasureOptions
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.metrics.options import MetricOptions


def test_the_fields_are_the_declared_options():
    names = {f.name for f in fields(MetricOptions)} - {"protocol"}
    assert names == set(OPTIONS)
    for f in fields(MetricOptions):
        if f.name != "protocol":
            assert f.default == OPTIONS[f.name].default, f.name


def test_a_protocol_is_applied_once_and_the_measures_get_their_own_object():
    metric = rm.RetrievalMetrics(["mrr@10"], protocol="trec_eval")
    assert metric.options.protocol == "trec_eval"
    assert metric.ties == metric.options.ties
    measures = metric.measure_options
    assert type(measures) is MeasureOptions and measures is metric.measure_options
    assert measures.ties == metric.ties and measures.gain == metric.gain


def test_every_option_is_checked_by_name_when_the_metric_is_made():
    with pytest.raises(ValueError, match="`divisor` must be one of"):
        rm.RetrievalMetrics(["map@10"], divisor="all")
    with pytest.raises(ValueError, match="protocol='vsepp' sets"):
        rm.RetrievalMetrics(["hit_rate@1"], protocol="vsepp", median="plain")


def test_options_are_read_only_on_the_metric():
    metric = rm.RetrievalMetrics(["hit_rate@1"], ties="optimistic")
    with pytest.raises(AttributeError):
        metric.ties = "pessimistic"
    metric.update(torch.eye(3), torch.tensor([0, 0, 1]))
    assert metric.ties == "optimistic" and metric.options.ties == "optimistic"


def test_the_constructor_takes_every_option_of_the_object_by_its_name():
    """A keyword of RetrievalMetricBase reaches MetricOptions by its name (no dict between):
    the signature and the fields list the same options, and the Args document each."""
    import inspect

    from retrieval_metrics.metrics.base import RetrievalMetricBase

    keywords = {
        name for name, p in inspect.signature(RetrievalMetricBase.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    # ignore_identical_ids belongs to the one-direction metrics (qrels), which set it; the
    # engine is an object that ranks, not a declared option
    assert keywords - {"engine"} == {f.name for f in fields(MetricOptions)} - {
        "ignore_identical_ids"
    }
    doc = RetrievalMetricBase.__doc__ or ""
    assert all(f"{name}:" in doc for name in keywords), sorted(
        name for name in keywords if f"{name}:" not in doc
    )


@pytest.mark.parametrize("ignore_identical_ids", [None, True, False])
def test_a_metric_builds_its_options_once(monkeypatch, ignore_identical_ids):
    """One MetricOptions per metric, the one-direction kind's own option included: a second
    object (a dataclass replace after the base made the first) would check every option
    again."""
    made = []
    original = MetricOptions.__post_init__

    def counted(self):
        made.append(self)
        original(self)

    monkeypatch.setattr(MetricOptions, "__post_init__", counted)
    metric = rm.RetrievalMetrics(
        ["ndcg@10"], qrels={"q": {"d": 1}}, ignore_identical_ids=ignore_identical_ids
    )
    assert made == [metric.options]
    assert metric.options.ignore_identical_ids is ignore_identical_ids
    with pytest.raises(ValueError, match="`ignore_identical_ids` applies with `qrels=` only"):
        rm.RetrievalMetrics(["ndcg@10"], ignore_identical_ids=True)
