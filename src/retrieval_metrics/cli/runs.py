"""The command line's inputs: the runs it reads from its arguments (embedding files, query and
gallery pairs, TREC or JSONL runs with their qrels), the metric each is scored by, and the lines
that describe a run. ``evaluate`` and ``compare`` (:mod:`retrieval_metrics.cli.commands`) read their
systems here."""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_metrics.cli import data
from retrieval_metrics.cli.errors import CLIError, in_flags
from retrieval_metrics.cli.parser import (
    APPLIES,
    EMBEDDING_METRICS,
    FORMS,
    QRELS_METRICS,
    TREC_METRICS,
)
from retrieval_metrics.cli.progress import Progress
from retrieval_metrics.formats import (
    EmbeddingFile,
    load_items,
    read_qrels,
    read_ranked_lists,
)
from retrieval_metrics.formats.embeddings import ARRAYS, check_pair

__all__ = [
    "CLIError",
    "Run",
    "check_options",
    "check_plot_depth",
    "describe",
    "effective_options",
    "evaluate_embeddings",
    "evaluate_trec",
    "input_forms",
    "options_line",
    "runs_from_args",
    "scored",
    "version",
]


def check_plot_depth(table: Any, plot_k: int | None, protocol: str | None) -> None:
    """Refuse a ``--plot-k`` below the depth an evaluator's protocol ranked judgments to."""
    if plot_k is None:
        return
    short = table.truncated_above(plot_k)
    if bool(short.any()):
        depth = int(table.depth[short].min())
        raise CLIError(
            f"--plot-k {plot_k} reaches below the {depth} documents that --protocol {protocol} "
            f"ranks to (the depth of its evaluator's run); give --plot-k {depth} or less, or "
            "leave --protocol out to rank every judged document in the whole corpus"
        )


# ---------------------------------------------------------------------------- progress bar


# ---------------------------------------------------------------------------- evaluation


@dataclass
class Run:
    """One evaluated run: its metric object (state filled) and how it was read."""

    name: str
    kind: str
    files: list[str]
    metric: Any
    num_queries: int
    notes: dict[str, Any] = field(default_factory=dict)
    summary: Any = None
    queries_key: str = ""  # equal for two runs that score the same queries in the same order
    #: the query ids given to the metric, in the order given (None: the queries are keyed by
    #: their row numbers), what --per-query keys each value by
    query_ids: list[Any] | None = None


def _summarize(run: Run, args: argparse.Namespace, bar: Progress) -> Run:
    """Intervals and chance levels (the bootstrap can take a while: the bar stays up); for
    ``compare``, which summarizes the systems together, the ranking alone."""
    bar.phase(f"{run.name}: ranking")
    run.metric.per_query()  # the ranking of every query given, made (and kept) while the bar is up
    bar.advance()
    if not getattr(args, "summarize", True):
        return run
    bar.phase(f"{run.name}: intervals and chance")
    run.summary = run.metric.summary(level=args.level, num_bootstrap=args.bootstrap, seed=args.seed)
    if run.kind == "trec":
        for row in run.summary.rows:  # the collection a run was drawn from is unknown
            row["chance"] = None
    bar.advance()
    return run


def _chunks(n: int, parts: int = 20, minimum: int = 2048) -> list[slice]:
    size = max(minimum, math.ceil(n / parts))
    return [slice(lo, min(n, lo + size)) for lo in range(0, n, size)]


