"""The counting backends (engine/counters.py): chosen once per ranking, equal to each other.

* The fused Triton kernel (``triton_count``) against the definition and against torch's
  whole-block count, under ``TRITON_INTERPRET=1`` on the CPU (tests/conftest.py sets it;
  hypothesis: ties, -inf, +inf padding, -0.0, rows of one relevant score and of thousands).
* Every backend ranks the metric classes' forms to the CPU's values (same source,
  queries/gallery, judgments, image-text).
* The work of a block on a whole-block backend: a fixed number of torch operations per block,
  whatever the relevant items per query (counted with a ``TorchFunctionMode``).
* The default budget on an accelerator follows its free memory; an explicit one wins.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

import retrieval_metrics as rm
from emulated_cuda import emulated_cuda
from retrieval_metrics.functional.ranking.engine import counters, counting, kernels
from retrieval_metrics.functional.ranking.settings import (
    DEFAULT_MEMORY_BUDGET,
    DEVICE_BUDGET_CAP,
    RankingSettings,
    memory_budget_on,
)
from triton_here import KERNEL_DEVICE, needs_triton, needs_triton_package

triton_count = pytest.importorskip(
    "retrieval_metrics.functional.ranking.engine.triton_count"
)


def _histograms(rows: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.zeros(rows * (m + 1), dtype=torch.int64),
            torch.zeros(rows * (m + 1), dtype=torch.int64))


def _by_definition(s: torch.Tensor, rel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin j of a row's "<" histogram: its items with exactly j relevant scores strictly below;
    the "<=" histogram holds, per bin, the items with j relevant scores at or below less those
    of the "<" one. Counted item by item in Python floats."""
    rows, m = rel.shape
    lt, le = _histograms(rows, m)
    for r in range(rows):
        values = rel[r].tolist()
        for x in s[r].tolist():
            below = sum(v < x for v in values)
            at_most = sum(v <= x for v in values)
            lt[r * (m + 1) + below] += 1
            le[r * (m + 1) + at_most] += 1
            le[r * (m + 1) + below] -= 1
    return lt, le


def _fused_on_kernel_device(s, rel, histograms, transposed: bool = False) -> None:
    """The fused kernel's histograms of ``s`` against ``rel``, run on :data:`KERNEL_DEVICE`,
    written into the host ``histograms``; ``transposed``: ``s`` given as the transposed view of
    its transpose (columns of unit stride, as the two-sided pass counts a product's columns)."""
    on = [h.to(KERNEL_DEVICE) for h in histograms]
    block = s.T.contiguous().to(KERNEL_DEVICE).T if transposed else s.to(KERNEL_DEVICE)
    assert transposed == (block.stride(1) != 1) or min(block.shape) == 1
    triton_count.count_block_fused(block, rel.to(KERNEL_DEVICE), *on)
    for host, device_copy in zip(histograms, on, strict=True):
        host.copy_(device_copy)


@st.composite
def blocks(draw, max_relevant: int = 12):
    """A score block and its rows' sorted relevant scores, drawn from few values (ties),
    with -inf (excluded items), +inf padding and -0.0 against 0.0."""
    rows = draw(st.integers(1, 9))
    cols = draw(st.integers(1, 300))
    m = draw(st.integers(1, max_relevant))
    levels = [-1.5, -0.0, 0.0, 0.25, 0.5, 2.0, float("-inf")]
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    pick = torch.tensor(levels, dtype=torch.float32)
    s = pick[torch.randint(0, len(levels), (rows, cols), generator=gen)]
    rel = pick[torch.randint(0, len(levels) - 1, (rows, m), generator=gen)]
    rel = rel + 0.0  # the engine's relevant scores: -0.0 made 0.0 (QueryBlock.start_counting)
    padding = draw(st.integers(0, m - 1))
    if padding:
        rel[: rows // 2 + 1, m - padding :] = float("inf")
    return s, torch.sort(rel, dim=1).values


@needs_triton
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(), st.booleans())
def test_the_fused_kernel_counts_as_the_definition(block, transposed):
    s, rel = block
    expected = _by_definition(s, rel)
    fused = _histograms(*rel.shape)
    _fused_on_kernel_device(s, rel, fused, transposed)
    searched = _histograms(*rel.shape)
    kernels.count_block_searched(s, rel, *searched, stage=2**20)
    for got in (fused, searched):
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


