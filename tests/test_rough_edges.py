"""The rough edges a new user hit (issue 13, items 1 to 10), each with its reproduction."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrieval_metrics as rm

# four classes of three items; the items of a class are near each other
EMB = torch.tensor(
    [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.9, 0.0, 0.1],
     [0.0, 1.0, 0.0], [0.1, 0.9, 0.0], [0.0, 0.9, 0.1],
     [0.0, 0.0, 1.0], [0.1, 0.0, 0.9], [0.0, 0.1, 0.9],
     [-1.0, 0.0, 0.0], [-0.9, -0.1, 0.0], [-0.9, 0.0, -0.1]]
)
LABELS = torch.arange(12) // 3


def every_metric() -> list[rm.RetrievalMetricBase]:
    """One object of every metric class the package exports."""
    return [
        rm.HitRateAtK(k=(1, 5)), rm.RecallAtK(k=2), rm.PrecisionAtK(k=2), rm.RPrecision(),
        rm.MAPAtR(), rm.MeanAveragePrecision(), rm.MRR(), rm.NDCGAtK(), rm.CMC(max_rank=5),
        rm.MedianRank(), rm.MeanRank(), rm.MINP(), rm.RetrievalMetrics(["hit_rate@1", "map@r"]),
        rm.CrossModalRetrieval(), rm.RSum(),
    ]


# ---------------------------------------------------------------------------- 1. forward


def test_forward_warns_once_per_object_and_names_the_remedy():
    m = rm.HitRateAtK(k=1)
    with pytest.warns(UserWarning, match=r"this batch alone.*update.*log the metric object"):
        m(EMB[:6], LABELS[:6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(EMB[6:], LABELS[6:])  # the same object: no second warning
    # forward still accumulates: the whole is the two halves together
    whole = rm.HitRateAtK(k=1)
    whole.update(EMB, LABELS)
    assert m.compute() == whole.compute()
    with pytest.warns(UserWarning, match="this batch alone"):
        rm.HitRateAtK(k=1)(EMB, LABELS)  # a new object warns again


def test_update_and_compute_do_not_warn():
    m = rm.HitRateAtK(k=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.update(EMB, LABELS)
        m.compute()


# ---------------------------------------------------------------------------- 10. TorchScript


@pytest.mark.parametrize("metric", every_metric(), ids=lambda m: type(m).__name__)
def test_every_metric_can_be_scripted(metric):
    # torchmetrics' test harness scripts every metric; scripting must neither fail nor warn about
    # the metric (recent torch deprecates TorchScript itself with a DeprecationWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        scripted = torch.jit.script(metric)
    assert isinstance(scripted, torch.jit.ScriptModule)
