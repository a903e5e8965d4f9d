"""``metric.set_dtype(torch.float64)`` gives float64 results on every metric class and input form
(the measures are computed in float64, so every digit is there); float32 stays the default, and
the states (int64 ids and label codes, float64 positions, embeddings) keep their dtype."""

from __future__ import annotations

import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401


def _ranked_lists(metric):
    # docs/definitions.md test vector 2
    metric.update(
        ranked_ids=[["d3", "d7", "d1", "d9", "d2"], ["d4", "d5", "d8", "d6", "d0"],
                    ["d2", "d0", "d5", "d1", "d3"]],
        relevant_ids=[{"d1"}, {"d4", "d6"}, {"d8"}],
    )


def _ranks(metric):
    metric.update(relevant_ranks=[[3]])


def _scores(metric):
    # one query, relevant item third of four
    metric.update(preds=torch.tensor([0.9, 0.5, 0.2, 0.1]), target=torch.tensor([0, 0, 1, 0]),
                  indexes=torch.tensor([0, 0, 0, 0]))


def _same_source(metric):
    # items 0, 1 of class 0 find each other first; items 2 and 3 of class 1 find each other
    # third (cosines: 3 scores 0.894 and 0.845 with 0 and 1; 2 scores 0.0995 and 0 with 1, 0)
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [1.0, -0.5]])
    metric.update(emb, torch.tensor([0, 0, 1, 1]))


CASES = [
    # (metric class, options, feed, name of the value, exact float64 value)
    (rm.MRR, {}, _ranks, None, 1 / 3),
    (rm.MRR, {}, _scores, None, 1 / 3),
    (rm.RetrievalMetrics, {"metrics": ["mrr", "precision@3"]}, _ranked_lists, "mrr",
     (1 / 3 + 1 + 0) / 3),
    (rm.RetrievalMetrics, {"metrics": ["mrr", "precision@3"]}, _ranked_lists, "precision@3",
     (1 / 3 + 1 / 3 + 0) / 3),
    (rm.PrecisionAtK, {"k": 3}, _scores, None, 1 / 3),
    (rm.NDCGAtK, {"k": 3, "gain": "linear"}, _scores, None, 1 / 2),
]


@pytest.mark.parametrize(("cls", "options", "feed", "name", "expected"), CASES)
def test_float64_results_are_exact_and_float32_stays_the_default(
    cls, options, feed, name, expected
):
    default = cls(**options)
    feed(default)
    value = default.compute()
    value = value if name is None else value[name]
    assert value.dtype == torch.float32
    assert float(value) == float(torch.tensor(expected, dtype=torch.float32))
    if expected in (1 / 3, 4 / 9, 2 / 9):
        assert float(value) != expected  # float32 cannot hold it

    metric = cls(**options)
    metric.set_dtype(torch.float64)
    feed(metric)
    value = metric.compute()
    value = value if name is None else value[name]
    assert value.dtype == torch.float64
    # to float64 rounding (NDCG's discounts are differences of a cumulative sum)
    assert float(value) == pytest.approx(expected, rel=1e-15, abs=1e-15)


def test_set_dtype_after_the_updates_and_for_embeddings():
    metric = rm.RetrievalMetrics(["mrr", "hit_rate@1"])
    _same_source(metric)
    metric.set_dtype(torch.float64)
    values = metric.compute()
    assert all(v.dtype == torch.float64 for v in values.values())
    assert float(values["mrr"]) == pytest.approx((1 + 1 + 1 / 3 + 1 / 3) / 4, abs=1e-15)
    assert float(values["hit_rate@1"]) == 0.5


def test_set_dtype_keeps_the_states_as_given():
    # 64-bit ids would be rounded by a float64 cast (2**60 + 1 is no float64)
    ids = torch.arange(4) + 2**60
    metric = rm.HitRateAtK(k=1)
    metric.update(torch.eye(4), torch.tensor([0, 0, 1, 1]), ids=ids)
    metric.set_dtype(torch.float64)
    metric.update(torch.eye(4)[:1], torch.tensor([0]), ids=ids[:1])  # a padding repeat
    assert metric.q_ids[0].dtype == torch.int64 and torch.equal(metric.q_ids[0], ids)
    assert metric.q_emb[0].dtype == torch.float32
    assert metric.compute().dtype == torch.float64
    metric.set_dtype(torch.float16)
    assert metric.compute().dtype == torch.float16
    assert metric.q_labels[0].dtype == torch.int64


