"""Half precision on the tensor cores (engine/tensor_cores.py), on the emulated CUDA device.

On an accelerator, float16 and bfloat16 embeddings are multiplied as they are stored, with
float32 accumulation (``torch.mm(..., out_dtype=torch.float32)``; the emulation computes it as
the product of the operands upcast, having no CPU kernel), and cosine and euclidean take their
norms after each product. Here: every form takes that product (no float32 product is left), and
every value equals the float64 ranking of the same half numbers (data whose every score is exact
in float32 and float64, full of ties, so that any order of sums ranks alike); rows whose norms
would underflow keep the float32 path; a zero row scores 0 and is said by name, as on the CPU.
The device matrix (test_device_matrix.py, its "bfloat16" and "float16" cases) holds every class
and form, over processes too, to the CPU's values bit for bit on integer embeddings.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from emulated_cuda import emulated_cuda
from retrieval_metrics.functional.ranking.engine.counters import choose_counter
from triton_here import INTERPRETED, KERNEL_DEVICE, kernels_cannot_run, needs_triton_package

HALVES = [torch.float16, torch.bfloat16]
NAMES = ["hit_rate@1", "recall@5", "map@r", "map", "mrr", "ndcg@10", "median_rank"]
FORMS = ["same_source", "one_sided", "query_gallery", "fixed_gallery", "qrels", "image_text"]


@pytest.fixture
def products(monkeypatch):
    """Each torch.mm of the ranking: (operands' dtype, out_dtype)."""
    seen: list[tuple[torch.dtype, torch.dtype | None]] = []
    original = torch.mm

    def mm(a, b, *args, **kwargs):
        seen.append((a.dtype, kwargs.get("out_dtype")))
        return original(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "mm", mm)
    return seen


def _data(similarity: str, n: int = 160, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings whose every score is exact in float32 and float64, by any order of sums:
    integers (dot products and squared distances are integers); for cosine, sign codes scaled
    by 1, 2 or 4 (every norm a power of two, every cosine an integer over a power of two).
    Scores tie often, as binary codes' do, and rows 3 and 7 are duplicates."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 16, (n,), generator=gen)
    if similarity == "cosine":
        centres = torch.randint(0, 2, (16, 16), generator=gen) * 2 - 1
        flips = torch.where(torch.rand(n, 16, generator=gen) < 0.2, -1, 1)
        scale = 2 ** torch.randint(0, 3, (n, 1), generator=gen)
        emb = (centres[labels] * flips * scale).float()
    else:
        centres = torch.randint(-2, 3, (16, 16), generator=gen)
        emb = (centres[labels] + torch.randint(-1, 2, (n, 16), generator=gen)).float()
    emb[7] = emb[3]
    return emb, labels


def _run(form: str, x: torch.Tensor, labels: torch.Tensor, similarity: str, device: str,
         budget: int | None = None):
    """compute() of ``form`` fed ``x`` (moved to ``device``); ``budget``: the memory budget
    (default: the one-sided form's small one, else the device's)."""
    x, labels = x.to(device), labels.to(device)
    if form == "image_text":
        images, captions = x[:40], x[40:]
        metric = rm.CrossModalRetrieval(k=(1, 5, 10), similarity=similarity).to(device)
        image_ids = torch.arange(40, device=device)
        metric.update(images, captions, image_ids,
                      text_image_ids=torch.arange(120, device=device) % 40)
    elif form == "qrels":
        qrels = {q: {1000 + (q * 7 + j) % 120: 1 + j % 3 for j in range(1 + q % 4)}
                 for q in range(40)}
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@20", "mrr@10", "map"], qrels=qrels,
                                     similarity=similarity, memory_budget=budget).to(device)
        for part in torch.arange(40, 160).split(32):
            metric.update(x[part.to(device)], ids=(part + 960).tolist(), role="gallery")
        metric.update(x[:40], ids=list(range(40)), role="query")
    else:
        if form == "one_sided":
            budget = 2**16  # too small for the symmetric pass
        metric = rm.RetrievalMetrics(NAMES, similarity=similarity,
                                     memory_budget=budget).to(device)
        if form in ("same_source", "one_sided"):
            for part in torch.arange(160).split(50):
                metric.update(x[part.to(device)], labels[part.to(device)])
        elif form == "query_gallery":
            metric.update(x[40:], labels[40:], role="gallery")
            metric.update(x[:40], labels[:40], role="query")
        else:
            metric.set_gallery(x[40:], labels[40:])
            for part in torch.arange(40).split(15):
                metric.update(x[part.to(device)], labels[part.to(device)], role="query")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: v.cpu().tolist() for k, v in metric.compute().items()}


