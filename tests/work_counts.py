"""Counting the work a ranking does, so that tests can hold it to its plan.

A clock drifts by 2x on a shared machine; a count does not. :func:`counting_work` records, while
it is active, every matrix product's multiply-adds (``aten.mm``, ``addmm``, ``bmm``, ``matmul``
and their ``out=`` forms: rows x columns x inner width, the padding of a product's blocks
included), the passes of the engine (one-sided, symmetric, two-way), the query blocks, the
rankings asked of the engine, and the score entries the counting reads (a block of the
two-sided pass read once for both of its sides counts once)::

    with counting_work() as work:
        metric.compute()
    assert work.multiply_adds <= 0.55 * n * n * d

The counts are exact and deterministic: a refactor that computes a product twice, or a layout
rule that stops taking the symmetric pass, changes them. Host syncs are counted by the emulated
device (:mod:`emulated_cuda`), which can be active at the same time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

from retrieval_metrics.functional.ranking import options as ranking_options
from retrieval_metrics.functional.ranking import row_norms
from retrieval_metrics.functional.ranking.engine import (
    counters,
    counting,
    kernels,
    product_shape,
    schedule,
)
from retrieval_metrics.functional.ranking.engine import one_sided as one_sided_module
from retrieval_metrics.functional.ranking.engine import two_sided as two_sided_pass

_aten = torch.ops.aten


def _product_shape(func, args) -> tuple[int, int, int] | None:
    """(rows, columns, inner width) of a matrix product's call, or None for other operators."""
    packet = getattr(func, "overloadpacket", None)
    if packet in (_aten.mm, _aten.matmul):
        a, b = args[0], args[1]
        if a.dim() == 2 and b.dim() == 2:
            return a.shape[0], b.shape[1], a.shape[1]
        return None
    if packet in (_aten.addmm, _aten.addmm_):
        a, b = args[1], args[2]
        return a.shape[0], b.shape[1], a.shape[1]
    if packet in (_aten.bmm, _aten.baddbmm):
        a, b = (args[0], args[1]) if packet is _aten.bmm else (args[1], args[2])
        return a.shape[0] * a.shape[1], b.shape[2], a.shape[2]
    return None


#: operators that allocate without writing (their memory is written by the next operator)
_ALLOCATIONS = {_aten.empty, _aten.empty_like, _aten.empty_strided, _aten.new_empty}


@dataclass
class Work:
    """What was computed while :func:`counting_work` was active."""

    multiply_adds: int = 0
    products: int = 0
    #: the passes the engine ran: "one_sided", "symmetric" (a set against itself, half the
    #: product), "two_way" (both directions of two sets from one product)
    passes: dict[str, int] = field(
        default_factory=lambda: {"one_sided": 0, "symmetric": 0, "two_way": 0}
    )
    query_blocks: int = 0
    #: rankings asked of the engine (``BlockedEngine.rank`` and its two-way and sharded forms)
    rankings: int = 0
    #: score entries the counting read: a block counted for one query block (``QueryBlock.count``)
    #: or for both sides of a two-sided pair at once (``count_both_sides``)
    entries_counted: int = 0
    #: score entries reduced to segment maxima (``kernels.segment_maxima``, as the passes call it)
    entries_maxima: int = 0
    #: elements written by every operator other than the products and the views: the work
    #: besides the product that torch does, and the rows the compiled one-pass read writes
    #: (``row_norms.unit_rows_in_one_pass``; the compiled count and numpy's are not in it)
    elements_written: int = 0
    #: probes of the host's BLAS for a shape's least product rows
    #: (``product_shape.least_product_rows``:
    #: once per shape in a process, its products not counted above)
    probes: int = 0
    #: operators run (the products, views and allocations included): what a ranking does
    #: per batch or per row of Python would show here
    operations: int = 0
    #: of those, the elements a whole-block counting backend wrote (``Counter.count_whole``:
    #: torch's kernels' positions and flags; the fused Triton kernel writes none per score)
    elements_counting: int = 0

    def ratio(self, rows: int, columns: int, width: int) -> float:
        """The multiply-adds as a share of one ``rows x columns x width`` product."""
        return self.multiply_adds / (rows * columns * width)


