"""An emulated CUDA device, so that the CPU-only test suite catches device bugs.

A :class:`FakeCudaTensor` reports ``device == torch.device("cuda:0")`` (``.is_cuda`` is True) while
its data lives in a plain CPU tensor, its ``host``. Every ATen operator that reaches it goes
through :func:`_run`, which applies the rules a real CUDA device enforces, runs the operator on the
host tensors, and wraps the results again. While :func:`emulated_cuda` (or the ``fake_cuda``
fixture) is active, the emulation also covers what a CPU-only build of torch refuses before it
dispatches: factories with ``device="cuda"``, ``.to("cuda")``, ``.cuda()``, ``torch.cuda`` queries
and NCCL-style collectives. A test then runs its code "on CUDA" and checks its values and its
host syncs, in a block or through the ``fake_cuda`` fixture (import it as
``from emulated_cuda import fake_cuda_fixture  # noqa: F401``, which pytest registers as
``fake_cuda``; ``from emulated_cuda import fake_cuda`` works too, but ruff then reports each test
argument ``fake_cuda`` as shadowing the import, F811)::

    with emulated_cuda() as emu:
        metric = MyMetric().to("cuda")
        metric.update(torch.randn(8, 4, device="cuda"), torch.arange(8, device="cuda"))
        assert metric.compute().device.type == "cuda"
    assert emu.syncs <= 3, emu.sync_log

The rules
---------
Same device. An operator that mixes a plain CPU tensor with a fake-cuda tensor raises
``RuntimeError("Expected all tensors to be on the same device, but found at least two devices,
cuda:0 and cpu! ...")``. Which CPU tensors are tolerated follows the operator's ``device_check`` in
ATen's ``native_functions.yaml`` (read from the copy torchgen ships with torch): operators with the
generated check (``index_select``, ``gather``, ``cat``, ``mm``, ``searchsorted``, ...) refuse every
CPU tensor among their positional arguments, 0-dim ones included, as CUDA does; the others
(TensorIterator-based ones: ``add``, ``where``, ``lt``, ...) accept 0-dim CPU tensors (CPU
scalars) and refuse larger ones. The exceptions CUDA makes are kept: ``copy_`` copies between host
and device either way, ``_to_copy`` moves, advanced indexing (``aten.index`` / ``index_put_``)
takes CPU index tensors for a device tensor (but not device indices for a CPU tensor), while
``index_put_`` values must be on the device unless 0-dim, and ``out=`` tensors must be on the
device.

Host reads. ``.numpy()`` / ``np.asarray`` of a fake-cuda tensor raise CUDA's ``TypeError``
("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
memory first."). ``bool``, ``int``, ``float``, ``complex``, ``operator.index``, ``.item()``,
``.tolist()`` and ``f"{t:.3f}"`` work, each counted as a host sync.

Host syncs. :attr:`EmulatedCuda.syncs` counts (and :attr:`EmulatedCuda.sync_log` names) each
point where the host waits for the device: scalar reads (``aten._local_scalar_dense``,
``aten.equal``, ``aten.is_nonzero``), ``.tolist()``, device-to-host copies (``.cpu()``,
``.to("cpu")``, ``cpu_tensor.copy_(fake)``), blocking host-to-device copies (``.to("cuda")``,
``.cuda()``, ``fake.copy_(cpu_tensor)``, ``torch.tensor(data, device="cuda")``, and the host
index tensors (or 0-dim host value) that advanced indexing of a device tensor moves first: each
ends in ATen's ``memcpy_and_sync``, a ``cudaStreamSynchronize`` that CUDA's sync debug mode
reports; a ``non_blocking=True`` copy either way and an empty one do not wait and are not
counted), and operators whose output size depends on device data: ``nonzero`` (so ``argwhere``
and one-argument ``torch.where``), ``masked_select``, indexing with a device boolean mask
(``x[mask]``, ``x[mask] = v`` unless CUDA turns it into ``masked_fill_``: one mask and a CPU
scalar value), ``unique`` / ``unique_consecutive``, ``repeat_interleave`` without
``output_size``, ``bincount``, ``histc`` with ``min == max`` and ``isin`` on its sorting path.
One count per operator, however many times CUDA's kernel reads back.

Collectives. While active, ``torch.distributed.{all_reduce, all_gather, all_gather_into_tensor /
all_gather_single, broadcast, reduce, reduce_scatter, reduce_scatter_tensor /
reduce_scatter_single, all_to_all, all_to_all_single, gather, scatter, send, recv, isend, irecv}``
(and the ``_coalesced`` forms) refuse a plain CPU tensor with NCCL's "Tensors must be CUDA
and dense" and hand fake-cuda tensors' host tensors to the real (gloo) collective, so results land
in the fake tensors. ``torch.distributed.get_backend`` reports ``"nccl"`` for a gloo group (pass
``report_nccl=False`` to keep ``"gloo"``). Object collectives are left as they are.

Apple's MPS. ``emulated_cuda(mps=True)`` makes the device answer as MPS does where MPS lacks
what CUDA has: no float64 (every way a float64 tensor could come to be on the device, an
operator's result, a factory, a move or a view, raises MPS's ``TypeError``, :data:`NO_FLOAT64`),
and no operator that ``native_functions.yaml`` gives no MPS kernel (neither ``MPS`` nor a
composite key in its dispatch, e.g. ``torch.mm(..., out_dtype=)``, registered for CUDA and XPU
only): the dispatcher's ``NotImplementedError``. Everything else is CUDA's emulation: the device
still reports ``cuda:0``, and a kernel MPS has but not for every dtype or size is not modelled.

Known deviations from real CUDA
-------------------------------
* One device, ``cuda:0``; ``"cuda:1"`` raises "invalid device ordinal". Kernels run on the CPU:
  values equal the CPU's (random factories draw from the CPU generator) and no timing is modeled.
  ``torch.mm(a, b, out_dtype=torch.float32)`` of half operands (the tensor cores' product,
  which has no CPU kernel) is the float32 product of the operands upcast: the same exact
  products, summed in float32 (in another order than a GPU's, perhaps).
* NCCL raises its "Tensors must be CUDA and dense" as a ``ValueError`` in recent torch (a
  ``RuntimeError`` before); :class:`NcclTensorError` is both. ``gather`` and ``scatter`` are
  treated like the other collectives: NCCL has implemented them since torch 1.11 (older releases
  raised "ProcessGroupNCCL does not support gather").
* Only ``torch.distributed.<name>`` is patched (what user code and torchmetrics call); a reference
  taken before the emulation started, or torch's internal calls in ``distributed_c10d`` (used by
  the object collectives over gloo's CPU tensors), see the unpatched functions.
  ``batch_isend_irecv`` (tensors inside ``P2POp`` objects) is not checked.
* The library's counting backend on the emulated device is torch's kernels, on any build of
  torch: the fused Triton kernel needs device memory (``RETRIEVAL_METRICS_COUNTER=triton``
  forces it, and fails on fake tensors).
* ``torch.cuda.is_available()`` returns True, ``device_count()`` 1, ``current_device()`` 0,
  ``set_device(0)`` and ``synchronize()`` do nothing (an explicit ``synchronize`` is not counted);
  ``torch.cuda.Stream``/``Event``, ``torch.Generator(device="cuda")``, ``torch.load(...,
  map_location="cuda")``, ``Tensor.type("torch.cuda.FloatTensor")`` and
  ``torch.set_default_device("cuda")`` are not emulated. ``pin_memory()`` returns a CPU copy and
  ``is_pinned()`` stays False.
* The modes are thread-local: other threads see fake-cuda tensors (their operators still follow
  the rules) but not the factories or ``.to("cuda")``.
* Python-level methods that a CPU-only build guards with a CUDA device guard (indexing,
  ``int()``, ``contiguous``, ``nonzero``, ``copy_``, ...) run on the host tensors, and each ATen
  operator they issue goes through the same rules, with the host tensors of fake ones standing
  for device tensors. Tensors such a method creates internally are CPU tensors, as on the host
  path of the real code.
* Rare cross-device scalar forms CUDA accepts with a sync (``cpu_tensor.fill_(cuda_scalar)``,
  ``cpu[mask] = cuda_scalar``) are refused like other mixes; a 0-dim CPU tensor in a keyword-only
  argument is accepted for every operator.
* The same-device message keeps CUDA's wording; its parenthesis names the ATen operator and
  argument rather than CUDA's ``wrapper_CUDA_...`` method.
* ``repr`` of a fake tensor is not counted as a sync (a real print copies to the host). Pickling
  stores the host data and loads a fake-cuda tensor.
* No autograd: torch's autograd records each tensor's device through a CUDA device guard, which a
  CPU-only build lacks, and fails in C++ by aborting the process. So a differentiable call with
  a fake-cuda tensor that requires grad (or ``.to("cuda")`` of a CPU tensor that does), with grad
  mode on, raises a RuntimeError instead; under ``torch.no_grad()`` (how metrics update and
  ``Module.to`` moves parameters) everything runs.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten as _pytree_flatten
from torch.utils._pytree import tree_map as _pytree_map


def tree_map(fn: Any, value: Any) -> Any:
    """``fn`` over the leaves of an operator's arguments or results: lists, tuples and dicts
    of tensors and scalars, as torch's pytree maps them. Plain containers are walked here:
    pytree's dispatch per node cost more than the operators of an emulated ranking (half the
    time of the device tests); any other container goes to pytree."""
    kind = type(value)
    if kind is list or kind is tuple:
        return kind([tree_map(fn, v) for v in value])
    if kind is dict:
        return {k: tree_map(fn, v) for k, v in value.items()}
    if isinstance(value, list | tuple | dict):
        return _pytree_map(fn, value)
    return fn(value)


def tree_flatten(value: Any) -> tuple[list[Any], None]:
    """The leaves of ``value`` in pytree's order (its spec is not needed here)."""
    leaves: list[Any] = []

    def walk(v: Any) -> None:
        kind = type(v)
        if kind is list or kind is tuple:
            for x in v:
                walk(x)
        elif kind is dict:
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple | dict):
            leaves.extend(_pytree_flatten(v)[0])
        else:
            leaves.append(v)

    walk(value)
    return leaves, None