def evaluate_embeddings(
    metric: Any,
    query: EmbeddingFile,
    gallery: EmbeddingFile | None,
    progress: Progress | None = None,
) -> int:
    """Fill ``metric`` from the arrays: the gallery fixed once, queries given in chunks (ranked
    together by the metric's ranking, at its ``compute()``).

    Same values as ``update(embeddings, labels)`` (same source, ``gallery=None``) or
    ``update(..., role="query")`` / ``update(..., role="gallery")``: self-exclusion by sample id
    (by position when the file has no ids), an id repeated for the same sample kept once, one
    given to two different samples refused: a gallery's by ``set_gallery`` (which keeps the
    first occurrences, the rows ``data.first_occurrences`` gives the written run), a file
    ranked against itself by the queries' check (which names the file's ids, not a gallery).
    """
    same_source = gallery is None
    keep: np.ndarray | slice = slice(None)
    if same_source:
        if query.ids is None:
            query.ids = np.arange(len(query), dtype=np.int64)
        gallery = query
        keep = data.first_occurrences(gallery.ids)
        if isinstance(keep, np.ndarray) and keep.size == len(gallery):
            keep = slice(None)  # each id once: every row, in order
    g = data.select_rows(gallery, keep)
    metric.set_gallery(
        g["embeddings"], g["labels"], ids=g["ids"], cameras=g["cameras"], positions=g["positions"]
    )
    data.give_back_freed()  # (the ids' sorting and hashing, before the ranking's blocks)
    for part in _chunks(len(query)):
        q = data.select_rows(query, part)
        metric.update(
            q["embeddings"],
            q["labels"],
            role="query",
            ids=q["ids"],
            cameras=q["cameras"],
            positions=q["positions"],
        )
        if progress is not None:
            progress.advance(part.stop - part.start)
    return len(query)


def evaluate_trec(
    metric: Any,
    qids: list[str],
    ranked: list[list[str]],
    relevant: list[Any],
    progress: Progress | None = None,
) -> int:
    for part in _chunks(len(qids), minimum=500):
        # the qids as the queries' ids: per_query(ids=...) keys each value by them
        metric.update(ranked_ids=ranked[part], relevant_ids=relevant[part], ids=qids[part])
        if progress is not None:
            progress.advance(part.stop - part.start)
    return len(qids)


def drop_identical_ids(args: argparse.Namespace) -> bool:
    """Whether a run's document of the query's id leaves the run before it is scored: with
    ``--ignore-identical-ids true``, or by the ``--protocol``'s default (BEIR pops it)."""
    from retrieval_metrics.metrics.protocols import PROTOCOL_DEFAULTS

    if args.ignore_identical_ids is not None:
        return bool(args.ignore_identical_ids == "true")
    return bool(PROTOCOL_DEFAULTS.get(args.protocol or "", {}).get("ignore_identical_ids", False))


def _metric_factory(
    args: argparse.Namespace, names: list[str], trec: bool, qrels: dict[str, Any] | None = None
) -> Callable[[], Any]:
    import torch

    import retrieval_metrics as rm
    from retrieval_metrics.functional import measures as M
    from retrieval_metrics.protocols import library_names

    for name in library_names(args.protocol, names):
        try:
            M.parse_metric(name)
        except ValueError as err:
            raise CLIError(f"--metrics: {err}") from None
    options: dict[str, Any] = {}
    for option in (
        "similarity", "ties", "empty_queries", "relevance", "radius", "ignore_label", "average"
    ):
        value = getattr(args, option)
        if value is not None:
            options[option] = value
    if args.percent:
        options["percent"] = True
    # (each option given acts on this input: check_options refused the others)
    if args.duplicates is not None:
        options["duplicates"] = args.duplicates
    if args.ignore_identical_ids is not None and not trec:  # (a run's: drop_identical_ids)
        options["ignore_identical_ids"] = args.ignore_identical_ids == "true"
    if qrels is not None:
        options["qrels"] = qrels
    protocol = args.protocol
    if protocol is None and trec:
        protocol = "trec_eval"
    if protocol not in (None, "none"):
        options["protocol"] = protocol
    if not trec and getattr(args, "write_run", None) is not None:
        # the evaluation's ranking keeps the run's lists as it counts (data.kept_lists)
        options["run_depth"] = data.run_depth(args)

    device = None if trec else checked_device(getattr(args, "device", None))

    def factory() -> Any:
        try:
            metric = rm.RetrievalMetrics(names, **options)
        except (TypeError, ValueError) as err:
            raise CLIError(in_flags(str(err))) from None
        # compute() in float64, the measures' own precision: `compare --json` writes its values
        # with every digit, as `evaluate --json` writes the summary's (float32 by default)
        metric.set_dtype(torch.float64)
        return metric if device is None else metric.to(device)

    factory()  # options are checked before any file is read
    return factory


