"""Metrics on a device answering as Apple's MPS (emulated: ``emulated_cuda(mps=True)``, a device
with no float64 and no ``torch.mm(..., out_dtype=)``), as Lightning puts them on Apple silicon.

The measures are computed in float64 on the host; float64 states (integer scores, positions,
rank tables' grades) and float64 results stay there, every other state and compute()'s float32
results on the device. Float64 embeddings, which would be scored in float64, are refused at the
update that gives them, naming the argument. The whole matrix of classes and input forms on such
a device is in test_device_matrix.py (``..._on_a_device_without_float64_...``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import emulated_cuda, fake_mps_fixture  # noqa: F401
from retrieval_metrics.functional import primitives
from retrieval_metrics.functional.primitives import device_can, holds_float64, to_device

EMB = torch.randint(-3, 4, (30, 8), generator=torch.Generator().manual_seed(0))
LABELS = torch.arange(30) % 5
REFUSED = r"`{}` are float64, which the metric's device \(cuda:0\) cannot hold"


def _calls(name: str, mps: torch.Tensor, host64: torch.Tensor):
    """The updates that give float64 embeddings, by argument name."""
    return {
        "same source": ("embeddings", lambda: rm.RecallAtK(k=1).to("cuda").update(host64, LABELS)),
        "gallery": ("embeddings", lambda: rm.RecallAtK(k=1).to("cuda").update(
            host64, LABELS, role="gallery")),
        "set_gallery": ("embeddings", lambda: rm.RecallAtK(k=1).to("cuda").set_gallery(
            host64, LABELS)),
        "query of a set gallery": ("embeddings", lambda: _set(mps).update(
            host64, LABELS, role="query")),
        "images": ("image_embeddings", lambda: rm.RSum().to("cuda").update(
            host64, mps, torch.arange(30))),
        "captions": ("text_embeddings", lambda: rm.RSum().to("cuda").update(
            mps, host64, torch.arange(30))),
    }[name]


def _set(mps: torch.Tensor) -> rm.RecallAtK:
    metric = rm.RecallAtK(k=1).to("cuda")
    metric.set_gallery(mps, LABELS.to("cuda"))
    return metric


@pytest.mark.parametrize(
    "call", ["same source", "gallery", "set_gallery", "query of a set gallery", "images",
             "captions"],
)
def test_float64_embeddings_are_refused_naming_the_argument(call, fake_mps):
    mps = EMB.float().to("cuda")
    name, update = _calls(call, mps, EMB.double())
    with pytest.raises(ValueError, match=REFUSED.format(name)):
        update()


def test_a_float64_corpus_on_disk_is_refused_at_set_gallery(tmp_path, fake_mps):
    path = tmp_path / "corpus.npy"
    np.save(path, EMB.double().numpy())
    metric = rm.RetrievalMetrics(["mrr"], qrels={0: {1: 1}}, ignore_identical_ids=False)
    with pytest.raises(ValueError, match=REFUSED.format("embeddings")):
        metric.to("cuda").set_gallery(path, ids=list(range(30)))


def test_float32_embeddings_give_the_cpus_values_and_per_query_values_on_the_host():
    cpu = rm.RetrievalMetrics(["map@r", "recall@1", "mrr"])
    cpu.update(EMB.double(), LABELS)
    with emulated_cuda(mps=True):
        metric = rm.RetrievalMetrics(["map@r", "recall@1", "mrr"]).to("cuda")
        metric.update(EMB.float().to("cuda"), LABELS.to("cuda"))
        values, per_query = metric.compute(), metric.per_query()
    for name, value in values.items():
        assert value.device.type == "cuda" and value.dtype == torch.float32
        assert value.item() == cpu.compute()[name].item()
    for name, value in per_query.items():
        # float64 on the host: every digit kept (the device cannot hold float64)
        assert value.device.type == "cpu" and value.dtype == torch.float64
        assert value.equal(cpu.per_query()[name])


def test_set_dtype_float64_gives_float64_results_on_the_host_before_and_after_a_move():
    cpu = rm.MAPAtR().set_dtype(torch.float64)
    cpu.update(EMB.double(), LABELS)
    want = cpu.compute()
    with emulated_cuda(mps=True):
        metric = rm.MAPAtR().to("cuda")
        metric.set_dtype(torch.float64)  # torchmetrics' own set_dtype probes on the device
        metric.update(EMB.float().to("cuda"), LABELS.to("cuda"))
        first = metric.compute()
        metric = metric.to("cuda")  # Lightning moves modules again; the dtype stays
        second = metric.compute()
    for got in (first, second):
        assert got.dtype == torch.float64 and got.device.type == "cpu"
        assert got.item() == want.item()


def test_a_move_keeps_float64_states_on_the_host_and_the_values():
    """Updates on the CPU (float64 positions, integer scores), then a move to the device:
    float64 states stay on the host, the others go, and the values are the CPU's."""
    positions = torch.randint(0, 40, (30, 2), generator=torch.Generator().manual_seed(1))
    place = rm.RecallAtK(k=[1, 5], relevance="radius", radius=10.0)
    place.update(EMB.float(), positions=positions.double())
    scores = rm.MRR()
    scores.update(torch.arange(12) % 5, torch.arange(12) % 3 == 0, indexes=torch.arange(12) % 4)
    want = [place.compute(), scores.compute()]
    for metric in (place, scores):
        metric.reset()
    place.update(EMB.float(), positions=positions.double())
    scores.update(torch.arange(12) % 5, torch.arange(12) % 3 == 0, indexes=torch.arange(12) % 4)
    with emulated_cuda(mps=True):
        got = []
        for metric in (place, scores):
            metric.to("cuda")
            devices = {
                (t.dtype == torch.float64, t.device.type)
                for value in metric.metric_state.values()
                for t in (value if isinstance(value, list) else [value])
            }
            assert (True, "cpu") in devices and (False, "cuda") in devices, devices
            assert (True, "cuda") not in devices and (False, "cpu") not in devices, devices
            got.append(metric.compute())
    assert {k: v.item() for k, v in got[0].items()} == {k: v.item() for k, v in want[0].items()}
    assert got[1].item() == want[1].item()


