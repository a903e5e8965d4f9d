"""Cosine on sign codes warns: rounding splits the ties that a dot product keeps exact."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking import rank_embeddings


def sign_codes(n: int, bits: int, seed: int = 0) -> torch.Tensor:
    codes = torch.sign(torch.randn(n, bits, generator=torch.Generator().manual_seed(seed)))
    codes[codes == 0] = 1.0
    return codes


def warned(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if "binary codes" in str(w.message)]


@pytest.mark.parametrize("same_source", [True, False])
def test_cosine_on_sign_codes_warns_and_dot_ranks_them_with_exact_ties(same_source):
    codes, labels = sign_codes(600, 32), torch.arange(600) % 6

    def run(similarity: str) -> dict[str, float]:
        metric = rm.RetrievalMetrics(["hit_rate@1", "map@r"], similarity=similarity)
        if same_source:
            metric.update(codes, labels)
        else:
            metric.update(codes[:100], labels[:100], role="query")
            metric.update(codes[100:], labels[100:], role="gallery")
        return {k: float(v) for k, v in metric.compute().items()}

    assert warned(lambda: run("cosine"))
    assert not warned(lambda: run("dot"))
    # the dot product's scores are whole numbers: the same values as float64 scores ranked by
    # the scores form, whose ties are exact whatever the precision
    dot = run("dot")
    q, g = (codes, codes) if same_source else (codes[:100], codes[100:])
    scores = q.double() @ g.double().T
    target = labels[: len(q)][:, None] == (labels if same_source else labels[100:])[None, :]
    if same_source:
        keep = ~torch.eye(len(q), dtype=torch.bool)
        scores, target = scores[keep].view(len(q), -1), target[keep].view(len(q), -1)
    indexes = torch.arange(len(q))[:, None].expand_as(scores)
    reference = rm.RetrievalMetrics(["hit_rate@1", "map@r"])
    reference.update(scores.flatten(), target.flatten(), indexes=indexes.flatten())
    assert dot == {k: float(v) for k, v in reference.compute().items()}


def test_real_embeddings_and_other_codes_do_not_warn():
    emb = torch.randn(200, 16, generator=torch.Generator().manual_seed(1))
    assert not warned(lambda: rank_embeddings(emb, query_labels=torch.arange(200) % 4))
    near = sign_codes(200, 16)
    near[0, 0] = 0.5  # one entry off: not sign codes
    assert not warned(lambda: rank_embeddings(near, query_labels=torch.arange(200) % 4))
    zero_one = (sign_codes(200, 16) > 0).float()  # 0/1 codes: cosine is a different order
    assert not warned(lambda: rank_embeddings(zero_one, query_labels=torch.arange(200) % 4))
    assert warned(lambda: rank_embeddings(sign_codes(200, 16), query_labels=torch.arange(200) % 4))