def checked_device(text: str | None) -> Any:
    """``--device`` as a torch device (None where not given), refused by name where torch does
    not know it or this machine has none: a tensor made there first, before any file is read."""
    if text is None:
        return None
    import torch

    try:
        device = torch.device(text)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError, ValueError, TypeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CLIError(f"--device {text}: {reason}") from None
    return device


def _parse_keys(text: str | None) -> dict[str, str]:
    keys: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in ARRAYS or not value:
            raise CLIError(
                f"--keys: expected NAME=ARRAY with NAME one of {', '.join(ARRAYS)}, got {part!r}"
            )
        keys[name] = value
    return keys


def effective_options(metric: Any) -> dict[str, Any]:
    names = (
        "protocol",
        "similarity",
        "ties",
        "empty_queries",
        "percent",
        "relevance",
        "radius",
        "ignore_label",
        "average",
        "ap",
        "divisor",
        "gain",
        "median",
    )
    out = {name: getattr(metric, name) for name in names if hasattr(metric, name)}
    if getattr(metric, "qrels", None) is not None:
        out["ignore_identical_ids"] = metric.ignore_identical_ids
    return out


def _distinct_names(labels: list[str], args: argparse.Namespace) -> None:
    """Refuse two runs of one name before any is scored: a report keyed by name (--per-query)
    would keep one of them, and --write-run would write both to one file. A --name beyond the
    last run names nothing: refused, as an option that does not act is."""
    given = list(getattr(args, "name", None) or [])
    if len(given) > len(labels):
        raise CLIError(
            f"--name is given {len(given)} times for {_many(len(labels), 'run')} (the names go "
            f"to the inputs in order, one each; {given[len(labels)]!r} names none)"
        )
    twice = sorted({name for name in labels if labels.count(name) > 1})
    if twice:
        raise CLIError(
            f"two runs are named {twice[0]!r} (a --name given twice, or two input files of one "
            "name in different folders): give each its own --name, in the order of the inputs"
        )
    if getattr(args, "write_run", None) is not None and len(labels) > 1:
        paths = [data.run_path(args.write_run, name, len(labels)) for name in labels]
        clash = next((p for p in paths if paths.count(p) > 1), None)
        if clash is not None:
            raise CLIError(
                f"--write-run: two runs' names make one file name ({clash}); give names that "
                "differ in letters, digits, '_', '.' or '-' (--name)"
            )


def input_forms(args: argparse.Namespace) -> set[str]:
    """The forms of input given (keys of ``cli.parser.FORMS``): one for embeddings, one per
    kind of --run file given; an input that is no form (none, two kinds) refused."""
    files, queries, galleries = args.files or [], args.query or [], args.gallery or []
    runs_trec = args.run or []
    sources = sum(bool(x) for x in (files, queries or galleries, runs_trec))
    if sources == 0:
        if args.qrels is not None:
            raise CLIError(
                "--qrels needs what it judges: --run RUN (TREC, .json or .jsonl), or --query "
                "Q --gallery CORPUS (embeddings with their ids)"
            )
        raise CLIError(
            "nothing to evaluate: give embedding FILEs, --query and --gallery, or --run and "
            "--qrels (see retrieval-metrics evaluate --help)"
        )
    if sources > 1:
        raise CLIError(
            "give one kind of input: embedding FILEs, --query/--gallery pairs, or --run/--qrels"
        )
    if files and args.qrels is not None:
        raise CLIError(
            "--qrels with same-source FILEs is not supported: give the queries and the corpus "
            "as --query Q --gallery CORPUS, with the qrels' query ids and document ids in them"
        )
    if files:
        return {"files"}
    if queries or galleries:
        return {"pairs" if args.qrels is None else "judged"}
    jsonl = "jsonl" if args.qrels is None else "jsonl_run"
    return {jsonl if Path(p).suffix.lower() == ".jsonl" else "scored_run" for p in runs_trec}