__all__ = [
    "CUDA",
    "EmulatedCuda",
    "FakeCudaTensor",
    "NcclTensorError",
    "active_emulation",
    "emulated_cuda",
    "fake_cuda",
    "fake_cuda_fixture",
    "is_fake_cuda",
    "to_fake_cuda",
]

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
aten = torch.ops.aten

# What a CPU-only build says when a CUDA device guard is asked for, and what a CUDA build says
# on a machine with no usable GPU (no driver, or one older than its CUDA runtime): the emulator
# then runs the guarded Python-level method on host tensors instead (see _run_on_host).
_NO_CUDA_GUARD = (
    "PyTorch is not linked with support for cuda devices",
    "CUDA driver version is insufficient for CUDA runtime version",
    "Found no NVIDIA driver on your system",
    "no CUDA-capable device is detected",
)
_NUMPY_ERROR = (
    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
    "host memory first."
)


#: What MPS raises for a float64 tensor on it (its words)
NO_FLOAT64 = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)


class NcclTensorError(RuntimeError, ValueError):
    """NCCL's refusal of a host tensor: a ValueError in recent torch, a RuntimeError before."""


def _same_device_error(first: torch.device, second: torch.device, what: str) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}! (emulated CUDA: {what})"
    )


# ---------------------------------------------------------------------------------- the tensor


