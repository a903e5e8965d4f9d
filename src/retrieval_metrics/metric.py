"""The shared ``Metric`` core: options, states, dedupe, distributed compute and everything beyond
``compute()``, for every metric kind.

:class:`RetrievalMetricBase` is what every metric of the library is: it resolves the options
(``protocol`` included), keeps per-item states of any number of sides (registered, appended,
gathered and deduplicated the same way for every kind), stores rank tables in the flat form
declared once in :mod:`retrieval_metrics.functional.table`, and builds ``per_query``, ``summary``,
``confidence_interval`` and :func:`retrieval_metrics.compare` on one method,
:meth:`~RetrievalMetricBase.rank_tables` (``plot`` too, from the front-end classes'
:class:`retrieval_metrics.plot.Plotted`: the core imports no plotting). A kind only says how its
states become rank tables.

:class:`RetrievalMetric` is the one-direction kind, with every input form:

* embeddings, same source: ``update(embeddings, labels)``;
* separate sets: ``update(q, q_labels, role="query")`` and ``update(g, g_labels, role="gallery")``,
  or a fixed gallery given once with :meth:`RetrievalMetric.set_gallery`, after which each query
  batch is ranked at once and only its per-query results are kept;
* ranked lists: ``update(ranked_ids=[...], relevant_ids=[...])`` (ids int or str; a dict of
  id -> grade for graded relevance);
* torchmetrics' form: ``update(preds=scores, target=relevance, indexes=query_index)``;
* precomputed ranks: ``update(relevant_ranks=[[1, 4], [2], ...])`` (1-based ranks of each query's
  relevant items; ``num_relevant=`` may add relevant items that were never retrieved).

Embeddings and per-item values may be torch tensors or numpy arrays. Labels, ids and cameras are
integers or strings; floats only when they hold whole numbers their dtype stores exactly.

Optional per-item tensors on embedding updates: ``ids=`` (sample ids: duplicates are dropped,
self-exclusion uses them), ``cameras=`` (re-id), ``positions=`` (``relevance="radius"``).

``compute()``: states are gathered across processes (any number of rows, updates, or none at all
per rank), duplicate samples dropped by id, each process ranks its share of the queries against the
whole gallery, and the per-query rank tables are gathered, so every process returns the same value
as a single process would (:mod:`retrieval_metrics.distributed`).
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from retrieval_metrics import distributed as D
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.checks import all_finite
from retrieval_metrics.functional.chunks import PAIR_BYTES, label_pair_counts, query_chunks
from retrieval_metrics.functional.items import ITEM_FIELDS, Items, RankingOptions
from retrieval_metrics.functional.measures import stats
from retrieval_metrics.functional.measures.ties import TIES
from retrieval_metrics.functional.ranking import (
    DEFAULT_MEMORY_BUDGET,
    SIMILARITIES,
    check_embeddings,
    nonpositive_missed,
    positive_counts,
    rank_checked_scores,
    rank_lists,
)
from retrieval_metrics.functional.ranking.labels import (
    canonical_id,
    whole_float_labels,
    whole_float_value,
)
from retrieval_metrics.functional.table import (
    PRESENT,
    TABLE_PARTS,
    UNBOUNDED,
    RankTable,
    table_from_parts,
    table_parts,
)
from retrieval_metrics.protocols import NOT_GIVEN, NotGiven, apply_protocol

__all__ = ["RetrievalMetric", "RetrievalMetricBase", "as_embeddings", "label_codes", "score_copy"]

RELEVANCE = ("label", "radius")
NONPOSITIVE = ("hit", "miss")
ALL_SKIPPED = ("nan", "zero")
# measures for which nonpositive="miss" makes a relevant item scored <= 0 a miss (torchmetrics)
_MISS_BASES = ("map", "mrr", "precision", "recall")
DUPLICATES = ("first", "error")
ROLES = (None, "query", "gallery")

# Input forms, as bits of the `form` state (reduced with max, so every process agrees).
_SAME_SOURCE, _QUERY, _GALLERY, _TABLE, _SCORES = range(5)
_FORM_NAMES = (
    "same-source embeddings",
    "query embeddings",
    "gallery embeddings",
    "ranked lists / precomputed ranks / a fixed gallery",
    "preds/target/indexes",
)


def _hash_label(value: Any) -> int:
    digest = hashlib.blake2b(repr((type(value).__name__, value)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def label_codes(labels: Any, name: str) -> Tensor:
    """int64 codes that compare like the labels: integers as they are, strings by a 64-bit hash,
    except a string that is the decimal text of an integer, which is that integer: labels and ids
    compare as text (``7`` and ``"7"`` are one label; see ``functional.relevance.canonical_id``).

    Floats are taken when they hold whole numbers their type stores exactly (below 2**24 for
    float32, 2**53 for float64), the rule the command line applies to the arrays of its files;
    other floats are refused, since labels are compared exactly. The hash is the same in every
    process, so string labels survive a distributed gather.
    """
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "iubf":
        labels = torch.from_numpy(np.ascontiguousarray(labels))
    if isinstance(labels, Tensor):
        if labels.is_complex():
            raise ValueError(f"`{name}` must hold integers or strings, got a {labels.dtype} tensor")
        if labels.is_floating_point():
            return whole_float_labels(labels.reshape(-1), name)
        return labels.reshape(-1).to(torch.int64)
    if isinstance(labels, np.ndarray):
        labels = labels.tolist()
    values = list(labels)
    codes = []
    for v in values:
        if isinstance(v, bool):
            raise ValueError(f"`{name}` must hold integers or strings, got {v!r}")
        if isinstance(v, (float, np.floating)):
            v = whole_float_value(v, name)
        # compared as text: the string "7" is the int 7 (canonical_id), in every update
        v = canonical_id(v)
        codes.append(v if isinstance(v, int) else _hash_label(v))
    return torch.tensor(codes, dtype=torch.int64)


def as_embeddings(name: str, value: Any) -> Tensor:
    """Embeddings as a tensor: a numpy array is taken as torch.from_numpy would (no copy)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise ValueError(f"`{name}` must hold numbers, got a numpy array of {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))
    elif not isinstance(value, Tensor):
        raise ValueError(
            f"`{name}` must be a torch.Tensor or a numpy array, got {type(value).__name__}"
        )
    return check_embeddings(name, value)


class RetrievalMetricBase(Metric):
    """What every retrieval metric shares: options, states, rank tables and what is built on them.

    Options left out take the library default shown here, or the value that ``protocol`` fixes;
    an option you pass must agree with the protocol.

    Args:
        similarity: "cosine" (default), "dot" or "euclidean".
        ties: "expected" (default), "optimistic" or "pessimistic": how equal scores are ordered
            (see the definitions page of the documentation).
        empty_queries: "skip" (default), "zero" or "error" for queries with no relevant item.
        percent: report fractions as percentages.
        relevance: "label" (default) or "radius" (with ``positions=`` and ``radius``).
        radius: metres for ``relevance="radius"``, inclusive (25 by default).
        ignore_label: gallery items with this label are removed from every ranking.
        average: "macro" (default), "micro" or "class". "micro" applies to recall, precision
            and r_precision; the other measures are one score per query and stay macro. A name
            may fix its own ("recall@10/micro").
        memory_budget: bytes of scratch memory the ranking may use. With more relevant
            (query, item) pairs than it holds (few classes of thousands), ``compute()``
            ranks a chunk of queries at a time and keeps only per-query values.
        protocol: a field's official evaluation by name ("vsepp", "pml", "torchreid",
            "market1501_official", "netvlad", "msls", "ann_benchmarks", "trec_eval",
            "torchmetrics"; see :mod:`retrieval_metrics.protocols`); it sets the options it
            fixes.
        ap: average precision "step" (default) or "trapezoid" (official Market-1501 code).
        divisor: AP@K divided by "relevant" m_q (default), "min" min(m_q, K) or "retrieved".
        gain: NDCG gain "exponential" 2^g - 1 (default) or "linear" g.
        median: median rank "vsepp" floor(median(r - 1)) + 1 (default) or "plain".
        nonpositive: "hit" (default) or "miss": with "miss", a relevant item scored <= 0 is
            never a hit of map, mrr, precision and recall (it still counts in m_q), and map
            without a cut-off divides by the relevant items scored > 0 (torchmetrics' rules; the
            preds/target/indexes form only).
        all_skipped: the value when ``empty_queries="skip"`` leaves no query: "nan" (default)
            or "zero" (torchmetrics).
        kwargs: passed to ``torchmetrics.Metric`` (``sync_on_compute``, ``process_group``, ...).

    A kind implements :meth:`metric_names`, ``_build_tables`` (its synced states -> rank tables)
    and :meth:`sample_ids`.
    """

    # TorchScript skips these when a metric is scripted: inferring a type for the update
    # signature torchmetrics keeps (string annotations here) costs a scripting ~0.3 s
    __jit_ignored_attributes__: ClassVar[list[str]] = [
        *Metric.__jit_ignored_attributes__, "_update_signature"
    ]
    is_differentiable = False
    higher_is_better: bool | None = True
    full_state_update = False
    plot_lower_bound: float | None = 0.0
    plot_upper_bound: float | None = 1.0

    def __init__(
        self,
        *,
        similarity: str | None = None,
        ties: str | None = None,
        empty_queries: str | None = None,
        percent: bool | None = None,
        relevance: str | None = None,
        radius: float | None = None,
        ignore_label: int | NotGiven | None = NOT_GIVEN,
        average: str | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        ap: str | None = None,
        divisor: str | None = None,
        gain: str | None = None,
        median: str | None = None,
        nonpositive: str | None = None,
        all_skipped: str | None = None,
        protocol: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        opts = apply_protocol(protocol, {
            "similarity": similarity, "ties": ties, "empty_queries": empty_queries,
            "percent": percent, "relevance": relevance, "radius": radius,
            "ignore_label": ignore_label, "average": average, "ap": ap, "divisor": divisor,
            "gain": gain, "median": median, "nonpositive": nonpositive,
            "all_skipped": all_skipped,
        })
        self.protocol = protocol
        _choice("similarity", opts["similarity"], SIMILARITIES)
        _choice("ties", opts["ties"], TIES)
        _choice("empty_queries", opts["empty_queries"], M.EMPTY_QUERIES)
        _choice("relevance", opts["relevance"], RELEVANCE)
        _choice("average", opts["average"], M.AVERAGES)
        _choice("ap", opts["ap"], M.AP_KINDS)
        _choice("divisor", opts["divisor"], M.AP_DIVISORS)
        _choice("gain", opts["gain"], ("exponential", "linear"))
        _choice("median", opts["median"], M.MEDIAN_CONVENTIONS)
        _choice("nonpositive", opts["nonpositive"], NONPOSITIVE)
        _choice("all_skipped", opts["all_skipped"], ALL_SKIPPED)
        percent, radius, ignore_label = opts["percent"], opts["radius"], opts["ignore_label"]
        if not isinstance(percent, bool):
            raise ValueError(f"`percent` must be a bool, got {percent!r}")
        if not (isinstance(radius, (int, float)) and radius >= 0):
            raise ValueError(f"`radius` must be a non-negative number, got {radius!r}")
        if not isinstance(memory_budget, int) or memory_budget < 2**16:
            raise ValueError(
                f"`memory_budget` must be an int >= 65536 bytes, got {memory_budget!r}"
            )
        if ignore_label is not None and not isinstance(ignore_label, int):
            raise ValueError(f"`ignore_label` must be an int or None, got {ignore_label!r}")
        self.similarity = opts["similarity"]
        self.ties = opts["ties"]
        self.empty_queries = opts["empty_queries"]
        self.percent = percent
        self.relevance = opts["relevance"]
        self.radius = float(radius)
        self.ignore_label = ignore_label
        self.average = opts["average"]
        self.memory_budget = memory_budget
        self.ap = opts["ap"]
        self.divisor = opts["divisor"]
        self.gain = opts["gain"]
        self.median = opts["median"]
        self.nonpositive = opts["nonpositive"]
        self.all_skipped = opts["all_skipped"]
        # the table with relevant items scored <= 0 made misses (nonpositive="miss"), built
        # with the rank tables
        self._miss_table: RankTable | None = None
        self.bytes_exchanged = 0
        self._sync_bytes = 0
        # The ranking of the current states, shared by compute(), per_query(), summary(),
        # rank_tables(), compare() and plot() until update() or reset() changes the states: the
        # whole rank tables, or (ranked a chunk of queries at a time) every process's per-query
        # parts and query fields.
        self._tables: dict[str, RankTable] | None = None
        self._chunk_parts: tuple[M.QueryParts, RankTable] | None = None
        self._warned_no_ids = False
        self._warned_forward = False
        self._warned_cutoffs = False

    # ------------------------------------------------------------------ what a kind provides

    def metric_names(self) -> list[str]:
        """Named measures this metric reports (see ``functional.parse_metric``)."""
        raise NotImplementedError

    def _build_tables(self) -> dict[str, RankTable]:
        """Rank tables from the (synced) states, keyed by the prefix of their measures' names
        ("" for one direction, "i2t/" and "t2i/" for image-text)."""
        raise NotImplementedError

    def sample_ids(self) -> dict[str, Tensor]:
        """The sample ids of the queries this process has received since the last reset, by kind
        of sample ("query"; "image" and "text" for image-text). Samples given without ids are
        not listed. :class:`~retrieval_metrics.lightning.SelectOnValidation` compares these
        between validation and test."""
        return {}

    def _local_states(self) -> set[str]:
        """States that stay on their process when syncing (a sharded gallery)."""
        return set()

    def _skip_reason(self) -> str:
        """Why a query of this kind can have no relevant item, for the warning of compute()."""
        return "nothing in the gallery is relevant to it"

    # ------------------------------------------------------------------ states

    def _add_item_states(self, side: str, names: Sequence[str] = ITEM_FIELDS) -> None:
        for name in names:
            self.add_state(f"{side}_{name}", [], dist_reduce_fx="cat")

    def _check_width(self, name: str, emb: Tensor) -> None:
        """Every embedding of a metric (any side, any update) has the width of the first one:
        checked at update, where the argument can be named, not at compute()'s concatenation."""
        for state in (n for n in self._defaults if n.endswith("_emb")):
            value = getattr(self, state)
            earlier = value[0] if isinstance(value, list) and value else value
            if isinstance(earlier, Tensor) and earlier.dim() == 2 and earlier.numel():
                if emb.shape[1] != earlier.shape[1]:
                    raise ValueError(
                        f"`{name}` must have {earlier.shape[1]} columns, the width of the "
                        f"embeddings of the earlier updates, got {emb.shape[1]}"
                    )
                return

    def _append_items(self, side: str, items: Items, role: str) -> None:
        """Append one batch of a side, checking that optional tensors come always or never."""
        previous = _num_batches(getattr(self, f"{side}_emb"))
        for name in ITEM_FIELDS[1:]:
            if not hasattr(self, f"{side}_{name}"):
                if getattr(items, name) is not None:
                    raise ValueError(f"`{name}` does not apply to {role}")
                continue
            before = _num_batches(getattr(self, f"{side}_{name}"))
            if (getattr(items, name) is None and before) or (
                getattr(items, name) is not None and before != previous
            ):
                raise ValueError(f"`{name}` must be given on every update or on none ({role})")
        for name in ITEM_FIELDS:
            value = getattr(items, name)
            if value is not None:
                self._append_state(f"{side}_{name}", value)

    def _side(self, side: str) -> Items | None:
        """A side's items as one batch, or None when it has none. A per-item tensor that was
        never given is None, also after a sync has turned its empty list into an empty tensor."""
        emb = self._state(f"{side}_emb")
        if emb is None:
            return None
        values = {}
        for name in ITEM_FIELDS[1:]:
            value = self._state(f"{side}_{name}") if hasattr(self, f"{side}_{name}") else None
            values[name] = None if value is None or value.numel() == 0 else value
        return Items(emb=emb, **values)

    def _deduped(self, side: str, what: str) -> Items | None:
        """A side's items, one per sample id (ascending ids) when ids were given."""
        items = self._side(side)
        if items is None or len(items) == 0:
            return items
        if items.ids is None:
            self._warn_without_ids("`ids=`")
            return items
        keep = D.dedupe_by_id(
            items.ids,
            what,
            embeddings=items.emb,
            labels=items.labels,
            cameras=items.cameras,
            positions=items.positions,
        )
        return items.select(keep)

    def _warn_without_ids(self, argument: str) -> None:
        """On several processes, warn once per metric that samples come without ids: the repeats
        DistributedSampler pads with cannot be told from new samples, and count twice."""
        _, world = D.rank_and_world(self.process_group)
        if world > 1 and not self._warned_no_ids:
            warnings.warn(
                f"{type(self).__name__}: no {argument} were given, so samples that "
                "DistributedSampler repeated to even out the processes cannot be detected and "
                f"are counted twice; pass per-sample ids to `update` ({argument})",
                UserWarning,
                stacklevel=5,
            )
            self._warned_no_ids = True

    def _append_state(self, name: str, value: Tensor) -> None:
        state = getattr(self, name)
        value = value.to(self.device) if isinstance(value, Tensor) else value
        if isinstance(state, list):
            state.append(value)
        else:  # after a sync in a full-state forward the state is one tensor
            setattr(self, name, torch.cat([state, value]))

    def _state(self, name: str) -> Tensor | None:
        value = getattr(self, name)
        if isinstance(value, list):
            if not value:
                return None
            if len(value) == 1 and value[0].dim() == 1:
                return value[0]  # one batch: read as it is, not copied by a concatenation
            return dim_zero_cat(value)
        return value

    def _distributed(self) -> bool:
        return bool(self._to_sync and self.distributed_available_fn())

    def _several_processes(self) -> bool:
        return self._distributed() and D.rank_and_world(self.process_group)[1] > 1

    def _sync_dist(self, dist_sync_fn: Any = None, process_group: Any = None) -> None:
        """Gather every state with :func:`retrieval_metrics.distributed.sync_states` (uneven
        sizes, empty processes); states reduced otherwise (the input form) are reduced after."""
        group = process_group or self.process_group
        local = self._local_states()
        synced = {name: fx for name, fx in self._reductions.items() if name not in local}
        # One gather for every state: a reduced state travels as one row per process.
        states = {
            name: getattr(self, name) if fx is dim_zero_cat else getattr(self, name)[None]
            for name, fx in synced.items()
        }
        gathered, self._sync_bytes = D.sync_states(states, group)
        for name, value in gathered.items():
            fx = synced[name]
            setattr(self, name, value if fx is dim_zero_cat else fx(value))

    # ------------------------------------------------------------------ rank tables

    def rank_tables(self) -> dict[str, RankTable]:
        """Every rank table of what all processes have seen so far, keyed by the prefix of the
        names of its measures ("" for one direction; "i2t/" and "t2i/" for image-text). Queries in
        a stable order (by sample id when ids were given)."""
        if self._tables is None:
            self._tables = self._on_synced_states(self._build_tables)
        return self._tables

    def _forget_ranking(self) -> None:
        """The states changed: the ranking shared since the last change no longer holds."""
        self._tables = None
        self._chunk_parts = None

    def _on_synced_states(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` with the states of every process (synced for the call unless they are)."""
        if self._is_synced:  # inside compute(): the states already hold every process's rows
            return fn()
        with self.sync_context(
            dist_sync_fn=self.dist_sync_fn,
            should_sync=self._to_sync,
            should_unsync=self._should_unsync,
        ):
            return fn()

    def rank_table(self) -> RankTable:
        """The rank table, for a metric that ranks in one direction (see :meth:`rank_tables`)."""
        tables = self.rank_tables()
        if len(tables) != 1:
            raise ValueError(
                f"{type(self).__name__} ranks in {len(tables)} directions "
                f"({', '.join(k.rstrip('/') for k in tables)}): use rank_tables()[prefix]"
            )
        return next(iter(tables.values()))

    def _measure_options(self) -> dict[str, Any]:
        """The options every measure of this metric is computed with."""
        return {
            "ties": self.ties, "empty_queries": self.empty_queries, "average": self.average,
            "percent": self.percent, "ap": self.ap, "divisor": self.divisor, "gain": self.gain,
            "median": self.median,
        }

    def per_query_options(self) -> dict[str, Any]:
        """The options this metric's per-query values are computed with (tie rule, AP kind,
        AP@K divisor, NDCG gain), as ``functional.per_query_values`` takes them."""
        return {"ties": self.ties, "ap": self.ap, "divisor": self.divisor, "gain": self.gain}

    def reset(self) -> None:
        super().reset()
        self._forget_ranking()

    def _warn_if_all_skipped(
        self, num_relevant: Tensor | None = None, stacklevel: int = 3
    ) -> None:
        """Warn (once per compute) when ``empty_queries="skip"`` left no query to count, the case
        where every value is NaN with nothing else to say why. ``num_relevant``: every query's
        m_q, when the tables were not kept."""
        if self.empty_queries != "skip" or self.all_skipped == "zero":
            return
        if num_relevant is None:
            counts = [t.num_relevant for t in self.rank_tables().values()]
        else:
            counts = [num_relevant]
        total = sum(c.numel() for c in counts)
        if total == 0 or any(bool((c > 0).any()) for c in counts):
            return
        warnings.warn(
            f"{type(self).__name__}: all {total} queries were skipped because each has no "
            f"relevant item ({self._skip_reason()}), so every "
            'value is NaN; check the labels, or pass empty_queries="zero" to score such queries '
            'as 0 (or "error" to raise)',
            UserWarning,
            stacklevel=stacklevel,
        )

    def _warn_if_cutoffs_reach_gallery(self, fields: dict[str, RankTable]) -> None:
        """Warn once per metric when a cut-off K is at or above the whole gallery: every
        answerable query then finds its relevant items within K, so hit rate and recall at K
        are 1 by construction (a gallery of 3 images reports R@5 = 100). ``fields``: the rank
        tables (or their query fields) by the prefix of their measures' names."""
        if self._warned_cutoffs:
            return
        found = []
        for key, table in fields.items():
            # ranked lists (depth unbounded) come from an unknown collection: a list no longer
            # than K is no whole gallery
            sizes = table.gallery_size[table.depth != UNBOUNDED]
            if sizes.numel() == 0:
                continue
            largest = int(sizes.max())
            for name in self.metric_names():
                k = M.parse_metric(name).k
                if isinstance(k, int) and k >= largest:
                    found.append(f"{key}{name} (gallery of {largest})")
        if found:
            warnings.warn(
                f"{type(self).__name__}: the cut-off reaches the whole gallery for "
                f"{', '.join(found)}: every query finds what is relevant to it within K, so hit "
                "rate and recall there are 1 by construction (precision and NDCG are computed "
                "over the whole gallery); use a larger gallery or a smaller K",
                UserWarning,
                stacklevel=4,
            )
            self._warned_cutoffs = True

    # Unused by TorchScript, like torchmetrics' own forward: its *args/**kwargs cannot be
    # compiled, and without the mark torch.jit.script(metric) fails.
    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """torchmetrics' ``forward``: add the batch to the state and return the value of the batch
        alone. A retrieval score of one batch ranks each query against that batch only, so it is
        almost never what is meant: this warns once per metric object."""
        if not self._warned_forward:
            warnings.warn(
                f"{type(self).__name__} was called on a batch (forward), which returns the "
                "retrieval score of this batch alone: each query ranked against the few items of "
                "its own batch, not the whole gallery. To log the epoch's value, call "
                "`metric.update(...)` in the step and log the metric object (self.log(name, "
                "metric)) or `metric.compute()` at the end of the epoch",
                UserWarning,
                stacklevel=2,
            )
            self._warned_forward = True
        out = super().forward(*args, **kwargs)
        # the tables were built from the batch alone; they must not stand for the accumulation
        self._forget_ranking()
        return out

    # ------------------------------------------------------------------ beyond compute()

    def per_query(self) -> dict[str, Tensor]:
        """Each query's value of every reported measure (NaN for skipped queries), queries in a
        stable order (by sample id when ids were given, else the order they arrived in); keys
        carry the direction for image-text ("i2t/hit_rate@1")."""
        out = {}
        for key, table in self.rank_tables().items():
            for name in self.metric_names():
                spec = M.parse_metric(name)
                out[f"{key}{spec.name}"] = self._per_query_values(table, spec).to(self.device)
        return out

    def _per_query_values(self, table: RankTable, spec: M.MetricSpec) -> Tensor:
        """One measure's per-query values, under ``nonpositive``."""
        if self.nonpositive == "miss" and spec.base in _MISS_BASES:
            miss = self._nonpositive_table(table)
            if spec.base == "map" and spec.k is None:
                # torchmetrics' AP over the whole list divides by the relevant items scored > 0
                return M.average_precision_per_query(
                    miss, miss.gallery_size, self.ties, divisor="retrieved"
                )
            return M.per_query_values(miss, spec, **self.per_query_options())
        return M.per_query_values(table, spec, **self.per_query_options())

    def _nonpositive_table(self, table: RankTable) -> RankTable:
        if self._miss_table is None or self._miss_table.num_queries != table.num_queries:
            raise ValueError(
                'nonpositive="miss" (protocol="torchmetrics") needs scores: it applies to '
                "update(preds=, target=, indexes=) only"
            )
        return self._miss_table

    def refuse_nonpositive(self, what: str) -> None:
        """Raise for ``what`` (a method reading whole rank tables) under nonpositive="miss"."""
        if self.nonpositive == "miss":
            raise ValueError(
                f'{what} is not available with nonpositive="miss" (protocol="torchmetrics"); '
                "use compute() and per_query()"
            )

    def summary(
        self, level: float = 0.95, num_bootstrap: int = 1000, seed: int = 0
    ) -> stats.Summary:
        """Values with queries counted and skipped, gallery size, chance level and a confidence
        interval (seeded percentile bootstrap over queries). Prints as a table."""
        self.refuse_nonpositive("summary()")
        options = dict(
            self._measure_options(), level=level, num_bootstrap=num_bootstrap, seed=seed
        )
        prefix = getattr(self, "prefix", "")
        rows = []
        for key, part in self._summaries(options):
            rows += [{**row, "name": f"{prefix}{key}{row['name']}"} for row in part.rows]
        return stats.Summary(rows=rows, level=level)

    def _summaries(self, options: dict[str, Any]) -> list[tuple[str, stats.Summary]]:
        """The summary of each rank table, by the prefix of its measures' names."""
        return [
            (key, stats.summarize(table, self.metric_names(), **options))
            for key, table in self.rank_tables().items()
        ]

    def confidence_interval(
        self, level: float = 0.95, num_bootstrap: int = 1000, seed: int = 0
    ) -> dict[str, tuple[float, float]]:
        """An interval per reported value: Wilson's for hit rates without ties to average, else
        a seeded percentile bootstrap over queries."""
        summary = self.summary(level=level, num_bootstrap=num_bootstrap, seed=seed)
        return {row["name"]: row["interval"] for row in summary.rows}


class RetrievalMetric(RetrievalMetricBase):
    """Base of the one-direction metrics: accumulates any input form, ranks once, reports named
    measures.

    Args:
        gallery_sharded: for galleries too large for one device: gallery items given with
            ``role="gallery"`` stay on the process that received them, the queries are gathered,
            each process ranks every query against its shard, and only relevant scores and counts
            cross between processes. Same values; self-exclusion needs ``ids=``; the shards must
            not repeat items across processes.
        duplicates: what a ranked list (``ranked_ids=``) that returns an id more than once gets:
            "first" (default) counts the id once, at its first position, each repeat keeping its
            slot as a non-relevant item (a retriever that returns one document twice has wasted
            a slot of its top K); "error" raises. The command line and
            :func:`retrieval_metrics.formats.read_ranked_lists` take the same option.
        kwargs: the options of :class:`RetrievalMetricBase` and of ``torchmetrics.Metric``.
    """

    def __init__(
        self, *, gallery_sharded: bool = False, duplicates: str = "first", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(gallery_sharded, bool):
            raise ValueError(f"`gallery_sharded` must be a bool, got {gallery_sharded!r}")
        _choice("duplicates", duplicates, DUPLICATES)
        self.gallery_sharded = gallery_sharded
        self.duplicates = duplicates
        self.add_state("form", torch.zeros(5, dtype=torch.int64), dist_reduce_fx="max")
        self._add_item_states("q")
        self._add_item_states("g")
        for part in TABLE_PARTS:
            self.add_state(f"t_{part.name}", [], dist_reduce_fx="cat")
        self.add_state(f"t_{PRESENT}", [], dist_reduce_fx="cat")
        for name in ("preds", "target", "indexes"):
            self.add_state(f"s_{name}", [], dist_reduce_fx="cat")
        self._gallery: Items | None = None

    def _format(self, values: dict[str, Tensor]) -> Tensor | dict[str, Tensor]:
        """Turn the named values into what ``compute()`` returns (a 0-d tensor for one value)."""
        if len(values) == 1:
            return next(iter(values.values()))
        return values

    def _skip_reason(self) -> str:
        form = self.form
        if int(form[_TABLE]) and self._gallery is None:  # ranked lists or precomputed ranks
            return "its `relevant_ids` are empty, or its `num_relevant` is 0"
        if int(form[_SCORES]):
            return "no `target` of the query is > 0"
        if self.relevance == "radius":
            return f"no gallery item lies within radius={self.radius:g} m of it"
        return "no other gallery item has its label, e.g. when every label appears once"

    def _local_states(self) -> set[str]:
        if not self.gallery_sharded:
            return set()
        return {f"g_{name}" for name in ITEM_FIELDS}

    # ------------------------------------------------------------------ inputs

    def set_gallery(
        self,
        embeddings: Tensor,
        labels: Any = None,
        *,
        ids: Any = None,
        cameras: Any = None,
        positions: Any = None,
    ) -> None:
        """Fix the gallery once: each later ``update(..., role="query")`` is ranked against it
        at once and only per-query results are kept (the query embeddings are not stored)."""
        emb = as_embeddings("embeddings", embeddings)
        if emb.shape[0] == 0:
            raise ValueError("the gallery is empty: `set_gallery` got 0 rows of `embeddings`")
        self._gallery = replace(
            self._item_tensors(emb, labels, ids, cameras, positions), emb=score_copy(emb)
        )
        self._forget_ranking()

    def update(  # type: ignore[override]
        self,
        embeddings: Tensor | None = None,
        labels: Any = None,
        *,
        role: str | None = None,
        ids: Any = None,
        cameras: Any = None,
        positions: Any = None,
        ranked_ids: Sequence[Sequence[Any]] | None = None,
        relevant_ids: Sequence[Any] | None = None,
        preds: Tensor | None = None,
        target: Tensor | None = None,
        indexes: Tensor | None = None,
        relevant_ranks: Sequence[Sequence[int]] | None = None,
        num_relevant: Sequence[int] | Tensor | None = None,
    ) -> None:
        """Add one batch, in any one of the input forms (see the module docstring)."""
        self._forget_ranking()
        if indexes is not None and embeddings is not None and preds is None and target is None:
            # torchmetrics' call shape, metric(preds, target, indexes=indexes): `indexes` belongs
            # to the scores form only, so the positional arguments are its preds and target
            unused = {"role": role, "ids": ids, "cameras": cameras, "positions": positions}
            extra = [k for k, v in unused.items() if v is not None]
            if extra:
                raise ValueError(
                    f"`indexes` is torchmetrics' form (preds, target, indexes), which takes no "
                    f"{extra}; for embeddings leave `indexes` out"
                )
            preds, target, embeddings, labels = embeddings, labels, None, None
        given = {
            "embeddings": embeddings is not None,
            "ranked_ids": ranked_ids is not None or relevant_ids is not None,
            "preds": preds is not None or target is not None or indexes is not None,
            "relevant_ranks": relevant_ranks is not None,
        }
        if sum(given.values()) != 1:
            raise ValueError(
                "`update` takes exactly one input form: `embeddings` (+ labels), `ranked_ids` + "
                "`relevant_ids`, `preds` + `target` + `indexes`, or `relevant_ranks`; got "
                f"{[k for k, v in given.items() if v] or 'none'}"
            )
        if role not in ROLES:
            raise ValueError(f'`role` must be None, "query" or "gallery", got {role!r}')
        if given["embeddings"]:
            self._update_embeddings(embeddings, labels, role, ids, cameras, positions)
        elif given["ranked_ids"]:
            if ranked_ids is None or relevant_ids is None:
                raise ValueError("ranked lists need both `ranked_ids` and `relevant_ids`")
            self._append_table(
                rank_lists(ranked_ids, relevant_ids, duplicates=self.duplicates), ids
            )
        elif given["preds"]:
            self._update_scores(preds, target, indexes)
        else:
            self._append_table(_table_from_ranks(relevant_ranks, num_relevant), ids)

    def _item_tensors(self, emb, labels, ids, cameras, positions) -> Items:
        n = emb.shape[0]
        out: dict[str, Tensor | None] = {
            "labels": None,
            "ids": None,
            "cameras": None,
            "positions": None,
        }
        if labels is not None:
            out["labels"] = _per_item("labels", label_codes(labels, "labels"), n)
        if ids is not None:
            out["ids"] = _per_item("ids", label_codes(ids, "ids"), n)
        if cameras is not None:
            out["cameras"] = _per_item("cameras", label_codes(cameras, "cameras"), n)
        if positions is not None:
            if isinstance(positions, Tensor) and positions.dtype in (
                torch.float32, torch.float16, torch.bfloat16
            ):
                warnings.warn(
                    f"`positions` arrived as {positions.dtype}, which keeps about 7 significant "
                    "digits (UTM eastings to a few centimetres, enough to move an item across "
                    "the radius); pass float64 positions",
                    UserWarning,
                    stacklevel=4,
                )
            pos = torch.as_tensor(positions, dtype=torch.float64)
            if pos.dim() != 2 or pos.shape[0] != n:
                raise ValueError(f"`positions` must have shape ({n}, P), got {tuple(pos.shape)}")
            if not all_finite(pos):
                raise ValueError("`positions` contains NaN or infinite values")
            out["positions"] = pos
        if self.relevance == "label" and out["labels"] is None:
            raise ValueError('`labels` are needed with relevance="label"')
        if self.relevance == "radius" and out["positions"] is None:
            raise ValueError('`positions` are needed with relevance="radius"')
        return Items(emb=emb, **out)

    def _update_embeddings(self, embeddings, labels, role, ids, cameras, positions) -> None:
        emb = as_embeddings("embeddings", embeddings)
        items = self._item_tensors(emb, labels, ids, cameras, positions)
        if self._gallery is not None:
            if role == "gallery":
                raise ValueError("a fixed gallery was set with `set_gallery`; update queries only")
            if emb.shape[1] != self._gallery.emb.shape[1]:
                raise ValueError(
                    f"`embeddings` must have {self._gallery.emb.shape[1]} columns, the width of "
                    f"the gallery given to `set_gallery`, got {emb.shape[1]}"
                )
            self._append_table(self._ranking_options().rank(items, self._gallery), items.ids)
            return
        form = _SAME_SOURCE if role is None else (_QUERY if role == "query" else _GALLERY)
        self._check_width("embeddings", emb)
        self._mark(form)
        side = "g" if role == "gallery" else "q"
        self._append_items(side, replace(items, emb=score_copy(emb)), f"role={role!r}")

    def _update_scores(self, preds, target, indexes) -> None:
        if preds is None or target is None or indexes is None:
            raise ValueError("torchmetrics' form needs `preds`, `target` and `indexes` together")
        preds, target, indexes = (torch.as_tensor(x) for x in (preds, target, indexes))
        if not (preds.shape == target.shape == indexes.shape):
            raise ValueError(
                "`preds`, `target` and `indexes` must have the same shape, got "
                f"{tuple(preds.shape)}, {tuple(target.shape)} and {tuple(indexes.shape)}"
            )
        if indexes.is_floating_point():
            raise ValueError(f"`indexes` must hold integers, got {indexes.dtype}")
        # Scores keep their dtype (widening is exact, so ties stay ties): integers and half
        # precision are stored in the smallest dtype that compares them exactly.
        if not preds.is_floating_point():
            preds = preds.to(torch.float64)
        elif preds.dtype in (torch.float16, torch.bfloat16):
            preds = preds.to(torch.float32)
        if not all_finite(preds):
            raise ValueError("`preds` contains NaN or infinite values")
        if target.is_complex() or (target.numel() and bool((target < 0).any())):
            raise ValueError("`target` must be non-negative (0 = not relevant, > 0 = grade)")
        self._mark(_SCORES)
        self._append_state("s_preds", preds.reshape(-1))
        # the target's dtype says binary (bool, integers 0/1) or graded (float), as in rank_scores
        self._append_state("s_target", target.reshape(-1))
        self._append_state("s_indexes", indexes.reshape(-1).to(torch.int64))

    def _append_table(self, table: RankTable, query_ids: Any) -> None:
        self._mark(_TABLE)
        if query_ids is not None:
            qid = _per_item("ids", label_codes(query_ids, "ids"), table.num_queries)
            table = replace(table, query_id=qid)
        parts = table_parts(table)
        before = self._state(f"t_{PRESENT}")
        if before is not None and before.numel() and table.num_queries:
            bit = 1 << [p.name for p in TABLE_PARTS if p.optional].index("query_id")
            if bool(before[0] & bit) != (query_ids is not None):
                raise ValueError("`ids` must be given on every update or on none")
        for name, value in parts.items():
            self._append_state(f"t_{name}", value)

    def _mark(self, form: int) -> None:
        current = self.form.clone()
        current[form] = 1
        self._check_forms(current)
        self.form = current

    @staticmethod
    def _check_forms(form: Tensor) -> None:
        used = {i for i in range(5) if int(form[i])}
        allowed = [{_SAME_SOURCE}, {_QUERY, _GALLERY}, {_QUERY}, {_GALLERY}, {_TABLE}, {_SCORES}]
        if used and used not in allowed:
            raise ValueError(
                "one metric takes one input form; got "
                f"{', '.join(_FORM_NAMES[i] for i in sorted(used))}. Use a separate metric per "
                "form (same-source updates cannot be mixed with role='query'/'gallery')"
            )

    def sample_ids(self) -> dict[str, Tensor]:
        # same-source items are queries too; gallery ids are not listed (validation and test
        # queries may share one corpus)
        parts = [self._state("q_ids")]
        present = self._state(f"t_{PRESENT}")
        if present is not None and present.numel():
            bit = 1 << [p.name for p in TABLE_PARTS if p.optional].index("query_id")
            with_ids = (present & bit) != 0
            parts.append(self._state("t_query_id")[with_ids])
        ids = [p.reshape(-1).cpu() for p in parts if p is not None and p.numel()]
        return {"query": torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)}

    # ------------------------------------------------------------------ compute

    def _ranking_options(self) -> RankingOptions:
        depth, cover = M.depth_for(self.metric_names())
        return RankingOptions(
            relevance=self.relevance,
            radius=self.radius,
            ignore_label=self.ignore_label,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
            depth=depth,
            cover_relevant=cover,
        )

    def _build_tables(self) -> dict[str, RankTable]:
        form = self.form
        self._check_forms(form)
        if int(form[_SCORES]):
            preds, target, indexes = (self._state(n) for n in ("s_preds", "s_target", "s_indexes"))
            # every batch was checked by update(): rank without checking the whole again
            table = rank_checked_scores(preds.cpu(), target.cpu(), indexes.cpu())
            if self.nonpositive == "miss":
                self._miss_table = nonpositive_missed(
                    table, positive_counts(preds.cpu(), indexes.cpu())
                )
        elif int(form[_TABLE]):
            table = self._table_from_states()
        elif int(form[_SAME_SOURCE]) or int(form[_QUERY]):
            table = self._rank_embedding_states(same_source=bool(int(form[_SAME_SOURCE])))
        elif int(form[_GALLERY]):
            raise ValueError("gallery items were given but no queries (update with role='query')")
        else:
            raise ValueError("no data: call `update` before `compute`")
        if table.num_queries == 0:
            raise ValueError("no items were given: every update had 0 rows (0 queries to score)")
        return {"": table}

    def _rank_embedding_states(self, same_source: bool) -> RankTable:
        queries = self._deduped("q", "`ids` of the queries" if not same_source else "`ids`")
        if queries is None:
            raise ValueError("no data: call `update` before `compute`")
        if len(queries) == 0:
            raise ValueError(
                "no items were given: every update had 0 rows"
                + ("" if same_source else " of query embeddings (role='query')")
            )
        distributed = self._distributed()
        if self.gallery_sharded and not same_source:
            table, sent = D.rank_gallery_sharded(
                queries,
                self._deduped("g", "`ids` of the gallery items"),
                self._ranking_options(),
                self.process_group,
                distributed,
            )
            # what this process sent: its states and the ranking's relevant scores and counts
            self.bytes_exchanged = sent + self._sync_bytes
            return table
        queries, gallery = self._embedding_sides(queries, same_source)
        return D.rank_queries(
            queries,
            None if same_source else gallery,
            self._ranking_options(),
            self.process_group,
            distributed,
        )

    def _embedding_sides(self, queries: Items, same_source: bool) -> tuple[Items, Items]:
        """The deduplicated queries and the gallery they are ranked against."""
        if same_source:
            if queries.ids is None:
                # self-exclusion by position: name every item by its index
                queries = queries.with_ids(torch.arange(len(queries)))
            return queries, queries
        gallery = self._deduped("g", "`ids` of the gallery items")
        if gallery is None:
            raise ValueError("queries were given but no gallery (update with role='gallery')")
        if len(gallery) == 0:
            raise ValueError(
                "the gallery is empty: every update with role='gallery' had 0 rows, so no "
                "query has anything to retrieve"
            )
        return queries, gallery

    def per_query(self) -> dict[str, Tensor]:
        # many relevant items per query: ranked and reduced a chunk of queries at a time, as in
        # compute(), so that the whole table never exists (on several processes each ranks its
        # share and the per-query values are gathered)
        chunked = self._chunked_ranking()
        if chunked is None:
            return super().per_query()
        parts, _ = chunked
        return {name: values.to(self.device) for name, (values, _, _) in parts.items()}

    def _summaries(self, options: dict[str, Any]) -> list[tuple[str, stats.Summary]]:
        # many relevant items per query: from the per-query parts of the ranking in chunks
        chunked = self._chunked_ranking()
        if chunked is None:
            return super()._summaries(options)
        parts, queries = chunked
        return [("", stats.summarize_query_parts(queries, parts, self.metric_names(), **options))]

    def _query_parts_exchange(self) -> Callable[..., Any] | None:
        """How query chunks ranked on several processes are put together: every process's
        per-query parts and query fields, in process order (None on one process)."""
        if not self._several_processes():
            return None
        return functools.partial(D.gather_query_parts, group=self.process_group)

    def _tables_in_chunks(self) -> Iterator[RankTable] | None:
        """The rank table a chunk of queries at a time (in the order of the whole table), or None
        where the whole table is ranked at once.

        Relevant pairs beyond ``memory_budget`` (thousands of relevant items per query) would make
        rank tables, relevance sets and tie groups of gigabytes; a chunk of queries at a time,
        each reduced to per-query values before the next is ranked, holds a budget's worth. Taken
        where the pairs can be counted before ranking (label relevance), not for a sharded
        gallery. On several processes, called on states synced across them: this process's share
        of the queries, whose per-query parts are then gathered.
        """
        if self._tables is not None or self.relevance != "label" or self.gallery_sharded:
            return None
        if self.nonpositive != "hit":  # the torchmetrics-compatible miss rule reads whole tables
            return None
        form = self.form
        self._check_forms(form)
        same_source = bool(int(form[_SAME_SOURCE]))
        if int(form[_SCORES]) or int(form[_TABLE]) or not (same_source or int(form[_QUERY])):
            return None
        several = self._several_processes()
        queries = self._deduped("q", "`ids` of the queries" if not same_source else "`ids`")
        if queries is None or len(queries) == 0 or queries.labels is None:
            return None
        queries, gallery = self._embedding_sides(queries, same_source)
        if gallery.labels is None:
            return None
        pairs = label_pair_counts(queries.labels, gallery.labels)
        if int(pairs.sum()) * PAIR_BYTES <= self.memory_budget:
            return None  # the same decision on every process: the states are synced
        options = self._ranking_options()
        if several:
            mine = D.query_share(len(queries), self.process_group, True)
            queries, pairs = queries.select(mine), pairs[mine]
            if len(queries) == 0:
                # nothing to rank here, but empty parts of the right kinds to gather
                return iter([options.rank(queries, gallery)])
        return (
            options.rank(queries.select(slice(start, stop)), gallery)
            for start, stop in query_chunks(pairs, self.memory_budget)
        )

    def _chunked_ranking(self) -> tuple[M.QueryParts, RankTable] | None:
        """:meth:`_parts_in_chunks` of the synced states; the kept parts without a new sync."""
        if self._chunk_parts is not None:
            return self._chunk_parts
        return self._on_synced_states(self._parts_in_chunks)

    def _parts_in_chunks(self) -> tuple[M.QueryParts, RankTable] | None:
        """Every process's per-query parts and query fields from :meth:`_tables_in_chunks`
        (computed once per state), or None where the whole table is ranked at once."""
        if self._chunk_parts is None:
            tables = self._tables_in_chunks()
            if tables is None:
                return None
            options = self.per_query_options()
            parts, queries = M.query_parts_in_chunks(
                tables, self.metric_names(), average=self.average, **options
            )
            exchange = self._query_parts_exchange()
            if exchange is not None:
                parts, queries = exchange(parts, queries)
            self._chunk_parts = (parts, queries)
        return self._chunk_parts

    def _values_in_chunks(self) -> dict[str, Tensor] | None:
        """compute()'s values from :meth:`_parts_in_chunks`, or None where it ranks at once."""
        chunked = self._parts_in_chunks()
        if chunked is None:
            return None
        parts, per_query = chunked
        options = self._measure_options()
        values = M.aggregate_query_parts(
            per_query, parts,
            **{k: options[k] for k in ("empty_queries", "average", "percent", "median")},
        )
        self._warn_if_all_skipped(per_query.num_relevant, stacklevel=4)
        self._warn_if_cutoffs_reach_gallery({"": per_query})
        if self.all_skipped == "zero" and not bool((per_query.num_relevant > 0).any()):
            values = {k: torch.nan_to_num(v, nan=0.0) for k, v in values.items()}
        return values

    def _table_from_states(self) -> RankTable:
        parts = {}
        for name in [p.name for p in TABLE_PARTS] + [PRESENT]:
            value = self._state(f"t_{name}")
            parts[name] = value if value is not None else torch.zeros(0, dtype=torch.int64)
        table = table_from_parts(parts)
        if table.query_id is not None and table.num_queries:
            keep = D.dedupe_by_id(
                table.query_id,
                "`ids` of the queries",
                relevant_items=table.num_relevant,
                listed_items=table.num_listed,
                gallery_size=table.gallery_size,
            )
            table = table.select(keep)
        return table

    def _values(self, table: RankTable) -> dict[str, Tensor]:
        names = self.metric_names()
        options = self._measure_options()
        if self.nonpositive == "hit":
            values = M.retrieval_measures(table, names, **options)
        else:
            values = {}
            for name in names:
                spec = M.parse_metric(name)
                if spec.base not in _MISS_BASES:
                    values.update(M.retrieval_measures(table, [name], **options))
                    continue
                miss = self._nonpositive_table(table)
                numerator = denominator = None
                average = M.average_for(spec, self.average)
                if average == "micro" and spec.measure.micro is not None:
                    numerator, denominator = spec.measure.micro(miss, spec.k, self.ties)
                values[spec.name] = M.aggregate(
                    self._per_query_values(table, spec), miss,
                    empty_queries=self.empty_queries, average=average, percent=self.percent,
                    numerator=numerator, denominator=denominator,
                )
        if self.all_skipped == "zero" and not bool((table.num_relevant > 0).any()):
            values = {k: torch.nan_to_num(v, nan=0.0) for k, v in values.items()}
        return values

    def compute(self) -> Tensor | dict[str, Tensor]:
        values = self._values_in_chunks()
        if values is None:
            self._warn_if_all_skipped()
            table = self.rank_table()
            self._warn_if_cutoffs_reach_gallery({"": table})
            values = self._values(table)
        # on the metric's device, as torchmetrics returns its values (the tables are host data)
        return self._format(
            {k: v.to(device=self.device, dtype=torch.float32) for k, v in values.items()}
        )


# ---------------------------------------------------------------------- helpers


def _choice(name: str, value: Any, options: Sequence[Any]) -> None:
    if value not in options:
        raise ValueError(f"`{name}` must be one of {tuple(options)}, got {value!r}")


def score_copy(emb: Tensor) -> Tensor:
    """Detached copy in the dtype the ranking scores in (half precision -> float32)."""
    dtype = torch.float64 if emb.dtype == torch.float64 else torch.float32
    return emb.detach().to(dtype)


def _num_batches(state: Any) -> int:
    if isinstance(state, list):
        return len(state)
    return int(state.numel() > 0)


def _per_item(name: str, value: Tensor, n: int) -> Tensor:
    if value.shape[0] != n:
        raise ValueError(f"`{name}` must have {n} entries (one per item), got {value.shape[0]}")
    return value


def _table_from_ranks(relevant_ranks: Sequence[Sequence[int]], num_relevant: Any) -> RankTable:
    """A table from 1-based ranks of each query's relevant items (no ties)."""
    ranks = [sorted({int(r) for r in row}) for row in relevant_ranks]
    for q, row in enumerate(ranks):
        if any(r < 1 for r in row):
            raise ValueError(f"`relevant_ranks[{q}]` must hold 1-based ranks (>= 1), got {row}")
    found = torch.tensor([len(r) for r in ranks], dtype=torch.int64)
    if num_relevant is None:
        total = found.clone()
    else:
        # (on the host, with the ranks: a rank table is host data whatever the metric's device)
        total = torch.as_tensor(num_relevant, dtype=torch.int64).reshape(-1).cpu()
        if total.numel() != len(ranks):
            raise ValueError(
                f"`num_relevant` must have one entry per query ({len(ranks)}), got {total.numel()}"
            )
        if bool((total < found).any()):
            raise ValueError("`num_relevant` must be at least the number of ranks given per query")
    ptr = torch.zeros(len(ranks) + 1, dtype=torch.int64)
    torch.cumsum(found, 0, out=ptr[1:])
    above = torch.tensor([r - 1 for row in ranks for r in row], dtype=torch.int64)
    return RankTable(
        ptr=ptr,
        above=above,
        tied=torch.ones_like(above),
        num_relevant=total,
        gallery_size=torch.full((len(ranks),), UNBOUNDED, dtype=torch.int64),
        depth=torch.full((len(ranks),), UNBOUNDED, dtype=torch.int64),
    )
