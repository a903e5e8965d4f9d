"""Everything that makes a metric give the same value on one process and on many.

Every metric kind goes through these steps, in this order, and nowhere else:

1. :func:`sync_states`: each "cat" state is gathered with :func:`gather_rows`, which all-gathers one
   tensor per rank along dimension 0 when ranks hold different numbers of rows, different trailing
   shapes only because a rank is empty, or different floating dtypes (two collectives for all
   the states: one for the shapes and dtypes, one for the payload as one padded buffer).
2. :func:`dedupe_by_id`: samples repeated by DistributedSampler (same id, and the same labels,
   cameras, positions and embedding, the embedding to float rounding) are dropped; an id repeated
   with anything different is an error.
3. :func:`rank_queries`: for a set ranked against itself, each process computes its share of
   the symmetric pass's block pairs and the counts are summed (:class:`DistributedExchange`);
   for a separate gallery, each ranks its contiguous share of the queries (:func:`query_share`)
   and the rank tables are gathered in process order (:func:`gather_table`). Either way every
   process holds the whole table.
4. Or, for a gallery too large for one device, :func:`rank_gallery_sharded`: the gallery stays
   where it is and only queries, relevant scores and counts cross.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from retrieval_metrics.functional.primitives import sent_without_waiting, to_device
from retrieval_metrics.functional.ranking import Exchange
from retrieval_metrics.functional.ranking.items import Items, keys_on_host
from retrieval_metrics.functional.ranking.options import RankingOptions
from retrieval_metrics.functional.table import (
    PRESENT,
    TABLE_PARTS,
    RankTable,
    table_from_parts,
    table_parts,
)

__all__ = [
    "EMBEDDING_REPEAT_TOLERANCE",
    "DistributedExchange",
    "Processes",
    "dedupe_across_shards",
    "dedupe_by_id",
    "distributed_ready",
    "gather_lists",
    "gather_rows",
    "gather_table",
    "ids_as_integers",
    "query_share",
    "rank_and_world",
    "rank_gallery_sharded",
    "rank_queries",
    "rank_two_ways",
    "sync_states",
]

_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
_MAX_DIMS = 3


@dataclass(frozen=True)
class Processes:
    """The processes a metric's states are synced over, as one call found them: ``group``
    (torch.distributed's, None for the default), ``distributed`` (the states are synced),
    ``several`` (over more than one process) and ``synced_bytes`` (what this process sent in
    the last sync)."""

    group: Any = None
    distributed: bool = False
    several: bool = False
    synced_bytes: int = 0


def distributed_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world(group: Any = None) -> tuple[int, int]:
    if not distributed_ready():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _common_dtype(codes: list[int], rows: list[int]) -> torch.dtype:
    dtypes = [_DTYPES[c] for c, r in zip(codes, rows, strict=True) if r > 0]
    if not dtypes:
        dtypes = [_DTYPES[c] for c in codes]
    result = dtypes[0]
    for d in dtypes[1:]:
        result = torch.promote_types(result, d)
    return result


def gather_rows(tensors: list[Tensor], group: Any = None) -> list[Tensor]:
    """All-gather each tensor of ``tensors`` (same list on every rank) along dimension 0.

    An empty tensor on one rank may have any trailing shape and dtype (it takes the others'), so a
    rank that saw no data never breaks the collective. Two collectives whatever the number of
    tensors (a metric's states are some twenty, and each collective costs a round trip between
    every process): one for the shapes and dtypes, one for the payload.
    """
    _, world = rank_and_world(group)
    if world == 1:
        return tensors
    device = _collective_device(tensors[0].device if tensors else torch.device("cpu"), group)
    meta = torch.zeros(len(tensors), 2 + _MAX_DIMS, dtype=torch.int64)
    for i, t in enumerate(tensors):
        if t.dim() > _MAX_DIMS or t.dim() == 0:
            # (a 0-D tensor has no rows to concatenate: gather t[None])
            raise ValueError(f"cannot gather a {t.dim()}-D state")
        meta[i, 0] = _DTYPES.index(t.dtype)
        meta[i, 1] = t.dim()
        meta[i, 2 : 2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    meta = to_device(meta, device)
    all_meta = [torch.zeros_like(meta) for _ in range(world)]
    dist.all_gather(all_meta, meta, group=group)
    all_meta = list(torch.cat(all_meta).cpu().split(len(tensors)))  # (one copy to the host)
    layouts = [_gathered_layout(all_meta, i) for i in range(len(tensors))]
    # Each rank's tensors, in its common dtype, as the bytes of one buffer: one collective for
    # the payload whatever the number of states. Every piece starts 8-byte aligned, so that it
    # can be read back as its dtype in place.
    nbytes = [
        [rows * math.prod(trailing) * dtype.itemsize for rows in per_rank]
        for dtype, trailing, per_rank in layouts
    ]
    lengths = [sum(_aligned(n[r]) for n in nbytes) for r in range(world)]
    if max(lengths) == 0:  # nothing anywhere (the same answer on every rank)
        return [
            torch.zeros(0, *trailing, dtype=dtype, device=t.device)
            for (dtype, trailing, _), t in zip(layouts, tensors, strict=True)
        ]
    payload = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    offset = 0
    for (dtype, _, _), t in zip(layouts, tensors, strict=True):
        size = t.numel() * dtype.itemsize
        payload[offset : offset + size].view(dtype).copy_(
            t.reshape(-1), non_blocking=sent_without_waiting(t, device)
        )
        offset += _aligned(size)
    gathered = [torch.zeros_like(payload) for _ in range(world)]
    dist.all_gather(gathered, payload, group=group)
    on_host = [t.device.type == "cpu" and device.type != "cpu" for t in tensors]
    # tensors held on the host (rank tables, per-query parts) that travelled through the device:
    # every rank's bytes come back in one copy, not one a tensor
    host_bytes = torch.cat(gathered).cpu().split(payload.numel()) if any(on_host) else None
    pieces: list[list[Tensor]] = [[] for _ in tensors]
    for r, buffer in enumerate(gathered):
        offset = 0
        for i, (dtype, _, _) in enumerate(layouts):
            source = host_bytes[r] if host_bytes is not None and on_host[i] else buffer
            pieces[i].append(source[offset : offset + nbytes[i][r]].view(dtype))
            offset += _aligned(nbytes[i][r])
    return [
        torch.cat(parts).view(sum(per_rank), *trailing).to(t.device)
        for parts, (_, trailing, per_rank), t in zip(pieces, layouts, tensors, strict=True)
    ]


def _collective_device(device: torch.device, group: Any = None) -> torch.device:
    """Where a collective's tensors must be: NCCL takes CUDA tensors only, so host tensors (rank
    tables and per-query parts are built on the host) travel through this process's GPU."""
    if dist.get_backend(group) == "nccl" and device.type != "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _sent_copy(tensor: Tensor, device: torch.device) -> Tensor:
    """A copy of ``tensor`` on ``device`` for a collective to write into (a host tensor sent
    without waiting for the device)."""
    out = to_device(tensor, device)
    return tensor.clone() if out is tensor else out


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 8) * 8