def test_the_abilities_are_asked_of_the_device_once():
    tries = []

    def attempt(device):
        tries.append(device)
        raise NotImplementedError("not on this backend")

    primitives._DEVICE_ABILITIES.clear()
    try:
        assert not device_can("meta", "a test's ability", attempt, NotImplementedError)
        assert not device_can("meta", "a test's ability", attempt, NotImplementedError)
        assert tries == [torch.device("meta")]
        # the CPU is not asked
        assert device_can("cpu", "a test's ability", attempt, NotImplementedError)
        assert tries == [torch.device("meta")]
        # an error other than the refusal is not taken for one: raised, and nothing remembered
        with pytest.raises(NotImplementedError):
            device_can("meta", "another ability", attempt, TypeError)
        assert ("meta", "another ability") not in primitives._DEVICE_ABILITIES
    finally:
        primitives._DEVICE_ABILITIES.clear()


def test_to_device_keeps_float64_on_the_host_of_a_device_without_it():
    with emulated_cuda(mps=True):
        assert not holds_float64("cuda")
        assert to_device(torch.ones(2, dtype=torch.float64), "cuda").device.type == "cpu"
        assert to_device(torch.ones(2), "cuda").device.type == "cuda"
    with emulated_cuda():
        assert holds_float64("cuda")
        assert to_device(torch.ones(2, dtype=torch.float64), "cuda").device.type == "cuda"


def test_float_labels_ids_and_cameras_on_the_device_give_the_cpus_values():
    """Whole-number float labels, ids and cameras are checked where they are, with no float64
    copy on the device."""
    cameras = torch.arange(30) % 3
    cpu = rm.RetrievalMetrics(["map@r", "cmc@3"])
    cpu.update(EMB.float(), LABELS, ids=torch.arange(30), cameras=cameras)
    with emulated_cuda(mps=True):
        metric = rm.RetrievalMetrics(["map@r", "cmc@3"]).to("cuda")
        metric.update(EMB.float().to("cuda"), LABELS.float().to("cuda"),
                      ids=torch.arange(30).float().to("cuda"),
                      cameras=cameras.half().to("cuda"))
        got = {k: v.cpu() for k, v in metric.compute().items()}
        with pytest.raises(ValueError, match="whole numbers below 2\\*\\*11"):
            rm.MAPAtR().to("cuda").update(
                EMB.float().to("cuda"), (LABELS + 0.5).half().to("cuda")
            )
    want = cpu.compute()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in got)


@pytest.mark.parametrize("name", ["RetrievalMAP", "RetrievalMRR", "RetrievalNormalizedDCG",
                                  "RetrievalAUROC", "RetrievalFallOut"])
def test_the_torchmetrics_classes_in_float64_give_float64_on_the_host(name):
    from retrieval_metrics.compat import torchmetrics as compat

    gen = torch.Generator().manual_seed(1)
    preds, target, indexes = torch.rand(12, generator=gen), torch.arange(12) % 3 == 0, (
        torch.arange(12) % 4)
    cpu = getattr(compat, name)().set_dtype(torch.float64)
    cpu.update(preds, target, indexes)
    with emulated_cuda(mps=True):
        metric = getattr(compat, name)().to("cuda")
        metric.set_dtype(torch.float64)
        metric.update(preds.to("cuda"), target.to("cuda"), indexes.to("cuda"))
        got = metric.compute()
    assert got.dtype == torch.float64 and got.device.type == "cpu"
    assert got.item() == cpu.compute().item()


def test_a_device_whose_float64_raises_a_runtime_error_is_one_without(monkeypatch):
    """Intel GPUs without fp64 answer a float64 kernel with a RuntimeError ("Required aspect
    fp64 is not supported on the device"), not MPS's TypeError: such a device keeps float64
    on the host too, and a metric moves to it and computes (emulated: float64 factories on
    the device raise so)."""
    zeros = torch.zeros

    def refusing(*args, **kwargs):
        if kwargs.get("dtype") == torch.float64 and str(kwargs.get("device")).startswith("cuda"):
            raise RuntimeError("Required aspect fp64 is not supported on the device")
        return zeros(*args, **kwargs)

    cpu = rm.MAPAtR()
    cpu.update(EMB.float(), LABELS)
    with emulated_cuda():
        monkeypatch.setattr(torch, "zeros", refusing)
        assert not holds_float64("cuda")
        metric = rm.MAPAtR().to("cuda")
        metric.update(EMB.float().to("cuda"), LABELS.to("cuda"))
        got = metric.compute()
    assert got.device.type == "cuda" and got.item() == cpu.compute().item()
