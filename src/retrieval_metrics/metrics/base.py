"""The shared ``Metric`` core of every metric kind: options, states, dedupe, the distributed sync,
rank tables and everything beyond ``compute()``.

:class:`RetrievalMetricBase` resolves the options (``protocol`` included; each option declared once
in :mod:`retrieval_metrics.functional.options`), keeps per-item states of any number of sides
(registered, appended, gathered and deduplicated the same way for every kind), and builds
``per_query``, ``summary``, ``confidence_interval`` and :func:`retrieval_metrics.compare` on one
method, :meth:`~RetrievalMetricBase.rank_tables` (``plot`` too, from the classes'
:class:`~retrieval_metrics.metrics.plotting.Plotted`). A kind says how its states become rank
tables: the one-direction kind is :class:`~retrieval_metrics.metrics.retrieval.RetrievalMetric`,
image-text :class:`~retrieval_metrics.metrics.crossmodal.CrossModalRetrieval`.

``compute()``: states are gathered across processes (any number of rows, updates, or none at all
per rank; :mod:`retrieval_metrics.metrics.distributed`), duplicate samples dropped by id, and the
ranking shared out, so every process returns the value a single process would.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import apply_to_collection, dim_zero_cat

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import stats
from retrieval_metrics.functional.measures.aggregation import (
    QueryParts,
    counted_values,
    unit_scale,
)
from retrieval_metrics.functional.measures.names import judged_needed
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.primitives import holds_float64, to_device
from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.ranking.options import (
    BLOCKED_ENGINE,
    RankingEngine,
    check_engine,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.options import MetricOptions
from retrieval_metrics.metrics.protocols import NOT_GIVEN, NotGiven
from retrieval_metrics.metrics.store import SideStore

__all__ = ["RetrievalMetricBase"]

#: the options, read from the metric's one MetricOptions (``metric.options``)
OPTION_NAMES = tuple(f.name for f in fields(MetricOptions))


#: how a metric of several values is logged in Lightning (refusals of self.log and log_dict)
_LOG_SEVERAL = (
    "call metric.update(...) in the step and, at the epoch's end (on_validation_epoch_end), "
    "self.log_dict(metric.compute(), sync_dist=True, reduce_fx=\"max\") (exact: the values "
    "are the same on every process) then metric.reset()"
)


class RetrievalMetricBase(Metric):
    """What every retrieval metric shares: options, states, rank tables and what is built on them.

    Options left out take the library default shown here, or the value that ``protocol`` fixes;
    an option you pass must agree with the protocol.

    Args:
        similarity: "cosine" (default), "dot" or "euclidean".
        ties: "expected" (default), "optimistic", "pessimistic" or "id" (tied gallery items
            in ascending order of their ``ids=``, as sentence-transformers 6.x): how equal
            scores are ordered (see the definitions page of the documentation).
        empty_queries: "skip" (default), "zero" or "error" for queries with no relevant item;
            "nan" (ragas) leaves out each value whose formula divides by zero (such a query
            still scores 0 in precision, and a precision over nothing retrieved is left out).
        percent: report fractions as percentages.
        relevance: "label" (default) or "radius" (with ``positions=`` and ``radius``).
        radius: metres for ``relevance="radius"``, inclusive (25 by default).
        ignore_label: gallery items with this label are removed from every ranking.
        average: "macro" (default), "micro" or "class". "micro" applies to recall, precision
            and r_precision; the other measures are one score per query and stay macro. A name
            may fix its own ("recall@10/micro").
        memory_budget: bytes of scratch memory ``compute()`` may use beyond the states: the
            relevant (query, item) pairs held at once, and the ranking the rest (at least
            half). With
            more pairs than it holds (few classes of thousands), ``compute()`` ranks a chunk of
            queries at a time and keeps only per-query values. None (the default): 256 MiB
            on the CPU; on an accelerator a quarter of its free memory when ``compute()``
            starts, at most 32 GiB (blocks the size of the device, not of a CPU's caches).
        protocol: a field's official evaluation by name ("vsepp", "pml", "torchreid",
            "market1501_official", "netvlad", "msls", "ann_benchmarks", "trec_eval",
            "torchmetrics"; see :mod:`retrieval_metrics.protocols`); it sets the options it
            fixes.
        ap: average precision "step" (default) or "trapezoid" (official Market-1501 code).
        divisor: AP@K divided by "relevant" m_q (default), "min" min(m_q, K) or "retrieved".
        gain: NDCG gain "exponential" 2^g - 1 (default), "linear" g or "binary" 1.
        median: median rank "vsepp" floor(median(r - 1)) + 1 (default) or "plain".
        nonpositive: "hit" (default) or "miss": with "miss", a relevant item scored <= 0 is
            never a hit of map, mrr, precision and recall (it still counts in m_q), and map
            without a cut-off divides by the relevant items scored > 0 (torchmetrics' rules; the
            preds/target/indexes form only).
        all_skipped: the value when ``empty_queries="skip"`` leaves no query: "nan" (default)
            or "zero" (torchmetrics).
        duplicates: what a ranked list (``ranked_ids=``) that returns an id more than once gets:
            "first" (default) counts the id once, at its first position, each repeat keeping its
            slot as a non-relevant item (a retriever that returns one document twice wasted a
            slot of its top K); "error" raises; "warn" counts as "first" and warns when a
            repeated id is relevant (evaluators that credit each repeat differ there), as the
            command line and :func:`retrieval_metrics.formats.read_ranked_lists` do.
        empty_lists: a ranked list that returns no id: "score" (default: its relevant ids are
            missed) or "error" (LlamaIndex refuses one).
        relevance_level: the lowest relevant grade (trec_eval ``-l``; None: every grade > 0).
        judged_only: score the condensed lists, unjudged documents removed (trec_eval ``-J``).
        persistence: RBP's p (0.8). A name may set these: ``"precision(rel=2)@5"``.
        max_grade: ERR's highest grade (4, gdeval's).
        engine: what ranks embeddings at ``compute()`` (a
            :class:`~retrieval_metrics.functional.ranking.RankingEngine`; None: the exact
            blocked engine). Another engine (an approximate index, say) gets every ranking of
            the states; a gallery sharded over processes stays the blocked engine's, and
            ``run()`` lists by the exact scores.
        kwargs: passed to ``torchmetrics.Metric`` (``sync_on_compute``, ``process_group``, ...).

    A kind implements :meth:`metric_names`, ``_build_tables`` (its synced states -> rank tables)
    and :meth:`sample_ids`.
    """

    # TorchScript skips these when a metric is scripted: inferring a type for the update
    # signature torchmetrics keeps (string annotations here) costs a scripting ~0.3 s
    __jit_ignored_attributes__: ClassVar[list[str]] = [
        *Metric.__jit_ignored_attributes__, "_update_signature"
    ]
    __jit_unused_properties__: ClassVar[list[str]] = [
        *Metric.__jit_unused_properties__, "measure_options", "_computed", *OPTION_NAMES
    ]
    is_differentiable = False
    higher_is_better: bool | None = True
    full_state_update = False
    plot_lower_bound: float | None = 0.0
    plot_upper_bound: float | None = 1.0
    #: put before every reported name (RetrievalMetrics' ``prefix=``)
    prefix = ""
    #: the sides whose keys' kinds are recorded (``store.note_key_kinds``), and what they hold
    kind_sides: ClassVar[dict[str, str]] = {"q": "queries", "g": "gallery items"}

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
        memory_budget: int | None = OPTIONS["memory_budget"].default,
        ap: str | None = None,
        divisor: str | None = None,
        gain: str | None = None,
        median: str | None = None,
        nonpositive: str | None = None,
        all_skipped: str | None = None,
        duplicates: str | None = None,
        empty_lists: str | None = None,
        relevance_level: float | None = None,
        judged_only: bool | None = None,
        persistence: float | None = None,
        max_grade: float | None = None,
        protocol: str | None = None,
        engine: RankingEngine | None = None,
        **kwargs: Any,
    ) -> None:
        # every option as passed, by its name (locals() before anything else is assigned)
        given = {name: value for name, value in locals().items() if name in OPTIONS}
        # a kind's own declared options (RetrievalMetric's ignore_identical_ids) come in kwargs
        given |= {name: kwargs.pop(name) for name in list(kwargs) if name in OPTIONS}
        super().__init__(**kwargs)
        #: every option, resolved and checked once (``protocol`` applied)
        self.options = MetricOptions.build(protocol, given)
        #: what ranks the embeddings at compute(): the exact blocked engine by default
        self.engine: RankingEngine = BLOCKED_ENGINE if engine is None else check_engine(engine)
        self.bytes_exchanged = 0
        self._sync_bytes = 0
        #: the list states, by side (``add_side``), and the kinds of their keys
        self.store = SideStore(self, self.kind_sides)
        # The ranking of the current states, shared by compute(), per_query(), summary(),
        # rank_tables(), compare() and plot() until update() or reset() changes the states: the
        # whole rank tables, or (ranked a chunk of queries at a time) every process's per-query
        # parts and query fields.
        self._tables: dict[str, RankTable] | None = None
        self._chunk_parts: tuple[QueryParts, RankTable] | None = None
        # counts about the data beside the ranking (summary().notes), made with the tables
        self._notes: dict[str, int] = {}
        self._warned_forward = False
        self._warned_cutoffs = False
        self._warned_unjudged = False

    # torchmetrics marks the value compute() kept as stale by setting ``_computed = None``
    # wherever the states change under it: update(), forward(), reset(), and a MetricCollection's
    # compute groups, which update a group's first member only and hand its states to the others
    # (whose update() never runs). The ranking kept beside that value is stale at the same
    # moments, so it is dropped with it: here, the one place every such change passes.
    @property
    def _computed(self) -> Any:
        return self.__dict__.get("_computed_value")

    @_computed.setter
    def _computed(self, value: Any) -> None:
        self.__dict__["_computed_value"] = value
        if value is None and "_tables" in self.__dict__:  # (torchmetrics' __init__ sets it first)
            self._forget_ranking()

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        """``merge_state``: the merged states are new data, so neither the ranking nor a value
        compute() kept holds (torchmetrics would return the value of the states before)."""
        super()._reduce_states(incoming_state)
        self._computed = None

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """``load_state_dict``: states loaded into a metric that has computed are new data."""
        super()._load_from_state_dict(state_dict, prefix, *args)
        self._computed = None

    # ------------------------------------------------------------------ dtype of the results

    def set_dtype(self, dst_type: str | torch.dtype) -> Any:
        """The dtype of ``compute()``'s results (torchmetrics' ``set_dtype``): a floating dtype
        (float64 keeps every digit of the measures, computed in float64). An integer, bool or
        complex dtype would truncate or mangle them (MRR 0.7 read 0), and is refused."""
        dtype = dst_type
        if not isinstance(dst_type, torch.dtype):
            try:  # a tensor type's name, as nn.Module.type takes it ("torch.DoubleTensor")
                dtype = torch.zeros(()).type(dst_type).dtype
            except (TypeError, ValueError, RuntimeError) as err:
                raise ValueError(
                    f"set_dtype: `dst_type` must be a floating dtype such as torch.float64, "
                    f"got {dst_type!r}"
                ) from err
        if not dtype.is_floating_point:
            raise ValueError(
                f"set_dtype: `dst_type` must be a floating dtype such as torch.float64 (the "
                f"results are measures between 0 and 1, ranks and sums), got {dtype}"
            )
        # Set here, not through torchmetrics' set_dtype: that converts a probe made on the
        # metric's device, which a device without float64 (Apple's MPS) refuses, and the states
        # are not converted anyway (they are the inputs themselves, see _apply).
        self._dtype = dtype
        # a value compute() kept is recomputed in the new dtype, not cast from the old one
        self._computed = None
        if self._forward_cache is not None:  # (what forward() returned, logged on step)
            self._forward_cache = apply_to_collection(self._forward_cache, Tensor, self._result)
        return self

    def _apply(self, fn: Callable, exclude_state: Sequence[str] = ()) -> Any:
        """``set_dtype`` sets the dtype of the results only (:meth:`_result`): the states are
        the inputs themselves (int64 ids and label codes, float64 positions, embeddings as
        given), which torchmetrics' conversion would cast to that dtype, rounding 64-bit codes
        and positions. Moves between devices (``.to``, ``.cuda``) apply to every state, but
        for float64 ones on a device without float64 (Apple's MPS), which stay on the host. A
        module's conversion to float64 (``.to(torch.float64)``) makes float64 results; one to
        half precision (``Trainer(precision="bf16-true")`` converts the LightningModule whole)
        keeps them float32: a value rounded to 8 bits would tie or swap epochs that
        ``ModelCheckpoint`` compares."""
        dtype = self._dtype
        probe = fn(torch.empty(0))  # (empty: no copy to wait for)
        destination = probe.device
        # a conversion of the floating states (not a move): what they rank changes with them
        # (float64 probed only where the destination holds it: Apple's MPS refuses the move)
        converts = probe.dtype != torch.float32 or (
            holds_float64(destination)
            and fn(torch.empty(0, dtype=torch.float64)).dtype != torch.float64
        )
        if not holds_float64(destination):
            # float64 states and kept results stay on the host, as to_device keeps them
            move = fn

            def fn(t: Tensor) -> Tensor:
                return t.cpu() if t.dtype == torch.float64 else move(t)

        out = super()._apply(fn, exclude_state)
        # torchmetrics reads the new dtype off a float32 probe, so a move (`.to(device)`,
        # Lightning's at setup) would undo set_dtype(torch.float64); a probe in the set dtype
        # keeps it, and still follows a dtype conversion
        converted = fn(torch.zeros(1, dtype=dtype)).dtype
        self._dtype = converted if converted in (torch.float32, torch.float64) else dtype
        if converts or self._dtype != dtype:
            # a value compute() kept, and its ranking, are those of the states before: the
            # converted embeddings may rank otherwise (rounded to half precision, two items
            # may tie), and a float32 value cast to float64 would carry float32's digits only
            self._computed = None
        return out

    def _result(self, value: Tensor) -> Tensor:
        """A value as ``compute()`` returns it: on the metric's device, in the metric's dtype
        (float32 by default; ``metric.set_dtype(torch.float64)`` for float64). The measures are
        computed in float64, so float64 results carry every digit."""
        # (converted where it is, then sent without waiting: results are built on the host)
        return to_device(value.to(self.dtype), self.device)

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

    def _distributed(self) -> bool:
        return bool(self._to_sync and self.distributed_available_fn())

    def _processes(self) -> D.Processes:
        """The processes the states are synced over, as they are now."""
        distributed = self._distributed()
        return D.Processes(
            group=self.process_group,
            distributed=distributed,
            several=distributed and D.rank_and_world(self.process_group)[1] > 1,
            synced_bytes=self._sync_bytes,
        )

    def _sync_dist(self, dist_sync_fn: Any = None, process_group: Any = None) -> None:
        """Gather every state with :func:`retrieval_metrics.metrics.distributed.sync_states` (uneven
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
        # (written only where something is held: every update() forgets twice, and each write
        # goes through torch's Module.__setattr__, microseconds apiece)
        if self.__dict__.get("_tables") is not None:
            self._tables = None
        if self.__dict__.get("_chunk_parts") is not None:
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

    @property
    def measure_options(self) -> M.MeasureOptions:
        """The options every measure of this metric is computed with, as one object."""
        return self.options.measures

    def per_query_options(self) -> dict[str, Any]:
        """The options this metric's per-query values are computed with (tie rule, AP kind,
        AP@K divisor, NDCG gain), as ``functional.per_query_values`` takes them."""
        return self.measure_options.per_query_options()

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

    def items(self) -> Any:
        """A metric is no mapping: Lightning's ``self.log_dict(metric)`` reads it as one (its
        ``items()``), which would fail with an AttributeError that names neither; refused with
        the ways to log it."""
        raise TypeError(
            f"{type(self).__name__} is a metric, not a dict of values: self.log_dict(metric) "
            "cannot log it. Log a metric of one value with self.log(name, metric); for several "
            f"values, {_LOG_SEVERAL}; or put metrics of one value each in a torchmetrics "
            "MetricCollection and self.log_dict(collection)"
        )

    def _refuse_several_in_log(self, values: Any) -> Any:
        """``values``, unless they are several (a dict) and Lightning's ``self.log(name,
        metric)`` is computing them: it logs one tensor per metric object, and would say only
        that the return "must be a tensor". Looks at a few calling frames, only for a dict."""
        if not isinstance(values, dict):
            return values
        frame = sys._getframe(1)
        for _ in range(8):
            frame = frame.f_back  # type: ignore[assignment]
            if frame is None:
                return values
            module = frame.f_globals.get("__name__", "")
            if module.endswith("logger_connector.result") and frame.f_code.co_name == "compute":
                meta = getattr(frame.f_locals.get("self"), "meta", None)
                name = getattr(meta, "name", None)
                logged = f"self.log({name!r}, metric)" if name else "self.log(name, metric)"
                raise ValueError(
                    f"{type(self).__name__} computes several values ({', '.join(values)}), and "
                    f"{logged} logs one tensor per metric object: {_LOG_SEVERAL}; or ask for "
                    "one value (one k, one metric name)"
                )
        return values

    def _warn_if_unjudged(self, fields: dict[str, RankTable], stacklevel: int = 4) -> None:
        """Warn once per metric when a measure that reads which documents were judged not
        relevant (Judged@K, bpref, a condensed list) is given judgments without one: it then
        reads every unlisted document as unjudged (bpref equals recall, Judged@K counts the
        relevant documents only), as from ``relevant_ids`` that hold the relevant ones alone."""
        if self._warned_unjudged:
            return
        names = [n for n in self.metric_names() if judged_needed([n], self.measure_options)]
        if not names:
            return
        tables = [t for t in fields.values() if t.num_nonrelevant is not None and t.num_queries]
        if not tables or any(bool((t.num_nonrelevant > 0).any()) for t in tables):
            return
        warnings.warn(
            f"{type(self).__name__}: {', '.join(names)} read which documents were judged not "
            "relevant, and the judgments given hold none (every judged document is relevant): "
            "every other document counts as unjudged there. Pass every judgment with its "
            "grade, those judged not relevant at grade 0: `relevant_ids=[{doc: grade, ...}]` "
            "(read_ranked_lists(...).judgments, not .relevant_ids) or `qrels=` with the grade 0 "
            "lines",
            UserWarning,
            stacklevel=stacklevel,
        )
        self._warned_unjudged = True

    def _warn_if_cutoffs_reach_gallery(
        self, fields: dict[str, RankTable], stacklevel: int = 4
    ) -> None:
        """Warn once per metric when a cut-off K is at or above the whole gallery: every
        answerable query then finds its relevant items within K, so hit rate and recall at K
        are 1 by construction (a gallery of 3 images reports R@5 = 100). ``fields``: the rank
        tables (or their query fields) by the prefix of their measures' names."""
        if self._warned_cutoffs:
            return
        found = []
        for key, table in fields.items():
            # ranked lists (depth unbounded) come from an unknown collection: a list no longer
            # than K is no whole gallery; and a query with nothing relevant finds nothing
            # (a set of one item, or labels all distinct: every value NaN, said apart)
            sizes = table.gallery_size[(table.depth != UNBOUNDED) & (table.num_relevant > 0)]
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
                stacklevel=stacklevel,
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

    def per_query(self, ids: Any = None) -> dict[str, Any]:
        """Each query's value of every reported measure as the mean counts it, in the metric's
        unit (percent under ``percent=True``; NaN for skipped queries; 0, or the worst rank,
        under ``empty_queries="zero"``), queries in a stable
        order (by sample id when ids were given, string ids by their 64-bit codes, which is no
        alphabetical order: pass ``ids`` to key the values by id; else the order they arrived
        in); keys carry the direction for image-text ("i2t/hit_rate@1").

        With ``ids`` (the query ids given to ``update``, int or str, any subset in any order):
        ``{name: {query id: value}}`` in the order of ``ids``, a value a float (a list for a
        CMC curve); ``pandas.DataFrame(metric.per_query(ids=...))`` makes it a table.

        >>> import retrieval_metrics as rm
        >>> m = rm.RetrievalMetrics(["mrr"])
        >>> m.update(ranked_ids=[["d1", "d2"], ["d2", "d1"]], relevant_ids=[{"d1"}, {"d1"}],
        ...          ids=["who", "what"])
        >>> m.per_query(ids=["who", "what"])
        {'mrr': {'who': 1.0, 'what': 0.5}}
        """
        rows = self._per_query_rows()
        if ids is None:
            return {name: values for name, (values, _) in rows.items()}
        return keyed_rows(rows, ids)

    def _per_query_rows(self) -> dict[str, tuple[Tensor, Tensor | None]]:
        """:meth:`per_query`'s rows by name, each with its queries' id codes (None without ids)."""
        out = {}
        for key, table in self.rank_tables().items():
            for name in self.metric_names():
                spec = M.parse_metric(name)
                values = counted_values(
                    self._per_query_values(table, spec), table, spec, self.measure_options
                )
                out[f"{key}{spec.name}"] = (
                    to_device(self.in_units(values, spec), self.device), table.query_id
                )
        return out

    def in_units(self, values: Tensor, spec: M.MetricSpec) -> Tensor:
        """Per-query values in this metric's unit, as ``compute()`` reports their mean: a
        fraction in percent under ``percent=True``, a rank as it is."""
        return values * unit_scale(spec, self.measure_options)

    def _per_query_values(self, table: RankTable, spec: M.MetricSpec) -> Tensor:
        """One measure's per-query values (a kind's input form may apply its own rule)."""
        return M.per_query_values(table, spec, options=self.measure_options)

    def refuse_nonpositive(self, what: str) -> None:
        """Raise for ``what`` (a method reading whole rank tables) under nonpositive="miss"."""
        if self.nonpositive == "miss":
            raise ValueError(
                f'{what} is not available with nonpositive="miss" (protocol="torchmetrics"); '
                "use compute() and per_query()"
            )

    def summary(
        self, level: float = 0.95, num_bootstrap: int = 1000, seed: int = 0, ids: Any = None
    ) -> stats.Summary:
        """Values with queries counted and skipped, gallery size, chance level and a confidence
        interval (seeded percentile bootstrap over queries). Prints as a table. With ``ids``
        (as :meth:`per_query` takes them) each row also holds ``"per_query"``, its values keyed
        by those query ids (``summary.as_dict()[name]["per_query"]``)."""
        self.refuse_nonpositive("summary()")
        options = dict(
            level=level, num_bootstrap=num_bootstrap, seed=seed, options=self.measure_options
        )
        prefix = self.prefix
        keyed = {} if ids is None else self.per_query(ids=ids)
        rows = []
        for key, part in self._summaries(options):
            rows += [{**row, "name": f"{prefix}{key}{row['name']}"}
                     | ({"per_query": keyed[f"{key}{row['name']}"]} if keyed else {})
                     for row in part.rows]
        # the warnings compute() gives, given here too (the command line reads summary() alone)
        fields = self.ranking_fields()
        self._warn_if_cutoffs_reach_gallery(fields, stacklevel=3)
        self._warn_if_unjudged(fields, stacklevel=3)
        return stats.Summary(rows=rows, level=level, notes=self._summary_notes())

    def ranking_fields(self) -> dict[str, RankTable]:
        """Each direction's rank table, or where the queries were ranked in chunks only their
        per-query fields (``num_relevant``, ``gallery_size``, ...), by the prefix of its
        measures' names: what tells whether two metrics scored the same queries."""
        return self.rank_tables()

    def _summary_notes(self) -> dict[str, int]:
        """Counts about the data as a whole for :meth:`summary` (a kind's input form may have
        some: judged documents the corpus lacks, say)."""
        return {}

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


def keyed_rows(
    rows: dict[str, tuple[Tensor, Tensor | None]], ids: Any
) -> dict[str, dict[Any, Any]]:
    """``rows`` (per name, the values and the queries' id codes) as ``{name: {id: value}}`` in
    the order of ``ids``; an id that is no query's is refused, naming it."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"`ids` must be a sequence of query ids, got the single id {ids!r}")
    ids = ids.tolist() if isinstance(ids, (Tensor, np.ndarray)) else list(ids)
    codes = label_codes(ids, "ids").tolist()
    out: dict[str, dict[Any, Any]] = {}
    for name, (values, query_codes) in rows.items():
        if query_codes is None:
            raise ValueError(
                f"per_query(ids=...) finds each query by the `ids` given to update(), and "
                f"the queries of {name!r} came without them: pass `ids=` to update() (or call "
                "per_query() for the rows in the order the queries arrived)"
            )
        row_of = {code: row for row, code in enumerate(query_codes.tolist())}
        missing = [i for i, code in zip(ids, codes, strict=True) if code not in row_of]
        if missing:
            raise ValueError(
                f"per_query(ids=...): {len(missing)} of the `ids` are no query's ({name!r} "
                f"has {len(row_of)} queries): {missing[:5]}{' ...' if len(missing) > 5 else ''}"
            )
        listed = values.cpu().tolist()
        out[name] = {i: listed[row_of[code]] for i, code in zip(ids, codes, strict=True)}
    return out


def _option_property(name: str) -> property:
    return property(lambda self: getattr(self.options, name), doc=OPTIONS[name].meaning
                    if name in OPTIONS else "the protocol's name, as it was matched")


# each option reads as an attribute of the metric (``metric.ties``), from its one MetricOptions
for _name in OPTION_NAMES:
    setattr(RetrievalMetricBase, _name, _option_property(_name))