def _gathered_layout(
    all_meta: list[Tensor], i: int
) -> tuple[torch.dtype, list[int], list[int]]:
    """Tensor ``i``'s dtype, trailing shape and rows per rank, from every rank's shapes."""
    rows = [int(m[i, 2]) if int(m[i, 1]) > 0 else 0 for m in all_meta]
    codes = [int(m[i, 0]) for m in all_meta]
    dtype = _common_dtype(codes, rows)
    donor = next((m for m, r in zip(all_meta, rows, strict=True) if r > 0), all_meta[0])
    ndim = max(1, int(donor[i, 1]))
    trailing = [int(x) for x in donor[i, 3 : 2 + ndim]]
    for m, r in zip(all_meta, rows, strict=True):
        if r > 0 and [int(x) for x in m[i, 3 : 2 + int(m[i, 1])]] != trailing:
            raise ValueError(
                f"ranks hold states of different trailing shapes: {trailing} and "
                f"{[int(x) for x in m[i, 3 : 2 + int(m[i, 1])]]} (e.g. embeddings of different "
                "dimensions)"
            )
    return dtype, trailing, rows


class DistributedExchange:
    """:class:`retrieval_metrics.functional.ranking.Exchange` over torch.distributed."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.sent = 0
        self.rank, self.world = rank_and_world(group)

    def gather(self, tensors: list[Tensor]) -> list[Tensor]:
        self.sent += sum(t.numel() * t.element_size() for t in tensors)
        return gather_rows(tensors, self.group)

    def _reduce(self, tensor: Tensor, op: Any) -> Tensor:
        out = _sent_copy(tensor, _collective_device(tensor.device, self.group))
        self.sent += out.numel() * out.element_size()
        dist.all_reduce(out, op=op, group=self.group)
        return out.to(tensor.device)

    def sum(self, tensor: Tensor) -> Tensor:
        return self._reduce(tensor, dist.ReduceOp.SUM)

    def max(self, tensor: Tensor) -> Tensor:
        return self._reduce(tensor, dist.ReduceOp.MAX)

    def min_async(self, tensor: Tensor) -> Callable[[], Tensor]:
        out = _sent_copy(tensor, _collective_device(tensor.device, self.group))
        self.sent += out.numel() * out.element_size()
        work = dist.all_reduce(out, op=dist.ReduceOp.MIN, group=self.group, async_op=True)

        def result() -> Tensor:
            work.wait()
            return out.to(tensor.device)

        return result


# ---------------------------------------------------------------------- states


def sync_states(states: Mapping[str, Any], group: Any = None) -> tuple[dict[str, Tensor], int]:
    """Every process's rows of each state (lists of tensors or tensors), concatenated in process
    order; also the bytes this process contributed."""
    names = list(states)
    local = []
    for name in names:
        value = states[name]
        if isinstance(value, list):
            value = torch.cat(value) if value else torch.zeros(0, dtype=torch.int64)
        local.append(value)
    sent = sum(t.numel() * t.element_size() for t in local)
    return dict(zip(names, gather_rows(local, group), strict=True)), sent


# ---------------------------------------------------------------------- dedupe


#: Two rows of embeddings under one sample id are the same sample (a padding repeat) when no
#: coordinate differs by more than this fraction of the row's largest absolute coordinate: the
#: rounding of one model's forward pass in different batches or on different devices (float16
#: and bfloat16 kernels included) stays far below it, two different samples far above.
EMBEDDING_REPEAT_TOLERANCE = 1e-2


#: repeated rows compared with their first at once (:func:`_rows_differ`)
REPEAT_ROWS = 4096


def _rows_differ(emb: Tensor, rows: Tensor, firsts: Tensor) -> Tensor:
    """Whether each row ``rows[i]`` of ``emb`` differs from row ``firsts[i]`` by more than
    :data:`EMBEDDING_REPEAT_TOLERANCE` of the latter's largest coordinate (host bool). A part of
    the rows at a time: image-text gives each image once per caption, and float32 copies of
    every repeat at once were several times the stored embeddings."""
    # compared in float32 (float64 ones in float64): a difference's rounding, a few parts in
    # 10**8 of it, is far below the tolerance, and a device without float64 compares alike
    wide = torch.promote_types(emb.dtype, torch.float32)
    differ = torch.zeros(rows.numel(), dtype=torch.bool, device=emb.device)
    rows, firsts = rows.to(emb.device), firsts.to(emb.device)
    for lo in range(0, rows.numel(), REPEAT_ROWS):
        part = slice(lo, lo + REPEAT_ROWS)
        a, b = emb[rows[part]].to(wide), emb[firsts[part]].to(wide)
        scale = b.abs().amax(1) if b.shape[1] else b.new_zeros(b.shape[0])
        differ[part] = (a - b).abs().amax(1) > EMBEDDING_REPEAT_TOLERANCE * scale
    return differ.cpu()  # (one read of the device, after every part)


def ids_as_integers(ids: Tensor) -> str:
    """A few ids as a message names them: the integers they are held as."""
    return ", ".join(str(int(i)) for i in ids)


def dedupe_by_id(
    ids: Tensor, what: str, *, embeddings: Tensor | None = None,
    named: Callable[[Tensor], str] | None = None, **keys: Tensor | None
) -> Tensor:
    """Indices of one item per id (ascending id order), after checking that repeats agree.

    Repeats that agree on every tensor of ``keys`` (labels, cameras, positions, ...) exactly, and
    on ``embeddings`` to :data:`EMBEDDING_REPEAT_TOLERANCE` of the row's largest coordinate, are
    the samples DistributedSampler pads with, and are dropped. An id repeated with different
    values names two different samples (e.g. ids that restart at 0 in every batch), which would
    silently lose data: it raises, naming a few of the ids and what differs (``named``: how a
    few of ``ids``' values are shown, where they are codes of the ids given; by default as the
    integers they are).
    """
    ids = ids.cpu()
    if ids.numel() < 2 or bool((ids[1:] > ids[:-1]).all()):
        # ascending already, so no id repeats (a corpus whose ids were coded as they came):
        # one comparison of neighbours instead of a sort
        return torch.arange(ids.numel())
    order = torch.argsort(ids, stable=True)
    sorted_ids = ids[order]
    first = torch.ones_like(sorted_ids, dtype=torch.bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    if bool(first.all()):
        return order  # no id repeats: nothing to compare
    group_first = order[first][torch.cumsum(first.to(torch.int64), 0) - 1]
    # only the repeats are compared with the first row of their id
    repeat = ~first
    rows, firsts = order[repeat], group_first[repeat]
    for name, key in {**keys, "embeddings": embeddings}.items():
        if key is None:
            continue
        if name == "embeddings":
            differ = _rows_differ(key, rows, firsts)
        else:
            key = key.cpu()
            differ = key[rows] != key[firsts]
            if differ.dim() > 1:
                differ = differ.reshape(differ.shape[0], -1).any(1)
        if bool(differ.any()):
            bad = torch.unique(sorted_ids[repeat][differ])
            shown = (ids_as_integers if named is None else named)(bad[:5])
            how = (
                f"embeddings that differ by more than {EMBEDDING_REPEAT_TOLERANCE:g} of their "
                "largest coordinate"
                if name == "embeddings"
                else f"different {name}"
            )
            raise ValueError(
                f"{what}: {bad.numel()} id(s) were given for samples with {how} "
                f"(e.g. {shown}); an id must name one sample (ids that restart in every batch "
                "are a common cause). Only identical repeats, such as DistributedSampler's "
                "padding, are dropped"
            )
    return order[first]


def dedupe_across_shards(shard: Items, what: str, group: Any = None) -> tuple[Items, int]:
    """This process's gallery shard without the items whose id a lower-ranked process holds.

    A gallery that stays split over processes is deduplicated within each process by the states'
    dedupe; the samples DistributedSampler repeats to even out the processes land on two
    processes, and would count twice. Only the ids travel (8 bytes an item, on every process the
    same answer); the rows of the ids held by several processes are then compared with
    :func:`dedupe_by_id`'s rule, so a repeat that is not the same sample is refused on every
    process alike. Returns the shard and the bytes this process sent."""
    rank, world = rank_and_world(group)
    if world == 1 or shard.ids is None:
        return shard, 0
    local_ids = shard.ids.cpu()
    sent = local_ids.numel() * 12
    all_ids, all_rank = gather_rows(
        [local_ids, torch.full_like(local_ids, rank, dtype=torch.int32)], group
    )
    all_ids, all_rank = all_ids.cpu(), all_rank.cpu().to(torch.int64)
    # the ids held by more than one process (each process holds an id once: deduped states)
    order = torch.argsort(all_ids, stable=True)
    sorted_ids = all_ids[order]
    repeated = torch.zeros_like(sorted_ids, dtype=torch.bool)
    if sorted_ids.numel() > 1:
        same = sorted_ids[1:] == sorted_ids[:-1]
        repeated[1:] |= same
        repeated[:-1] |= same
    shared = torch.unique(sorted_ids[repeated])
    if shared.numel() == 0:
        return shard, sent
    mine = torch.isin(local_ids, shared)
    rows = shard.select(mine)
    key_names = ("labels", "cameras", "positions")
    # the same list on every process: a key this process lacks travels as an empty tensor
    fields = [rows.emb, rows.ids] + [
        torch.zeros(0, dtype=torch.int64) if getattr(rows, name) is None else getattr(rows, name)
        for name in key_names
    ]
    gathered = gather_rows(fields, group)
    sent += sum(t.numel() * t.element_size() for t in fields)
    emb, ids = gathered[0], gathered[1]
    keys = {
        name: key if key.shape[0] == ids.shape[0] else None
        for name, key in zip(key_names, gathered[2:], strict=True)
    }
    dedupe_by_id(ids, what, embeddings=emb, **keys)  # raises where a repeat is another sample
    # keep each shared id on the lowest rank that holds it
    first_rank = torch.full((shared.numel(),), world, dtype=torch.int64)
    at = torch.searchsorted(shared, all_ids)
    held = torch.isin(all_ids, shared)
    first_rank.scatter_reduce_(0, at[held], all_rank[held], reduce="amin")
    owner = first_rank[torch.searchsorted(shared, local_ids[mine])]
    keep = torch.ones_like(local_ids, dtype=torch.bool)
    keep[mine] = owner == rank
    return shard.select(keep), sent


# ---------------------------------------------------------------------- ranking


def query_share(num_queries: int, group: Any = None, distributed: bool = True) -> slice:
    """This process's contiguous share of ``num_queries`` queries (all of them on one process)."""
    rank, world = rank_and_world(group) if distributed else (0, 1)
    return slice(rank * num_queries // world, (rank + 1) * num_queries // world)


def gather_table(table: RankTable, group: Any = None) -> RankTable:
    """Every process's rank table, queries concatenated in process order."""
    parts = table_parts(table)
    names = [p.name for p in TABLE_PARTS] + [PRESENT]
    gathered = gather_rows([parts[n] for n in names], group)
    return table_from_parts(dict(zip(names, gathered, strict=True)))


def gather_lists(
    lists: tuple[Tensor, Tensor] | None, group: Any = None
) -> tuple[Tensor, Tensor] | None:
    """Every process's run lists of its share of the queries (:func:`query_share`: contiguous,
    in process order), as one process's would be; None where any process kept none."""
    held = lists is not None
    # (an empty tensor of any shape takes the others': a process that kept none joins)
    rows, scores = lists if lists is not None else (torch.zeros(0), torch.zeros(0))
    flag = torch.tensor([int(held)], device=rows.device)
    rows, scores, flags = gather_rows([rows, scores, flag], group)
    return (rows, scores) if bool(flags.all()) else None


def gather_query_parts(
    parts: dict[str, tuple[Tensor, Tensor | None, Tensor | None]],
    queries: RankTable,
    group: Any = None,
) -> tuple[dict[str, tuple[Tensor, Tensor | None, Tensor | None]], RankTable]:
    """Every process's per-query parts and query fields (measures.query_parts_in_chunks),
    queries concatenated in process order: what a ranking in query chunks sends instead of its
    tables, a few numbers per query whatever the number of relevant pairs."""
    names = list(parts)
    tensors = [t for name in names for t in parts[name] if t is not None]
    fields = ["num_relevant", "gallery_size", "depth", "query_class", "query_id", "num_absent"]
    present = [f for f in fields if getattr(queries, f) is not None]
    gathered = gather_rows(tensors + [getattr(queries, f) for f in present], group)
    it = iter(gathered)
    out = {name: tuple(None if t is None else next(it) for t in parts[name]) for name in names}
    got = {f: next(it) for f in present}
    num_q = got["num_relevant"].numel()
    empty = torch.zeros(0, dtype=torch.int64)
    gathered_queries = RankTable(
        ptr=torch.zeros(num_q + 1, dtype=torch.int64), above=empty, tied=empty, **got
    )
    return out, gathered_queries  # type: ignore[return-value]


def rank_queries(
    queries: Items,
    gallery: Items | None,
    options: RankingOptions,
    group: Any = None,
    distributed: bool = True,
) -> RankTable:
    """Rank every query against the whole gallery (``None``: same source, the queries
    themselves), each process its share of the work; the whole table on every process."""
    _, world = rank_and_world(group) if distributed else (0, 1)
    if world == 1:
        # one process ranks the whole set: same source stays stated, for the symmetric pass
        return options.rank(queries, gallery)
    if gallery is None:
        # Every process holds the whole set: they share the symmetric pass's block pairs out
        # (each computes 1 / world of the half product), where ranking a share of the queries
        # against the whole set would cost each process the half product of one process.
        return options.rank(queries, None, DistributedExchange(group))
    share = queries.select(query_share(len(queries), group, distributed))
    table = options.rank(share, queries if gallery is None else gallery)
    return gather_table(table, group)


def rank_two_ways(
    a: Items,
    b: Items,
    options: RankingOptions,
    group: Any = None,
    distributed: bool = True,
) -> tuple[RankTable, RankTable]:
    """``a`` against ``b`` and ``b`` against ``a`` (label relevance), the whole tables on every
    process: one pass over the products on one process, each process its share of both
    directions' queries on several."""
    _, world = rank_and_world(group) if distributed else (0, 1)
    if world == 1:
        return options.rank_two_ways(a, b)
    return (
        rank_queries(a, b, options, group, distributed),
        rank_queries(b, a, options, group, distributed),
    )


def rank_gallery_sharded(
    queries: Items,
    shard: Items | None,
    options: RankingOptions,
    group: Any = None,
    distributed: bool = True,
) -> tuple[RankTable, int]:
    """Rank every query against a gallery that stays split over processes; returns the table and
    the bytes this process sent while ranking."""
    exchange = DistributedExchange(group) if distributed else Exchange()
    if shard is None:  # this process holds no gallery items
        shard = queries.select(torch.zeros(0, dtype=torch.int64))
    # (the relevance sets are built on the host: both sides' keys read in one copy)
    queries, shard = keys_on_host(queries, shard)
    table = options.rank_sharded(queries, shard, exchange)
    return table, exchange.sent
