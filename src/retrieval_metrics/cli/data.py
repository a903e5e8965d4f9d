"""The command's arrays as the metric takes them, and the runs it writes.

A gallery given as a ``.npy`` file is memory-mapped and handed to ``set_gallery`` as it is
(:func:`is_corpus_on_disk`): the ranking reads it a block at a time, never whole.

``retrieval-metrics evaluate ... --write-run RUN``: each query's top K items as a run file.
The items are ranked as the evaluation ranked them (the metric's similarity, its duplicate
ids dropped, a query never listing itself or, judged by qrels, a document of its own id), and
:func:`retrieval_metrics.functional.top_k` lists them; ties at the cut go to the item first in
the file, or under ``ties="id"`` to the smaller id. The run's format follows its extension
(:func:`retrieval_metrics.formats.write_run`): TREC, ``.json`` or ``.jsonl``.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from retrieval_metrics.cli.errors import CLIError
from retrieval_metrics.cli.parser import RUN_DEPTH
from retrieval_metrics.formats import EmbeddingFile, write_run_lines
from retrieval_metrics.formats.embeddings import ARRAYS
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.labels import all_distinct, label_codes
from retrieval_metrics.functional.ranking.relevance import (
    leaves_out_identical_ids,
    left_out_of_lists,
)
from retrieval_metrics.functional.ranking.row_batches import MappedRows, RowBatches
from retrieval_metrics.functional.ranking.top_lists import TopK, top_k

__all__ = [
    "any_in", "as_tensor", "first_occurrences", "give_back_freed", "is_corpus_on_disk",
    "output_problem", "run_depth", "run_path", "select_rows",
    "write_run_file", "write_run_of", "write_run_problem",
]


def as_tensor(arr: np.ndarray | None) -> torch.Tensor | None:
    """An array of a file as the metric takes it (strings as they are, for the metric to hash;
    float16 kept, other floats but float64 as float32)."""
    if arr is None:
        return None
    if arr.dtype.kind in "US":
        return arr  # type: ignore[return-value]  # strings: the metric hashes them
    # (a read-only array, a slice of a memory-mapped file: copied, as torch writes to its own)
    t = torch.from_numpy(np.ascontiguousarray(arr) if arr.flags.writeable else np.array(arr))
    if t.is_floating_point() and t.dtype not in (torch.float64, torch.float16):
        t = t.to(torch.float32)
    return t


def select_rows(items: EmbeddingFile, index: np.ndarray | slice) -> dict[str, Any]:
    """The arrays' rows ``index`` as tensors; a memory-mapped corpus's embeddings, every row
    of them, stay on disk (set_gallery reads them a block at a time, never whole)."""
    on_disk = is_corpus_on_disk(items.embeddings) and _every_row(index)
    return {
        name: items.embeddings if name == "embeddings" and on_disk
        else as_tensor(None if getattr(items, name) is None else getattr(items, name)[index])
        for name in ARRAYS
    }


def _every_row(index: np.ndarray | slice) -> bool:
    return isinstance(index, slice) and index == slice(None)


def is_corpus_on_disk(embeddings: np.ndarray) -> bool:
    """Whether a gallery file's embeddings can stay on disk (a memory-mapped .npy, by rows)."""
    return isinstance(embeddings, np.memmap) and bool(embeddings.flags["C_CONTIGUOUS"])


def run_depth(args: Any) -> int:
    """``--run-depth`` as given, else its default (the parser's default is None, so that a
    depth given without ``--write-run`` is told from none: ``cli.runs.check_options``)."""
    depth = getattr(args, "run_depth", None)
    return RUN_DEPTH if depth is None else depth


def write_run_problem(args: Any) -> str | None:
    """What is wrong with ``--write-run`` and ``--run-depth`` as given (None: nothing; where
    they apply is ``cli.runs.check_options``'s)."""
    if run_depth(args) < 1:
        return f"--run-depth must be a positive integer, got {args.run_depth}"
    if args.write_run is not None:
        return output_problem("--write-run", args.write_run)
    return None