def check_options(args: argparse.Namespace) -> set[str]:
    """Refuse, by name, an option given where it does not act (``cli.parser.APPLIES``: on
    other inputs, or without the option it qualifies), before any file is read: it would change
    nothing, and its user would believe it did. The forms of input given."""
    from retrieval_metrics.metrics.protocols import PROTOCOLS

    def value(dest: str) -> Any:
        # the option as given, else as --protocol sets it (--radius acts under netvlad's
        # relevance radius as under --relevance radius)
        given = getattr(args, dest, None)
        if given is None and getattr(args, "protocol", None) in PROTOCOLS:
            given = PROTOCOLS[args.protocol][0].get(dest)
        return given

    forms = input_forms(args)
    for dest, rule in APPLIES.items():
        if getattr(args, dest, None) is None:
            continue
        flag = "--" + dest.replace("_", "-")
        if not forms & rule.forms:
            given = " and ".join(FORMS[f] for f in FORMS if f in forms)
            raise CLIError(f"{flag} applies to {rule.to}; the input given is {given}")
        if rule.needs is not None:
            needed, wanted = rule.needs
            have = value(needed)
            if have is None or (wanted is not None and have != wanted):
                other = "--" + needed.replace("_", "-")
                why = f"{other} was not given" if have is None else f"{other} is {have}"
                raise CLIError(f"{flag} applies to {rule.to}; {why}")
    return forms


