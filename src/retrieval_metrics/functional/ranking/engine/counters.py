"""How a ranking counts its score blocks: one counting backend, chosen once per ranking.

Every backend gives each relevant pair the same two counts (items above it, items tied with
it); they differ in what they skip and where they run:

* :class:`CpuCounter`: the CPU. Each row's threshold rises (segment maxima, the compiled pass's
  heaps, the counts themselves), items below it are never looked at, finished rows leave the
  products, and the compiled ``_count`` module counts where it is built (``kernels``).
* :class:`TorchDeviceCounter`: an accelerator, with torch's own kernels. Each block is counted
  whole (a batched binary search of every score in its row's relevant scores, then two
  scatter-adds): a fixed handful of kernels a block and no wait on the host, where the CPU's
  pruning would read a data-dependent size on the host at every block. (Ties ordered by id
  add a bounded number: ``tie_keys``.)
* :class:`TritonCounter`: a CUDA device with Triton: the same counts in one fused kernel over the
  score block (``triton_count``), which reads each score once and writes nothing per item.
  Chosen where Triton's kernels first pass a check on the device (``triton_check``: they
  launch, and give torch's numbers); elsewhere torch's kernels count, with a warning.

:func:`choose_counter` is the one place that looks at the device's type to decide how to count;
the passes ask the chosen counter (``Pass.counter``) what to do.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from typing import ClassVar

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import device_can
from retrieval_metrics.functional.ranking.engine import kernels, plan
from retrieval_metrics.functional.ranking.row_batches import HALF_PRECISION

__all__ = [
    "COUNTER_ENV",
    "Counter",
    "CpuCounter",
    "TorchDeviceCounter",
    "TritonCounter",
    "choose_counter",
    "multiplied_by_host_blas",
]

#: Environment variable naming the counting backend of accelerator rankings ("torch" or
#: "triton"): for comparing the two on one device; unset, Triton where it can run.
COUNTER_ENV = "RETRIEVAL_METRICS_COUNTER"


class Counter:
    """A counting backend: how the query blocks of one ranking count their score blocks."""

    #: the backend's name (benchmarks and messages)
    name: ClassVar[str] = ""
    #: every item of every block is counted: no threshold rises, no segment maxima are taken,
    #: no finished row leaves the products (each of those reads a size on the host)
    whole_blocks: ClassVar[bool] = False
    #: ``count_whole`` reads a block through its strides: the two-sided pass's columns (a
    #: transposed view of the product) are counted where they lie, not copied row-major first
    reads_strided: ClassVar[bool] = False
    #: a half product's factors per pair (cosine's, where a block is read along its columns
    #: too) are applied in one pass (``triton_pairs``), not as a block of factors, then a product
    fuses_pair_factors: ClassVar[bool] = False
    #: ``count_whole`` takes a factor per column (a one-sided half product's cosine, 1/|g_j|),
    #: or per row and per column (a two-sided one's, 1/|a_i| * 1/|b_j|), and multiplies each
    #: score by it as it reads it: the block is not scaled in a pass of its own first (a read
    #: and a write of every score)
    folds_column_factor: ClassVar[bool] = False
    #: relevant rows gathered from many blocks are packed side by side where a product of
    #: their shape rounds a pair alike in every column (``one_sided.columns_alike`` probes the
    #: host's BLAS); elsewhere (not probed) each goes into its own block's column
    probes_columns: ClassVar[bool] = False

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def block_caps(self) -> tuple[int, int, int]:
        """The largest query, gallery and square blocks this backend is given."""
        raise NotImplementedError

    def count_whole(
        self, s: Tensor, rel_sorted: Tensor, hist_lt: Tensor, hist_le: Tensor, budget: int,
        num_finite: Tensor, column_factor: Tensor | None = None,
        row_factor: Tensor | None = None,
    ) -> None:
        """Add every item of score block ``s`` to the histograms (``kernels.count_block``'s
        contract): what a backend with ``whole_blocks`` counts a block by (the CPU's counts in
        the query block's own passes instead). ``column_factor``: the items are ``s`` times
        it, column by column (the scores ``s.mul_(column_factor)`` leaves), and with
        ``row_factor`` times ``row_factor[:, None] * column_factor[None, :]``; given only to a
        backend that ``folds_column_factor``."""
        raise NotImplementedError

    def sort_rows(self, x: Tensor, with_perm: bool = True) -> tuple[Tensor, Tensor | None]:
        """``torch.sort(x, dim=1)`` (values, and the permutation where asked)."""
        values, perm = torch.sort(x, dim=1)
        return values, perm if with_perm else None

    def multiplies_half(self, *dtypes: torch.dtype) -> bool:
        """Whether matrices of these dtypes are multiplied as they are stored, on the tensor
        cores with float32 accumulation (``tensor_cores``): all of one half-precision dtype,
        on an accelerator that has ``torch.mm(..., out_dtype=)`` (CUDA's and XPU's torch; not
        Apple's MPS, asked of the device once). Elsewhere half precision is upcast to float32
        as its blocks are read (the CPU has no such product)."""
        return (
            self.device.type != "cpu"
            and len(set(dtypes)) == 1
            and dtypes[0] in HALF_PRECISION
            and hasattr(torch.ops.aten.mm, "dtype_out")
            # (no kernel for the backend: the dispatcher's NotImplementedError)
            and device_can(self.device, "mm out_dtype", _half_product, NotImplementedError)
        )

    def lists_compiled(self, product: Tensor) -> bool:
        """Whether a run's running lists (``running_best``) find the items of the score block
        ``product`` that enter them with the compiled pass (``kernels.entering_compiled``):
        the CPU's, where it is built; elsewhere torch's compares."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.device})"


def _half_product(device: torch.device) -> Tensor:
    """A 1 x 1 product of float16 matrices with a float32 result, on ``device``
    (``torch.mm(one, one, out_dtype=torch.float32)``, called as its ATen operator)."""
    one = torch.ones(1, 1, dtype=torch.float16, device=device)
    return torch.ops.aten.mm.dtype(one, one, torch.float32)


class CpuCounter(Counter):
    """The CPU: thresholds that rise, pruning, the compiled count where it is built."""

    name = "cpu"
    whole_blocks = False
    probes_columns = True

    def block_caps(self) -> tuple[int, int, int]:
        return plan.CPU_BLOCK_CAPS

    def sort_rows(self, x: Tensor, with_perm: bool = True) -> tuple[Tensor, Tensor | None]:
        return kernels.sort_rows(x, with_perm)  # numpy's, several times torch's on long rows

    def lists_compiled(self, product: Tensor) -> bool:
        return kernels.compiles_entering(product) and product.is_contiguous()


class TorchDeviceCounter(Counter):
    """An accelerator through torch's kernels: every block counted whole, no host waits."""

    name = "torch"
    whole_blocks = True

    def block_caps(self) -> tuple[int, int, int]:
        return plan.DEVICE_BLOCK_CAPS

    def count_whole(
        self, s: Tensor, rel_sorted: Tensor, hist_lt: Tensor, hist_le: Tensor, budget: int,
        num_finite: Tensor, column_factor: Tensor | None = None,
        row_factor: Tensor | None = None,
    ) -> None:
        # (the block's own pass: torch's kernels fuse nothing)
        if row_factor is not None:
            assert column_factor is not None
            s = s.mul_(row_factor[:, None] * column_factor[None, :])
        elif column_factor is not None:
            s = s.mul_(column_factor)
        # a quarter of the counting's budget a chunk of rows
        kernels.count_block_searched(s, rel_sorted, hist_lt, hist_le, budget // 4)


class TritonCounter(TorchDeviceCounter):
    """A CUDA device with Triton: each block counted by one fused kernel."""

    name = "triton"
    reads_strided = True
    fuses_pair_factors = True
    folds_column_factor = True

    def count_whole(
        self, s: Tensor, rel_sorted: Tensor, hist_lt: Tensor, hist_le: Tensor, budget: int,
        num_finite: Tensor, column_factor: Tensor | None = None,
        row_factor: Tensor | None = None,
    ) -> None:
        from retrieval_metrics.functional.ranking.engine import triton_count

        triton_count.count_block_fused(
            s, rel_sorted, hist_lt, hist_le, column_factor, row_factor
        )


def multiplied_by_host_blas(device: torch.device | str) -> bool:
    """Whether a ranking on ``device`` multiplies with the host's BLAS (the CPU's), whose
    shapes that compute alike ``plan.least_product_rows`` asks."""
    return torch.device(device).type == "cpu"


def _triton_runs_on(device: torch.device) -> bool:
    """Whether Triton can launch kernels on ``device``: a CUDA build of torch, a CUDA device and
    the ``triton`` package (the emulated device of the tests is a CPU build: no)."""
    if device.type != "cuda" or torch.version.cuda is None:
        return False
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _triton_works_on(device: torch.device) -> bool:
    """Whether Triton's kernels launch on ``device`` and give torch's numbers there
    (``triton_check``): once per device in a process. Where not, a warning says why, and
    torch's kernels count there: the same values."""
    from retrieval_metrics.functional.ranking.engine import triton_check

    why = triton_check.kernels_agree(device)
    if why is None:
        return True
    warnings.warn(
        f"retrieval_metrics: Triton's counting kernels cannot be used on {device} ({why}); "
        f"torch's kernels count there instead: the same values, a few more kernels a block. "
        f'Set {COUNTER_ENV}="torch" to choose them without this check',
        RuntimeWarning, stacklevel=2,
    )
    return False


def choose_counter(device: torch.device | str | None) -> Counter:
    """The counting backend of a ranking on ``device``: the CPU's, Triton's fused kernel on a
    CUDA device where Triton is installed and its kernels pass their check there (once per
    device in a process: ``triton_check``), else torch's kernels.

    ``RETRIEVAL_METRICS_COUNTER`` (:data:`COUNTER_ENV`) = ``"torch"`` or ``"triton"`` picks one
    of the whole-block backends on any device, the CPU included (for comparing them, and for
    the tests, which run the Triton kernel on the CPU under ``TRITON_INTERPRET=1``); the values
    are the same whichever counts.

    >>> choose_counter("cpu")
    CpuCounter(cpu)
    """
    device = torch.device("cpu" if device is None else device)
    wanted = os.environ.get(COUNTER_ENV, "").strip().lower()
    if wanted not in ("", "torch", "triton"):
        raise ValueError(f'{COUNTER_ENV} must be "torch" or "triton", got {wanted!r}')
    if wanted == "torch":
        return TorchDeviceCounter(device)
    if wanted == "triton":
        return TritonCounter(device)
    if device.type == "cpu":
        return CpuCounter(device)
    if _triton_runs_on(device) and _triton_works_on(_indexed(device)):
        return TritonCounter(device)
    return TorchDeviceCounter(device)


def _indexed(device: torch.device) -> torch.device:
    """``device`` with its index (``cuda`` is the current one): one check per device."""
    if device.index is not None or device.type != "cuda":
        return device
    return torch.device(device.type, torch.cuda.current_device())
