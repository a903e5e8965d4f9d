"""Write runs (each query's documents and scores, best first) in the formats ``runs.py`` reads.

:func:`write_run` takes a run held whole (a dict); :func:`write_run_lines` takes the queries one
at a time and writes each as it comes (``retrieval-metrics evaluate --write-run`` streams a
ranking's top lists through it, never holding the run's text or a text of every corpus id). Both
write the same bytes for the same run: ``.json`` as ranx and pytrec_eval read it, ``.jsonl`` one
query a line, else a TREC run. The file appears whole or not at all (written beside it first,
then renamed): a bad id or score found halfway leaves no half-written run.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["write_run", "write_run_lines"]


def write_run(
    run: Mapping[str, Any], path: str | Path, *, tag: str = "retrieval-metrics"
) -> Path:
    """Write ``run`` (query id -> its ``(document id, score)`` pairs best first, or -> {document
    id: score}) by the extension of ``path``: ``.json`` as ranx and pytrec_eval read it, ``.jsonl``
    one query a line (``{"id", "retrieved", "scores"}``), else a TREC run (``qid Q0 docid rank
    score tag``). Scores are written in full (a float32 score's exact value), so a reader ranks
    what was ranked; a reader orders tied scores by its own rule (trec_eval and pytrec_eval: by
    document id, descending), :func:`read_run` too.

    >>> import pathlib, tempfile
    >>> from retrieval_metrics.formats import read_run
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.txt"
    >>> _ = write_run({"q1": [("d3", 0.5), ("d1", 0.25)]}, path)
    >>> print(path.read_text(), end="")
    q1 Q0 d3 1 0.5 retrieval-metrics
    q1 Q0 d1 2 0.25 retrieval-metrics
    >>> read_run(path)[0]
    {'q1': ['d3', 'd1']}
    """
    _check_tag(tag)
    by_text: dict[str, tuple[Any, Any]] = {}
    for qid, docs in run.items():
        text = str(qid)
        if text in by_text:
            # (7 and "7" are one query: two lists for it, which is right is unknown)
            raise ValueError(
                f"`run` gives query {text!r} twice ({by_text[text][0]!r} and {qid!r}: an int id "
                "and its decimal text are one id); give each query once"
            )
        by_text[text] = (qid, docs)
    return write_run_lines(by_text.values(), path, tag=tag)


def write_run_lines(
    queries: Iterable[tuple[Any, Any]], path: str | Path, *, tag: str = "retrieval-metrics"
) -> Path:
    """:func:`write_run` of the run whose ``(query id, its pairs or {document id: score})``
    come one query at a time from ``queries`` (each query once), each written as it comes."""
    _check_tag(tag)
    path = Path(path)
    suffix = path.suffix.lower()
    part = path.with_name(path.name + ".part")
    try:
        with open(part, "w") as out:
            if suffix == ".json":
                out.write("{")
            for n, (given, docs) in enumerate(queries):
                qid, pairs = str(given), _run_pairs(docs, given)
                if suffix == ".json":
                    # (json.dumps of the whole dict: ", " between entries, ": " after a key)
                    out.write(("" if n == 0 else ", ") + f"{json.dumps(qid)}: "
                              + json.dumps(dict(pairs)))
                elif suffix == ".jsonl":
                    out.write(json.dumps({"id": qid, "retrieved": [d for d, _ in pairs],
                                          "scores": [s for _, s in pairs]}) + "\n")
                else:
                    out.write("".join(_trec_lines(qid, pairs, tag)))
            if suffix == ".json":
                out.write("}")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


def _check_tag(tag: str) -> None:
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"`tag` must be one word (a TREC run's last field), got {tag!r}")


def _trec_lines(qid: str, pairs: list[tuple[str, float]], tag: str) -> Iterable[str]:
    for doc, _ in pairs:
        if any(c.isspace() for c in qid + doc) or not qid or not doc:
            raise ValueError(
                f"a TREC run's ids are words without spaces: query {qid!r}, document "
                f"{doc!r} (write .json or .jsonl instead)"
            )
    return (f"{qid} Q0 {doc} {rank} {score!r} {tag}\n"
            for rank, (doc, score) in enumerate(pairs, start=1))


def _run_pairs(docs: Any, qid: Any) -> list[tuple[str, float]]:
    items = docs.items() if isinstance(docs, Mapping) else docs
    pairs = [(str(doc), float(score)) for doc, score in items]
    seen: set[str] = set()
    for doc, score in pairs:
        if doc in seen:
            raise ValueError(f"`run[{qid!r}]` lists document {doc!r} twice")
        if not math.isfinite(score):
            raise ValueError(f"`run[{qid!r}]` gives document {doc!r} the score {score}")
        seen.add(doc)
    return pairs