def runs_from_args(args: argparse.Namespace) -> tuple[list[Run], bool]:
    check_options(args)
    files, queries, galleries = args.files or [], args.query or [], args.gallery or []
    runs_trec = args.run or []
    trec = bool(runs_trec)
    judged = args.qrels is not None and not trec  # embeddings judged by qrels
    qrels = read_qrels(args.qrels) if judged else None
    # commas inside parentheses belong to a name's options: "RBP(p=0.5,rel=2),nDCG@10"
    names = [n.strip() for n in re.split(r",(?![^()]*\))", args.metrics or "") if n.strip()]
    if not names:
        default = TREC_METRICS if trec else QRELS_METRICS if judged else EMBEDDING_METRICS
        names = default.split(",")
    factory = _metric_factory(args, names, trec, qrels)
    probe = factory()
    keys = _parse_keys(args.keys)
    need_labels = probe.relevance == "label"
    need_positions = probe.relevance == "radius"
    run_names = list(args.name or [])

    def name_of(i: int, default: str) -> str:
        return run_names[i] if i < len(run_names) else default

    runs: list[Run] = []
    if trec:
        _distinct_names([name_of(i, Path(p).stem) for i, p in enumerate(runs_trec)], args)
        for path in runs_trec:
            if args.qrels is None and Path(path).suffix.lower() != ".jsonl":
                raise CLIError(
                    f"{path}: a run needs judgments: --qrels QRELS (TREC, BEIR .tsv, .json or "
                    '.jsonl), or a .jsonl run whose lines carry "relevant"'
                )
        for i, path in enumerate(runs_trec):
            lists = read_ranked_lists(
                path,
                args.qrels,
                complete=bool(args.complete),
                # the file refuses repeats itself; counting them (and warning) is the metric's
                duplicates="error" if args.duplicates == "error" else "first",
            )
            notes: dict[str, Any] = dict(lists.notes)
            notes["complete"] = bool(args.complete)
            ranked_ids = lists.ranked_ids
            if drop_identical_ids(args):
                ranked_ids = [[d for d in docs if d != qid]
                              for qid, docs in zip(lists.qids, ranked_ids, strict=True)]
                notes["documents of the query's id left out"] = sum(
                    len(a) - len(b) for a, b in zip(lists.ranked_ids, ranked_ids, strict=True))
            if not lists.qids:
                raise CLIError(f"{path}: no query of the run has judgments in {args.qrels}")
            metric = factory()
            label = name_of(i, Path(path).stem)
            files_used = [str(path)] + ([] if args.qrels is None else [str(args.qrels)])
            run_ = Run(label, "trec", files_used, metric, len(lists), notes)
            # the metric pairs the queries by id (its table orders them so): the set of qids
            # decides, not the order the run lists them in
            run_.queries_key = _digest(*(q.encode() for q in sorted(lists.qids)))
            run_.query_ids = list(lists.qids)
            # every judgment (grade 0 too) where a measure reads which documents were judged,
            # or an ir_measures string scores the queries judged grade 0 only
            from retrieval_metrics.functional.measures.names import judged_queries_needed

            judged = judged_queries_needed(metric.metric_names(), metric.measure_options)
            relevant = lists.judgments if judged else lists.relevant_ids
            with Progress(len(lists), f"{label}: scoring", delay=args.progress_delay) as bar, \
                    warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                evaluate_trec(metric, lists.qids, ranked_ids, relevant, bar)
                runs.append(_summarize(run_, args, bar))
            _show_warnings(caught, path)
        return runs, trec
    if files:
        pairs = [(path, None) for path in files]
    else:
        if not queries or not galleries:
            raise CLIError("separate sets need both --query FILE and --gallery FILE")
        if len(galleries) == 1:
            galleries = galleries * len(queries)
        if len(galleries) != len(queries):
            raise CLIError(
                f"got {len(queries)} --query and {len(galleries)} --gallery files; give one "
                "gallery for all, or one per query file"
            )
        pairs = list(zip(queries, galleries, strict=True))
    _distinct_names([name_of(i, Path(q).stem) for i, (q, _) in enumerate(pairs)], args)
    if judged:
        assert qrels is not None
        for i, (qpath, gpath) in enumerate(pairs):
            label = name_of(i, Path(qpath).stem)
            runs.append(
                _judged_run(args, factory, keys, qpath, gpath, qrels, label, len(pairs))
            )
        return runs, trec
    for i, (qpath, gpath) in enumerate(pairs):
        query = load_items(qpath, keys, need_labels=need_labels, need_positions=need_positions)
        gallery = None
        if gpath is not None:
            gallery = load_items(
                gpath, keys, need_labels=need_labels, need_positions=need_positions
            )
            check_pair(query, gallery)
        metric = factory()
        label = name_of(i, Path(qpath).stem)
        kind = "same_source" if gallery is None else "query_gallery"
        files_used = [str(qpath)] + ([] if gpath is None else [str(gpath)])
        run_ = Run(label, kind, files_used, metric, len(query))
        run_.queries_key = _queries_key(query)
        # (the queries read and given, then the ranking of them all: _summarize)
        with Progress(len(query), f"{label}: queries", delay=args.progress_delay) as bar:
            try:
                evaluate_embeddings(metric, query, gallery, bar)
                if query.ids is not None:  # (same source: the row numbers, given as ids)
                    run_.query_ids = query.ids.tolist()
                runs.append(_summarize(run_, args, bar))
                # (with --write-run, the run's lists its ranking kept: run_depth, _metric_factory)
                found = data.kept_lists(args, metric)
                data.write_run_of(args, run_, query, gallery, len(pairs), found)
            except ValueError as err:
                where = str(qpath) if gpath is None else f"{qpath} / {gpath}"
                message = _user_ids(str(err), query.ids, None if gallery is None else gallery.ids)
                raise CLIError(f"{where}: {message}") from None
    return runs, trec


def _queries_key(query: EmbeddingFile) -> str:
    """What two runs of embedding files must share to be paired query by query: each query's
    label (and position), in the order the metric pairs them. Given ids, the metric orders its
    queries by id, and pairs them so: the rows sorted by id (then label) first, so that two
    files holding the same items in another row order pair (they were refused as scoring
    "other queries"); without ids the queries pair by row, in file order."""
    arrays = [a for a in (query.labels, query.ids, query.positions) if a is not None]
    if query.ids is not None:
        keys = [query.ids] if query.labels is None else [query.labels, query.ids]
        order = np.lexsort([np.asarray(k).reshape(len(query), -1)[:, 0] for k in keys])
        arrays = [np.ascontiguousarray(np.asarray(a)[order]) for a in arrays]
    return _digest(*(a.tobytes() for a in arrays))