class _ProductCounter(TorchDispatchMode):
    def __init__(self, work: Work) -> None:
        super().__init__()
        self.work = work

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shape = _product_shape(func, args)
        self.work.operations += 1
        if shape is not None:
            rows, columns, width = shape
            self.work.multiply_adds += int(rows) * int(columns) * int(width)
            self.work.products += 1
        out = func(*args, **(kwargs or {}))
        if shape is None and not func.is_view and func.overloadpacket not in _ALLOCATIONS:
            self.work.elements_written += sum(
                t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)
            )
        return out


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


@contextmanager
def counting_work() -> Iterator[Work]:
    """Count the products, passes, query blocks and rankings of the code run inside."""
    work = Work()
    one_sided, two_sided = schedule.one_sided_pass, schedule.two_sided_pass
    block_init = counting.QueryBlock.__init__
    engine = ranking_options.BlockedEngine
    rank_methods = {
        name: getattr(engine, name)
        for name in ("rank", "rank_two_ways", "rank_sharded")
        if hasattr(engine, name)
    }

    def counted_one_sided(*args, **kwargs):
        work.passes["one_sided"] += 1
        return one_sided(*args, **kwargs)

    def counted_two_sided(*args, **kwargs):
        work.passes["symmetric" if args[1] is None else "two_way"] += 1
        return two_sided(*args, **kwargs)

    def counted_block(self, *args, **kwargs):
        work.query_blocks += 1
        block_init(self, *args, **kwargs)

    block_count, both_sides = counting.QueryBlock.count, two_sided_pass.count_both_sides
    # every backend's own count_whole (a subclass may define its own)
    whole = {
        cls: cls.__dict__["count_whole"]
        for cls in (counters.Counter, *_subclasses(counters.Counter))
        if "count_whole" in cls.__dict__
    }

    depth = [0]  # (a backend calling its parent's count_whole is counted once)

    def counted_whole(method):
        def count_whole(self, *args, **kwargs):
            before = work.elements_written
            depth[0] += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    work.elements_counting += work.elements_written - before

        return count_whole
    maxima = {module: module.segment_maxima for module in (one_sided_module, two_sided_pass)}

    def counted_maxima(s, *args, **kwargs):
        work.entries_maxima += s.numel()
        return kernels.segment_maxima(s, *args, **kwargs)

    def counted_count(self, s, *args, **kwargs):
        work.entries_counted += s.numel()
        return block_count(self, s, *args, **kwargs)

    def counted_both_sides(rows, cols, s, *args, **kwargs):
        done = both_sides(rows, cols, s, *args, **kwargs)
        if done:
            work.entries_counted += s.numel()
        return done

    def counted_rank(method):
        def rank(*args, **kwargs):
            work.rankings += 1
            return method(*args, **kwargs)

        return rank

    one_pass = row_norms.unit_rows_in_one_pass

    def counted_one_pass(piece, *args, **kwargs):
        done = one_pass(piece, *args, **kwargs)
        if done:  # (the rows it wrote, as torch's passes would have written them)
            work.elements_written += piece.numel()
        return done

    probes = {name: getattr(product_shape, name) for name in ("_probed_rows", "_probed_columns")}

    def uncounted(probe):
        def uncounted_probe(*args):
            # (a probe runs once per shape in a process: the work of a compute() is its plan's)
            work.probes += 1
            with _disable_current_modes():
                return probe(*args)

        return uncounted_probe

    for name, probe in probes.items():
        setattr(product_shape, name, uncounted(probe))
    schedule.one_sided_pass = counted_one_sided
    schedule.two_sided_pass = counted_two_sided
    row_norms.unit_rows_in_one_pass = counted_one_pass
    counting.QueryBlock.__init__ = counted_block
    counting.QueryBlock.count = counted_count
    two_sided_pass.count_both_sides = counted_both_sides
    for module in maxima:
        module.segment_maxima = counted_maxima
    for name, method in rank_methods.items():
        setattr(engine, name, counted_rank(method))
    for cls, method in whole.items():
        cls.count_whole = counted_whole(method)
    try:
        with _ProductCounter(work):
            yield work
    finally:
        for name, probe in probes.items():
            setattr(product_shape, name, probe)
        schedule.one_sided_pass = one_sided
        schedule.two_sided_pass = two_sided
        row_norms.unit_rows_in_one_pass = one_pass
        counting.QueryBlock.__init__ = block_init
        counting.QueryBlock.count = block_count
        two_sided_pass.count_both_sides = both_sides
        for module, function in maxima.items():
            module.segment_maxima = function
        for name, method in rank_methods.items():
            setattr(engine, name, method)
        for cls, method in whole.items():
            cls.count_whole = method
