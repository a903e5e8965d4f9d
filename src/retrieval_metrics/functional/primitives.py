"""Tensor primitives every layer shares: array operations with a faster CPU path than torch's, and
the check of input values every entry point makes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor


def masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x[mask]`` for a 1-D ``x`` and boolean ``mask``; on the CPU through numpy, several times
    faster than torch's boolean indexing on the per-pair arrays of a ranking (millions long)."""
    if x.device.type == "cpu" and mask.device.type == "cpu" and x.dtype != torch.bfloat16:
        return torch.from_numpy(x.numpy()[mask.numpy()])
    return x[mask]


def repeat(values: Tensor, counts: Tensor, output_size: int | None = None) -> Tensor:
    """``torch.repeat_interleave(values, counts)``; on the CPU through numpy, 10 to 30 times
    faster when the runs are long (a row index repeated over a query's thousands of relevant
    pairs)."""
    if (
        values.device.type == "cpu"
        and counts.device.type == "cpu"
        and values.dtype != torch.bfloat16
    ):
        return torch.from_numpy(np.repeat(values.numpy(), counts.numpy()))
    return torch.repeat_interleave(values, counts, output_size=output_size)


def flat_nonzero(mask: Tensor) -> Tensor:
    """``torch.nonzero(mask).flatten()`` for a 1-D ``mask``: the int64 positions of its nonzero
    (True) entries; on the CPU through numpy, about 7 times faster than torch's."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return torch.nonzero(mask).flatten()


def sent_without_waiting(x: Tensor, device: torch.device | str) -> bool:
    """Whether a copy of ``x`` to ``device`` may be queued (``non_blocking=True``) instead of
    waiting for the device: a host tensor sent to a CUDA device.

    A blocking copy from host memory (``x.to("cuda")``, ``buffer.copy_(x)``) ends in a stream
    synchronisation (ATen's ``memcpy_and_sync``): the host waits until every kernel queued
    before it has run, a host sync for each index tensor a block sends. From pageable memory
    CUDA stages the data before a queued copy returns, so the host tensor may be freed or
    changed at once. Not so: a pinned tensor (a caller's, from a DataLoader with
    ``pin_memory=True``), read later while its owner may already refill it; a copy to the host,
    which the host reads next; a copy to a device other than CUDA's, whose staging of host
    memory is not documented so.
    """
    return x.device.type == "cpu" and torch.device(device).type == "cuda" and not x.is_pinned()


def to_device(x: Tensor, device: torch.device | str) -> Tensor:
    """``x`` on ``device``; a host tensor (an index tensor the ranking builds on the CPU, a
    result, a batch's keys) sent to a CUDA device without waiting for it
    (:func:`sent_without_waiting`). A float64 tensor bound for a device without float64
    (Apple's MPS) goes to the host instead (:func:`float64_home`): its digits are kept, not
    rounded to float32."""
    if x.dtype == torch.float64:
        device = float64_home(device)
    return x.to(device, non_blocking=sent_without_waiting(x, device))


#: what accelerators were found able to do, by (device type, ability): :func:`device_can`
_DEVICE_ABILITIES: dict[tuple[str, str], bool] = {}


def device_can(
    device: torch.device | str,
    ability: str,
    attempt: Callable[[torch.device], Any],
    refusal: type[Exception] | tuple[type[Exception], ...],
) -> bool:
    """Whether ``attempt(device)`` runs on the accelerator ``device`` (a tiny operation that
    needs ``ability``) rather than raising ``refusal``, the error a backend without it gives;
    tried once per backend (device type) and remembered. Backends differ in what they
    implement (Apple's MPS has no float64, no ``torch.mm(..., out_dtype=)``), and the device's
    own answer is the one that holds, whatever its name. Any other error is raised: a device
    that should have the ability is not silently taken for one without. The CPU can do all of
    it."""
    device = torch.device(device)
    if device.type == "cpu":
        return True
    key = (device.type, ability)
    if key not in _DEVICE_ABILITIES:
        try:
            attempt(device)
            _DEVICE_ABILITIES[key] = True
        except refusal:
            _DEVICE_ABILITIES[key] = False
    return _DEVICE_ABILITIES[key]


def holds_float64(device: torch.device | str) -> bool:
    """Whether ``device`` can hold float64 tensors: the CPU and CUDA can, Apple's MPS cannot
    (it raises a TypeError for any float64 tensor), nor Intel GPUs without fp64 (a
    RuntimeError, "Required aspect fp64 is not supported on the device"). A device taken for
    one without float64 keeps float64 on the host: the same values, never a failure."""
    return device_can(
        device, "float64", lambda d: torch.zeros((), dtype=torch.float64, device=d),
        (TypeError, RuntimeError),
    )


def float64_home(device: torch.device | str) -> torch.device:
    """Where float64 data kept for ``device`` lives: on it, or on the host where it has no
    float64 (:func:`holds_float64`). The measures are computed in float64 on the host anyway;
    float64 states (positions, integer scores, rank tables' grades) and float64 results
    (``per_query()``, ``compute()`` after ``set_dtype(torch.float64)``) stay there."""
    return torch.device(device) if holds_float64(device) else torch.device("cpu")


def in_float64(x: Tensor) -> Tensor:
    """``x`` as float64: on its device, or on the host where that has no float64
    (:func:`float64_home`)."""
    return x.to(float64_home(x.device), torch.float64)


def to_host(tensors: list[Tensor]) -> list[Tensor]:
    """``[t.cpu() for t in tensors]``, read from a device in one copy (one host sync, not one
    apiece): each tensor's bytes, padded to a whole 8 so that every dtype's view of its slice
    is aligned, joined on the device, copied to the host once and cut back into views of that
    one buffer.

    >>> to_host([torch.tensor([[1, 2]]), torch.tensor([0.5])])
    [tensor([[1, 2]]), tensor([0.5000])]
    """
    on_device = [i for i, t in enumerate(tensors) if t.device.type != "cpu"]
    if len(on_device) < 2:
        return [t.cpu() for t in tensors]
    flat = [tensors[i].reshape(-1).contiguous() for i in on_device]
    pieces, spans = [], []
    for t in flat:
        raw = t.view(torch.uint8)
        pad = -raw.numel() % 8
        pieces.append(raw if pad == 0 else torch.cat([raw, raw.new_zeros(pad)]))
        spans.append(raw.numel())
    joined = torch.cat(pieces).cpu()
    out = list(tensors)
    at = 0
    for i, t, piece, size in zip(on_device, flat, pieces, spans, strict=True):
        out[i] = joined[at : at + size].view(t.dtype).view(tensors[i].shape)
        at += piece.numel()
    return out


def is_identity(index: Tensor, n: int) -> bool:
    """Whether ``index`` (int positions or a boolean mask) keeps all ``n`` items, in place."""
    index = index.cpu()
    if index.dtype == torch.bool:
        return index.numel() == n and bool(index.all())
    return index.numel() == n and bool((index == torch.arange(n)).all())


def order_by_row(row: Tensor, key: Tensor) -> Tensor:
    """The permutation that sorts entries by ``row``, then by ``key`` within a row, keeping the
    order of equal ``(row, key)`` pairs (two stable sorts): how the rank tables list each
    query's items by position."""
    order = torch.argsort(key, stable=True)
    return order[torch.argsort(row[order], stable=True)]


def all_finite(x: Tensor) -> bool:
    """Whether a floating tensor holds no NaN and no infinity (True for other dtypes, empty):
    :func:`finite_flag` read (one device synchronisation)."""
    return bool(finite_flag(x))


def finite_flag(x: Tensor) -> Tensor:
    """Whether ``x`` holds no NaN and no infinity, as a 0-dim bool tensor on its device (not
    read: a caller that must not wait for the device keeps it there).

    The minimum and maximum are NaN where any value is NaN and infinite where any value is:
    two reductions in one pass instead of a boolean tensor the size of ``x`` (20x faster on the
    CPU for embeddings). On the host, a float32 or float64 tensor's sum decides first: NaN and
    infinities carry through a sum, so a finite sum means finite values (one reduction, not
    two: 1.6 ms against 4.4 ms for 50,000 x 384 float32); only where it is not (those, or
    finite values whose sum overflows) do the minimum and maximum decide. (A half-precision
    sum overflows near 65,504, and summed in float32 took 13x their 2.2 ms.)
    """
    if not x.is_floating_point() or x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        total = x.sum()
        if bool(torch.isfinite(total)):
            return torch.ones((), dtype=torch.bool)
    return torch.isfinite(torch.stack(torch.aminmax(x))).all()


def fingerprint(parts: Iterable[Tensor | bytes | str]) -> int:
    """A 63-bit hash of ``parts`` (tensors by their values and shapes, read on the host), the
    same in every process: what processes compare, after a sync, to find that they were given
    different judgments, options or galleries. Never 0, which stands for "nothing given"."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        if isinstance(part, Tensor):
            digest.update(repr((str(part.dtype), tuple(part.shape))).encode())
            part = part.detach().cpu().contiguous().numpy().tobytes()
        digest.update(part.encode() if isinstance(part, str) else part)
    return (int.from_bytes(digest.digest(), "little") >> 1) or 1