#: factors per column: reciprocal norms that round (1/3, 1/7), powers of two, 1 (a padded or
#: zero row's), and one whose products are subnormal for small scores
FACTORS = [1 / 3, 1 / 7, 0.5, 1.0, 3.0, 2.0**-20, 0.7071067811865476]


@needs_triton
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks(), st.booleans(), st.integers(0, 2**31 - 1), st.integers(0, 6), st.booleans())
def test_the_fused_kernel_folds_a_factor_per_column(block, transposed, seed, from_scores, pair):
    """Given a factor per column, the kernel counts ``s * factor`` as torch's ``s.mul_(factor)``
    leaves it (one float32 product a score, rounded alike), and leaves ``s`` as it is; given one
    per row too (``pair``: cosine's factor per pair), ``s * (row[:, None] * column[None, :])``
    as torch rounds it (``triton_pairs``). The relevant scores are drawn from the scaled block
    itself (``from_scores`` of them a row), as the pass reads them from the scaled products, so
    that items tie them exactly: one rounding apart, the ties would split."""
    s, rel = block
    gen = torch.Generator().manual_seed(seed)
    pick = torch.tensor(FACTORS, dtype=torch.float32)
    factor = pick[torch.randint(0, len(FACTORS), (s.shape[1],), generator=gen)]
    row = pick[torch.randint(0, len(FACTORS), (s.shape[0],), generator=gen)] if pair else None
    scaled = s.clone().mul_(factor if row is None else row[:, None] * factor[None, :])
    if from_scores:
        picks = torch.randint(0, s.shape[1], (s.shape[0], from_scores), generator=gen)
        taken = torch.gather(scaled, 1, picks) + 0.0
        rel = torch.sort(torch.cat([rel, taken], 1), 1).values
    expected = _by_definition(scaled, rel)
    kept = s.clone()
    on = [h.to(KERNEL_DEVICE) for h in _histograms(*rel.shape)]
    block_ = s.T.contiguous().to(KERNEL_DEVICE).T if transposed else s.to(KERNEL_DEVICE)
    triton_count.count_block_fused(
        block_, rel.to(KERNEL_DEVICE), *on, factor.to(KERNEL_DEVICE),
        None if row is None else row.to(KERNEL_DEVICE),
    )
    assert torch.equal(on[0].cpu(), expected[0]) and torch.equal(on[1].cpu(), expected[1])
    assert torch.equal(block_.cpu(), kept)  # (the scores themselves untouched)
    # torch's whole-block backend, given the factors, counts the same (scaling in place)
    searched = _histograms(*rel.shape)
    counters.TorchDeviceCounter(torch.device("cpu")).count_whole(
        s.clone(), rel, *searched, 2**20, torch.zeros(0), factor, row
    )
    assert torch.equal(searched[0], expected[0]) and torch.equal(searched[1], expected[1])