class FakeCudaTensor(torch.Tensor):
    """A tensor that reports ``cuda:0`` and keeps its data in the CPU tensor ``host``."""

    host: torch.Tensor

    @staticmethod
    def __new__(cls, host: torch.Tensor, requires_grad: bool = False) -> FakeCudaTensor:
        if isinstance(host, FakeCudaTensor) or host.device.type != "cpu":
            raise TypeError(f"a FakeCudaTensor holds a plain CPU tensor, got {type(host)}")
        if host.dtype == torch.float64 and _current().mps:
            raise TypeError(NO_FLOAT64)
        # "sizes": the wrapper asks the host for sizes and strides on each query, so in-place
        # metadata changes of the host (resize_ through out=, t_, set_) show on the wrapper too.
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            host.shape,
            strides=host.stride(),
            storage_offset=host.storage_offset(),
            dtype=host.dtype,
            layout=host.layout,
            device=CUDA,
            requires_grad=requires_grad,
            dispatch_sizes_strides_policy="sizes",
        )
        out.host = host
        return out

    # A "traceable wrapper subclass": nn.Module._apply then swaps a moved parameter's Python
    # object (torch.utils.swap_tensors) instead of assigning ``param.data``, which would leave a
    # plain Parameter object over this wrapper's storage-less implementation.
    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["host"], None

    @staticmethod
    def __tensor_unflatten__(
        inner: dict[str, torch.Tensor], ctx: Any, outer_size: Any, outer_stride: Any
    ) -> FakeCudaTensor:
        return FakeCudaTensor(inner["host"])

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        # Not counted as a sync: printing is for people reading a failure.
        text = repr(self.host)
        return text[:-1] + ", device='cuda:0')" if text.endswith(")") else text

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # Pickle the host data; loading gives a fake-cuda tensor again, as CUDA tensors load
        # back onto the device.
        return (_rebuild, (self.host.detach().clone(),))

    @classmethod
    def __torch_function__(
        cls, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        _refuse_autograd(func, args, kwargs)
        handler = _METHOD_HANDLERS.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
        emu = _current()
        before = len(emu.sync_log)
        with torch._C.DisableTorchFunctionSubclass():
            try:
                return func(*args, **kwargs)
            except RuntimeError as error:
                if not any(message in str(error) for message in _NO_CUDA_GUARD):
                    raise
        # A Python binding asked for a CUDA device guard before dispatching (it failed before
        # doing anything): run the same method on the host tensors, under the rules.
        del emu.sync_log[before:]
        return _run_on_host(func, args, kwargs)

    @classmethod
    def __torch_dispatch__(
        cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        return _run(_current(), func, args, kwargs or {})


# Methods that build no autograd graph even on a tensor that requires grad.
_NO_GRAPH = {
    "__get__",
    "__set__",
    "__repr__",
    "__format__",
    "__len__",
    "__hash__",
    "__deepcopy__",
    "detach",
    "detach_",
    "requires_grad_",
    "size",
    "dim",
    "numel",
    "stride",
    "element_size",
    "is_contiguous",
    "data_ptr",
    "get_device",
    "_has_compatible_shallow_copy_type",
    "is_floating_point",
    "is_complex",
    "is_signed",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "item",
    "tolist",
    "numpy",
    "__array__",
}


def _refuse_autograd(func: Callable, args: tuple, kwargs: dict) -> None:
    """Refuse a differentiable call with a fake-cuda tensor that requires grad.

    Autograd records each tensor's device with a device guard, which a CPU-only build lacks
    for CUDA; it fails in C++ and aborts the whole process. A Python error instead.
    """
    if not torch.is_grad_enabled() or getattr(func, "__name__", "") in _NO_GRAPH:
        return
    tensors = [t for v in (*args, *kwargs.values()) for t in _tensors(v)]
    if any(t.requires_grad for t in tensors) and any(is_fake_cuda(t) for t in tensors):
        raise RuntimeError(
            f"emulated CUDA: {getattr(func, '__name__', func)} would record autograd history "
            "for a fake-cuda tensor, which a CPU-only torch cannot do (it aborts the process); "
            "run it under torch.no_grad() or detach the tensor"
        )


def _rebuild(host: torch.Tensor) -> FakeCudaTensor:
    return FakeCudaTensor(host)


def is_fake_cuda(x: Any) -> bool:
    """Whether ``x`` is a tensor on the emulated CUDA device."""
    return isinstance(x, FakeCudaTensor)


def to_fake_cuda(x: torch.Tensor) -> FakeCudaTensor:
    """``x`` copied onto the emulated device (a fake-cuda ``x`` is returned as it is).

    Works with or without an active emulation; no sync is counted (a host-to-device copy).
    """
    if isinstance(x, FakeCudaTensor):
        return x
    if x.device.type != "cpu":
        raise TypeError(f"to_fake_cuda takes a CPU tensor, got one on {x.device}")
    return FakeCudaTensor(x.detach().clone(), requires_grad=x.requires_grad)


def _wrap_new(host: torch.Tensor) -> FakeCudaTensor:
    """A fresh CPU result of the emulation (a factory, a copy) as a fake-cuda tensor."""
    if host.requires_grad:
        return FakeCudaTensor(host.detach(), requires_grad=True)
    return FakeCudaTensor(host)


# -------------------------------------------------------------------------------- device rules


@functools.cache
def _native_functions() -> dict[str, str] | None:
    """ATen's ``native_functions.yaml`` (the copy torchgen ships with torch): each operator's
    block of text by its name ("add.Tensor", ...). None when torch ships without it."""
    try:
        import torchgen
    except ImportError:
        return None
    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not path.is_file():
        return None
    blocks = {}
    for block in re.split(r"\n(?=- func:)", path.read_text()):
        found = re.match(r"- func: ([\w.]+)\(", block)
        if found:
            blocks[found.group(1)] = block
    return blocks


@functools.cache
def _no_check_ops() -> frozenset[str] | None:
    """ATen operators declared ``device_check: NoCheck`` ("add.Tensor", "copy_", ...).

    These check devices in their kernels (TensorIterator tolerates CPU scalars); every other
    operator's CUDA wrapper refuses any tensor not on the common device. None when torch ships
    without torchgen's copy of native_functions.yaml: then every operator tolerates 0-dim CPU
    tensors.
    """
    blocks = _native_functions()
    if blocks is None:
        return None
    return frozenset(name for name, block in blocks.items() if "device_check: NoCheck" in block)


_COMPOSITE = re.compile(r"Composite\w+")


@functools.cache
def _without_mps_kernel() -> frozenset[str]:
    """ATen operators that have no kernel for Apple's MPS in ``native_functions.yaml``: their
    ``dispatch:`` names neither ``MPS`` nor a composite key (which runs on any backend), or
    their ``structured_delegate`` has none. Empty when torch ships without that file."""
    delegate: dict[str, str] = {}
    keys: dict[str, set[str]] = {}
    for name, block in (_native_functions() or {}).items():
        target = re.search(r"^  structured_delegate: ([\w.]+)", block, re.M)
        if target:
            delegate[name] = target.group(1)
        dispatch = re.search(r"^  dispatch:\n((?:    .*\n?)+)", block, re.M)
        if dispatch:
            keys[name] = {
                key.strip()
                for line in dispatch.group(1).splitlines()
                for key in line.split(":")[0].split(",")
            }

    def has_kernel(name: str) -> bool:
        if name in delegate:
            return has_kernel(delegate[name])
        if name not in keys:  # no dispatch section: CompositeImplicitAutograd
            return True
        return "MPS" in keys[name] or any(_COMPOSITE.fullmatch(k) for k in keys[name])

    return frozenset(name for name in keys.keys() | delegate.keys() if not has_kernel(name))


def _op_key(func: Any) -> str:
    schema = func._schema
    name = schema.name.split("::")[-1]
    return f"{name}.{schema.overload_name}" if schema.overload_name else name


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _is_plain(t: torch.Tensor) -> bool:
    return not isinstance(t, FakeCudaTensor)


def _check_same_device(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise as CUDA does when ``func`` mixes CPU tensors with device tensors."""
    no_check = _no_check_ops()
    key = _op_key(func)
    strict = no_check is not None and key not in no_check
    schema_args = func._schema.arguments
    out_names = {a.name for a in schema_args if a.is_out}
    positional = [a.name for a in schema_args if not a.kwarg_only]
    named = [(positional[i] if i < len(positional) else str(i), v) for i, v in enumerate(args)]
    fake_seen = False
    for position, (name, value) in enumerate(named + list(kwargs.items())):
        for t in _tensors(value):
            if not _is_plain(t):
                fake_seen = True
                continue
            # A CPU tensor CUDA tolerates: a 0-dim input of an operator that checks devices in
            # its kernel (TensorIterator's CPU scalars), or one in a keyword-only argument.
            tolerated = t.dim() == 0 and name not in out_names
            if strict and position < len(args):
                tolerated = False
            if not tolerated:
                # CUDA names the common device first: the first tensor it saw.
                first, second = (CUDA, CPU) if fake_seen else (CPU, CUDA)
                raise _same_device_error(first, second, f"argument '{name}' of aten.{key}")


# ------------------------------------------------------------------------------------ syncs


def _syncs(func: Any, args: tuple, kwargs: dict) -> str | None:
    """Why ``func`` waits for the device's data (None if it does not); called with fake inputs."""
    packet = func.overloadpacket
    if packet in _SCALAR_READS or packet in _DATA_DEPENDENT_SIZE:
        # The data is the first argument (equal: either of two).
        return _op_key(func) if any(is_fake_cuda(x) for x in args[:2]) else None
    if packet is aten.repeat_interleave:
        # The Tensor overload: its output size is the sum of the counts, unless given.
        if isinstance(args[0], FakeCudaTensor) and kwargs.get("output_size") is None:
            return "repeat_interleave without output_size"
        return None
    if packet is aten.histc:
        lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
        hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
        return "histc with min == max (reads the data's range)" if lo == hi else None
    if packet is aten.isin and func is aten.isin.Tensor_Tensor:
        elements, test = args[0], args[1]
        assume_unique = kwargs.get("assume_unique", False)
        # ATen's heuristic: few test elements -> a comparison kernel; else sorting, which
        # uniques both inputs (a data-dependent size) unless they are said to be unique.
        sorting = test.numel() >= int(10.0 * float(max(elements.numel(), 1)) ** 0.145)
        if sorting and not assume_unique and elements.numel() > 0:
            return "isin (sorting path uniques its inputs)"
        return None
    if packet in _INDEX_PACKETS:
        indices = args[1]
        masks = [i for i in indices if i is not None and i.dtype in (torch.bool, torch.uint8)]
        if not any(isinstance(m, FakeCudaTensor) for m in masks):
            return None  # a CPU mask is turned into indices on the host, no device read
        if packet is not aten.index:
            value = args[2]
            accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
            defined = [i for i in indices if i is not None]
            if not accumulate and len(defined) == 1 and value.numel() == 1 and _is_plain(value):
                return None  # CUDA turns it into masked_fill_ with the host scalar
        return f"{_op_key(func)} with a device boolean mask"
    return None


_SCALAR_READS = {aten._local_scalar_dense, aten.equal, aten.is_nonzero, aten.allclose}
_DATA_DEPENDENT_SIZE = {
    aten.nonzero,
    aten.masked_select,
    aten._unique,
    aten._unique2,
    aten.unique_dim,
    aten.unique_consecutive,
    aten.unique_dim_consecutive,
    aten.bincount,
}
_INDEX_PACKETS = {aten.index, aten.index_put_, aten.index_put, aten._index_put_impl_}
# Operators that read a tensor's metadata (sizes, strides, contiguity) and never its data.
_METADATA = {
    aten.sym_size,
    aten.sym_stride,
    aten.sym_numel,
    aten.sym_storage_offset,
    aten.size,
    aten.stride,
    aten.numel,
    aten.dim,
    aten.storage_offset,
    aten.is_contiguous,
    aten.is_strides_like_format,
    aten.is_non_overlapping_and_dense,
    aten.is_same_size,
    aten._has_compatible_shallow_copy_type,
}


# ---------------------------------------------------------------------------------- the engine


def _as_device(value: Any) -> torch.device | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = torch.device("cuda", value)
    device = torch.device(value)
    if device.type == "cuda":
        if device.index not in (None, 0):
            raise RuntimeError(
                f"CUDA error: invalid device ordinal (emulated CUDA has one device, not {device})"
            )
        return CUDA
    return device


def _unwrap(x: Any) -> Any:
    return x.host if isinstance(x, FakeCudaTensor) else x


def _rewrap(out: Any, args: tuple, kwargs: dict, on_device: bool) -> Any:
    """Tensors in ``out`` as the caller should see them: an input's host tensor -> that input
    (in-place and out= operators return their argument), an input CPU tensor -> itself, a new
    tensor -> fake-cuda if the operator ran on the device."""
    inputs: dict[int, torch.Tensor] = {}
    for x in tree_flatten((args, kwargs))[0]:
        if isinstance(x, FakeCudaTensor):
            inputs[id(x.host)] = x
        elif isinstance(x, torch.Tensor):
            inputs[id(x)] = x

    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) in inputs:
            return inputs[id(t)]
        return FakeCudaTensor(t) if on_device else t

    return tree_map(one, out)


def _tensor_core_mm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """CUDA's ``torch.mm(a, b, out_dtype=...)`` (``aten.mm.dtype`` / ``dtype_out``: half
    operands, float32 accumulation and result, on the tensor cores), which has no CPU kernel:
    the product of the operands upcast, the same exact products summed in float32."""
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"mm with out_dtype: expected half operands, got {a.dtype}, {b.dtype}")
    result = aten.mm.default(a.to(torch.float32), b.to(torch.float32)).to(out_dtype)
    if out is None:
        return result
    return out.copy_(result)


def _run(emu: EmulatedCuda, func: Any, args: tuple, kwargs: dict) -> Any:
    """One ATen operator under the emulated device's rules."""
    flat = tree_flatten((args, kwargs))[0]
    has_fake = any(isinstance(x, FakeCudaTensor) for x in flat)
    target = _as_device(kwargs["device"]) if "device" in kwargs else None
    if not has_fake and (target is None or target.type != "cuda"):
        return func(*args, **kwargs)  # nothing on the device
    if func.overloadpacket in _METADATA:
        return func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
    if emu.mps and _op_key(func) in _without_mps_kernel():
        raise NotImplementedError(
            f"Could not run 'aten::{_op_key(func)}' with arguments from the 'MPS' backend."
        )
    packet = func.overloadpacket
    if "device" in kwargs:
        # A factory or a move: run it on the host, place the result by the requested device.
        kwargs = {**kwargs, "device": CPU}
    if packet is aten._to_copy:
        source = args[0]
        if isinstance(source, FakeCudaTensor) and target is not None and target.type == "cpu":
            if not kwargs.get("non_blocking", False):
                emu.record_sync("device-to-host copy (_to_copy)")
            return func(source.host, *args[1:], **kwargs)
        on_device = target is None or target.type == "cuda"
        if on_device and _is_plain(source) and source.numel():
            if not kwargs.get("non_blocking", False):
                emu.record_sync("host-to-device copy (_to_copy)")
        return _rewrap(func(_unwrap(source), *args[1:], **kwargs), args, kwargs, on_device)
    if packet is aten.copy_:
        dst, src = args[0], args[1]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        if isinstance(dst, FakeCudaTensor) or not isinstance(src, FakeCudaTensor):
            if isinstance(dst, FakeCudaTensor) and _is_plain(src) and dst.numel():
                if not non_blocking:
                    emu.record_sync("host-to-device copy (copy_)")
            dst.host.copy_(_unwrap(src), non_blocking)  # on the device, or host-to-device
            return dst
        if not non_blocking:
            emu.record_sync("device-to-host copy (copy_)")
        dst.copy_(src.host, non_blocking)
        return dst
    if packet in _INDEX_PACKETS:
        _check_indexing(func, args, kwargs)
        for why in _host_operands_moved(func, args, kwargs):
            emu.record_sync(why)
    else:
        _check_same_device(func, args, kwargs)
    why = _syncs(func, args, kwargs)
    if why is not None:
        emu.record_sync(why)
    host = func if packet is not aten.mm or "dtype" not in func._overloadname else _tensor_core_mm
    out = host(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
    on_device = target.type == "cuda" if target is not None else True
    return _rewrap(out, args, kwargs, on_device)


def _host_operands_moved(func: Any, args: tuple, kwargs: dict) -> list[str]:
    """Host tensors that advanced indexing of a device tensor copies to the device first, each
    a blocking host-to-device copy (ATen's ``make_info`` moves every index tensor with
    ``.to(self.device())``; ``index_put_`` moves a 0-dim host value the same way unless it
    becomes ``masked_fill_``): one sync each."""
    self, indices = args[0], args[1]
    if _is_plain(self):
        return []
    moved = [
        f"{_op_key(func)} with a host index tensor (copied to the device)"
        for i in indices
        if i is not None and _is_plain(i) and i.numel()
    ]
    if func.overloadpacket is not aten.index:
        value = args[2]
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        defined = [i for i in indices if i is not None]
        masked_fill = (
            not accumulate and len(defined) == 1 and defined[0].dtype in (torch.bool, torch.uint8)
            and not _is_plain(defined[0])
        )
        if _is_plain(value) and value.dim() == 0 and not masked_fill:
            moved.append(f"{_op_key(func)} with a 0-dim host value (copied to the device)")
    return moved


def _check_indexing(func: Any, args: tuple, kwargs: dict) -> None:
    """Advanced indexing's own device rules (ATen's index / index_put_ kernels)."""
    self, indices = args[0], args[1]
    if _is_plain(self):
        if any(i is not None and not _is_plain(i) for i in indices):
            raise RuntimeError(
                "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
            )
        values = args[2] if len(args) > 2 else None
        if isinstance(values, FakeCudaTensor) and values.dim() > 0:
            raise _same_device_error(CPU, CUDA, f"values of aten.{_op_key(func)}")
        return
    # A device tensor takes CPU index tensors (moved by the kernel); values must be on the
    # device unless they are a 0-dim CPU tensor.
    if func.overloadpacket is aten.index:
        return
    values = args[2]
    if _is_plain(values) and values.dim() > 0:
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        if accumulate:
            raise RuntimeError("expected device cuda:0 but got device cpu for value tensor")
        raise _same_device_error(CUDA, CPU, f"values of aten.{_op_key(func)}")


class _HostTracker(TorchDispatchMode):
    """Runs one Python-level method on host tensors; each operator it issues is re-run through
    :func:`_run` with the tracked host tensors standing for the device tensors they hold."""

    def __init__(self, emu: EmulatedCuda, tracked: dict[int, torch.Tensor]) -> None:
        super().__init__()
        self.emu = emu
        # id -> tensor; the values keep the tensors alive so that their ids stay theirs.
        self.tracked = tracked

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        def as_device(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and id(t) in self.tracked:
                return FakeCudaTensor(t)
            return t

        out = _run(self.emu, func, tree_map(as_device, args), tree_map(as_device, kwargs or {}))

        def as_host(t: Any) -> Any:
            if isinstance(t, FakeCudaTensor):
                self.tracked[id(t.host)] = t.host
                return t.host
            return t

        return tree_map(as_host, out)


def _run_on_host(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``func`` (a Python-level tensor method a CPU-only build guards) on the host tensors."""
    originals: dict[int, FakeCudaTensor] = {}
    tracked: dict[int, torch.Tensor] = {}

    def unwrap(x: Any) -> Any:
        if isinstance(x, FakeCudaTensor):
            originals[id(x.host)] = x
            tracked[id(x.host)] = x.host
            return x.host
        return x

    host_args, host_kwargs = tree_map(unwrap, args), tree_map(unwrap, kwargs)
    with _HostTracker(_current(), tracked):
        out = func(*host_args, **host_kwargs)

    def rewrap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or id(t) not in tracked:
            return t
        return originals[id(t)] if id(t) in originals else FakeCudaTensor(t)

    return tree_map(rewrap, out)


# ----------------------------------------------------------------- Python-level method handlers


def _scalar_read(func: Callable, args: tuple, kwargs: dict) -> Any:
    # int() / float() / complex() / operator.index(): CUDA copies the one value to the host.
    host = args[0].host
    value = func(host, *args[1:], **kwargs)
    _current().record_sync(func.__name__)
    return value


def _tolist(func: Callable, args: tuple, kwargs: dict) -> Any:
    value = args[0].host.tolist()
    _current().record_sync("tolist")
    return value


def _numpy(func: Callable, args: tuple, kwargs: dict) -> Any:
    force = kwargs.get("force", args[1] if len(args) > 1 else False)
    if func is torch.Tensor.numpy and force:
        _current().record_sync("numpy(force=True)")
        return args[0].host.detach().numpy(force=True).copy()
    raise TypeError(_NUMPY_ERROR)


def _format(func: Callable, args: tuple, kwargs: dict) -> Any:
    self, spec = args[0], args[1]
    if self.dim() == 0:
        return self.item().__format__(spec)  # a 0-dim tensor formats its value: a sync
    return object.__format__(self, spec)


def _on_host(func: Callable, args: tuple, kwargs: dict) -> Any:
    return _run_on_host(func, args, kwargs)


def _pin_memory(func: Callable, args: tuple, kwargs: dict) -> Any:
    raise RuntimeError("cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned")


def _shallow_copy_compatible(func: Callable, args: tuple, kwargs: dict) -> bool:
    # Real CUDA and CPU dense tensors are "compatible" (``param.data = moved`` works), but
    # assigning a wrapper's implementation to a plain object (or back) leaves an object whose
    # class and data disagree: say no, so that nn.Module._apply builds a new parameter instead.
    first, second = args[0], args[1]
    if is_fake_cuda(first) != is_fake_cuda(second):
        return False
    with torch._C.DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


def _set_data(func: Callable, args: tuple, kwargs: dict) -> None:
    """``target.data = value`` across the emulated device: ``target`` becomes, in place, a tensor
    of ``value``'s kind over ``value``'s data (keeping its own attributes and requires_grad)."""
    target, value = args[0], args[1]
    if not (is_fake_cuda(target) or is_fake_cuda(value)):
        with torch._C.DisableTorchFunctionSubclass():
            return func(target, value)
    if is_fake_cuda(value):
        replacement: torch.Tensor = FakeCudaTensor(value.host, requires_grad=target.requires_grad)
    else:
        replacement = value.detach().requires_grad_(target.requires_grad)
    kept = {k: v for k, v in target.__dict__.items() if k != "host"}
    was_param = isinstance(target, torch.nn.Parameter)
    # swap_tensors exchanges the Python objects' classes and implementations, so references to
    # ``target`` (a module's parameter) see the new kind of tensor.
    torch.utils.swap_tensors(target, replacement)
    target.__dict__.update(kept)
    if was_param:
        target._is_param = True
    return None


def _tensor_from_tensor(func: Callable, args: tuple, kwargs: dict) -> Any:
    """``torch.tensor`` / ``as_tensor`` / ``asarray`` of a tensor: a copy (tensor) or the tensor
    itself when it fits (the others), on the requested device, by default the data's."""
    data = args[0]
    if not isinstance(data, torch.Tensor) or len(args) > 1:
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)
    device = _as_device(kwargs.get("device")) or (CUDA if is_fake_cuda(data) else CPU)
    dtype = kwargs.get("dtype")
    if device.type == "cuda":
        if func is torch.tensor:
            return _move_to_device(data.detach(), dtype, copy=True)
        return _move_to_device(data, dtype)
    out = data.to("cpu", dtype)  # from the device: a counted device-to-host copy
    return out.detach().clone() if func is torch.tensor and out is data else out


_METHOD_HANDLERS: dict[Callable, Callable[[Callable, tuple, dict], Any]] = {
    torch._has_compatible_shallow_copy_type: _shallow_copy_compatible,
    torch.Tensor.data.__set__: _set_data,
    torch.Tensor.__int__: _scalar_read,
    torch.Tensor.__float__: _scalar_read,
    torch.Tensor.__complex__: _scalar_read,
    torch.Tensor.__index__: _scalar_read,
    torch.Tensor.tolist: _tolist,
    torch.Tensor.numpy: _numpy,
    torch.Tensor.__array__: _numpy,
    torch.Tensor.__format__: _format,
    # Guarded by a CUDA device guard in a CPU-only build: run on the host, under the rules
    # (the generic fallback in __torch_function__ would find them too, one failed call later).
    torch.Tensor.__getitem__: _on_host,
    torch.Tensor.__setitem__: _on_host,
    torch.Tensor.contiguous: _on_host,
    torch.Tensor.nonzero: _on_host,
    torch.nonzero: _on_host,
    torch.Tensor.copy_: _on_host,
    torch.Tensor.pin_memory: _pin_memory,
}


# ------------------------------------------------------------------ the function-level mode


def _to_arguments(args: tuple, kwargs: dict) -> tuple[torch.device | None, Any, bool, bool, Any]:
    """``Tensor.to``'s arguments after ``self``: (device, dtype, non_blocking, copy, format)."""
    device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
        *args, **{k: v for k, v in kwargs.items() if k != "copy"}
    )
    if "copy" in kwargs:
        copy = bool(kwargs["copy"])
    elif args and isinstance(args[0], torch.dtype | torch.Tensor):
        copy = bool(args[2]) if len(args) > 2 else False  # to(dtype|other, non_blocking, copy)
    else:
        copy = bool(args[3]) if len(args) > 3 else False  # to(device, dtype, non_blocking, copy)
    return _as_device(device), dtype, non_blocking, copy, memory_format


def _move_to_device(
    t: torch.Tensor,
    dtype: Any = None,
    non_blocking: bool = False,
    copy: bool = False,
    memory_format: Any = None,
) -> torch.Tensor:
    """``t.to("cuda", ...)``: self if nothing changes, else one differentiable ``_to_copy``."""
    same_dtype = dtype is None or dtype == t.dtype
    keeps_format = memory_format in (None, torch.preserve_format)
    if isinstance(t, FakeCudaTensor) and same_dtype and keeps_format and not copy:
        return t
    if t.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(
            "emulated CUDA: moving a tensor that requires grad onto the device would record "
            "autograd history, which a CPU-only torch cannot do for CUDA (it aborts the "
            "process); move it under torch.no_grad() or detach it"
        )
    options: dict[str, Any] = {"device": CUDA, "non_blocking": non_blocking}
    if dtype is not None:
        options["dtype"] = dtype
    if memory_format is not None:
        options["memory_format"] = memory_format
    # Through the dispatcher (not the Python binding, which would initialise CUDA), so that
    # autograd records the copy as it does for a real move.
    return aten._to_copy.default(t, **options)


_TENSOR_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}


class EmulatedCuda(TorchFunctionMode):
    """The emulation: a function mode for what a CPU-only torch refuses before dispatching, a
    dispatch mode for factories issued inside ATen, the patches, and the sync counter.

    Use it through :func:`emulated_cuda` or the ``fake_cuda`` fixture
    (``from emulated_cuda import fake_cuda_fixture  # noqa: F401``).
    """

    def __init__(self, report_nccl: bool = True, mps: bool = False) -> None:
        super().__init__()
        self.sync_log: list[str] = []
        self.report_nccl = report_nccl
        self.mps = mps
        self._dispatch = _FactoryDispatch(self)
        self._patches = contextlib.ExitStack()

    @property
    def syncs(self) -> int:
        """Host syncs counted so far."""
        return len(self.sync_log)

    def record_sync(self, why: str) -> None:
        """Count one host sync (``why`` goes to :attr:`sync_log`)."""
        self.sync_log.append(why)

    def reset(self) -> None:
        """Forget the syncs counted so far."""
        self.sync_log.clear()

    @contextlib.contextmanager
    def counting(self) -> Iterator[list[str]]:
        """The syncs of a block only: ``with emu.counting() as log: ...; len(log)``."""
        start = len(self.sync_log)
        log: list[str] = []
        try:
            yield log
        finally:
            log.extend(self.sync_log[start:])

    def __enter__(self) -> EmulatedCuda:
        if _ACTIVE:
            raise RuntimeError("the CUDA emulation is already active")
        _ACTIVE.append(self)
        _forget_device_answers()
        try:
            self._patches.enter_context(self._dispatch)
            self._patch_cuda()
            self._patch_distributed()
            super().__enter__()
        except BaseException:
            self._patches.close()
            _ACTIVE.pop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._patches.close()
            _ACTIVE.pop()
            _forget_device_answers()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        original = getattr(owner, name)
        setattr(owner, name, value)
        self._patches.callback(setattr, owner, name, original)

    def _patch_cuda(self) -> None:
        def set_device(device: Any) -> None:
            _as_device(device)  # refuses other ordinals

        self._patch(torch.cuda, "is_available", lambda: True)
        self._patch(torch.cuda, "device_count", lambda: 1)
        self._patch(torch.cuda, "current_device", lambda: 0)
        self._patch(torch.cuda, "set_device", set_device)
        self._patch(torch.cuda, "synchronize", lambda device=None: None)
        # Triton launches kernels on device memory, and a fake tensor's data is host memory: the
        # emulated device counts with torch's kernels, as on a CPU build, also on a CUDA build
        # of torch with Triton (a GPU machine running these tests)
        from retrieval_metrics.functional.ranking.engine import counters

        self._patch(counters, "_triton_runs_on", lambda device: False)

    def _patch_distributed(self) -> None:
        if not dist.is_available():
            return
        for name in _COLLECTIVES:
            if hasattr(dist, name):
                self._patch(dist, name, _nccl_collective(getattr(dist, name), name))
        if self.report_nccl:
            original = dist.get_backend

            def get_backend(group: Any = None) -> Any:
                backend = original(group)
                return "nccl" if str(backend) == "gloo" else backend

            self._patch(dist, "get_backend", get_backend)

    def __torch_function__(
        self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.to:
            device, dtype, non_blocking, copy, memory_format = _to_arguments(args[1:], kwargs)
            if device is not None and device.type == "cuda":
                return _move_to_device(args[0], dtype, non_blocking, copy, memory_format)
            return func(*args, **kwargs)
        if func is torch.Tensor.cuda:
            device = kwargs.get("device", args[1] if len(args) > 1 else None)
            _as_device("cuda" if device is None else device)
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            return _move_to_device(args[0], None, non_blocking, False, kwargs.get("memory_format"))
        if func == torch.Tensor.data.__set__:
            return _set_data(func, args, kwargs)  # the subclass is not asked about a value
        if func is torch.Tensor.pin_memory and not is_fake_cuda(args[0]):
            return args[0].clone()  # no pinned memory without CUDA: a host copy
        if func in _TENSOR_FACTORIES and args and is_fake_cuda(args[0]):
            # The data argument is not checked for torch functions: the binding would see a
            # CUDA tensor and initialise CUDA.
            return _tensor_from_tensor(func, args, kwargs)
        device = _as_device(kwargs["device"]) if kwargs.get("device") is not None else None
        if device is None or device.type != "cuda":
            return func(*args, **kwargs)
        # A factory (torch.zeros, torch.tensor, x.new_ones, torch.zeros_like, ...) on the
        # device: build it on the host (the Python binding would initialise CUDA first).
        if func in _TENSOR_FACTORIES and args and isinstance(args[0], torch.Tensor):
            return _tensor_from_tensor(func, args, kwargs)
        out = func(*args, **{**kwargs, "device": CPU})
        if func in _TENSOR_FACTORIES and isinstance(out, torch.Tensor) and out.numel():
            # built on the host from Python data, then moved: a blocking host-to-device copy
            self.record_sync(f"host-to-device copy (torch.{func.__name__})")
        return tree_map(
            lambda t: _wrap_new(t) if isinstance(t, torch.Tensor) and _is_plain(t) else t, out
        )


class _FactoryDispatch(TorchDispatchMode):
    """Factories issued inside ATen (``at::empty(..., self.options())`` in a decomposition) and
    moves of CPU tensors reach no fake tensor: this mode sends every operator through _run."""

    def __init__(self, emu: EmulatedCuda) -> None:
        super().__init__()
        self.emu = emu

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        return _run(self.emu, func, args, kwargs or {})


def _forget_device_answers() -> None:
    """Forget what retrieval_metrics remembers of ``cuda:0``'s abilities (float64, the half
    product: an emulation with ``mps=True`` answers otherwise than one without)."""
    primitives = sys.modules.get("retrieval_metrics.functional.primitives")
    if primitives is not None:
        primitives._DEVICE_ABILITIES.clear()


_ACTIVE: list[EmulatedCuda] = []
_IDLE = EmulatedCuda()  # counts the syncs of fake tensors used while no emulation is active


def _current() -> EmulatedCuda:
    return _ACTIVE[-1] if _ACTIVE else _IDLE


def active_emulation() -> EmulatedCuda:
    """The innermost active emulation (its sync counter), for code that runs inside one it did
    not start (a worker process's scenario); raises where none is active."""
    if not _ACTIVE:
        raise RuntimeError("no emulated CUDA device is active")
    return _ACTIVE[-1]


# ------------------------------------------------------------------------------ collectives

_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",  # all_gather_into_tensor's new name (torch 2.13)
    "all_gather_coalesced",
    "all_reduce_coalesced",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
)


def _nccl_collective(original: Callable, name: str) -> Callable:
    """``original`` as NCCL would take it: device tensors only, run on their host tensors."""

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        def host(x: Any) -> Any:
            if isinstance(x, FakeCudaTensor):
                return x.host  # the collective writes into the fake tensor's own storage
            if isinstance(x, torch.Tensor):
                raise NcclTensorError(
                    f"Tensors must be CUDA and dense (emulated NCCL: a {x.device} tensor "
                    f"given to torch.distributed.{name})"
                )
            return x

        return original(*tree_map(host, args), **tree_map(host, kwargs))

    return collective


# ------------------------------------------------------------------------------ entry points


@contextlib.contextmanager
def emulated_cuda(report_nccl: bool = True, mps: bool = False) -> Iterator[EmulatedCuda]:
    """Emulate a CUDA device for the block; yields the emulator (``.syncs``, ``.sync_log``).

    ``mps=True``: the device lacks what Apple's MPS lacks (float64, ``torch.mm(...,
    out_dtype=)``; see the module's docstring)."""
    with EmulatedCuda(report_nccl=report_nccl, mps=mps) as emu:
        yield emu


@pytest.fixture(name="fake_cuda")
def fake_cuda_fixture() -> Iterator[EmulatedCuda]:
    """The CUDA emulation, active for the test; the fixture's value is the emulator.

    Import it as ``from emulated_cuda import fake_cuda_fixture  # noqa: F401`` and ask for
    ``fake_cuda``: pytest registers it under that name, and ruff sees no test argument shadowing
    an import (F811), as it would with ``from emulated_cuda import fake_cuda``, which works too.
    """
    with emulated_cuda() as emu:
        yield emu


fake_cuda = fake_cuda_fixture


@pytest.fixture(name="fake_mps")
def fake_mps_fixture() -> Iterator[EmulatedCuda]:
    """The CUDA emulation answering as Apple's MPS (``emulated_cuda(mps=True)``); import it as
    ``from emulated_cuda import fake_mps_fixture  # noqa: F401``."""
    with emulated_cuda(mps=True) as emu:
        yield emu