def _show_warnings(caught: list[warnings.WarningMessage], path: str) -> None:
    """The metric's warnings about a run file, each on one line that names the file (``--duplicates
    warn``'s came as a Python warning with a library source line); others re-emitted as they
    came. (The warning names the query by the id the run gives it: the qids are the ids.)"""
    for w in caught:
        if not issubclass(w.category, UserWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        print(f"retrieval-metrics: warning: {path}: {w.message}", file=sys.stderr)


#: the ids a metric's message names: ``(e.g. 7818327418847251472, ...)``, text ids by the 64-bit
#: codes it keeps them as (then said after a colon)
_NAMED_IDS = re.compile(r"\(e\.g\. (-?\d+(?:, -?\d+)*)(: the 64-bit codes [^)]*)?\)")


def _user_ids(message: str, *ids: np.ndarray | None) -> str:
    """``message`` with the 64-bit codes that the metric names text ids by (``e.g.
    7818327418847251472, ...``: it keeps text ids as codes) replaced by the ids of the file,
    where one of ``ids`` holds each."""
    found = _NAMED_IDS.search(message)
    if found is None:
        return message
    from retrieval_metrics.functional.ranking.labels import label_codes

    codes = [int(code) for code in found.group(1).split(", ")]
    tables = [
        (arr, label_codes(arr, "ids").numpy()) for arr in ids
        # (integer ids are their own codes: the message shows them already)
        if arr is not None and arr.dtype.kind == "U" and arr.ndim == 1
    ]
    named = []
    for code in codes:
        hits = [(arr, np.flatnonzero(table == code)) for arr, table in tables]
        given = [str(arr[at[0]]) for arr, at in hits if at.size]
        if not given:
            return message  # (a code of no file's id: the message stays as the metric says)
        named.append(repr(given[0]))
    return message.replace(found.group(0), f"(e.g. {', '.join(named)})", 1)


def _judged_run(
    args: argparse.Namespace,
    factory: Callable[[], Any],
    keys: dict[str, str],
    qpath: str,
    gpath: str,
    qrels: dict[str, Any],
    label: str,
    count: int,
) -> Run:
    """One retriever: query embeddings and a corpus, judged by ``qrels`` through their ids."""
    why = f"--qrels {args.qrels} judges queries and documents by their ids"
    query = _ids_only(load_items(qpath, keys, need_labels=False, need_ids=why))
    gallery = _ids_only(load_items(gpath, keys, need_labels=False, need_ids=why))
    check_pair(query, gallery)
    assert query.ids is not None and gallery.ids is not None
    # the queries of the qrels only: BEIR's loader keeps those, trec_eval scores those, and a
    # query without judgments would count as 0 under the presets that score empty queries 0
    query_ids = query.ids.astype(str)
    keep = np.isin(query_ids, np.asarray(list(qrels), dtype=str))
    if not keep.any():
        raise CLIError(
            f"{qpath}: none of its {len(query)} query ids has judgments in {args.qrels} "
            f"(ids {_examples(query_ids)}; judged {_examples(list(qrels))})"
        )
    documents = {d for docs in qrels.values() for d in docs}
    doc_ids = gallery.ids.astype(str, copy=False)
    if not data.any_in(doc_ids, np.asarray(sorted(documents), dtype=str)):
        raise CLIError(
            f"{gpath}: none of its {len(gallery)} document ids is judged in {args.qrels} "
            f"(ids {_examples(doc_ids)}; judged {_examples(sorted(documents))})"
        )
    ignored = int(np.unique(query_ids[~keep]).size)
    if ignored:
        index = np.flatnonzero(keep)
        query.embeddings, query.ids = query.embeddings[index], query.ids[index]
    metric = factory()
    run_ = Run(label, "qrels", [str(qpath), str(gpath), str(args.qrels)], metric, len(query))
    run_.notes = {"query_file_queries_without_qrels": ignored}
    # the table orders the queries by id: two runs pair when they score the same set
    run_.queries_key = _digest(*(q.encode() for q in sorted(set(query_ids[keep].tolist()))))
    # (the queries read and given, then the ranking of them all: _summarize)
    with Progress(len(query), f"{label}: queries", delay=args.progress_delay) as bar:
        try:
            evaluate_embeddings(metric, query, gallery, bar)
            run_.query_ids = query.ids.tolist()
            summarized = _summarize(run_, args, bar)
            # with --write-run, the run's lists kept as the ranking counted (one pass over the
            # corpus for the table and the run, engine.listing: what the ranking leaves out,
            # the run leaves out)
            data.write_run_of(args, run_, query, gallery, count, data.kept_lists(args, metric))
            return summarized
        except ValueError as err:
            hint = ""
            if "ignore_identical_ids" in str(err):
                hint = " (on the command line: --ignore-identical-ids false or true)"
            message = _user_ids(str(err), query.ids, gallery.ids)
            raise CLIError(f"{qpath} / {gpath}: {message}{hint}") from None


def _ids_only(items: EmbeddingFile) -> EmbeddingFile:
    """The embeddings and ids of a file judged by qrels (relevance is the judgments': labels,
    cameras and positions are not read)."""
    items.labels = items.cameras = items.positions = None
    return items


def _examples(ids: Any, n: int = 3) -> str:
    shown = [str(x) for x in list(ids)[:n]]
    return ", ".join(repr(x) for x in shown) + (", ..." if len(ids) > n else "")


def _many(count: int, one: str, many: str | None = None) -> str:
    """``count`` and the noun that goes with it: "1 query", "2 queries" (not "1 queries")."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def describe(run: Run) -> str:
    if run.kind == "same_source":
        return f"{run.files[0]}: {_many(run.num_queries, 'item')}, each queries all the others"
    queries = _many(run.num_queries, "query", "queries")
    if run.kind == "query_gallery":
        return f"{run.files[0]} against {run.files[1]}: {queries}"
    if run.kind == "qrels":
        ignored = run.notes.get("query_file_queries_without_qrels")
        many = _many(ignored or 0, "query", "queries")
        tail = f" ({many} of the file without judgments ignored)" if ignored else ""
        return (
            f"{run.files[0]} against {run.files[1]}, judged by {run.files[2]}: {queries}{tail}"
        )
    notes = run.notes
    extra = []
    if notes.get("run_queries_without_qrels"):
        many = _many(notes["run_queries_without_qrels"], "run query", "run queries")
        extra.append(f"{many} without judgments ignored")
    if notes.get("qrels_queries_without_run"):
        verb = "scored as empty lists" if notes.get("complete") else "ignored"
        many = _many(notes["qrels_queries_without_run"], "judged query", "judged queries")
        extra.append(f"{many} not in the run {verb}")
    tail = f" ({'; '.join(extra)})" if extra else ""
    if len(run.files) == 1:
        their = "its" if run.num_queries == 1 else "their"
        questions = _many(run.num_queries, "question")
        return f"{run.files[0]}: {questions} with {their} relevant ids{tail}"
    return f"{run.files[0]} judged by {run.files[1]}: {queries}{tail}"


def options_line(metric: Any, trec: bool = False, scored: bool = False) -> str:
    """The options under a run's header; the tie rule only for a run that had scores to tie (a
    .jsonl run is lists in rank order, taken as given)."""
    opts = effective_options(metric)
    shown = (
        ["protocol", "empty_queries", "gain"]
        if trec
        else ["protocol", "similarity", "ties", "empty_queries"]
    )
    if getattr(metric, "qrels", None) is not None:
        shown += ["gain", "ignore_identical_ids"]
    line = ", ".join(f"{k}={opts[k]}" for k in shown if k in opts and opts[k] is not None)
    return line + ("; scored runs ranked by score, ties by docid descending" if scored else "")


def scored(run: Run) -> bool:
    """Whether a run file had scores: every run format but .jsonl (as formats.read_run reads)."""
    return run.kind == "trec" and Path(run.files[0]).suffix.lower() != ".jsonl"


def _digest(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def version() -> str:
    from retrieval_metrics import __version__

    return __version__
