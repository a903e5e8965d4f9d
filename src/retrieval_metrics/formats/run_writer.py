"""Write runs (each query's documents and scores, best first) in the formats ``runs.py`` reads.

:func:`write_run` takes a run held whole (a dict); :func:`write_run_lines` takes the queries one
at a time and writes each as it comes (``retrieval-metrics evaluate --write-run`` streams a
ranking's top lists through it, never holding the run's text or a text of every corpus id). Both
write the same bytes for the same run: ``.json`` as ranx and pytrec_eval read it, ``.jsonl`` one
query a line, else a TREC run. The file appears whole or not at all (written beside it first,
then renamed): a bad id or score found halfway leaves no half-written run.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_metrics.formats.runs import checked_score, id_text, trec_eval_order

__all__ = ["write_run", "write_run_lines"]


def write_run(
    run: Mapping[str, Any], path: str | Path, *, tag: str = "retrieval-metrics"
) -> Path:
    """Write ``run`` (query id -> its ``(document id, score)`` pairs best first, or -> {document
    id: score}) by the extension of ``path``: ``.json`` as ranx and pytrec_eval read it, ``.jsonl``
    one query a line (``{"id", "retrieved", "scores"}``), else a TREC run (``qid Q0 docid rank
    score tag``).

    Each query's documents are written in the order :func:`read_run` ranks them: by decreasing
    score compared as float32 (as trec_eval 9 and pytrec_eval hold scores), tied scores by
    document id in descending byte order (:func:`~retrieval_metrics.formats.runs.trec_eval_order`).
    So the rank column follows the scores, a dict (which has no best-first order) is ranked, and
    a ``.jsonl`` run, read in the order it lists, reads back as the same ranking as the TREC and
    ``.json`` copies. Pairs given as a list must come best first (scores never increase): a list
    that does not is refused, since which order was meant is unknown.

    Scores are written in full (a float32 score's exact value, a float64 score's too); a reader
    that compares them as float32 ranks what was ranked when the scores are float32 (or float16).
    Float64 scores closer than float32's resolution (about 6e-8 of their size) compare equal
    there: they are written, and read back, in the tie order.

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
        text = id_text(qid, "`run`'s query id")
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
                qid = id_text(given, "`run`'s query id")
                pairs = _run_pairs(docs, given)
                if suffix == ".json":
                    # (json.dumps of the whole dict: ", " between entries, ": " after a key)
                    out.write(("" if n == 0 else ", ") + f"{json.dumps(qid)}: "
                              + json.dumps(dict(pairs)))
                elif suffix == ".jsonl":
                    out.write(json.dumps({"id": qid, "retrieved": [d for d, _ in pairs],
                                          "scores": [s for _, s in pairs]}) + "\n")
                else:
                    out.write(_trec_lines(qid, pairs, tag))
            if suffix == ".json":
                out.write("}")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


#: a character ``str.isspace`` calls space (``re``'s ``\s`` on text is the same test)
_SPACE = re.compile(r"\s")


def _check_tag(tag: str) -> None:
    if not tag or _SPACE.search(tag):
        raise ValueError(f"`tag` must be one word (a TREC run's last field), got {tag!r}")


def _trec_lines(qid: str, pairs: list[tuple[str, float]], tag: str) -> str:
    if not pairs:
        return ""
    docs = [doc for doc, _ in pairs]
    # (the query once and every document in one search; an id at a time took a fifth of a
    # 2,000,000-line run's writing. Which id is no word is looked for only when one is not)
    if not qid or _SPACE.search(qid) or not all(docs) or _SPACE.search("".join(docs)):
        bad = next(doc for doc in docs if not qid or not doc or _SPACE.search(qid + doc))
        raise ValueError(
            f"a TREC run's ids are words without spaces: query {qid!r}, document {bad!r} "
            "(write .json or .jsonl instead)"
        )
    # "qid Q0 doc rank score tag\n", the columns joined by spaces
    head, tail = itertools.repeat(f"{qid} Q0"), itertools.repeat(f"{tag}\n")
    ranks = map(str, range(1, len(docs) + 1))
    scores = map(repr, [score for _, score in pairs])
    return "".join(map(" ".join, zip(head, docs, ranks, scores, tail, strict=False)))


def _run_pairs(docs: Any, qid: Any) -> list[tuple[str, float]]:
    """One query's pairs as the readers rank them (see :func:`write_run`), each checked."""
    if type(docs) in (list, dict):
        plain = _plain_pairs(docs)
        if plain is not None:
            return plain
    given_as_dict = isinstance(docs, Mapping)
    items = docs.items() if given_as_dict else docs
    pairs = []
    for doc, score in items:
        # (a str and a finite float, as a listing gives them, taken as they are: two calls a
        # pair took a third of a 2,000,000-line run's writing)
        text = doc if type(doc) is str else id_text(doc, f"`run[{qid!r}]`'s document id")
        if type(score) is not float or not math.isfinite(score):
            score = checked_score(score, f"`run[{qid!r}]`, document {text!r}")
        pairs.append((text, score))
    seen: set[str] = set()
    for doc, _ in pairs:
        if doc in seen:
            raise ValueError(f"`run[{qid!r}]` lists document {doc!r} twice")
        seen.add(doc)
    if not given_as_dict:
        for (above, high), (below, low) in itertools.pairwise(pairs):
            if low > high:
                # (scores that rise: distances, or an order that is no ranking; which order was
                # meant is unknown, so nothing is re-ranked by a guess)
                raise ValueError(
                    f"`run[{qid!r}]` must list its (document, score) pairs best first, but "
                    f"{below!r} (score {low!r}) comes after {above!r} (score {high!r}); give "
                    "the pairs by decreasing score (higher is better), or a {document: score} dict"
                )
    # the readers' order (float32 scores, ties by id descending): the rank column follows the
    # scores, and a .jsonl copy (read in the order listed) ranks as the TREC and .json copies
    score = dict(pairs)
    return [(doc, score[doc]) for doc in trec_eval_order(score)]


def _plain_pairs(docs: list | dict) -> list[tuple[str, float]] | None:
    """``docs`` in the readers' order where it is what a listing gives, (str, finite float)
    pairs best first with no document twice, or a {str: finite float} dict; None where it is
    not, for the checks a pair at a time to say what is wrong. The checks run over whole
    columns (a pair at a time, they took half of a 2,000,000-line run's writing), and pairs
    whose scores fall strictly as float32 are in the readers' order already, with no sort."""
    if type(docs) is dict:
        texts, scores = tuple(docs), tuple(docs.values())
    elif set(map(type, docs)) != {tuple} or set(map(len, docs)) != {2}:
        return None
    else:
        texts, scores = zip(*docs, strict=True)  # (pairs, each of two)
    if set(map(type, texts)) != {str} or set(map(type, scores)) != {float}:
        return None
    values = np.fromiter(scores, dtype=np.float64, count=len(scores))
    if not np.isfinite(values).all():
        return None
    if type(docs) is dict:
        return [(doc, docs[doc]) for doc in trec_eval_order(docs)]
    if bool((values[:-1] < values[1:]).any()) or len(set(texts)) != len(texts):
        return None  # (a score that rises, or an id twice: refused by the checks)
    with np.errstate(over="ignore"):
        as_float32 = values.astype(np.float32)
    if bool((as_float32[:-1] > as_float32[1:]).all()):
        return docs
    score = dict(docs)
    return [(doc, score[doc]) for doc in trec_eval_order(score)]
