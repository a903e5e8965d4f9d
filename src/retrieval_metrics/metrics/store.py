"""A metric's stored sides: the list states that ``update()`` appends batches to and ``compute()``
reads back, one object that every input form and metric kind writes and reads them through.

torchmetrics keeps a metric's states as attributes of the metric (``add_state``; a sync or
``reset()`` replaces them), so the store holds its metric and reaches the states by their names;
it owns what is said about them: which states are lists of batches, how a side's items are
appended (optional tensors always or never, one embedding width), read back as one batch or as
batches (:class:`RowBatches`), deduplicated by sample id once per ranking, and whether a side's
labels, ids and cameras were integers or strings.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from retrieval_metrics.functional.primitives import finite_flag, to_device
from retrieval_metrics.functional.ranking.corpus import as_embeddings
from retrieval_metrics.functional.ranking.items import ITEM_FIELDS, Items
from retrieval_metrics.functional.ranking.labels import key_kind
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.scores import PREDS_REFUSED, TARGET_REFUSED
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.inputs import check_device_holds, num_batches
from retrieval_metrics.metrics.ranking import Ranking, Side

__all__ = ["KIND_KEYS", "SideStore"]

#: the per-item keys whose kind (integers or strings) every update and process of a side must
#: share: an integer and a string that is no integer's text never match
KIND_KEYS = ("labels", "ids", "cameras")

#: the checks of values an update on a device makes without waiting for the answer
#: (:meth:`SideStore.verdict`), by argument: what the argument is refused for. Each has a bit
#: after the key kinds' in ``key_kinds``, set where an update's values failed it.
PUT_OFF = {
    "embeddings": "contains NaN or infinite values",
    "image_embeddings": "contains NaN or infinite values",
    "text_embeddings": "contains NaN or infinite values",
    "positions": "contains NaN or infinite values",
    "preds": PREDS_REFUSED,
    "target": TARGET_REFUSED,
}


class SideStore:
    """The list states of ``metric``: sides of items (``"q"``, ``"g"``, ...), each a state per
    item field (``q_emb``, ``q_ids``, ...), and any other state a form keeps (``t_*``, ``s_*``).

    ``sides``: the sides whose keys' kinds are recorded, and what they hold in messages
    (``{"q": "queries", "g": "gallery items"}``)."""

    def __init__(self, metric: Metric, sides: dict[str, str]) -> None:
        self.metric = metric
        self.sides = dict(sides)
        self.names: list[str] = []
        #: per side and key, whether integers and strings were given (one bit each, reduced
        #: with max across processes)
        self.kind_bits = [
            (side, key, kind) for side in self.sides for key in KIND_KEYS for kind in ("int", "str")
        ]
        # (then one bit per PUT_OFF check: whether an update on a device failed it; in the same
        # state, so that compute() reads them in the same host read, and a sync reduces them
        # with no collective more)
        metric.add_state(
            "key_kinds", torch.zeros(len(self.kind_bits) + len(PUT_OFF), dtype=torch.int64),
            dist_reduce_fx="max",
        )
        self.warned_no_ids = False
        #: the ``key_kinds`` tensor this store last wrote and bits it knows set in it (an update
        #: whose bits are all set writes nothing; a tensor replaced since, by a reset, ``.to``, a
        #: load or a sync, is not this one, and is written again)
        self._kinds_known: tuple[Tensor, frozenset[int]] | None = None
        #: the ranking in progress (see one_ranking), None outside one
        self.ranking: Ranking[Any] | None = None
        self._depth = 0

    # ------------------------------------------------------------------ states by name

    def add(self, name: str) -> None:
        """A list state: one entry per batch, concatenated by a sync."""
        self.metric.add_state(name, [], dist_reduce_fx="cat")
        self.names.append(name)

    def add_side(self, side: str, fields: Sequence[str] = ITEM_FIELDS) -> None:
        """A side's item states, one per field (``emb`` first)."""
        for name in fields:
            self.add(f"{side}_{name}")

    @property
    def device(self) -> torch.device:
        """The device the states live on (the metric's)."""
        return self.metric.device

    def append(self, name: str, value: Tensor) -> None:
        """Append one batch to the state ``name`` (on the metric's device)."""
        state = getattr(self.metric, name)
        value = to_device(value, self.metric.device) if isinstance(value, Tensor) else value
        if isinstance(state, list):
            state.append(value)
        else:  # after a sync in a full-state forward the state is one tensor
            setattr(self.metric, name, torch.cat([state, value]))

    def read(self, name: str) -> Tensor | None:
        """The state ``name`` as one tensor, or None where no batch came."""
        value = getattr(self.metric, name)
        if isinstance(value, list):
            if not value:
                return None
            if len(value) == 1 and value[0].dim() >= 1:
                return value[0]  # one batch: read as it is, not copied by a concatenation
            return dim_zero_cat(value)
        return value

    def batches_by_side(self) -> tuple[int, int]:
        """(batches in every list state but the gallery's, batches in the gallery's) held: what
        :class:`~retrieval_metrics.lightning.SelectOnValidation` reads around each validation
        batch to tell a dataloader that feeds only a corpus (``role="gallery"``) from one that
        feeds queries. Entries, not rows: read twice a batch, it must not walk every batch."""
        other = gallery = 0
        for name in self.names:
            value = getattr(self.metric, name)
            if isinstance(value, list):
                if name.startswith("g_"):
                    gallery += len(value)
                else:
                    other += len(value)
        return other, gallery

    # ------------------------------------------------------------------ sides of items

    def check_width(self, name: str, emb: Tensor) -> None:
        """Every embedding of a metric (any side, any update) has the width of the first one:
        checked at update, where the argument can be named, not at compute()'s concatenation."""
        for state in (n for n in self.names if n.endswith("_emb")):
            value = getattr(self.metric, state)
            earlier = value[0] if isinstance(value, list) and value else value
            if isinstance(earlier, Tensor) and earlier.dim() == 2 and earlier.numel():
                if emb.shape[1] != earlier.shape[1]:
                    raise ValueError(
                        f"`{name}` must have {earlier.shape[1]} columns, the width of the "
                        f"embeddings of the earlier updates, got {emb.shape[1]}"
                    )
                return

    def append_items(self, side: str, items: Items, role: str) -> None:
        """Append one batch of a side, checking that optional tensors come always or never."""
        previous = num_batches(getattr(self.metric, f"{side}_emb"))
        for name in ITEM_FIELDS[1:]:
            if f"{side}_{name}" not in self.names:
                if getattr(items, name) is not None:
                    raise ValueError(f"`{name}` does not apply to {role}")
                continue
            before = num_batches(getattr(self.metric, f"{side}_{name}"))
            if (getattr(items, name) is None and before) or (
                getattr(items, name) is not None and before != previous
            ):
                raise ValueError(f"`{name}` must be given on every update or on none ({role})")
        for name in ITEM_FIELDS:
            value = getattr(items, name)
            if value is not None:
                self.append(f"{side}_{name}", value)

    def side(self, side: str, batched: bool = False) -> Items | None:
        """A side's items as one batch, or None when it has none. A per-item tensor that was
        never given is None, also after a sync has turned its empty list into an empty tensor.

        ``batched``: embeddings held as batches of one dtype and device (one batch, or the
        tensor a sync gathered, included) are handed on as they are (:class:`RowBatches`, which
        the ranking reads a block at a time) instead of joined: a corpus is then never copied,
        neither joined nor normalised."""
        held = getattr(self.metric, f"{side}_emb")
        parts = held if isinstance(held, list) else [held]
        emb: Tensor | RowBatches | None
        if (
            batched
            and parts
            and all(isinstance(b, Tensor) and b.dim() == 2 for b in parts)
            and len({(b.dtype, b.device) for b in parts}) == 1
        ):
            emb = RowBatches(parts)
        else:
            emb = self.read(f"{side}_emb")
        if emb is None:
            return None
        values = {}
        for name in ITEM_FIELDS[1:]:
            value = self.read(f"{side}_{name}") if f"{side}_{name}" in self.names else None
            values[name] = None if value is None or value.numel() == 0 else value
            if values[name] is not None and values[name].shape[0] != emb.shape[0]:
                # each process gives a tensor always or never, so after the sync this is a
                # tensor given on some processes and not on others: refused on every process
                raise ValueError(
                    f"{type(self.metric).__name__}: `{name}` were given on some processes and "
                    f"not on others ({values[name].shape[0]} of the {emb.shape[0]} items of side "
                    f"{side!r} have them); give `{name}` on every process or on none"
                )
        if not isinstance(emb, RowBatches):
            self._keep_joined(side, {"emb": emb, **values})
        return Items(emb=emb, **values)

    def _keep_joined(self, side: str, joined: dict[str, Tensor | None]) -> None:
        """Hold a side's list states as their one concatenation from now on: the batches are
        freed (a corpus is not held twice while it is ranked) and the next read copies nothing.
        Every state of the side at once, so that each still counts as many batches as the
        embeddings (what ``update`` checks)."""
        for name, value in joined.items():
            state = getattr(self.metric, f"{side}_{name}", None)
            if isinstance(state, list) and len(state) > 1 and value is not None:
                setattr(self.metric, f"{side}_{name}", [value])

    @contextmanager
    def one_ranking(self, ranking: Ranking[Any]) -> Iterator[Ranking[Any]]:
        """Within it, each side is deduplicated once (:meth:`deduped`) and held in ``ranking``:
        the chunking decision and the ranking read the same items; let go when the outermost
        one ends."""
        if self._depth == 0:
            self.ranking = ranking
        self._depth += 1
        try:
            yield ranking
        finally:
            self._depth -= 1
            if self._depth == 0:
                ranking.let_go()
                self.ranking = None

    def deduped(self, side: str, what: str, batched: bool = False) -> Items | None:
        """A side's items, one per sample id when ids were given: queries in ascending id order
        (the order of ``per_query()`` whatever the batches and processes), gallery items in the
        order they came, so that a gallery without repeats is ranked as it is held, not copied
        into another order (the values do not depend on the gallery's order). ``what`` names the
        ids in messages; ``batched``: see :meth:`side`. Once per side within
        :meth:`one_ranking` (held in its :class:`Ranking`)."""
        if self.ranking is None:
            return self._deduplicate(side, what, batched)
        held = self.ranking.side(side)
        if held is None:
            held = Side(self._deduplicate(side, what, batched))
            self.ranking.hold(side, held)
        return held.items

    def _deduplicate(self, side: str, what: str, batched: bool) -> Items | None:
        items = self.side(side, batched)
        keep = self._kept_rows(side, items, what)
        return items if keep is None else items.select(keep)

    def deduped_rows(self, side: str, what: str) -> Tensor | None:
        """The rows of a side as held (its batches one after another) that :meth:`deduped`
        keeps, in its order; None: every row, as held."""
        return self._kept_rows(side, self.side(side), what)

    def _kept_rows(self, side: str, items: Items | None, what: str) -> Tensor | None:
        if items is None or len(items) == 0:
            return None
        if items.ids is None:
            self.warn_without_ids("`ids=`")
            return None
        keep = D.dedupe_by_id(
            items.ids, what, embeddings=items.emb, labels=items.labels, cameras=items.cameras,
            positions=items.positions, named=lambda bad: self.ids_shown(side, bad),
        )
        if side == "g":
            if keep.numel() == len(items):
                return None  # no id repeats: every item, in the order held (no sort of keep)
            keep = torch.sort(keep).values
        return keep

    def ids_shown(self, side: str, codes: Tensor) -> str:
        """A few ids of ``side`` as a message shows them: the integers they are; text ids are
        held as their 64-bit codes (the text is not kept), which the message then says."""
        shown = D.ids_as_integers(codes)
        if side in self.sides and self.has_string("ids", [side]):
            return f"{shown}: the 64-bit codes that text ids are held as"
        return shown

    def warn_without_ids(self, argument: str) -> None:
        """On several processes, warn once per metric that samples come without ids: the repeats
        DistributedSampler pads with cannot be told from new samples, and count twice."""
        _, world = D.rank_and_world(self.metric.process_group)
        if world > 1 and not self.warned_no_ids:
            warnings.warn(
                f"{type(self.metric).__name__}: no {argument} were given, so samples that "
                "DistributedSampler repeated to even out the processes cannot be detected and "
                f"are counted twice; pass per-sample ids to `update` ({argument})",
                UserWarning,
                stacklevel=5,
            )
            self.warned_no_ids = True

    # ------------------------------------------------------------------ kinds of keys

    def note_key_kinds(self, side: str, keys: dict[str, Any]) -> None:
        """Record whether each of ``keys`` (labels, ids, cameras as given) holds integers or
        strings (:func:`~retrieval_metrics.functional.ranking.labels.key_kind`)."""
        bits = [
            self.kind_bits.index((side, key, key_kind(value)))
            for key, value in keys.items()
            # an empty batch's keys (ids=[]) have no kind: they agree with either
            if value is not None and not _empty(value)
        ]
        if not bits:
            return
        kinds = self.metric.key_kinds
        known = self._kinds_known
        set_before = known[1] if known is not None and known[0] is kinds else frozenset()
        if set_before.issuperset(bits):
            return  # (each update of a loop gives the same kinds: one write, not one each)
        # (the positions sent to the device: setting entries from Python values copies each
        # value from the host, a sync apiece)
        at = to_device(torch.tensor(bits), kinds.device)
        self.metric.key_kinds = kinds.index_fill(0, at, 1)
        self._kinds_known = (self.metric.key_kinds, set_before | frozenset(bits))

    def scanned(self, name: str, value: Any) -> tuple[Tensor, Tensor | None]:
        """``value`` as the embeddings argument ``name``, checked as ``as_embeddings`` checks
        them, and the :meth:`verdict` of its scan for NaN and infinities."""
        emb = as_embeddings(name, value, scan=False)
        check_device_holds(name, emb, self.device)
        return emb, self.verdict(name, finite_flag(emb))

    def verdict(self, name: str, passed: Tensor) -> Tensor | None:
        """Whether an update's ``name`` passed its :data:`PUT_OFF` check (``passed``, a 0-dim
        bool tensor on the values' device). On the host it is read now (a ValueError naming
        ``name``) and None is returned. On a device it is returned there, not read: an update
        waiting for it would wait for all the work queued on the device before (the model's
        forward pass); :meth:`note_scans` keeps it for compute() once the batch is accepted."""
        if passed.device.type != "cpu":
            return passed
        if not bool(passed):
            raise ValueError(f"`{name}` {PUT_OFF[name]}")
        return None

    def note_scans(self, scans: dict[str, Tensor | None]) -> None:
        """Keep the verdicts of an accepted batch on the device (:meth:`verdict`; a bit set for
        each check failed), read by :meth:`check_kinds`."""
        kinds = None
        for name, passed in scans.items():
            if passed is not None:
                kinds = self.metric.key_kinds.clone() if kinds is None else kinds
                at = len(self.kind_bits) + list(PUT_OFF).index(name)
                kinds.select(0, at).bitwise_or_(~passed)
        if kinds is not None:
            self.metric.key_kinds = kinds

    def has_string(self, key: str, sides: Sequence[str]) -> bool:
        """Whether a batch of any of ``sides`` gave ``key`` as strings (on the synced states:
        any process's); the bits in one host read."""
        seen = self.metric.key_kinds.reshape(-1).tolist()
        return any(seen[self.kind_bits.index((side, key, "str"))] for side in sides)

    def check_kinds(self, seen: Sequence[int] | None = None) -> None:
        """On the synced states: refused, on every process, where an update on a device failed
        a check of its values (:meth:`verdict`: a NaN, a negative target), or where a side's
        labels, ids or cameras were integers in some updates (or processes) and strings in
        others. ``seen``: the ``key_kinds`` bits as read already (else read here, in one host
        read)."""
        if seen is None:
            seen = self.metric.key_kinds.reshape(-1).tolist()
        for (name, problem), bit in zip(PUT_OFF.items(), seen[len(self.kind_bits) :], strict=True):
            if bit:
                raise ValueError(
                    f"`{name}` {problem} (given to an update on a device, on this process or "
                    "another: there, updates leave the check's answer on the device, and "
                    "compute() reads it)"
                )
        for side, what in self.sides.items():
            for key in KIND_KEYS:
                if all(seen[self.kind_bits.index((side, key, k))] for k in ("int", "str")):
                    raise ValueError(
                        f"{type(self.metric).__name__}: `{key}` of the {what} were integers in "
                        "some updates (or processes) and strings in others; an integer and a "
                        'string are one id only when the string is its decimal text ("7" is 7), '
                        f"so such `{key}` never match: give them all as integers or all as strings"
                    )


def _empty(value: Any) -> bool:
    """Whether per-item keys as given hold no entry (an empty list, array or tensor)."""
    if isinstance(value, Tensor):
        return value.numel() == 0
    try:
        return len(value) == 0
    except TypeError:
        return False
