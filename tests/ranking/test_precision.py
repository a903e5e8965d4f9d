"""The ranking's products run in full float32 whatever the global matmul precision.

``torch.set_float32_matmul_precision("high")`` (which Lightning suggests on recent GPUs) lets
float32 products use TF32 or other reduced-precision units, so ties and ranks would change with
the device. Every product of the ranking is computed under "highest" and the user's setting is
restored after it, also when the ranking raises.
"""

from __future__ import annotations

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import ranking as R
from retrieval_metrics.functional.ranking.engine.fp32 import full_fp32_products


@pytest.fixture
def precision_at_products(monkeypatch):
    """The global matmul precision and the CUDA backend's own setting at every product."""
    seen: list[tuple[str, str]] = []
    original = torch.mm

    def mm(*args, **kwargs):
        seen.append(
            (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.fp32_precision)
        )
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "mm", mm)
    yield seen
    torch.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("setting", ["high", "medium"])
def test_products_are_full_fp32_and_the_setting_is_restored(setting, precision_at_products):
    torch.set_float32_matmul_precision(setting)
    gen = torch.Generator().manual_seed(0)
    emb, labels = torch.randn(300, 8, generator=gen), torch.arange(300) % 7
    same = rm.RetrievalMetrics(["hit_rate@1", "map@r"])  # the symmetric pass
    same.update(emb, labels)
    same.compute()
    split = rm.HitRateAtK(k=1, similarity="euclidean")  # the one-sided pass
    split.update(emb[:100], labels[:100], role="query")
    split.update(emb[100:], labels[100:], role="gallery")
    split.compute()
    pairs = rm.RSum()  # two directions from one product
    pairs.update(emb[:50], emb[50:100], torch.arange(50))
    pairs.compute()
    assert len(precision_at_products) >= 3
    assert set(precision_at_products) == {("highest", "ieee")}
    assert torch.get_float32_matmul_precision() == setting
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # the user's, back


def test_the_setting_is_restored_when_the_ranking_raises(monkeypatch):
    torch.set_float32_matmul_precision("high")
    try:
        def fail(*args, **kwargs):
            raise RuntimeError("planted")

        monkeypatch.setattr(torch, "mm", fail)
        with pytest.raises(RuntimeError, match="planted"):
            R.rank_embeddings(torch.randn(10, 4), query_labels=torch.arange(10) % 2)
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_full_precision_is_left_alone():
    before = torch.backends.cuda.matmul.fp32_precision
    with full_fp32_products():
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.fp32_precision == before