def test_image_text_results_follow_set_dtype():
    images = torch.eye(3)
    # image 2's caption (1, 0, 0.5) is beaten by caption 1 (0, 1, 1); caption 1 ties images 1
    # and 2 (hit with probability 1/2), caption 2 finds image 0 first
    captions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 0.5]])
    image_ids = torch.tensor([0, 1, 2])
    cm = rm.CrossModalRetrieval(k=(1,))
    cm.update(images, captions, image_ids)
    assert all(v.dtype == torch.float32 for v in cm.compute().values())
    cm = rm.CrossModalRetrieval(k=(1,))
    cm.set_dtype(torch.float64)
    cm.update(images, captions, image_ids)
    values = cm.compute()
    assert all(v.dtype == torch.float64 for v in values.values())
    assert float(values["i2t/hit_rate@1"]) == 2 / 3
    assert float(values["t2i/hit_rate@1"]) == 1 / 2
    assert float(values["rsum"]) == pytest.approx(100 * (2 / 3 + 1 / 2), abs=1e-12)
    rsum = rm.RSum(k=(1,))
    rsum.set_dtype(torch.float64)
    rsum.update(images, captions, image_ids)
    assert rsum.compute().dtype == torch.float64
    assert float(rsum.compute()) == float(values["rsum"])


def test_the_torchmetrics_compat_classes_follow_set_dtype():
    from retrieval_metrics.compat.torchmetrics import RetrievalMRR

    preds, target = torch.tensor([0.9, 0.5, 0.2]), torch.tensor([0, 0, 1])
    indexes = torch.tensor([0, 0, 0])
    default = RetrievalMRR()
    default.update(preds, target, indexes=indexes)
    assert default.compute().dtype == torch.float32
    metric = RetrievalMRR()
    metric.set_dtype(torch.float64)
    metric.update(preds, target, indexes=indexes)
    value = metric.compute()
    assert value.dtype == torch.float64 and float(value) == 1 / 3


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_move_to_a_device_keeps_set_dtype(device, request):
    """``.to(device)`` after ``set_dtype`` (as Lightning moves a module's metrics at setup)
    keeps float64 results; torchmetrics' own move resets them to float32."""
    if device == "cuda":
        request.getfixturevalue("fake_cuda")
    metric = rm.MRR()
    metric.set_dtype(torch.float64)
    metric = metric.to(device)
    metric.update(ranked_ids=[[1, 2, 3]], relevant_ids=[{3}])
    value = metric.compute()
    assert value.dtype == torch.float64 and value.device.type == device
    assert float(value) == 1 / 3


@pytest.mark.parametrize(
    ("dtype", "result"),
    [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
     (torch.float64, torch.float64)],
)
def test_a_module_converted_to_half_precision_keeps_float32_results(dtype, result):
    """Trainer(precision="bf16-true") converts the LightningModule, its metrics too: a result
    rounded to bfloat16 read MAP@R 0.015625 for 0.0156652 (8 bits), enough to tie or swap the
    epochs ModelCheckpoint compares. Half precision keeps float32 results; float64 follows."""
    g = torch.Generator().manual_seed(0)
    emb, labels = torch.randn(201, 16, generator=g), torch.arange(201) % 23
    plain = rm.MAPAtR()
    plain.update(emb, labels)
    converted = rm.MAPAtR().to(dtype)
    converted.update(emb, labels)
    value = converted.compute()
    assert value.dtype == result
    assert float(value) == pytest.approx(float(plain.compute()), rel=1e-6)
    assert float(value) != pytest.approx(float(torch.tensor(float(value)).to(torch.bfloat16)),
                                         rel=1e-6)


@pytest.mark.parametrize(
    ("before", "after"),
    [(torch.float32, torch.bfloat16), (torch.float32, torch.float16),
     (torch.float64, torch.float32)],
)
def test_a_conversion_after_compute_ranks_the_converted_states(before, after):
    """A module converted after a compute() (``.to(dtype)``, as Trainer(precision="bf16-true")
    converts a LightningModule: its embeddings converted too) gives what the converted states
    give, not the value and ranking kept from before. The relevant item scores 2**-12 above
    the other (2**-40 in float64): first apart (MRR 1.0), tied with it once rounded to 8 or 11
    bits (or float32's 24), MRR 0.75 (a tie's expectation)."""
    gap = 2.0**-12 if after != torch.float32 else 2.0**-40

    def fed(dtype):
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot")
        metric.update(torch.tensor([[1.0, 0.0]], dtype=dtype), torch.tensor([1]),
                      role="query")
        metric.update(torch.tensor([[1.0, 0.0], [1.0 + gap, 0.0]], dtype=dtype),
                      torch.tensor([0, 1]), role="gallery")
        return metric

    metric = fed(before)
    assert float(metric.compute()["mrr"]) == 1.0  # (apart: the relevant item first)
    metric = metric.to(after)
    fresh = fed(before).to(after)
    expected = fresh.compute()
    assert float(expected["mrr"]) == 0.75  # (tied once converted)
    got = metric.compute()
    assert float(got["mrr"]) == 0.75 and got["mrr"].dtype == expected["mrr"].dtype
    assert torch.equal(metric.per_query()["mrr"], fresh.per_query()["mrr"])
