"""The shared ``Metric`` base: states, input forms, dedupe and distributed compute.

Every metric class of the library is a thin subclass of :class:`RetrievalMetric` that only says
which named measures it reports. The base accepts every input form of DESIGN.md:

* embeddings, same source: ``update(embeddings, labels)``;
* separate sets: ``update(q, q_labels, role="query")`` and ``update(g, g_labels, role="gallery")``,
  or a fixed gallery given once with :meth:`RetrievalMetric.set_gallery`, after which each query
  batch is ranked at once and only its per-query results are kept;
* ranked lists: ``update(ranked_ids=[...], relevant_ids=[...])`` (ids int or str; a dict of
  id -> grade for graded relevance);
* torchmetrics' form: ``update(preds=scores, target=relevance, indexes=query_index)``;
* precomputed ranks: ``update(relevant_ranks=[[1, 4], [2], ...])`` (1-based ranks of each query's
  relevant items; ``num_relevant=`` may add relevant items that were never retrieved).

Optional per-item tensors on embedding updates: ``ids=`` (sample ids: duplicates are dropped,
self-exclusion uses them), ``cameras=`` (re-id), ``positions=`` (``relevance="radius"``).

``compute()``: states are gathered across processes (any number of rows, updates, or none at all
per rank), duplicate samples dropped by id, each process ranks its share of the queries against the
whole gallery, and the per-query rank tables are gathered, so every process returns the same value
as a single process would.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from retrieval_metrics.distributed import DistributedExchange, gather_rows, rank_and_world
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional import stats
from retrieval_metrics.functional.ranking import (
    DEFAULT_MEMORY_BUDGET,
    SIMILARITIES,
    UNBOUNDED,
    Exchange,
    RankTable,
    _check_embeddings,
    rank_embeddings,
    rank_embeddings_sharded,
    rank_lists,
    rank_scores,
)
from retrieval_metrics.functional.ties import TIES
from retrieval_metrics.protocols import NOT_GIVEN, NotGiven, apply_protocol

__all__ = ["RetrievalMetric", "label_codes"]

RELEVANCE = ("label", "radius")
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
    """int64 codes that compare like the labels: integers as they are, strings by a 64-bit hash.

    The hash is the same in every process, so string labels survive a distributed gather.
    """
    if isinstance(labels, Tensor):
        if labels.is_floating_point() or labels.is_complex():
            raise ValueError(
                f"`{name}` must hold integers or strings, got a {labels.dtype} tensor; labels are "
                "compared exactly and are never cast to float"
            )
        return labels.reshape(-1).to(torch.int64)
    try:
        import numpy as np

        if isinstance(labels, np.ndarray):
            if labels.dtype.kind in "iub":
                return torch.from_numpy(labels.astype(np.int64).reshape(-1))
            labels = labels.tolist()
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    values = list(labels)
    codes = []
    for v in values:
        if isinstance(v, bool) or isinstance(v, float):
            raise ValueError(
                f"`{name}` must hold integers or strings, got {v!r}; labels are compared exactly "
                "and are never cast to float"
            )
        codes.append(int(v) if isinstance(v, int) else _hash_label(v))
    return torch.tensor(codes, dtype=torch.int64)


class RetrievalMetric(Metric):
    """Base of every retrieval metric: accumulates inputs, ranks once, reports named measures.

    Options left out take the library default shown here, or the value that ``protocol`` fixes;
    an option you pass must agree with the protocol.

    Args:
        similarity: "cosine" (default), "dot" or "euclidean".
        ties: "expected" (default), "optimistic" or "pessimistic" (SPEC.md section 3).
        empty_queries: "skip" (default), "zero" or "error" for queries with no relevant item.
        percent: report fractions as percentages.
        relevance: "label" (default) or "radius" (with ``positions=`` and ``radius``).
        radius: metres for ``relevance="radius"``, inclusive (25 by default).
        ignore_label: gallery items with this label are removed from every ranking.
        average: "macro" (default), "micro" (recall-like metrics) or "class".
        memory_budget: bytes of scratch memory the ranking may use.
        gallery_sharded: for galleries too large for one device: gallery items given with
            ``role="gallery"`` stay on the process that received them, the queries are gathered,
            each process ranks every query against its shard, and only relevant scores and counts
            cross between processes. Same values; self-exclusion needs ``ids=``; the shards must
            not repeat items across processes.
        protocol: a field's official evaluation by name ("vsepp", "pml", "torchreid",
            "market1501_official", "netvlad", "msls", "ann_benchmarks", "trec_eval"; see
            :mod:`retrieval_metrics.protocols`); it sets the options it fixes.
        ap, divisor, gain, median: measure options (see
            :func:`retrieval_metrics.functional.retrieval_measures`).
        kwargs: passed to ``torchmetrics.Metric`` (``sync_on_compute``, ``process_group``, ...).
    """

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
        gallery_sharded: bool = False,
        protocol: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        opts = apply_protocol(protocol, {
            "similarity": similarity, "ties": ties, "empty_queries": empty_queries,
            "percent": percent, "relevance": relevance, "radius": radius,
            "ignore_label": ignore_label, "average": average, "ap": ap, "divisor": divisor,
            "gain": gain, "median": median,
        })
        similarity, ties, empty_queries = opts["similarity"], opts["ties"], opts["empty_queries"]
        percent, relevance, radius = opts["percent"], opts["relevance"], opts["radius"]
        ignore_label, average, ap = opts["ignore_label"], opts["average"], opts["ap"]
        divisor, gain, median = opts["divisor"], opts["gain"], opts["median"]
        self.protocol = protocol
        _choice("similarity", similarity, SIMILARITIES)
        _choice("ties", ties, TIES)
        _choice("empty_queries", empty_queries, M.EMPTY_QUERIES)
        _choice("relevance", relevance, RELEVANCE)
        _choice("average", average, M.AVERAGES)
        _choice("ap", ap, M.AP_KINDS)
        _choice("divisor", divisor, M.AP_DIVISORS)
        _choice("gain", gain, ("exponential", "linear"))
        _choice("median", median, M.MEDIAN_CONVENTIONS)
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
        self.similarity = similarity
        self.ties = ties
        self.empty_queries = empty_queries
        self.percent = percent
        self.relevance = relevance
        self.radius = float(radius)
        self.ignore_label = ignore_label
        self.average = average
        self.memory_budget = memory_budget
        self.ap = ap
        self.divisor = divisor
        self.gain = gain
        self.median = median
        if not isinstance(gallery_sharded, bool):
            raise ValueError(f"`gallery_sharded` must be a bool, got {gallery_sharded!r}")
        self.gallery_sharded = gallery_sharded
        self.bytes_exchanged = 0
        self._sync_bytes = 0

        self.add_state("form", torch.zeros(5, dtype=torch.int64), dist_reduce_fx="max")
        for side in ("q", "g"):
            for name in ("emb", "labels", "ids", "cameras", "positions"):
                self.add_state(f"{side}_{name}", [], dist_reduce_fx="cat")
        for name in (
            "counts",
            "above",
            "tied",
            "grade",
            "num_relevant",
            "gallery_size",
            "depth",
            "ideal_counts",
            "ideal_grade",
            "query_class",
            "query_id",
        ):
            self.add_state(f"t_{name}", [], dist_reduce_fx="cat")
        for name in ("preds", "target", "indexes"):
            self.add_state(f"s_{name}", [], dist_reduce_fx="cat")
        self._gallery: dict[str, Tensor | None] | None = None
        self._table: RankTable | None = None
        self._warned_no_ids = False
        self._next_query_id = 0

    # ------------------------------------------------------------------ what a subclass reports

    def metric_names(self) -> list[str]:
        """Named measures this metric reports (see ``functional.parse_metric``)."""
        raise NotImplementedError

    def _format(self, values: dict[str, Tensor]) -> Tensor | dict[str, Tensor]:
        """Turn the named values into what ``compute()`` returns (a 0-d tensor for one value)."""
        if len(values) == 1:
            return next(iter(values.values()))
        return values

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
        emb = _check_embeddings("embeddings", embeddings)
        self._gallery = self._item_tensors(emb, labels, ids, cameras, positions)
        self._gallery["emb"] = _score_copy(emb)
        self._table = None

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
        self._table = None
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
            self._append_table(rank_lists(ranked_ids, relevant_ids), ids)
        elif given["preds"]:
            self._update_scores(preds, target, indexes)
        else:
            self._append_table(_table_from_ranks(relevant_ranks, num_relevant), ids)

    def _item_tensors(self, emb, labels, ids, cameras, positions) -> dict[str, Tensor | None]:
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
            if not bool(torch.isfinite(pos).all()):
                raise ValueError("`positions` contains NaN or infinite values")
            out["positions"] = pos
        if self.relevance == "label" and out["labels"] is None:
            raise ValueError('`labels` are needed with relevance="label"')
        if self.relevance == "radius" and out["positions"] is None:
            raise ValueError('`positions` are needed with relevance="radius"')
        return out

    def _update_embeddings(self, embeddings, labels, role, ids, cameras, positions) -> None:
        emb = _check_embeddings("embeddings", embeddings)
        items = self._item_tensors(emb, labels, ids, cameras, positions)
        if self._gallery is not None:
            if role == "gallery":
                raise ValueError("a fixed gallery was set with `set_gallery`; update queries only")
            self._append_table(self._rank_against_gallery(emb, items), items["ids"])
            return
        form = _SAME_SOURCE if role is None else (_QUERY if role == "query" else _GALLERY)
        self._mark(form)
        side = "g" if role == "gallery" else "q"
        previous_batches = _num_batches(getattr(self, f"{side}_emb"))
        for name, value in items.items():
            given_before = _num_batches(getattr(self, f"{side}_{name}"))
            if (value is None and given_before) or (
                value is not None and given_before != previous_batches
            ):
                raise ValueError(
                    f"`{name}` must be given on every update or on none (role={role!r})"
                )
        for name, value in items.items():
            if value is not None:
                self._append_state(f"{side}_{name}", value)
        self._append_state(f"{side}_emb", _score_copy(emb))

    def _rank_against_gallery(self, emb: Tensor, items: dict[str, Tensor | None]) -> RankTable:
        g = self._gallery
        assert g is not None
        return rank_embeddings(
            emb.to(g["emb"].device),
            g["emb"],
            query_labels=items["labels"],
            gallery_labels=g["labels"],
            query_ids=items["ids"],
            gallery_ids=g["ids"],
            query_cameras=items["cameras"],
            gallery_cameras=g["cameras"],
            query_positions=items["positions"],
            gallery_positions=g["positions"],
            relevance=self.relevance,
            radius=self.radius,
            ignore_label=self.ignore_label,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
            **self._depth_kwargs(),
        )

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
        if preds.numel() and not bool(torch.isfinite(preds.to(torch.float64)).all()):
            raise ValueError("`preds` contains NaN or infinite values")
        if target.numel() and bool((target < 0).any()):
            raise ValueError("`target` must be non-negative (0 = not relevant, > 0 = grade)")
        self._mark(_SCORES)
        self._append_state("s_preds", preds.reshape(-1).to(torch.float64))
        self._append_state("s_target", target.reshape(-1).to(torch.float64))
        self._append_state("s_indexes", indexes.reshape(-1).to(torch.int64))

    def _append_table(self, table: RankTable, query_ids: Any) -> None:
        self._mark(_TABLE)
        n = table.num_queries
        if query_ids is not None:
            qid = _per_item("ids", label_codes(query_ids, "ids"), n)
        else:
            qid = torch.full((n,), -1, dtype=torch.int64)
        graded = table.grade is not None
        self._append_state("t_counts", table.ptr.diff())
        self._append_state("t_above", table.above)
        self._append_state("t_tied", table.tied)
        self._append_state(
            "t_grade",
            table.grade
            if graded
            else torch.full((table.above.numel(),), math.nan, dtype=torch.float64),
        )
        self._append_state("t_num_relevant", table.num_relevant)
        self._append_state("t_gallery_size", table.gallery_size)
        self._append_state("t_depth", table.depth)
        if table.ideal_ptr is not None and table.ideal_grade is not None:
            self._append_state("t_ideal_counts", table.ideal_ptr.diff())
            self._append_state("t_ideal_grade", table.ideal_grade)
        else:
            self._append_state("t_ideal_counts", torch.full((n,), -1, dtype=torch.int64))
        self._append_state(
            "t_query_class",
            table.query_class
            if table.query_class is not None
            else torch.full((n,), -1, dtype=torch.int64),
        )
        self._append_state("t_query_id", qid)

    def _append_state(self, name: str, value: Tensor) -> None:
        state = getattr(self, name)
        value = value.to(self.device) if isinstance(value, Tensor) else value
        if isinstance(state, list):
            state.append(value)
        else:  # after a sync in a full-state forward the state is one tensor
            setattr(self, name, torch.cat([state, value]))

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

    # ------------------------------------------------------------------ compute

    def _depth_kwargs(self) -> dict[str, Any]:
        depth, cover = M.depth_for(self.metric_names())
        return {"depth": depth, "cover_relevant": cover}

    def _state(self, name: str) -> Tensor | None:
        value = getattr(self, name)
        if isinstance(value, list):
            if not value:
                return None
            return dim_zero_cat(value)
        return value

    def _distributed(self) -> bool:
        return bool(self._to_sync and self.distributed_available_fn())

    def rank_table(self) -> RankTable:
        """The per-query rank table of everything seen so far (all processes), queries in a stable
        order (by sample id when ids were given)."""
        if self._table is None:
            self._table = self._build_table()
        return self._table

    def _build_table(self) -> RankTable:
        form = self.form
        self._check_forms(form)
        if int(form[_SCORES]):
            preds, target, indexes = (self._state(n) for n in ("s_preds", "s_target", "s_indexes"))
            return rank_scores(preds.cpu(), target.cpu(), indexes.cpu())
        if int(form[_TABLE]):
            return self._table_from_states()
        if int(form[_SAME_SOURCE]) or int(form[_QUERY]):
            return self._rank_embedding_states(same_source=bool(int(form[_SAME_SOURCE])))
        if int(form[_GALLERY]):
            raise ValueError("gallery items were given but no queries (update with role='query')")
        raise ValueError("no data: call `update` before `compute`")

    def _items(self, side: str) -> dict[str, Tensor | None]:
        out = {
            name: self._state(f"{side}_{name}")
            for name in ("emb", "labels", "ids", "cameras", "positions")
        }
        for name, value in list(out.items()):
            if value is not None and value.numel() == 0 and name != "emb":
                out[name] = None
        return out

    def _dedupe(self, items: dict[str, Tensor | None]) -> dict[str, Tensor | None]:
        ids = items["ids"]
        if items["emb"] is None or items["emb"].shape[0] == 0:
            return items
        if ids is None:
            _, world = rank_and_world(self.process_group)
            if world > 1 and not self._warned_no_ids:
                warnings.warn(
                    f"{type(self).__name__}: no `ids=` were given, so samples that "
                    "DistributedSampler repeated to even out the processes cannot be detected and "
                    "are counted twice; pass per-sample ids to `update`",
                    UserWarning,
                    stacklevel=3,
                )
                self._warned_no_ids = True
            return items
        keep = first_by_id(ids)
        return {name: None if v is None else v[keep.to(v.device)] for name, v in items.items()}

    def _rank_embedding_states(self, same_source: bool) -> RankTable:
        queries = self._dedupe(self._items("q"))
        gallery = queries if same_source else self._dedupe(self._items("g"))
        if self.gallery_sharded and not same_source:
            return self._rank_sharded(queries, gallery)
        if not same_source and gallery["emb"] is None:
            raise ValueError("queries were given but no gallery (update with role='gallery')")
        if queries["emb"] is None:
            raise ValueError("no data: call `update` before `compute`")
        num_q = queries["emb"].shape[0]
        q_ids, g_ids = queries["ids"], gallery["ids"]
        if same_source and q_ids is None:
            # self-exclusion by position: name every item by its index
            q_ids = g_ids = torch.arange(num_q)
        rank, world = rank_and_world(self.process_group) if self._distributed() else (0, 1)
        # Each process ranks a contiguous share of the queries against the whole gallery.
        lo, hi = rank * num_q // world, (rank + 1) * num_q // world
        share = slice(lo, hi)

        def part(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[share]

        table = rank_embeddings(
            queries["emb"][share],
            gallery["emb"],
            query_labels=part(queries["labels"]),
            gallery_labels=gallery["labels"],
            query_ids=part(q_ids),
            gallery_ids=g_ids,
            query_cameras=part(queries["cameras"]),
            gallery_cameras=gallery["cameras"],
            query_positions=part(queries["positions"]),
            gallery_positions=gallery["positions"],
            relevance=self.relevance,
            radius=self.radius,
            ignore_label=self.ignore_label,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
            **self._depth_kwargs(),
        )
        if world > 1:
            table = _gather_table(table, self.process_group)
        return table

    def _rank_sharded(self, queries: dict, gallery: dict) -> RankTable:
        if queries["emb"] is None:
            raise ValueError("no data: call `update` before `compute`")
        exchange = DistributedExchange(self.process_group) if self._distributed() else Exchange()
        emb = gallery["emb"]
        if emb is None:  # this process holds no gallery items
            emb = torch.zeros(0, queries["emb"].shape[1], dtype=queries["emb"].dtype)
        table = rank_embeddings_sharded(
            queries["emb"],
            emb,
            exchange,
            query_labels=queries["labels"],
            gallery_labels=_or_empty(gallery["labels"], queries["labels"]),
            query_ids=queries["ids"],
            gallery_ids=_or_empty(gallery["ids"], queries["ids"]),
            query_cameras=queries["cameras"],
            gallery_cameras=_or_empty(gallery["cameras"], queries["cameras"]),
            query_positions=queries["positions"],
            gallery_positions=gallery["positions"]
            if gallery["positions"] is not None
            else (
                None
                if queries["positions"] is None
                else torch.zeros(0, queries["positions"].shape[1], dtype=torch.float64)
            ),
            relevance=self.relevance,
            radius=self.radius,
            ignore_label=self.ignore_label,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
        )
        # what this process sent: its states (queries, its share of nothing else) and the
        # ranking's relevant scores and counts
        self.bytes_exchanged = exchange.sent + getattr(self, "_sync_bytes", 0)
        return table

    def _table_from_states(self) -> RankTable:
        counts = self._state("t_counts")
        above, tied, grade = self._state("t_above"), self._state("t_tied"), self._state("t_grade")
        num_rel, size = self._state("t_num_relevant"), self._state("t_gallery_size")
        depth, qid = self._state("t_depth"), self._state("t_query_id")
        ideal_counts, ideal_grade = self._state("t_ideal_counts"), self._state("t_ideal_grade")
        q_class = self._state("t_query_class")
        table = _assemble_table(
            counts, above, tied, grade, num_rel, size, depth, ideal_counts, ideal_grade, q_class
        )
        if qid is not None and bool((qid >= 0).all()) and qid.numel():
            table = table.select(first_by_id(qid))
        return table

    def _measure_options(self) -> dict[str, Any]:
        """The options every measure of this metric is computed with."""
        return {
            "ties": self.ties, "empty_queries": self.empty_queries, "average": self.average,
            "percent": self.percent, "ap": self.ap, "divisor": self.divisor, "gain": self.gain,
            "median": self.median,
        }

    def _values(self, table: RankTable) -> dict[str, Tensor]:
        return M.retrieval_measures(table, self.metric_names(), **self._measure_options())

    def compute(self) -> Tensor | dict[str, Tensor]:
        values = self._values(self.rank_table())
        return self._format({k: v.to(torch.float32) for k, v in values.items()})

    def reset(self) -> None:
        super().reset()
        self._table = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        # forward() computes on the batch alone; its table must not stand for the accumulation.
        out = super().forward(*args, **kwargs)
        self._table = None
        return out

    # ------------------------------------------------------------------ beyond compute()

    def per_query(self) -> dict[str, Tensor]:
        """Each query's value of every reported measure (NaN for skipped queries), queries in a
        stable order (by sample id when ids were given, else the order they arrived in)."""
        table = self._synced_table()
        out = {}
        for name in self.metric_names():
            spec = M.parse_metric(name)
            out[spec.name] = M.per_query_values(
                table, spec, ties=self.ties, ap=self.ap, divisor=self.divisor, gain=self.gain
            )
        return out

    def _synced_table(self) -> RankTable:
        if self._table is not None:
            return self._table
        with self.sync_context(
            dist_sync_fn=self.dist_sync_fn,
            should_sync=self._to_sync,
            should_unsync=self._should_unsync,
        ):
            return self.rank_table()

    def summary(
        self, level: float = 0.95, num_bootstrap: int = 1000, seed: int = 0
    ) -> stats.Summary:
        """Values with queries counted and skipped, gallery size, chance level and a confidence
        interval (seeded percentile bootstrap over queries). Prints as a table."""
        table = self._synced_table()
        return stats.summarize(
            table,
            self.metric_names(),
            **self._measure_options(),
            level=level,
            num_bootstrap=num_bootstrap,
            seed=seed,
        )

    def confidence_interval(
        self, level: float = 0.95, num_bootstrap: int = 1000, seed: int = 0
    ) -> dict[str, tuple[float, float]]:
        """An interval per reported value: Wilson's for hit rates without ties to average, else
        a seeded percentile bootstrap over queries (SPEC.md section 6)."""
        summary = self.summary(level=level, num_bootstrap=num_bootstrap, seed=seed)
        return {row["name"]: row["interval"] for row in summary.rows}

    def _sync_dist(self, dist_sync_fn: Any = None, process_group: Any = None) -> None:
        """Gather every "cat" state with :func:`gather_rows` (uneven sizes, empty processes)."""
        group = process_group or self.process_group
        names = [
            n
            for n, fx in self._reductions.items()
            if fx is dim_zero_cat and not (self.gallery_sharded and n.startswith("g_"))
        ]
        local = []
        for name in names:
            value = getattr(self, name)
            if isinstance(value, list):
                value = dim_zero_cat(value) if value else torch.zeros(0, dtype=torch.int64)
            local.append(value)
        self._sync_bytes = sum(t.numel() * t.element_size() for t in local)
        gathered = gather_rows(local, group)
        for name, value in zip(names, gathered, strict=True):
            setattr(self, name, value)
        form = self.form.clone()
        form_all = gather_rows([form[None, :]], group)[0]
        self.form = form_all.max(0).values

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """torchmetrics' ``plot``: ``(fig, ax)``; hit rate vs K with its chance curve for metrics
        that report a curve (CMC, several hit rates). See :mod:`retrieval_metrics.plot`."""
        from retrieval_metrics.plot import plot_metric

        return plot_metric(self, val, ax)


# ---------------------------------------------------------------------- helpers


def _choice(name: str, value: Any, options: Sequence[Any]) -> None:
    if value not in options:
        raise ValueError(f"`{name}` must be one of {tuple(options)}, got {value!r}")


def _score_copy(emb: Tensor) -> Tensor:
    """Detached copy in the dtype the ranking scores in (half precision -> float32)."""
    dtype = torch.float64 if emb.dtype == torch.float64 else torch.float32
    return emb.detach().to(dtype)


def _or_empty(value: Tensor | None, like: Tensor | None) -> Tensor | None:
    """A gallery shard with no items still needs empty per-item tensors where queries have them."""
    if value is not None or like is None:
        return value
    return torch.zeros(0, dtype=torch.int64)


def first_by_id(ids: Tensor) -> Tensor:
    """Indices of the first occurrence of each id, in ascending id order: repeats (e.g. samples
    DistributedSampler padded in) are dropped, and the order does not depend on how the data was
    split over batches or processes."""
    ids = ids.cpu()
    order = torch.argsort(ids, stable=True)
    sorted_ids = ids[order]
    first = torch.ones_like(sorted_ids, dtype=torch.bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    return order[first]


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
        total = torch.as_tensor(num_relevant, dtype=torch.int64).reshape(-1)
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


def _assemble_table(
    counts, above, tied, grade, num_rel, size, depth, ideal_counts, ideal_grade, q_class
) -> RankTable:
    n = counts.numel()
    ptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(counts.cpu().to(torch.int64), 0, out=ptr[1:])
    grade = grade.cpu().to(torch.float64) if grade is not None else None
    graded = grade is not None and grade.numel() > 0 and not bool(torch.isnan(grade).all())
    ideal_ptr = None
    ideal = None
    if ideal_counts is not None and bool((ideal_counts >= 0).all()) and n:
        ideal_ptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(ideal_counts.cpu().to(torch.int64), 0, out=ideal_ptr[1:])
        ideal = ideal_grade.cpu().to(torch.float64) if ideal_grade is not None else torch.zeros(0)
    if graded and ideal_ptr is None:
        raise ValueError("graded and binary ranked lists cannot be mixed in one metric")
    cls = q_class.cpu().to(torch.int64) if q_class is not None else None
    return RankTable(
        ptr=ptr,
        above=above.cpu().to(torch.int64),
        tied=tied.cpu().to(torch.int64),
        num_relevant=num_rel.cpu().to(torch.int64),
        gallery_size=size.cpu().to(torch.int64),
        depth=depth.cpu().to(torch.int64),
        grade=grade if graded else None,
        ideal_ptr=ideal_ptr if graded else None,
        ideal_grade=ideal if graded else None,
        query_class=cls if cls is not None and bool((cls != -1).any()) else None,
    )


def _gather_table(table: RankTable, group: Any) -> RankTable:
    """Every process's share of the rank table, in process order (contiguous query shares)."""
    ideal_counts = (
        table.ideal_ptr.diff()
        if table.ideal_ptr is not None
        else torch.full((table.num_queries,), -1, dtype=torch.int64)
    )
    parts = [
        table.ptr.diff(),
        table.above,
        table.tied,
        table.grade if table.grade is not None else torch.zeros(0, dtype=torch.float64),
        table.num_relevant,
        table.gallery_size,
        table.depth,
        ideal_counts,
        table.ideal_grade if table.ideal_grade is not None else torch.zeros(0, dtype=torch.float64),
        table.query_class
        if table.query_class is not None
        else torch.full((table.num_queries,), -1, dtype=torch.int64),
    ]
    (counts, above, tied, grade, num_rel, size, depth, i_counts, i_grade, q_class) = gather_rows(
        parts, group
    )
    return _assemble_table(
        counts,
        above,
        tied,
        grade if grade.numel() else None,
        num_rel,
        size,
        depth,
        i_counts,
        i_grade,
        q_class,
    )