DEVICES = [
    "emulated",
    pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device")),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("form", FORMS)
def test_every_form_multiplies_half_and_ranks_as_float64(
    form, similarity, dtype, device, products
):
    emb, labels = _data(similarity)
    half = emb.to(dtype)
    assert half.double().equal(emb.double())  # every number exact in half precision
    want = _run(form, half.double(), labels, similarity, "cpu")
    products.clear()
    with emulated_cuda() if device == "emulated" else contextlib.nullcontext():
        got = _run(form, half, labels, similarity, "cuda")
    assert got == want
    assert products, "no product was made"
    # every product on the tensor cores, none upcast to float32
    assert set(products) == {(dtype, torch.float32)}, set(products)


def test_the_choice_is_the_counters():
    with emulated_cuda():
        assert choose_counter("cuda").multiplies_half(torch.bfloat16, torch.bfloat16)
        assert not choose_counter("cuda").multiplies_half(torch.bfloat16, torch.float16)
        assert not choose_counter("cuda").multiplies_half(torch.float32, torch.float32)
    with emulated_cuda(mps=True):  # Apple's MPS has no torch.mm(..., out_dtype=)
        assert not choose_counter("cuda").multiplies_half(torch.bfloat16, torch.bfloat16)
    assert not choose_counter("cpu").multiplies_half(torch.bfloat16, torch.bfloat16)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("form", FORMS)
def test_a_device_without_the_half_product_upcasts_and_ranks_as_float64(
    form, similarity, dtype, products
):
    """On a device whose torch has no ``torch.mm(..., out_dtype=)`` (Apple's MPS, emulated),
    half precision is upcast to float32 as its blocks are read, as on the CPU: the float64
    values, and no product asks for an out_dtype (which would raise there)."""
    emb, labels = _data(similarity)
    half = emb.to(dtype)
    want = _run(form, half.double(), labels, similarity, "cpu")
    products.clear()
    with emulated_cuda(mps=True):
        got = _run(form, half, labels, similarity, "cuda")
    assert got == want
    assert products, "no product was made"
    assert {out for _, out in products} == {None}, set(products)


@pytest.mark.parametrize("mps", [False, True], ids=["cuda", "mps"])
def test_rows_whose_products_would_underflow_keep_float32(products, mps):
    """bfloat16 holds numbers down to 1e-38, whose products underflow float32 before the norms
    could divide them: such a ranking takes the float32 path (unit rows first). Those rows are
    scaled in float64, on the host where the device has none (Apple's MPS): the same values."""
    emb, labels = _data("cosine")
    half = emb.to(torch.bfloat16)
    half[11] = half[11] * 2.0**-100
    want = _run("same_source", half.double(), labels, "cosine", "cpu")
    products.clear()
    with emulated_cuda(mps=mps):
        got = _run("same_source", half, labels, "cosine", "cuda")
    assert got == want
    assert {out for _, out in products} == {None}


def test_a_zero_row_scores_zero_and_is_said_by_name():
    emb, labels = _data("cosine")
    emb[5] = 0
    half = emb.to(torch.float16)
    with emulated_cuda():
        metric = rm.RetrievalMetrics(["map@r"], similarity="cosine").to("cuda")
        metric.update(half.to("cuda"), labels.to("cuda"))
        with pytest.warns(UserWarning, match="1 query and gallery embedding is a zero vector"):
            got = metric.compute()["map@r"].item()
    ref = rm.RetrievalMetrics(["map@r"], similarity="cosine")
    ref.update(half.double(), labels)
    with pytest.warns(UserWarning, match="zero vector"):
        assert got == ref.compute()["map@r"].item()


@pytest.mark.parametrize("similarity", ["cosine", "cosine_rows_unscaled", "dot", "euclidean"])
def test_the_product_call_is_one_torch_takes(similarity):
    """The call block_product makes, on meta tensors (torch registers aten.mm.dtype_out's
    checks for them, as for CUDA): half operands, a transposed view, a float32 out= slice of a
    larger buffer, and the factors' broadcasts."""
    from retrieval_metrics.functional.ranking.engine.tensor_cores import (
        HalfProducts,
        block_product,
    )

    meta = {"device": "meta"}
    a = torch.empty(16, 8, dtype=torch.bfloat16, **meta)
    b = torch.empty(24, 8, dtype=torch.bfloat16, **meta)
    out, work = torch.empty(32, 24, **meta), torch.empty(32, 24, **meta)
    factors = {"cosine": (torch.empty(16, **meta), torch.empty(24, **meta)),
               "cosine_rows_unscaled": (None, torch.empty(24, **meta)),
               "dot": (None, None), "euclidean": (None, torch.empty(24, **meta))}[similarity]
    half = HalfProducts(similarity.split("_")[0], *factors)
    s = block_product(a, b, out[:16], half, *factors, work)
    assert s.shape == (16, 24) and s.dtype == torch.float32


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_a_shard_scores_and_counts_on_the_tensor_cores(similarity, products):
    """A sharded gallery's two halves (the relevant scores a shard sends, the counts against
    those it receives) on the tensor cores: one shard's table equals the float64 ranking. Its
    scores are true cosines (1/|q| kept), as every shard's must be whichever path it took."""
    from retrieval_metrics.functional import rank_embeddings
    from retrieval_metrics.functional.ranking.engine.exchange import Exchange
    from retrieval_metrics.functional.ranking.sharded import rank_embeddings_sharded

    emb, labels = _data(similarity)
    half = emb.to(torch.bfloat16)
    want = rank_embeddings(half[:40].double(), half[40:].double(), query_labels=labels[:40],
                           gallery_labels=labels[40:], similarity=similarity)
    products.clear()
    with emulated_cuda():
        got = rank_embeddings_sharded(
            half[:40].cuda(), half[40:].cuda(), Exchange(), query_labels=labels[:40].cuda(),
            gallery_labels=labels[40:].cuda(), similarity=similarity,
        )
        got = {name: getattr(got, name).cpu() for name in ("ptr", "above", "tied")}
    for name in ("ptr", "above", "tied"):
        assert torch.equal(got[name], getattr(want, name)), name
    assert set(products) == {(torch.bfloat16, torch.float32)}


@needs_triton_package  # (no loop bound from an argument: every interpreter runs it)
@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(0, 70), cols=st.integers(0, 300), extra=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_the_fused_pair_factors_equal_torchs_two_operations(rows, cols, extra, seed):
    """Cosine's factor per pair in one pass (``triton_pairs``, where Triton counts: under
    ``TRITON_INTERPRET=1`` here, compiled on a GPU) gives torch's two operations (the pair
    factors as a block, then the product by them) bit for bit, on a block whose rows lie
    further apart than its width (a product's output cut to the rows still ranked) and whose
    sizes are not whole tiles; the rest of the buffer is left as it was."""
    from retrieval_metrics.functional.ranking.engine import triton_pairs

    device = KERNEL_DEVICE
    gen = torch.Generator().manual_seed(seed)
    buffer = torch.randn(rows + 1, cols + extra, generator=gen) * 40
    a = torch.rand(rows, generator=gen) * 3 + 1e-3
    b = torch.rand(cols, generator=gen) * 3 + 1e-3
    expected = buffer.clone()
    block = expected[:rows, :cols]
    block.mul_(a[:, None] * b[None, :])
    got = buffer.to(device)
    triton_pairs.scale_by_pairs(got[:rows, :cols], a.to(device), b.to(device))
    assert torch.equal(got.cpu(), expected)


#: tests that run a Triton kernel on the emulated device's host tensors: under triton's
#: interpreter only (on a GPU, test_every_form_multiplies_half_and_ranks_as_float64 takes the
#: compiled kernels)
kernels_on_the_hosts = pytest.mark.skipif(
    not INTERPRETED or kernels_cannot_run() is not None,
    reason="runs the kernel on the emulated device's host tensors: triton's interpreter, "
    + (kernels_cannot_run() or "not used where a GPU is"),
)


@kernels_on_the_hosts
@pytest.mark.parametrize("form", ["same_source", "image_text"])
def test_the_passes_apply_fused_pair_factors_as_they_rank(form, monkeypatch):
    """Where the counting backend fuses cosine's pair factors (Triton's), the symmetric pass
    and image-text's two-way pass hand each half product to ``triton_pairs`` (here: the
    emulated device's host tensors, the kernel interpreted) and rank as float64 does."""
    from emulated_cuda import FakeCudaTensor
    from retrieval_metrics.functional.ranking.engine import counters, triton_pairs

    fused, calls = triton_pairs.scale_by_pairs, []

    def on_the_hosts(s, a, b):
        calls.append(s.shape)
        assert all(isinstance(t, FakeCudaTensor) for t in (s, a, b))
        fused(s.host, a.host, b.host)  # (the block's host is a view of its buffer's)
        return s

    monkeypatch.setattr(counters.TorchDeviceCounter, "fuses_pair_factors", True)
    monkeypatch.setattr(triton_pairs, "scale_by_pairs", on_the_hosts)
    emb, labels = _data("cosine")
    half = emb.to(torch.bfloat16)
    want = _run(form, half.double(), labels, "cosine", "cpu")
    with emulated_cuda():
        got = _run(form, half, labels, "cosine", "cuda")
    assert calls, "no pair factors were applied in one pass"
    assert got == want


def _counted_on_the_hosts(folded: list[int], pairs: bool):
    """triton_count.count_block_fused run on the emulated device's host tensors (the kernel
    interpreted), noting in ``folded`` the scores of each block counted with its factors (per
    pair where ``pairs``, else per column alone)."""
    from emulated_cuda import FakeCudaTensor
    from retrieval_metrics.functional.ranking.engine import triton_count

    fused = triton_count.count_block_fused

    def count(s, rel, hist_lt, hist_le, column_factor=None, row_factor=None):
        assert all(isinstance(t, FakeCudaTensor) for t in (s, rel, hist_lt, hist_le))
        if column_factor is not None and pairs == (row_factor is not None):
            folded.append(s.numel())
        fused(s.host, rel.host, hist_lt.host, hist_le.host,
              *(None if f is None else f.host for f in (column_factor, row_factor)))

    return count


def _with_and_without_folding(monkeypatch, run, want: dict, folded: list[int]):
    """``run()`` on the emulated device with Triton's counting (its kernels on the hosts, as
    the caller patched them), first without folding factors, then with: each time equal to
    ``want``. Returns, per setting, the work besides the products and the counting, the scores
    counted with their factors folded (``folded``, filled by the patched count), and the work."""
    from retrieval_metrics.functional.ranking.engine import counters
    from work_counts import counting_work

    monkeypatch.setenv(counters.COUNTER_ENV, "triton")  # (on the emulated device)
    besides, scores_folded, works = {}, {}, []
    for folds in (False, True):
        monkeypatch.setattr(counters.TritonCounter, "folds_column_factor", folds)
        folded.clear()
        with emulated_cuda(), counting_work() as work:
            got = run()
        assert got == want
        besides[folds] = work.elements_written - work.elements_counting
        scores_folded[folds] = sum(folded)
        works.append(work)
    return besides, scores_folded, works


@kernels_on_the_hosts
@pytest.mark.parametrize("form", ["fixed_gallery", "qrels"])
def test_the_counting_folds_cosines_factor_per_column(form, monkeypatch):
    """Where the counting backend folds a half product's factor per column (Triton's), the
    one-sided pass hands it each block as the product left it, with cosine's 1/|g_j| (here:
    the emulated device's host tensors, the kernel interpreted; a gallery of 1,000 in blocks
    of a small budget, its relevant items in more blocks than stay cached, so that every block
    is counted as it is computed). The values are float64's, and the pass writes a score block
    less for each block so counted: the block scaled in a pass of its own (a read and a write
    of every score) is gone."""
    from retrieval_metrics.functional.ranking.engine import triton_count

    folded: list[int] = []
    on_the_hosts = _counted_on_the_hosts(folded, pairs=False)

    emb, labels = _data("cosine", n=1040)
    labels = labels * 8 + torch.arange(1040) % 8  # (a few relevant items a query, not 65)
    half = emb.to(torch.bfloat16)

    def run(x: torch.Tensor, device: str) -> dict:
        x, lab = x.to(device), labels.to(device)
        if form == "qrels":
            qrels = {q: {1000 + (q * 97 + 331 * j) % 1000: 1 + j % 3 for j in range(1 + q % 4)}
                     for q in range(40)}
            metric = rm.RetrievalMetrics(["ndcg@10", "recall@20", "mrr@10", "map"],
                                         qrels=qrels, similarity="cosine", memory_budget=2**18)
            metric = metric.to(device)
            metric.set_gallery(x[40:], ids=torch.arange(1000, 2000, device=device))
            metric.update(x[:40], ids=torch.arange(40, device=device), role="query")
        else:
            metric = rm.RetrievalMetrics(NAMES, similarity="cosine", memory_budget=2**18)
            metric = metric.to(device)
            metric.set_gallery(x[40:], lab[40:])
            metric.update(x[:40], lab[:40], role="query")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {k: v.cpu().tolist() for k, v in metric.compute().items()}

    want = run(half.double(), "cpu")
    monkeypatch.setattr(triton_count, "count_block_fused", on_the_hosts)
    besides, scores_folded, _ = _with_and_without_folding(
        monkeypatch, lambda: run(half, "cuda"), want, folded
    )
    assert scores_folded[False] == 0 and scores_folded[True] >= 40 * 1000 // 2
    assert besides[False] - besides[True] >= scores_folded[True]


@kernels_on_the_hosts
@pytest.mark.parametrize("form", ["same_source", "image_text"])
def test_the_counting_folds_cosines_factor_per_pair(form, monkeypatch):
    """Where the counting backend folds factors (Triton's), a block pair of the symmetric pass
    or of image-text's two ways computed to be counted leaves cosine's factor per pair to the
    counting of both its sides (the rows' ``1/|a_i| * 1/|b_j|``, the columns' the same products
    swapped): here the kernels interpreted on the emulated device's host tensors. The values
    are float64's, and the work besides the products and the counting falls by at least one
    element per score so counted (the pair factors' pass over the block is gone)."""
    from retrieval_metrics.functional.ranking.engine import triton_count, triton_pairs

    scaled, folded = triton_pairs.scale_by_pairs, []
    count_on_the_hosts = _counted_on_the_hosts(folded, pairs=True)

    def pairs_on_the_hosts(s, a, b):
        scaled(s.host, a.host, b.host)
        return s

    # (sizes and budgets where some block pairs are counted without their relevant scores
    # read, each pass in several blocks: Triton's interpreter takes its time per score)
    emb, labels = _data("cosine", n=400)
    labels = labels * 8 + torch.arange(400) % 8  # (a few relevant items a query)
    half = emb.to(torch.bfloat16)

    def run(x: torch.Tensor, device: str) -> dict:
        x, lab = x.to(device), labels.to(device)
        if form == "image_text":
            images, captions = x[:80], x[80:400]
            metric = rm.CrossModalRetrieval(k=(1, 5, 10), similarity="cosine",
                                            memory_budget=2**19).to(device)
            metric.update(images[torch.arange(320, device=device) % 80], captions,
                          torch.arange(320, device=device) % 80)
        else:
            metric = rm.RetrievalMetrics(NAMES, similarity="cosine", memory_budget=2**20)
            metric = metric.to(device)
            metric.update(x, lab)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {k: v.cpu().tolist() for k, v in metric.compute().items()}

    want = run(half.double(), "cpu")
    monkeypatch.setattr(triton_count, "count_block_fused", count_on_the_hosts)
    monkeypatch.setattr(triton_pairs, "scale_by_pairs", pairs_on_the_hosts)
    besides, scores_folded, works = _with_and_without_folding(
        monkeypatch, lambda: run(half, "cuda"), want, folded
    )
    for work in works:
        assert work.passes["symmetric" if form == "same_source" else "two_way"] == 1
    assert scores_folded[False] == 0 and scores_folded[True] > 0
    assert besides[False] - besides[True] >= scores_folded[True]