def output_problem(flag: str, path: str) -> str | None:
    """What stops ``path`` being written (its folder missing or not writable, or the path a
    folder), found before an evaluation that can take minutes; None where it looks writable
    (the write itself can still fail, and is reported the same way)."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        return f"{flag} {path}: is a directory, not a file"
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        return f"{flag} {path}: its folder {folder} {what}"
    # (a file that is there, /dev/null say, is written in place: its own permission counts)
    if target.exists() and not os.access(target, os.W_OK):
        return f"{flag} {path}: is not writable"
    if not target.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return f"{flag} {path}: its folder {folder} is not writable"
    return None


def first_occurrences(ids: np.ndarray) -> np.ndarray | slice:
    """Indices of the first occurrence of each id, in input order (the metric's dedupe rule);
    ``slice(None)`` where every id is distinct (every row, in order).

    Text ids are sorted by their 64-bit codes (``label_codes``), and a repeat's text compared
    with its first's: a sort of a million strings took 116 MB above the ids, of their codes
    30 MB. Where two texts share a code (``"7"`` and ``"07"``), the texts are sorted."""
    if ids.dtype.kind != "U" or ids.ndim != 1:
        return slice(None) if all_distinct(ids) else np.sort(np.unique(ids, return_index=True)[1])
    codes = label_codes(ids, "ids").numpy()
    if all_distinct(codes):
        return slice(None)
    distinct, first = np.unique(codes, return_index=True)
    kept = np.zeros(ids.size, dtype=bool)
    kept[first] = True
    repeats = np.flatnonzero(~kept)
    if repeats.size:
        of = first[np.searchsorted(distinct, codes[repeats])]
        if not bool((ids[repeats] == ids[of]).all()):
            return np.sort(np.unique(ids, return_index=True)[1])
    return np.sort(first)


def any_in(values: np.ndarray, wanted: np.ndarray) -> bool:
    """Whether some of ``values`` is among ``wanted`` (a few), a chunk of ``values`` at a time
    (a whole corpus's ids at once: copies of them all)."""
    step = 1 << 16
    return any(bool(np.isin(values[i : i + step], wanted).any())
               for i in range(0, len(values), step))


def kept_lists(args: Any, metric: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """With ``--write-run``: the run's lists the evaluation's ranking kept (the metric's
    ``run_depth``), one row per query row given; else, or where it kept none, None."""
    if args.write_run is None:
        return None
    return metric.kept_lists(run_depth(args))


def write_run_of(args: Any, run: Any, query: EmbeddingFile, gallery: EmbeddingFile | None,
                 runs: int, found: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """With ``--write-run``: the run of the evaluated ``run`` (one of ``runs``), its gallery's
    rows as the evaluation kept them; its path noted in ``run.notes``. ``found``: the lists the
    evaluation's ranking kept (:func:`kept_lists`), else they are listed here."""
    if args.write_run is None:
        return
    held = query if gallery is None else gallery
    rows = first_occurrences(held.ids) if held.ids is not None else slice(None)
    path = run_path(args.write_run, run.name, runs)
    give_back_freed()  # (the evaluation's freed scratch, before the run's blocks are made)
    notes: dict[str, int] = {}
    depth = run_depth(args)
    try:
        written = write_run_file(
            path, depth, run.metric, query, gallery, rows, run.name, notes, found
        )
    except OSError as err:
        # (a folder removed, a disk full, ... after the check made before the evaluation)
        raise CLIError(f"--write-run {path}: {err}") from None
    run.notes["run_written"] = str(written)
    # what was written, not what was asked: a depth beyond the corpus lists every item ("the
    # top 5000" of a 1,000-document corpus was 1,000)
    longest = notes.get("longest", depth)
    top = (f"the top {depth} of each query" if longest >= depth else
           f"the top {longest} of each query (every item it ranks; --run-depth {depth})")
    print(f"{run.name}: {top} written to {written}", file=sys.stderr)
    if notes.get("float32_ties"):
        count = notes["float32_ties"]
        print(
            f"{run.name}: note: in {count} {'query' if count == 1 else 'queries'}, scores that "
            "differ by less than float32's resolution (float64 embeddings) are written as ties, "
            "by document id descending: trec_eval 9, pytrec_eval and --run hold scores as "
            "float32 and rank them so; the run's values can differ there from the table's",
            file=sys.stderr,
        )


def give_back_freed() -> None:
    """Hand the heap's freed memory back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). A ranking frees its blocks when it ends, but the allocator keeps the pages of
    the heap they were carved from: after a 1.2M-row evaluation, 60 MB held that the run
    written next would add its own blocks to."""
    try:
        libc = ctypes.CDLL(None)  # (Windows: a TypeError, no process's own symbols)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return
    trim(0)


def run_path(path: str, label: str, runs: int) -> Path:
    """Where a run is written: ``path`` itself for one run, else the run's name before the
    extension (``run.txt`` -> ``run.NAME.txt``) for each of several."""
    target = Path(path)
    if runs == 1:
        return target
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return target.with_name(f"{target.stem}.{safe}{target.suffix}")


def write_run_file(
    path: Path,
    depth: int,
    metric: Any,
    query: EmbeddingFile,
    gallery: EmbeddingFile | None,
    gallery_rows: np.ndarray | slice,
    label: str,
    notes: dict[str, int] | None = None,
    found: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Path:
    """The top ``depth`` of every query of ``query`` among ``gallery``'s rows ``gallery_rows``
    (the rows the evaluation kept: each id once; ``gallery=None``: the queries' own, each query
    ranked against the others), written to ``path``. ``notes["float32_ties"]``: the queries
    whose written order differs from the ranking's (float64 scores equal as float32, which the
    writer writes in the readers' tie order); ``notes["longest"]``: the most items a query
    lists (below ``depth`` where the corpus holds fewer). ``found``: the lists (gallery rows
    among ``gallery_rows``, and scores) the evaluation's ranking kept, at ``depth``; None: they
    are listed here (``top_k``), the corpus read again."""
    items = query if gallery is None else gallery
    # the ids as arrays (a million corpus ids as python str took 70 MB, twice): only the ids
    # listed are made text, a query's lines as they are written
    q_ids = query.ids if query.ids is not None else np.arange(len(query))
    g_ids = (items.ids if items.ids is not None else np.arange(len(items)))[gallery_rows]
    tag = re.sub(r"\s+", "_", label) or "retrieval-metrics"
    if found is not None:
        listed = TopK(*found)  # (listed by the evaluation's ranking)
    else:
        # what the ranking leaves out, the run leaves out: a query itself (the document of its
        # id), the items of its label and camera, the ignore label's (these: out of the corpus
        # listed)
        settings = metric.context().ranking_options()
        pairs, kept = _left_out(settings, query, items, gallery_rows, len(g_ids))
        if kept is not None:
            gallery_rows = np.arange(len(items))[gallery_rows][kept.numpy()]
            g_ids = g_ids[kept.numpy()]
        corpus: Any = (
            # read a block at a time, never whole; its scan for NaN made by the ranking's read
            # (the file read once for the run, not once to check it and again to rank it), and
            # sent to the device of the queries (--device) as it is read
            RowBatches([MappedRows(items.embeddings)]).check_when_read("--gallery")
            if is_corpus_on_disk(items.embeddings) and _every_row(gallery_rows)
            else torch.from_numpy(np.ascontiguousarray(items.embeddings[gallery_rows])).to(
                metric.device)
        )
        listed = top_k(
            torch.from_numpy(np.ascontiguousarray(query.embeddings)).to(metric.device),
            corpus,
            depth,
            similarity=metric.similarity,
            ties="id" if metric.ties == "id" else "position",
            query_ids=q_ids,
            gallery_ids=g_ids,
            # (same source: the item of the query's own id is the query, the CLI giving ids
            # where the file has none; the corpus's ids read a chunk at a time, never whole)
            exclude_identical_ids=leaves_out_identical_ids(settings),
            excluded=pairs,
        )
    lines = listed.lines(q_ids, g_ids)
    if notes is not None:
        notes["float32_ties"] = notes["longest"] = 0
        lines = _counting(lines, notes)
    return write_run_lines(lines, path, tag=tag)


def _left_out(
    settings: Any, query: EmbeddingFile, items: EmbeddingFile, gallery_rows: np.ndarray | slice,
    num_gallery: int,
) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor | None]:
    """What the metric's ranking (``settings``, its ranking options) of ``query`` against
    ``items``' rows ``gallery_rows`` left out besides a query's own id (top_k's, the ids read
    in chunks): by its rule (``relevance.left_out_of_lists``), the pairs of a query's label and
    camera, and the rows kept where the ignore label's are left out (None: all)."""

    def keys(file: EmbeddingFile, rows: np.ndarray | slice) -> Keys:
        return Keys(
            labels=None if file.labels is None else label_codes(file.labels[rows], "labels"),
            cameras=None if file.cameras is None else label_codes(file.cameras[rows], "cameras"),
        )

    return left_out_of_lists(
        keys(query, slice(None)), keys(items, gallery_rows), (len(query), num_gallery),
        settings, False,
    )


def _counting(lines: Iterator[tuple[str, list[tuple[str, float]]]],
              notes: dict[str, int]) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """``lines`` as they are, counting in ``notes["float32_ties"]`` the queries with two
    neighbouring scores that differ but are equal as float32 (only float64 scores can), and
    in ``notes["longest"]`` the most pairs a query lists."""
    for qid, pairs in lines:
        notes["longest"] = max(notes["longest"], len(pairs))
        if len(pairs) > 1:
            scores = np.fromiter((s for _, s in pairs), dtype=np.float64, count=len(pairs))
            with np.errstate(over="ignore"):
                single = scores.astype(np.float32)
            if bool(((scores[1:] != scores[:-1]) & (single[1:] == single[:-1])).any()):
                notes["float32_ties"] += 1
        yield qid, pairs