@needs_triton
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1), st.sampled_from([65, 300, 2000]))
def test_the_fused_kernel_counts_rows_of_thousands(seed, m):
    """Rows past the per-bin width (one atomic add per item above the lowest relevant score),
    in float64 too: equal to torch's searched count."""
    gen = torch.Generator().manual_seed(seed)
    for dtype in (torch.float32, torch.float64):
        s = torch.randint(-20, 21, (3, 700), generator=gen).to(dtype) / 4
        rel = torch.sort(torch.randint(-20, 21, (3, m), generator=gen).to(dtype) / 4, 1).values
        rel[2, m // 2 :] = float("inf")
        fused, searched = _histograms(3, m), _histograms(3, m)
        _fused_on_kernel_device(s, rel, fused)
        kernels.count_block_searched(s, rel, *searched, stage=2**20)
        assert torch.equal(fused[0], searched[0]) and torch.equal(fused[1], searched[1])


def _forms(n: int, device: str = "cpu") -> dict[str, dict[str, torch.Tensor]]:
    """Each form's values through the metric classes on small integer embeddings (ties; dot
    products, exact on every device), on ``device``, as host tensors."""
    gen = torch.Generator().manual_seed(3)
    labels = torch.randint(0, n // 6, (n,), generator=gen).to(device)
    emb = torch.randint(-2, 3, (n, 8), generator=gen).float().to(device)
    names = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr", "map", "ndcg@10"]
    out = {}
    m = rm.RetrievalMetrics(names, similarity="dot").to(device)
    m.update(emb, labels)
    out["same source"] = m.compute()
    m = rm.RetrievalMetrics(names, similarity="dot").to(device)
    m.update(emb[: n // 3], labels[: n // 3], role="query")
    m.update(emb[n // 3 :], labels[n // 3 :], role="gallery")
    out["query/gallery"] = m.compute()
    q = n // 4
    qrels = {f"q{i}": {f"d{j}": 1 + j % 2 for j in range(i % 5, n - q, 7)} for i in range(q)}
    m = rm.RetrievalMetrics(["ndcg@10", "recall@20", "map", "mrr"], qrels=qrels,
                            similarity="dot").to(device)
    m.update(emb[:q], ids=[f"q{i}" for i in range(q)], role="query")
    m.update(emb[q:], ids=[f"d{j}" for j in range(n - q)], role="gallery")
    out["qrels"] = m.compute()
    owner = torch.arange(n // 6).repeat_interleave(3).to(device)
    cm = rm.CrossModalRetrieval(similarity="dot").to(device)
    cm.update(emb[: n // 6][owner], emb[n // 6 : n // 6 + owner.numel()], owner)
    out["image-text"] = cm.compute()
    return {form: {k: v.cpu() for k, v in values.items()} for form, values in out.items()}


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_every_backend_gives_the_cpu_values(backend, monkeypatch):
    expected = _forms(180)
    monkeypatch.setenv(counters.COUNTER_ENV, backend)
    got = _forms(180, KERNEL_DEVICE if backend == "triton" else "cpu")
    for form, values in expected.items():
        for name, value in values.items():
            assert torch.equal(got[form][name], value), (backend, form, name)


def _listed(table) -> list[list[tuple[int, int]]]:
    """Each query's listed (above, tied) pairs, on the host."""
    ptr, above, tied = (t.cpu().tolist() for t in (table.ptr, table.above, table.tied))
    return [list(zip(above[a:b], tied[a:b], strict=True)) for a, b in itertools.pairwise(ptr)]


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
@pytest.mark.parametrize("locate_first", [True, False])
@pytest.mark.parametrize("cover_relevant", [False, True])
def test_a_ranking_with_a_depth_lists_the_same_items_on_every_backend(
    backend, locate_first, cover_relevant, monkeypatch
):
    """With a depth a query lists the relevant items fewer than its depth items beat (and,
    with locate_first, its best ones): read off the whole ranking here. The CPU's thresholds
    stop at the depth; a whole-block backend (a GPU's) counted every item and listed them all,
    so a table, and the measures it refuses, depended on the device."""
    from retrieval_metrics.functional.ranking import rank_embeddings

    gen = torch.Generator().manual_seed(1)
    q, g = torch.randn(12, 8, generator=gen), torch.randn(300, 8, generator=gen)
    labels = {"query_labels": torch.randint(0, 4, (12,), generator=gen),
              "gallery_labels": torch.randint(0, 4, (300,), generator=gen)}
    depth = 5
    options = {"depth": depth, "locate_first": locate_first, "cover_relevant": cover_relevant}
    whole = rank_embeddings(q, g, **labels)
    expected = []
    for items, m in zip(_listed(whole), whole.num_relevant.tolist(), strict=True):
        reach = max(depth, m) if cover_relevant else depth
        best = min((a for a, _ in items), default=None)
        expected.append(
            [(a, t) for a, t in items if a < reach or (locate_first and a == best)]
        )
    cpu = rank_embeddings(q, g, **labels, **options)
    assert _listed(cpu) == expected
    monkeypatch.setenv(counters.COUNTER_ENV, backend)
    device = KERNEL_DEVICE if backend == "triton" else "cpu"
    on_device = rank_embeddings(
        q.to(device), g.to(device),
        **{k: v.to(device) for k, v in labels.items()}, **options,
    )
    assert _listed(on_device) == expected


def test_the_backend_is_chosen_once_by_device(monkeypatch):
    monkeypatch.delenv(counters.COUNTER_ENV, raising=False)
    assert type(counters.choose_counter("cpu")) is counters.CpuCounter
    with emulated_cuda():
        # a CPU build of torch (the emulated device) cannot launch Triton: torch's kernels
        assert type(counters.choose_counter("cuda")) is counters.TorchDeviceCounter
    monkeypatch.setenv(counters.COUNTER_ENV, "fast")
    with pytest.raises(ValueError, match="RETRIEVAL_METRICS_COUNTER"):
        counters.choose_counter("cpu")


class _CountOps(TorchFunctionMode):
    """Counts torch calls; a Triton launch counts one (``launch``): under the interpreter the
    kernel itself runs as torch and numpy calls on the CPU, on a GPU it is one launch."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.in_kernel = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.in_kernel:
            self.ops += 1
        return func(*args, **(kwargs or {}))

    def launch(self, kernel):
        def launched(*args, **kwargs):
            self.ops += 1
            self.in_kernel = True
            try:
                return kernel(*args, **kwargs)
            finally:
                self.in_kernel = False

        return launched


def _ops_per_block(
    class_size: int, backend: str, monkeypatch, ties_by_id: bool = False
) -> list[int]:
    """Torch operations of each QueryBlock.count (one gallery block), a set ranked against
    itself in classes of ``class_size`` items, on a whole-block backend (an accelerator's), the
    blocks fixed at (64, 128) so that only the relevant items per query change.
    ``ties_by_id``: tied items ordered by their ids (each block also counts, per relevant
    pair, the tied items of a smaller id)."""
    from retrieval_metrics.functional.ranking import rank_embeddings

    monkeypatch.setenv(counters.COUNTER_ENV, backend)
    gen = torch.Generator().manual_seed(class_size)
    n = 288
    device = KERNEL_DEVICE if backend == "triton" else "cpu"
    labels = (torch.arange(n) // class_size).to(device)
    emb = torch.randn(n, 8, generator=gen).to(device)
    ops = []
    original = counting.QueryBlock.count

    fused = triton_count.count_block_fused

    def counted(self, *args, **kwargs):
        with _CountOps() as mode:
            monkeypatch.setattr(triton_count, "count_block_fused", mode.launch(fused))
            original(self, *args, **kwargs)
        ops.append(mode.ops)

    monkeypatch.setattr(counting.QueryBlock, "count", counted)
    by_id = {"gallery_ids": torch.arange(n), "ties_by_id": True} if ties_by_id else {}
    rank_embeddings(
        emb, None if not ties_by_id else emb, query_labels=labels,
        **({"gallery_labels": labels} if ties_by_id else {}), block_size=(64, 128),
        memory_budget=2**28, **by_id,
    )
    monkeypatch.setattr(counting.QueryBlock, "count", original)
    monkeypatch.setattr(triton_count, "count_block_fused", fused)
    assert ops
    return sorted(set(ops))


# classes from two items to most of a gallery block (spanning two of them): 288 items in
# blocks of (64, 128), small since Triton's interpreter takes its time per score
CLASS_SIZES = (2, 24, 96)


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_the_work_of_a_block_does_not_grow_with_the_relevant_items(backend, monkeypatch):
    """A block is a fixed handful of torch operations (no loop over relevant items, no step
    per relevant score): the same count for every block, for classes of 2, 24 and 96 items."""
    per_block = [_ops_per_block(size, backend, monkeypatch) for size in CLASS_SIZES]
    assert per_block[0] == per_block[1] == per_block[2] and len(per_block[0]) == 1, per_block
    assert per_block[0][0] <= (16 if backend == "triton" else 64), per_block


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_the_work_of_a_block_with_ties_by_id_is_bounded(backend, monkeypatch):
    """Ordering ties by id counts, per relevant pair, the block's tied items of a smaller id:
    four operations over the block per relevant item up to a few, then one sort of the block
    and a handful of searches, in four parts of its rows (69, 222 and 2070 operations a block
    for classes of 2, 24 and 288 before: one comparison per relevant score)."""
    per_block = [
        _ops_per_block(size, backend, monkeypatch, ties_by_id=True) for size in CLASS_SIZES
    ]
    assert per_block[1] == per_block[2] and len(per_block[1]) == 1, per_block
    assert max(per_block[0]) <= per_block[1][0] <= 200, per_block


def test_the_default_budget_follows_the_devices_free_memory(monkeypatch):
    gib = 2**30
    assert memory_budget_on(None, "cpu") == DEFAULT_MEMORY_BUDGET
    assert memory_budget_on(2**20, "cpu") == 2**20
    with emulated_cuda():
        for free, expected in ((8 * gib, 2 * gib), (140 * gib, DEVICE_BUDGET_CAP),
                               (gib // 2, DEFAULT_MEMORY_BUDGET)):
            monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, f=free: (f, f))
            assert memory_budget_on(None, "cuda") == expected
            assert RankingSettings().budget_on("cuda") == expected
            assert RankingSettings(memory_budget=2**22).budget_on("cuda") == 2**22


def test_the_default_budget_on_apple_mps_follows_metals_recommended_working_set(monkeypatch):
    """MPS has no mem_get_info: its free memory is the working set Metal recommends for the
    process less what the driver holds (mocked: no Mac here)."""
    gib = 2**30
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 12 * gib)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 4 * gib)
    assert memory_budget_on(None, "mps") == 2 * gib  # a quarter of the 8 GiB left
    assert memory_budget_on(2**22, "mps") == 2**22
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 13 * gib)
    assert memory_budget_on(None, "mps") == DEFAULT_MEMORY_BUDGET  # never below the CPU's

    def unavailable():
        raise RuntimeError("MPS backend is not available")

    monkeypatch.setattr(torch.mps, "recommended_max_memory", unavailable)
    assert memory_budget_on(None, "mps") == DEFAULT_MEMORY_BUDGET


def test_a_ranking_on_a_device_takes_the_devices_budget(monkeypatch):
    """The budget each ranking of a compute() is given: a share of the mocked free memory
    by default (square blocks of the symmetric pass grow with it), the explicit one where
    given (and the blocks it allows)."""
    from retrieval_metrics.functional.ranking.engine import layout

    seen = []
    original = layout.choose_layout

    def recorded(side, *args, **kwargs):
        chosen = original(side, *args, **kwargs)
        seen.append((side.options.budget_on(side.device), chosen))
        return chosen

    from retrieval_metrics.functional.ranking.engine import schedule

    monkeypatch.setattr(schedule, "choose_layout", recorded)  # (where the ranking calls it)
    gen = torch.Generator().manual_seed(0)
    emb, labels = torch.randn(1500, 8, generator=gen), torch.arange(1500) // 4

    def budget_and_block(**kwargs):
        seen.clear()
        with emulated_cuda():
            monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**34, 2**35))
            m = rm.RetrievalMetrics(["hit_rate@1"], **kwargs).to("cuda")
            m.update(emb.to("cuda"), labels.to("cuda"))
            m.compute()
        # (the largest: with a small budget the metric ranks a chunk of queries at a time)
        return max(b for b, _ in seen), max(c.block_q * c.block_g for _, c in seen)

    auto_budget, auto_block = budget_and_block()
    # 16 GiB free: a quarter (the metric keeps half for the relevant pairs it holds)
    assert auto_budget >= 2**31, auto_budget
    explicit_budget, explicit_block = budget_and_block(memory_budget=2**21)
    assert explicit_budget <= 2**21
    assert explicit_block < auto_block  # scores a block


def test_the_engine_asks_the_devices_type_in_one_place():
    """How a block is counted depends on the device through the counter chosen for it, never
    through a test of the device's type elsewhere in the engine (functional/ranking/engine)."""
    import ast
    from pathlib import Path

    engine = Path(counters.__file__).parent
    readers = set()
    for path in engine.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "type" and (
                (isinstance(node.value, ast.Attribute) and node.value.attr == "device")
                or (isinstance(node.value, ast.Name) and node.value.id == "device")
            ):
                readers.add(path.name)
    assert readers == {"counters.py"}, readers


_COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from retrieval_metrics.functional.ranking.engine import triton_count as T


def compiled(source, multiplies, scores="fp32"):
    # the kernel for compute capability 9.0, its float products each rounded alone as torch
    # rounds them: no fused multiply-add, with Triton's FP fusion on
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
    assert kernel.asm["cubin"]
    assert (f"mul.f{scores[2:]}" in kernel.asm["ptx"]) == multiplies  # ("fp32": mul.f32)
    assert "fma." not in kernel.asm["ptx"]


def signature(scores):
    return {"s_ptr": f"*{scores}", "rel_ptr": f"*{scores}", "hist_lt_ptr": "*i64",
            "hist_le_ptr": "*i64", "n_rows": "i32", "n_cols": "i32", "m": "i32",
            "row_stride": "i32", "col_stride": "i32", "factor_ptr": f"*{scores}",
            "row_factor_ptr": f"*{scores}", "ROWS": "constexpr", "COLUMNS": "constexpr",
            "SEARCH_STEPS": "constexpr", "SCALED": "constexpr", "ROW_SCALED": "constexpr"}


def count_tile(scores, steps, strides, scaled, row_scaled):
    source = ASTSource(fn=T._kernel(), signature=signature(scores),  # (the kernel the GPU runs)
                       constexprs={"ROWS": T.ROWS, "COLUMNS": T.COLUMNS,
                                   "SEARCH_STEPS": steps, "SCALED": scaled,
                                   "ROW_SCALED": row_scaled, **strides})
    compiled(source, multiplies=scaled, scores=scores)


for steps in (3, 9):  # per-bin sums (at most 63 relevant scores a row), atomic adds
    # rows of unit stride (a block read along its rows; Triton specialises a stride of 1), and
    # a transposed view (columns of unit stride); without factors, with one per column, and
    # with one per row and per column
    for strides in ({"col_stride": 1}, {"row_stride": 1}):
        for scaled, row_scaled in ((False, False), (True, False), (True, True)):
            count_tile("fp32", steps, strides, scaled, row_scaled)
# float64 states give float64 score blocks
for scaled, row_scaled in ((False, False), (True, True)):
    count_tile("fp64", 3, {"col_stride": 1}, scaled, row_scaled)
# cosine's factor per pair (triton_pairs), on a block whose rows lie further apart than its width
from retrieval_metrics.functional.ranking.engine import triton_pairs as P
source = ASTSource(fn=P._kernel(), signature={
    "s_ptr": "*fp32", "a_ptr": "*fp32", "b_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
    "row_stride": "i32", "ROWS": "constexpr", "COLUMNS": "constexpr"},
    constexprs={"ROWS": P.ROWS, "COLUMNS": P.COLUMNS})
compiled(source, multiplies=True)
print("compiled")
"""


@needs_triton_package
def test_the_fused_kernel_compiles_for_an_h200():
    """The kernels as the GPU runs them, not as the interpreter does: compiled to a cubin for
    compute capability 9.0 (H100/H200): the fused count both ways of adding the counts, float32
    and float64 scores, with and without a factor per column, and cosine's factor per pair
    (``triton_pairs``); no score is a fused multiply-add, which would round otherwise than
    torch's products the relevant scores came from.
    Compiling needs no GPU (Triton ships its own ptxas); in a fresh process, as the interpreter
    of the tests above leaves triton.language patched."""
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    done = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True,
                          env=env, timeout=240)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


@needs_triton
def test_the_fused_kernel_counts_a_products_columns_where_they_lie(monkeypatch):
    """The two-sided pass counts a product's columns as its transposed view. The fused kernel
    reads a block through its strides (``reads_strided``): it is given the view itself, where
    torch's kernels are given a row-major copy, and that copy, a score-sized write per
    off-diagonal product, is gone from the work besides the counting."""
    from retrieval_metrics.functional.ranking import rank_embeddings
    from work_counts import counting_work

    n = 576
    gen = torch.Generator().manual_seed(0)
    labels, emb = torch.arange(n) // 4, torch.randn(n, 8, generator=gen)
    seen: dict[str, set[bool]] = {}
    besides: dict[str, int] = {}
    for backend, cls in (("torch", counters.TorchDeviceCounter),
                         ("triton", counters.TritonCounter)):
        monkeypatch.setenv(counters.COUNTER_ENV, backend)
        layouts: set[bool] = set()
        original = cls.__dict__["count_whole"]

        def spy(self, s, *args, layouts=layouts, original=original, **kwargs):
            layouts.add(s.is_contiguous())
            return original(self, s, *args, **kwargs)

        monkeypatch.setattr(cls, "count_whole", spy)
        device = KERNEL_DEVICE if backend == "triton" else "cpu"
        with counting_work() as work:
            rank_embeddings(emb.to(device), None, query_labels=labels.to(device),
                            memory_budget=2**20)
        assert work.passes["symmetric"] == 1 and work.products > 1
        monkeypatch.setattr(cls, "count_whole", original)
        seen[backend], besides[backend] = layouts, work.elements_written - work.elements_counting
    assert seen == {"torch": {True}, "triton": {True, False}}
    assert besides["triton"] < besides["torch"]


# ------------------------------------------------------------------ Triton's check on a device


@pytest.fixture
def triton_on_the_emulated_device(monkeypatch):
    """The emulated device taken for a CUDA device that Triton runs on (its check then runs
    there, its kernels on the emulation's host memory: as on the CPU), the check's memory of
    devices empty before and after."""
    with emulated_cuda():
        monkeypatch.setattr(counters, "_triton_runs_on", lambda device: True)
        monkeypatch.delenv(counters.COUNTER_ENV, raising=False)
        counters._triton_works_on.cache_clear()
        try:
            yield
        finally:
            counters._triton_works_on.cache_clear()


def test_a_device_where_tritons_kernels_cannot_launch_counts_with_torchs(
    triton_on_the_emulated_device, monkeypatch
):
    """A kernel that cannot be built at its first launch (no C compiler for Triton's launcher,
    a GPU older than Triton supports) fails inside the check, not inside compute(): a warning
    says why, and torch's kernels count, once asked per device; the values are the CPU's."""
    tries = []

    def cannot_build(*args, **kwargs):
        tries.append(1)
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment "
                           "variable.\n(more lines)")

    monkeypatch.setattr(triton_count, "count_block_fused", cannot_build)
    with pytest.warns(RuntimeWarning, match=r"cannot be used on cuda:0 \(RuntimeError: Failed to "
                                            r"find C compiler\. Please specify via CC environment "
                                            r"variable\.\); torch's kernels count there"):
        chosen = counters.choose_counter("cuda")
    assert type(chosen) is counters.TorchDeviceCounter
    assert type(counters.choose_counter("cuda:0")) is counters.TorchDeviceCounter
    assert len(tries) == 1
    gen = torch.Generator().manual_seed(3)
    emb, labels = torch.randn(300, 6, generator=gen), torch.arange(300) % 40
    values = []
    for device in ("cpu", "cuda"):
        metric = rm.RetrievalMetrics(["map@r", "mrr", "hit_rate@5"]).to(device)
        metric.update(emb.to(device), labels.to(device))
        values.append({k: float(v) for k, v in metric.compute().items()})
    assert values[0] == values[1]
    assert len(tries) == 1


def test_a_device_where_tritons_kernels_count_otherwise_counts_with_torchs(
    triton_on_the_emulated_device, monkeypatch
):
    """A kernel that runs but gives other counts than torch's on the check's block (a compiler
    or device this project never ran on) is not used: the warning names what differed."""
    def one_off(s, rel_sorted, hist_lt, hist_le, *factors):
        kernels.count_block_searched(s, rel_sorted, hist_lt, hist_le, 1 << 20)
        hist_le[-1] += 1

    def pairs_as_torch(s, a, b):  # (the emulated device's memory is no GPU's)
        return s.mul_(a[:, None] * b[None, :])

    from retrieval_metrics.functional.ranking.engine import triton_pairs

    monkeypatch.setattr(triton_count, "count_block_fused", one_off)
    monkeypatch.setattr(triton_pairs, "scale_by_pairs", pairs_as_torch)
    with pytest.warns(RuntimeWarning, match=r"other numbers than torch's \(the '<=' counts\)"):
        assert type(counters.choose_counter("cuda")) is counters.TorchDeviceCounter
    # (the same kernels giving torch's counts pass: it is the difference that was caught)
    counters._triton_works_on.cache_clear()
    monkeypatch.setattr(triton_count, "count_block_fused",
                        lambda s, rel, lt, le, *f: kernels.count_block_searched(s, rel, lt, le,
                                                                                1 << 20))
    assert type(counters.choose_counter("cuda")) is counters.TritonCounter


@needs_triton
def test_tritons_kernels_pass_their_check_where_they_run():
    """The check's block through the real kernels (compiled on a GPU, interpreted on the CPU):
    they give torch's numbers, so a device where they run counts with them."""
    from retrieval_metrics.functional.ranking.engine import triton_check

    assert triton_check.kernels_agree(torch.device(KERNEL_DEVICE)) is None
