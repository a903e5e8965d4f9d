"""The one-direction metric: accumulates any input form, ranks once, reports named measures.

The input forms (embeddings, same source or query and gallery; a fixed gallery; ranked lists;
precomputed ranks; torchmetrics' preds/target/indexes) are small objects in
:mod:`retrieval_metrics.metrics.forms`; this class picks the form of each ``update()`` call,
keeps one bit per kind of state so that forms are never mixed (also across processes), and at
``compute()`` ranks the synced states once: the whole table, or a chunk of queries at a time
where the relevant pairs would not fit ``memory_budget``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import stats
from retrieval_metrics.functional.measures.aggregation import (
    QueryParts,
    aggregate_query_parts,
    counted_values,
    query_parts_in_chunks,
)
from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.functional.ranking.engine.listing import listing
from retrieval_metrics.functional.ranking.items import ITEM_FIELDS, Items
from retrieval_metrics.functional.ranking.options import BlockedEngine
from retrieval_metrics.functional.ranking.qrels import Judgments
from retrieval_metrics.functional.table import PRESENT, TABLE_PARTS, RankTable, has_part
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.base import RetrievalMetricBase
from retrieval_metrics.metrics.forms import (
    FORMS,
    Batch,
    FixedGallery,
    FormContext,
    InputForm,
    form_of_call,
    form_of_kind,
    kinds,
)
from retrieval_metrics.metrics.inputs import read_ids
from retrieval_metrics.metrics.ranking import Ranking
from retrieval_metrics.metrics.runs import run_of

__all__ = ["RetrievalMetric"]


class RetrievalMetric(RetrievalMetricBase):
    """Base of the one-direction metrics: accumulates any input form, ranks once, reports named
    measures.

    Args:
        gallery_sharded: for galleries too large for one device: gallery items given with
            ``role="gallery"`` stay on the process that received them, the queries are gathered,
            each process ranks every query against its shard, and only relevant scores and counts
            cross between processes (and the gallery ids, 8 bytes an item, so that an item two
            processes hold, DistributedSampler's padding, counts once). Same values, with
            ``qrels=`` too; self-exclusion needs ``ids=``; without ids the shards must not repeat
            items across processes.
        qrels: judgments (BEIR, MTEB, TREC): a mapping query id -> collection of document ids,
            or -> {document id: grade} (as ``retrieval_metrics.formats.read_qrels`` returns
            it). Queries come with ``update(q, ids=query_ids, role="query")``, the corpus with
            ``update(d, ids=doc_ids, role="gallery")`` or :meth:`set_gallery`; a grade <= 0 is
            judged not relevant, a judged document the corpus lacks is relevant and never
            retrieved. The rules are on the definitions page of the documentation.
        ignore_identical_ids: with ``qrels``: leave the document whose id is the query's id out
            of its ranking (BEIR's and MTEB's ``ignore_identical_ids``). None (default): left
            out, but integer ids that collide are refused (query ids 0..Q-1 and document ids
            0..N-1 from two counters would drop document i from query i's ranking): say True
            (a query is a corpus document) or False (the ids are two numberings).
        run_depth: keep each query's ``run_depth`` best items as the ranking counts them, so
            that :meth:`run` (``k <= run_depth``) lists them without ranking the states again:
            one pass over the corpus for the values and the run, as the command line's
            ``--write-run --run-depth``. Kept by the ranking ``compute()`` makes of queries and
            a gallery given in updates or with :meth:`set_gallery` (with or without ``qrels``,
            every query judged; on several processes each ranks its share of the queries, and
            the lists are gathered), whichever of ``run()`` and ``compute()`` comes first.
            Elsewhere (a set ranked against itself, ``ties="id"``, a gallery split over
            processes, a half-precision corpus on disk ranked by cosine on a device's tensor
            cores, a block whose cut may fall in a tie on a device, a ranking that takes the
            gallery in an order of its own, as euclidean with labels) :meth:`run` ranks again:
            the same run either way. The ranking pays the lists' upkeep, and no query leaves
            its products early. None (default): none kept.
        kwargs: the options of :class:`RetrievalMetricBase` and of ``torchmetrics.Metric``.
    """

    def __init__(
        self,
        *,
        gallery_sharded: bool = False,
        qrels: Any = None,
        ignore_identical_ids: bool | None = None,
        run_depth: int | None = None,
        **kwargs: Any,
    ) -> None:
        if qrels is not None:
            if kwargs.get("relevance") not in (None, "qrels"):
                raise ValueError(
                    f"`qrels` decide relevance: leave `relevance` out (got "
                    f"relevance={kwargs['relevance']!r})"
                )
            kwargs["relevance"] = "qrels"
        super().__init__(ignore_identical_ids=ignore_identical_ids, **kwargs)
        self.qrels = None if qrels is None else Judgments.of(qrels)
        if self.relevance == "qrels" and self.qrels is None:
            raise ValueError('relevance="qrels" needs the judgments: pass `qrels=`')
        if self.qrels is None and ignore_identical_ids is not None:
            raise ValueError("`ignore_identical_ids` applies with `qrels=` only")
        if not isinstance(gallery_sharded, bool):
            raise ValueError(f"`gallery_sharded` must be a bool, got {gallery_sharded!r}")
        self.gallery_sharded = gallery_sharded
        if run_depth is not None and (
            not isinstance(run_depth, int) or isinstance(run_depth, bool) or run_depth < 1
        ):
            raise ValueError(f"`run_depth` must be a positive int or None, got {run_depth!r}")
        self.run_depth = run_depth
        if gallery_sharded and not isinstance(self.engine, BlockedEngine):
            raise ValueError(
                "gallery_sharded=True ranks with the blocked engine only (each shard's counts are "
                f"exchanged between its block products), not {self.engine!r}: leave `engine` "
                "out, or gather the gallery (gallery_sharded=False)"
            )
        if gallery_sharded and self.ties == "id":
            raise ValueError(
                "ties='id' (tied items by ascending gallery id) is not available with "
                "gallery_sharded=True: each shard would need the others' ids to place its ties; "
                "gather the gallery (gallery_sharded=False) or choose another `ties`"
            )
        self.add_state("form", torch.zeros(len(kinds()), dtype=torch.int64), dist_reduce_fx="max")
        #: the ``form`` tensor last read or written and its bits (_form_bits)
        self._form_known: tuple[Tensor, list[int]] | None = None
        # what every process must agree on, compared after the sync (three entries a process;
        # the kinds of the keys are the base's state): the judgments', the options' and the
        # fixed gallery's fingerprints (0: none given; the gallery's is written into the copy
        # the sync gathers, _sync_dist: the gallery is no state, and outlives a reset())
        self.add_state(
            "agreement",
            torch.tensor(
                [0 if self.qrels is None else self.qrels.fingerprint, self.options.fingerprint, 0],
                dtype=torch.int64,
            ),
            dist_reduce_fx="cat",
        )
        self._gallery_print = 0

        self.store.add_side("q")
        self.store.add_side("g")
        for part in TABLE_PARTS:
            self.store.add(f"t_{part.name}")
        self.store.add(f"t_{PRESENT}")
        for name in ("preds", "target", "indexes"):
            self.store.add(f"s_{name}")
        self._gallery: Items | None = None
        # what is derived once from the synced states, kept until they change (the agreed form,
        # the deduplicated sides while a ranking runs, the miss table): one typed object
        self._ranking: Ranking[InputForm] = Ranking()
        # with qrels: an id of each side as the user last gave it, for the messages of ids that
        # do not meet the judgments' (the states hold the ids' codes only)
        self.id_examples = {}  # type: ignore[var-annotated]

    def _format(self, values: dict[str, Tensor]) -> Tensor | dict[str, Tensor]:
        """Turn the named values into what ``compute()`` returns (a 0-d tensor for one value)."""
        if len(values) == 1:
            return next(iter(values.values()))
        return values

    def _local_states(self) -> set[str]:
        if not self.gallery_sharded:
            return set()
        return {f"g_{name}" for name in ITEM_FIELDS}

    def _forget_ranking(self) -> None:
        super()._forget_ranking()
        held = self.__dict__.get("_ranking")
        if held is None or not held.empty():
            self._ranking = Ranking()

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
        """Fix the gallery once: later ``update(..., role="query")`` calls add queries only,
        kept as given (embeddings, labels, ids, ...), and ``compute()`` ranks them all at once
        against this gallery, the one set last: queries given in small updates share its
        passes over the gallery, as one update would. Only the queries are states (gathered
        across processes); the gallery stays with the metric, on every process alike.

        ``embeddings`` may also be a corpus on disk, read a block at a time and never whole:
        the path of a ``.npy`` file, a glob or a list of them (their rows in that order), or
        memory-mapped arrays (``numpy.load(path, mmap_mode="r")``); ``ids`` then may be the
        path of a text file (one id a line) or of a ``.npy`` array. Its values are read (and
        checked for NaN and infinities) by each ranking as it reads them: a NaN in the file is
        refused by ``compute()`` (or :meth:`run`, or :func:`~retrieval_metrics.functional.top_k`),
        not here."""
        if isinstance(ids, (str, Path)):
            ids = read_ids(ids)
        keys = {"labels": labels, "ids": ids, "cameras": cameras, "positions": positions}
        self._gallery = FixedGallery.set(self.context(), embeddings, keys)
        self._gallery_print = 0  # (hashed when a query is ranked against it on many processes)
        self._note_id_example("gallery", ids)
        # the value compute() kept, and its ranking, were the gallery's before (torchmetrics
        # marks the value stale only when a state changes: a gallery given once is none)
        self._computed = None

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """torchmetrics' ``forward`` (see the base class). A batch of one side
        (``role="query"`` or ``"gallery"``) has no value alone unless the gallery is fixed
        (:meth:`set_gallery`): torchmetrics' forward would set the states aside, score the
        batch alone, fail for want of the other side, and leave them lost. Refused first."""
        role = kwargs.get("role")
        if role is not None and self._gallery is None:
            raise ValueError(
                f"{type(self).__name__}(...) was called (forward) with role={role!r}: a batch of "
                "one side has no value alone, since forward() scores its batch against itself. "
                f"Add it with `update(..., role={role!r})` and log the metric object (or "
                "compute() at the end of the epoch); nothing was added"
            )
        return super().forward(*args, **kwargs)

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
        """Add one batch, in any one of the input forms (:mod:`retrieval_metrics.metrics.forms`):

        * embeddings, same source: ``update(embeddings, labels)``;
        * separate sets: ``update(q, q_labels, role="query")`` and ``update(g, g_labels,
          role="gallery")``, or a fixed gallery given once with :meth:`set_gallery`;
        * judgments (``qrels=`` on the metric): ``update(q, ids=query_ids, role="query")`` and
          ``update(d, ids=doc_ids, role="gallery")`` (or :meth:`set_gallery`), ranked against
          the whole corpus, relevance by the qrels;
        * ranked lists: ``update(ranked_ids=[...], relevant_ids=[...])`` (ids int or str; a dict
          of id -> grade for graded relevance);
        * torchmetrics' form: ``update(preds=scores, target=relevance, indexes=query_index)``;
        * precomputed ranks: ``update(relevant_ranks=[[1, 4], [2], ...])`` (1-based ranks of each
          query's relevant items; ``num_relevant=`` may add relevant items never retrieved).

        Optional per-item values on embedding updates: ``ids=`` (sample ids: duplicates are
        dropped, self-exclusion uses them), ``cameras=`` (re-id), ``positions=``
        (``relevance="radius"``).
        """
        self._forget_ranking()
        batch = Batch(
            embeddings=embeddings, labels=labels, role=role, ids=ids, cameras=cameras,
            positions=positions, ranked_ids=ranked_ids, relevant_ids=relevant_ids, preds=preds,
            target=target, indexes=indexes, relevant_ranks=relevant_ranks,
            num_relevant=num_relevant,
        )
        context = self.context()
        form, batch = form_of_call(batch, context)
        if self.qrels is not None and form.kind not in ("qrels", "fixed_gallery"):
            raise ValueError(
                f"`qrels=` scores query and corpus embeddings; {form.call} does not read them "
                "(give ranked lists their judgments as `relevant_ids=`, on a metric without "
                "`qrels=`)"
            )
        # marked before the batch is checked and appended, unmarked when it is refused: a form
        # of another kind is refused before any state changes
        before = self.form
        self._mark(form.kind)
        try:
            form.append(context, batch)
        except BaseException:
            self.form = before
            raise
        self._note_id_example(role or "query", ids)

    def run(self, k: int = 100, *, ids: Any = None) -> dict[str, list[tuple[str, float]]]:
        """Each query's ``k`` best gallery items and their scores, as ``compute()`` ranks them
        (the similarity, duplicate ids dropped, and none of the items its ranking leaves out: a
        query never lists itself, the gallery item of its id, nor in re-identification the items
        of its label and camera, nor the ``ignore_label``'s; with qrels, a document of its own
        id unless ``ignore_identical_ids=False``): query id -> ``[(document id, score), ...]``
        best first, ids
        as text, for :func:`retrieval_metrics.formats.write_run` (TREC, JSON, JSONL). Tied
        scores at the cut go to the item the states hold first (same source: the smaller id,
        string ids by their 64-bit codes, which is no alphabetical order; a separate gallery:
        as given, on one process), or under ``ties="id"`` to the smaller id of a separate
        gallery (strings by code point, as ``ties="id"`` ranks them).

        For embeddings whose states hold both sides (same source; queries and gallery in
        updates, with or without ``qrels``), and for queries ranked against a gallery given with
        :meth:`set_gallery` (a corpus on disk read again a block at a time, never whole: the
        run ``retrieval-metrics evaluate --write-run`` writes for the same files). String ids
        are kept as 64-bit codes: give ``ids``, every id as given (in any order, e.g. the
        dataset's query and document ids), to have them back. On several processes, every
        process calls it and gets the whole run; with ``gallery_sharded=True`` each lists the
        best of its shard and the lists are merged (tied scores at the cut by id code).

        It ranks the states again (about one more product over the gallery), unless the metric
        has ``run_depth >= k`` and its ranking keeps their lists (see ``run_depth``): then
        ``compute()`` and ``run()``, in either order, take one ranking.

        >>> from retrieval_metrics import RetrievalMetrics
        >>> m = RetrievalMetrics(["mrr"], similarity="dot")
        >>> m.update(torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0]]), torch.tensor([0, 0, 1]),
        ...          ids=["a", "b", "c"])
        >>> run = m.run(k=2, ids=["a", "b", "c"])
        >>> run["a"], run["b"]
        ([('b', 2.0), ('c', 0.0)], [('c', 3.0), ('a', 2.0)])
        """
        def listed() -> dict[str, list[tuple[str, float]]]:
            strings = self.store.has_string("ids", ("q", "g"))
            form = self._synced_form()
            if self.run_depth is not None and k <= self.run_depth and self._keeps_lists(form):
                # one pass for the values and the run, whichever of run() and compute() is
                # called first: the ranking compute() reads is made here, with the lists
                self._ranked()
            context = self.context()
            return run_of(
                context, form, k, ids, string_ids=strings, several=context.processes.several,
                kept=self._kept_lists(k),
            )

        return self._on_synced_states(listed)

    def kept_lists(self, k: int) -> tuple[Tensor, Tensor] | None:
        """What :meth:`run` lists without another product, as arrays: the ``k`` best items
        (``k <= run_depth``) that ``compute()``'s ranking kept for each query row given to
        ``update()`` (every update's rows in order, a repeated id's rows alike), as the rows of
        the gallery it ranked (``set_gallery``'s, or the updates' one per id; -1 past a
        query's end) and their scores. None where the ranking kept none (see ``run_depth``),
        or none was made since the last update."""

        def rows_given() -> tuple[Tensor, Tensor] | None:
            kept = self._kept_lists(k)
            if kept is None:
                return None
            rows, scores = kept[0][:, :k], kept[1][:, :k]
            keep = self.store.deduped_rows("q", "`ids` of the queries")
            if keep is None:  # every row ranked as given
                return rows, scores
            # each row given takes the lists of the row of its id that was ranked
            given = self.store.read("q_ids")
            assert given is not None  # (rows are dropped by id only)
            ranked = given.index_select(0, keep.to(given.device))
            order = torch.argsort(ranked)
            at = order[torch.searchsorted(ranked[order], given)]
            return rows.index_select(0, at.to(rows.device)), scores.index_select(
                0, at.to(scores.device)
            )

        return self._on_synced_states(rows_given)

    def _kept_lists(self, k: int) -> tuple[Tensor, Tensor] | None:
        """The lists compute()'s ranking of these states kept for :meth:`run` (``run_depth >=
        k``); None: none hold."""
        if self.run_depth is None or k > self.run_depth:
            return None
        kept = self._ranking.run_lists
        # (-2: lists a device kept with no wait, which may break a tie at a block's cut
        # otherwise than the tie order; one read of the device, here, not one per ranking)
        if kept is None or bool((kept[0] == -2).any()):
            return None
        return kept

    def _note_id_example(self, side: str, ids: Any) -> None:
        if self.qrels is None or ids is None or len(ids) == 0:
            return
        first = ids[0]
        self.id_examples[side] = first.item() if hasattr(first, "item") else first

    def _mark(self, kind: str) -> None:
        """Record that this metric's states hold ``kind`` (refused when another kind is in)."""
        bits = self._form_bits()
        index = kinds().index(kind)
        marked, bits[index] = bits[index], 1
        self._form_of_bits(bits)
        if marked:
            return  # marked by an earlier update: the state stays as it is
        # (written on the host and sent: setting one entry of a device tensor from a Python
        # value copies that value from the host, a sync of its own)
        self.form = to_device(torch.tensor(bits, dtype=self.form.dtype), self.form.device)
        self._form_known = (self.form, bits)

    def _form_bits(self) -> list[int]:
        """The ``form`` state's bits, read from the device once: an update writes the tensor
        and keeps its bits, so the next update reads them from the host (on a GPU, one wait
        for the device less per update). Nothing writes a state in place (torchmetrics and
        this class replace it: reset, ``.to``, a loaded or merged state, the sync's
        reduction), so another tensor is a change, and its bits are read again."""
        known = self._form_known
        if known is not None and known[0] is self.form:
            return list(known[1])
        bits = self.form.tolist()  # the bits in one host read
        self._form_known = (self.form, bits)
        return list(bits)

    @staticmethod
    def _form_of_bits(bits: list[int]) -> InputForm | None:
        """The form that reads states marked ``bits`` (the ``form`` state as read, one entry
        per kind; None for none), refused when they mix kinds (across processes too: the bits
        are reduced with max)."""
        used = [kind for kind, bit in zip(kinds(), bits, strict=True) if bit]
        if len(used) > 1:
            names = [f.description for f in FORMS if f.kind in used]
            raise ValueError(
                "one metric takes one input form; got "
                f"{', '.join(dict.fromkeys(names))}. Use a separate metric per form "
                "(same-source updates cannot be mixed with role='query'/'gallery')"
            )
        return form_of_kind(used[0]) if used else None

    def _input_form(self) -> InputForm:
        """The form of the states: as the ranking found it on the synced states (a process that
        received nothing reads every process's form), else from this process's bits."""
        form = self._ranking.form or self._form_of_bits(self._form_bits())
        if form is None:
            raise ValueError("no data: call `update` before `compute`")
        return form

    def _synced_form(self) -> InputForm:
        """:meth:`_input_form` on the synced states, kept in the ranking for what reads it after
        the sync; refused on every process where the processes disagree. Checked once per
        ranking, the form's and the keys' bits in one host read."""
        if self._ranking.form is None:
            self._ranking.form = self._agreed_form()
        return self._ranking.form

    def _agreed_form(self) -> InputForm:
        """What every process (and every update) must agree on, on the synced states: one
        input form, the same judgments, and each side's labels, ids and cameras all integers
        or all strings."""
        n, kinds = self.form.numel(), self.key_kinds.numel()
        # (one host read for the bits and the fingerprints)
        bits = torch.cat(
            [self.form.reshape(-1), self.key_kinds.reshape(-1), self.agreement.reshape(-1)]
        ).tolist()
        self.store.check_kinds(bits[n : n + kinds])
        self._check_agreement(bits[n + kinds :])
        form = self._form_of_bits(bits[:n])
        if form is None:
            raise ValueError("no data: call `update` before `compute`")
        return form

    def _sync_dist(self, dist_sync_fn: Any = None, process_group: Any = None) -> None:
        if self._gallery is not None:
            # the fixed gallery's fingerprint, in what the processes compare (written into the
            # states the sync gathers; unsync restores the process's own; a corpus's keys
            # hashed once, not at every set_gallery)
            if not self._gallery_print:
                self._gallery_print = FixedGallery.fingerprint(self._gallery)
            at = to_device(torch.tensor([2]), self.agreement.device)
            self.agreement = (
                self.agreement.view(-1, 3).index_fill(1, at, self._gallery_print).view(-1)
            )
        super()._sync_dist(dist_sync_fn, process_group)

    def _check_agreement(self, prints: list[int]) -> None:
        """Refuse processes that were given different judgments, options or fixed galleries:
        each ranks a share of the queries against its own copy of the gallery (or its shard)
        before the merge, so their results would be mixed into one value. ``prints``: three
        fingerprints a process (:attr:`agreement`)."""
        rows = [prints[i : i + 3] for i in range(0, len(prints), 3)]
        owner = type(self).__name__
        for column, what in enumerate(("`qrels`", "options", "galleries with `set_gallery`")):
            # (a process without set_gallery has 0 there: refused beside one with a gallery)
            seen = {row[column] for row in rows}
            if len(seen) <= 1:
                continue
            advice = (
                "every process must score against the same judgments",
                "every process must make the metric with the same options (memory_budget "
                "aside)",
                "set_gallery fixes the whole gallery on every process: the same rows in the "
                "same order (the fingerprint reads the ids and keys in order); for a gallery "
                "split over the processes, update(d, ids=..., role='gallery') each process's "
                "part with gallery_sharded=True",
            )[column]
            raise ValueError(
                f"{owner}: the processes were given different {what} ({len(seen)} different "
                f"among {len(rows)} processes, compared by fingerprint); {advice}"
            )

    def _skip_reason(self) -> str:
        form = self._ranking.form or self._form_of_bits(self._form_bits())
        return form.skip_reason(self.context()) if form is not None else super()._skip_reason()

    def sample_ids(self) -> dict[str, Tensor]:
        # same-source items are queries too; gallery ids are not listed (validation and test
        # queries may share one corpus)
        parts = [self.store.read("q_ids")]
        present = self.store.read(f"t_{PRESENT}")
        if present is not None and present.numel():
            parts.append(self.store.read("t_query_id")[has_part(present, "query_id")])
        ids = [p.reshape(-1).cpu() for p in parts if p is not None and p.numel()]
        return {"query": torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)}

    # ------------------------------------------------------------------ compute

    def context(self) -> FormContext:
        """What this metric's input form sees of it for one call: the stored sides, the
        options, the ranking's options and the processes the states are synced over."""
        return FormContext(
            store=self.store,
            options=self.options,
            names=self.metric_names(),
            owner=type(self).__name__,
            processes=self._processes(),
            qrels=self.qrels,
            gallery_sharded=self.gallery_sharded,
            fixed_gallery=self._gallery,
            id_examples=self.id_examples,
            engine=self.engine,
            ranking=self._ranking,
            run_depth=self.run_depth,
        )

    def _build_tables(self) -> dict[str, RankTable]:
        with self.store.one_ranking(self._ranking):
            form = self._synced_form()
            context = self.context()
            table = form.table(context)
            # counted on the synced states with the table (summary() reads them after the
            # states are let go: a form may count what its table leaves out)
            self._notes = form.notes(context, table)
        if context.bytes_exchanged is not None:
            self.bytes_exchanged = context.bytes_exchanged
        if table.num_queries == 0:
            raise ValueError("no items were given: every update had 0 rows (0 queries to score)")
        return {"": table}

    def _tables_in_chunks(self) -> Iterator[RankTable] | None:
        """The rank table a chunk of queries at a time, or None where it is ranked whole (the
        input form decides: ``InputForm.tables_in_chunks``)."""
        return self._input_form().tables_in_chunks(self.context())

    def _keeps_lists(self, form: InputForm) -> bool:
        """Whether the ranking of states of ``form`` keeps the run's lists (``run_depth``): the
        rankings that share the queries out (on several processes, each ranks a contiguous
        share against the whole gallery, its lists gathered after)."""
        return self.run_depth is not None and (
            form.kind in ("query_gallery", "qrels", "fixed_gallery")
            and not (self._processes().several and self.gallery_sharded)
        )

    def _rank_once(self) -> None:
        """Rank the synced states once: the whole table, or every process's per-query parts of
        a ranking a chunk of queries at a time; the deduplicated sides are let go after. With
        ``run_depth``, the run's lists kept as the ranking counts, where they can be."""
        with self.store.one_ranking(self._ranking):
            form = self._synced_form()
            several = self._processes().several
            keep = self._keeps_lists(form)
            with listing(self.run_depth) if keep else nullcontext() as kept:
                chunks = self._tables_in_chunks()
                if chunks is None:
                    self._tables = self._build_tables()
                else:
                    self._chunk_parts = self._parts_of(chunks)
            queries = self._ranking.queries
            if kept is not None and queries is not None and queries.items is not None:
                # (None where a ranking kept none, or ranked other queries than the states'
                # deduplicated ones: judged queries only; run() then ranks again. Not read
                # from the device here: run() reads whether they hold)
                if not several:
                    self._ranking.run_lists = kept.unread(len(queries.items))
                else:
                    share = D.query_share(len(queries.items), self.process_group)
                    count = share.stop - share.start
                    none = (torch.zeros(0, dtype=torch.int64), torch.zeros(0))
                    mine = kept.unread(count) if count else none
                    self._ranking.run_lists = D.gather_lists(mine, self.process_group)

    def _parts_of(self, chunks: Iterator[RankTable]) -> tuple[QueryParts, RankTable]:
        """Every process's per-query parts and query fields of a ranking in chunks."""
        parts, queries = query_parts_in_chunks(
            chunks, self.metric_names(), options=self.measure_options
        )
        exchange = self._query_parts_exchange()
        if exchange is not None:
            parts, queries = exchange(parts, queries)
        return parts, queries

    def _ranked(self) -> None:
        """The ranking of the current states, made once until ``update()`` or ``reset()``."""
        if self._tables is None and self._chunk_parts is None:
            self._on_synced_states(self._rank_once)

    def _query_parts_exchange(self) -> Callable[..., Any] | None:
        """How query chunks ranked on several processes are put together: every process's
        per-query parts and query fields, in process order (None on one process)."""
        if not self._processes().several:
            return None
        return functools.partial(D.gather_query_parts, group=self.process_group)

    def _per_query_values(self, table: RankTable, spec: M.MetricSpec) -> Tensor:
        return self._input_form().per_query_values(self.context(), table, spec)

    def _per_query_rows(self) -> dict[str, tuple[Tensor, Tensor | None]]:
        # many relevant items per query: ranked and reduced a chunk of queries at a time, as in
        # compute(), so that the whole table never exists (on several processes each ranks its
        # share and the per-query values are gathered)
        self._ranked()
        if self._chunk_parts is None:
            return super()._per_query_rows()
        parts, queries = self._chunk_parts
        return {
            name: (to_device(counted_values(
                values, queries, M.parse_metric(name), self.measure_options
            ), self.device), queries.query_id)
            for name, (values, _, _) in parts.items()
        }

    def ranking_fields(self) -> dict[str, RankTable]:
        self._ranked()
        if self._chunk_parts is None:
            return super().ranking_fields()
        return {"": self._chunk_parts[1]}

    def _summaries(self, options: dict[str, Any]) -> list[tuple[str, stats.Summary]]:
        # many relevant items per query: from the per-query parts of the ranking in chunks
        self._ranked()
        if self._chunk_parts is None:
            return super()._summaries(options)
        parts, queries = self._chunk_parts
        return [("", stats.summarize_query_parts(queries, parts, self.metric_names(), **options))]

    def _summary_notes(self) -> dict[str, int]:
        self._ranked()
        if self._chunk_parts is not None:
            return {}
        self.rank_table()
        return dict(self._notes)

    def _values_of_parts(self, parts: QueryParts, queries: RankTable) -> dict[str, Tensor]:
        values = aggregate_query_parts(queries, parts, options=self.measure_options)
        self._warn_if_all_skipped(queries.num_relevant, stacklevel=4)
        return values

    def compute(self) -> Tensor | dict[str, Tensor]:
        self._ranked()
        if self._chunk_parts is not None:
            parts, fields = self._chunk_parts
            values = self._values_of_parts(parts, fields)
        else:
            self._warn_if_all_skipped()
            fields = self.rank_table()
            values = self._input_form().values(self.context(), fields)
        self._warn_if_cutoffs_reach_gallery({"": fields})
        self._warn_if_unjudged({"": fields})
        if self.all_skipped == "zero" and not bool((fields.num_relevant > 0).any()):
            values = {k: torch.nan_to_num(v, nan=0.0) for k, v in values.items()}
        # on the metric's device, as torchmetrics returns its values (the tables are host data)
        return self._refuse_several_in_log(self._format(
            {k: self._result(v) for k, v in values.items()}
        ))
