"""Read the ranked-list files that IR and RAG evaluations already have.

Runs (what a retriever returned, per query):

* TREC run, ``qid Q0 docid rank score tag`` per line (any extension but the two below);
* ``.json``: ranx / pytrec_eval / ir_datasets style ``{"qid": {"docid": score, ...}, ...}``;
* ``.jsonl``: one question per line, ``{"id": ..., "retrieved": [docid, ...]}``, in rank order,
  optionally with its ``"relevant"`` ids (a list, or a dict docid -> grade), in which case the
  file needs no qrels. A list may retrieve an id more than once (a retriever that returns two
  chunks of one document): as in the Python API, the id counts once, at its first position, and
  each repeat keeps its slot as a non-relevant item (``duplicates="first"``, the default);
  ``duplicates="error"`` refuses such a line instead.

Judgments (qrels):

* TREC qrels, ``qid iter docid rel`` per line (any extension but the three below);
* ``.tsv``: BEIR, a header ``query-id  corpus-id  score`` and one tab-separated judgment a line;
* ``.json``: ``{"qid": {"docid": grade, ...}, ...}``;
* ``.jsonl``: ``{"id": ..., "relevant": [docid, ...]}`` or with grades as a dict.

A qrels file judges each (query, document) once: the same judgment repeated is kept once, and
one judged again at another grade is refused, naming the line (which grade holds is unknown).

Scored runs are ranked as trec_eval 9 (and pytrec_eval) ranks them: by decreasing score (as
float32, as trec_eval 9 holds it; trec_eval 10 compares doubles), ties by document id in
descending byte order (the file's rank column and its order of lines do not matter); a scored
run holds one score per document, so a document listed twice for a query is an error, as in
trec_eval. A ``.jsonl`` list is taken in the order given. A grade
>= 1 is relevant; a query whose judgments hold no relevant document is unanswerable and follows
the metric's ``empty_queries``.
Ids are compared as text: ``7`` and ``"7"`` are the same document. In TREC runs and qrels, a
line that starts with ``#`` is a comment (trec_eval 10's rule).

Every reader stops at the first bad line with a :class:`FormatError` that names the file, the
line and what was expected.

Example:
    >>> import json, pathlib, tempfile
    >>> import retrieval_metrics as rm
    >>> from retrieval_metrics.formats import read_ranked_lists
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> lines = [{"id": "q1", "retrieved": ["d3", "d7", "d1"], "relevant": ["d1"]},
    ...          {"id": "q2", "retrieved": ["d4", "d5"], "relevant": {"d4": 2, "d6": 1}}]
    >>> _ = (folder / "questions.jsonl").write_text("\\n".join(json.dumps(x) for x in lines))
    >>> lists = read_ranked_lists(folder / "questions.jsonl")
    >>> lists.qids
    ['q1', 'q2']
    >>> m = rm.RecallAtK(k=3)
    >>> m.update(ranked_ids=lists.ranked_ids, relevant_ids=lists.relevant_ids)
    >>> round(float(m.compute()), 4)
    0.75
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_metrics.formats.errors import FormatError
from retrieval_metrics.formats.json_files import (
    Lists,
    Qrels,
    file_lines,
    read_jsonl,
    read_nested_json,
)

__all__ = [
    "FormatError",
    "RankedLists",
    "checked_grade",
    "checked_score",
    "id_text",
    "order_by_score",
    "ranked_lists",
    "read_qrels",
    "read_ranked_lists",
    "read_run",
    "read_trec_qrels",
    "read_trec_run",
    "text_keyed",
    "trec_eval_order",
]

BEIR_HEADER = ("query-id", "corpus-id", "score")



@dataclass
class RankedLists:
    """Queries ready for ``update(ranked_ids=..., relevant_ids=...)``.

    Attributes:
        qids: the query ids, sorted.
        ranked_ids: per query, its document ids in rank order.
        relevant_ids: per query, its relevant ids: a set, or a dict docid -> grade when any
            judgment has a grade above 1 (then every query gets a dict).
        judgments: per query, every judgment, docid -> grade, grades <= 0 (judged not
            relevant) included: what the measures that read which documents were judged
            (Judged@K, bpref, the condensed lists) are given instead of ``relevant_ids``.
        notes: counts of queries left out: ``run_queries_without_qrels`` (not scored) and
            ``qrels_queries_without_run`` (not scored, or scored as empty lists with
            ``complete=True``).
    """

    qids: list[str]
    ranked_ids: list[list[str]]
    relevant_ids: list[Any]
    notes: dict[str, int] = field(default_factory=dict)
    judgments: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.qids)


# ---------------------------------------------------------------------------- text lines


def _grade(text: str, where: str) -> int:
    try:
        # (Python reads "1_0" as 10, and "٣" or "３" as 3; trec_eval's atoi reads 1, and 0:
        # neither is a grade)
        if "_" in text or not text.strip().isascii():  # (blanks around it: int() strips them)
            raise ValueError(text)
        return int(text)
    except ValueError:
        raise FormatError(f"{where}: relevance {text!r} is not an integer") from None


def _is_grade(text: str) -> bool:
    try:
        _grade(text, "")
    except FormatError:
        return False
    return True


_ASCII_BLANKS = re.compile(r"[ \t\n\v\f\r]+")


def _trec_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """The fields of each line of a TREC run or qrels file, its comment lines left out, a line
    at a time (the fields of a 2,000,000-line run held at once, 2,000,000 lists, kept the
    garbage collector walking them: 9.8 s to read it, where it takes 3).

    A line whose first character is ``#`` is a comment, as trec_eval 10 reads it ("Lines
    starting with '#' are ignored"). A ``#`` that opens the first field after blanks is refused:
    a comment or a query id, which is meant is unknown (trec_eval 9 reads every line as data;
    a comment of 4 fields ending in a number, ``# pool depth 100``, became a judgment)."""
    for lineno, line in file_lines(path):
        if line.startswith("#"):
            continue
        # fields are split at ASCII blanks, as trec_eval's C reads them: str.split() also splits
        # at Unicode spaces (a non-breaking space inside an id made a line of 7 fields)
        fields = line.split() if line.isascii() else [f for f in _ASCII_BLANKS.split(line) if f]
        if fields[0].startswith("#"):
            raise FormatError(
                f"{path}, line {lineno}: starts with blanks, then '#': a comment line starts "
                "with '#' at its first character; a query id may not start with '#'"
            )
        yield lineno, fields


def read_trec_run(path: str | Path) -> dict[str, dict[str, float]]:
    """A TREC run file (``qid Q0 docid rank score tag`` per line) as qid -> docid -> score.

    The rank column is ignored (trec_eval ranks by score). A document listed twice for one query
    is an error, as in trec_eval. A line that starts with ``#`` is a comment (trec_eval 10).
    """
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    # (each message's "path, line N" made where it is raised: one a line took a tenth of the
    # reading)
    for lineno, fields in _trec_lines(path):
        if len(fields) != 6:
            raise FormatError(
                f"{path}, line {lineno}: a run line has 6 fields 'qid Q0 docid rank score tag', "
                f"got {len(fields)}"
            )
        qid, _, doc, _, score, _ = fields
        try:
            # (Python reads "1_0" as 10, and "٣" as 3; trec_eval's atof reads 1, and 0: refused
            # as no number)
            if "_" in score or not score.strip().isascii():
                raise ValueError(score)
            value = float(score)
        except ValueError:
            raise FormatError(f"{path}, line {lineno}: score {score!r} is not a number") from None
        if not math.isfinite(value):
            raise FormatError(f"{path}, line {lineno}: score {score!r} is not finite")
        docs = run.get(qid)
        if docs is None:
            docs = run[qid] = {}
        elif doc in docs:
            raise FormatError(
                f"{path}, line {lineno}: document {doc!r} listed twice for query {qid!r}"
            )
        docs[doc] = value
    if not run:
        raise FormatError(f"{path}: the run is empty")
    return run


def _judge(qrels: Qrels, qid: str, doc: str, grade: int, where: str) -> None:
    """Record one judgment; a document judged again for the same query at another grade is
    refused (which grade holds is unknown), the same judgment repeated is kept once."""
    judged = qrels.setdefault(qid, {})
    before = judged.setdefault(doc, grade)
    if before != grade:
        raise FormatError(
            f"{where}: query {qid!r}, document {doc!r} is judged again, at grade {grade} "
            f"(grade {before} on an earlier line): each (query, document) takes one grade; "
            "keep the line that holds"
        )


def read_trec_qrels(path: str | Path) -> Qrels:
    """A TREC qrels file (``qid iter docid rel`` per line) as qid -> docid -> grade. A line that
    starts with ``#`` is a comment (trec_eval 10)."""
    path = Path(path)
    qrels: Qrels = {}
    for lineno, fields in _trec_lines(path):
        where = f"{path}, line {lineno}"
        if len(fields) != 4:
            raise FormatError(
                f"{where}: a qrels line has 4 fields 'qid iter docid rel', got {len(fields)}"
            )
        qid, _, doc, rel = fields
        _judge(qrels, qid, doc, _grade(rel, where), where)
    if not qrels:
        raise FormatError(f"{path}: the qrels are empty")
    return qrels


def _read_beir_qrels(path: Path) -> Qrels:
    """BEIR qrels: a ``query-id corpus-id score`` header, then tab-separated judgments. A first
    line of 3 fields whose score is no integer is a header too, however it names the columns
    (``query_id corpus_id score``, ``qid docid rel``): BEIR's loader skips the first line
    whatever it holds, and such a line cannot be a judgment. A first line that is one is read."""
    qrels: Qrels = {}
    first = True
    for lineno, line in file_lines(path):
        fields = line.rstrip("\r\n").split("\t")
        where = f"{path}, line {lineno}"
        if first:
            first = False
            named = tuple(f.strip().lower() for f in fields)
            if named == BEIR_HEADER or (len(named) == 3 and not _is_grade(named[2])):
                continue
        if len(fields) != 3:
            # (MS MARCO's qrels.dev.tsv is TREC qrels, 'qid 0 docid rel', in a .tsv)
            hint = (
                "; 4 fields are TREC qrels ('qid iter docid rel', as MS MARCO's qrels.*.tsv): "
                "give the file another extension (e.g. .txt) to read it as TREC qrels"
                if len(fields) == 4 else ""
            )
            raise FormatError(
                f"{where}: a BEIR qrels line has 3 tab-separated fields 'query-id corpus-id "
                f"score', got {len(fields)}{hint}"
            )
        qid, doc, rel = (f.strip() for f in fields)
        if not qid or not doc:
            raise FormatError(f"{where}: empty query-id or corpus-id")
        _judge(qrels, qid, doc, _grade(rel, where), where)
    if not qrels:
        raise FormatError(f"{path}: the qrels are empty")
    return qrels


# ---------------------------------------------------------------------------- public readers


def checked_score(value: Any, where: str) -> float:
    """``value`` as a score (a float), or a ``ValueError`` that starts with ``where`` (the
    argument, the query and the document): a real number (int, float, a numpy scalar, a 0-d
    tensor) that is finite, as the file readers require. A bool or a text is no score (``"0.5"``
    would be a guess at what the text meant); NaN has no place in a ranking."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{where}: the score {value!r} is not a number")
    try:
        number = float(value)
    except OverflowError:  # (an int beyond a double's range)
        raise ValueError(f"{where}: the score {_brief(value)} is not finite") from None
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{where}: the score {_brief(value)} is not a number") from None
    if math.isnan(number):
        raise ValueError(f"{where}: the score is NaN, which has no place in a ranking")
    if not math.isfinite(number):
        raise ValueError(f"{where}: the score {number!r} is not finite")
    return number


def checked_grade(value: Any, where: str) -> int:
    """``value`` as a relevance grade (an int), or a ``ValueError`` that starts with ``where``:
    a whole number (an int, a numpy integer, or a float or 0-d tensor holding a whole value). A
    fraction is refused rather than truncated (0.5 would become 0, judged not relevant), a bool
    or a text rather than read as a number."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{where}: the grade {value!r} is not an integer")
    if isinstance(value, numbers.Integral):
        return int(value)
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise ValueError(f"{where}: the grade {_brief(value)} is not an integer") from None
    if not number.is_integer():
        raise ValueError(f"{where}: the grade {number!r} is not an integer")
    return int(number)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:36]}..."


def id_text(value: Any, what: str) -> str:
    """An id as the file writes it: a str as it is, an integer (numpy's too) in decimal. Other
    ids are refused: ``str()`` wrote bytes as ``b'd1'`` and a float as ``1.0``, ids that no
    reader reads back as the ones meant."""
    if isinstance(value, str):
        return str(value)  # (np.str_ too, as plain text)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    hint = " (decode bytes first, e.g. ids.astype(str))" if isinstance(value, bytes) else ""
    raise ValueError(
        f"{what} must be a str or an int, got {value!r} ({type(value).__name__}){hint}"
    )


def text_keyed(mapping: Mapping[Any, Any], what: str) -> Mapping[str, Any]:
    """``mapping`` keyed by the text of its ids (:func:`id_text`): the integer 7 and the string
    ``"7"`` are one id, as everywhere in the library, and trec_eval orders tied documents by that
    text (``"9"`` before ``"10"``), not by the integers' values. Two keys of one text are
    refused. A mapping keyed by str already is returned as it is."""
    if all(type(key) is str for key in mapping):
        return mapping
    out: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(key, (float, np.floating)):
            # a whole float (a pandas column of ids) is its integer, as labels and ids are
            # read everywhere; another float names no id (whole_float_value refuses it)
            from retrieval_metrics.functional.ranking.labels import whole_float_value

            try:
                text = str(whole_float_value(key, "ids"))
            except ValueError:
                raise ValueError(
                    f"{what}: the id {key!r} is a float that holds no whole number below 2**53; "
                    "an id must be a str or an int"
                ) from None
        else:
            text = id_text(key, f"{what}: an id")
        if text in out:
            raise ValueError(
                f"{what}: the ids {given[text]!r} and {key!r} are one id (ids compare as "
                "text); give each id once"
            )
        out[text], given[text] = value, key
    return out


def trec_eval_order(scores: Mapping[str, float], *, as_float32: bool = True) -> list[str]:
    """One query's document ids by decreasing score, ties by document id in descending byte
    order (trec_eval's rule; the one place it is written, for the readers here and
    :func:`retrieval_metrics.formats.converters.trec_run_to_lists`). The scores compare as
    float32, as trec_eval 9 (and pytrec_eval, which embeds it) holds them (0.100000001 and 0.1
    tie there); ``as_float32=False`` compares them as given (gdeval's rule). A NaN score is
    refused: it has no place in an order."""
    docs = list(scores)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(docs))
    bad = np.flatnonzero(np.isnan(values))
    if bad.size:
        raise ValueError(
            f"`scores`: document {docs[int(bad[0])]!r} has the score nan, which has no place in "
            "an order"
        )
    if as_float32:
        # (a score beyond float32's range becomes inf there, as in trec_eval 9: no warning)
        with np.errstate(over="ignore"):
            values = values.astype(np.float32)
    score = dict(zip(docs, values.tolist(), strict=True))
    # two stable sorts: by id in descending byte order, then by score, best first, which keeps
    # that order among ties (a tuple of negated bytes per id as one key took 3 of a
    # 2,000,000-line run's 7 s). UTF-8 orders text as its code points, which is how str
    # compares: the ids themselves are the keys (a longer id before its prefix, descending)
    by_id = sorted(docs, reverse=True)
    return sorted(by_id, key=score.__getitem__, reverse=True)


def order_by_score(run: dict[str, dict[str, float]]) -> Lists:
    """Each query's documents by decreasing score, ties by document id in descending byte order
    (trec_eval's rule)."""
    return {qid: trec_eval_order(docs) for qid, docs in run.items()}


def read_run(path: str | Path, *, duplicates: str = "first") -> tuple[Lists, Qrels | None]:
    """A run file by its extension: ``(lists, qrels)``, lists qid -> docids in rank order.

    ``qrels`` is not None only for a ``.jsonl`` whose lines carry ``"relevant"``. ``duplicates``
    ("first" or "error") is what a ``.jsonl`` list that repeats an id gets (see the module
    docstring); a scored run never lists a document twice for one query.
    """
    _check_duplicates(duplicates)
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return read_jsonl(path, "retrieved", duplicates)
    if suffix == ".json":
        return order_by_score(read_nested_json(path, "run")), None
    return order_by_score(read_trec_run(path)), None


def read_qrels(path: str | Path) -> Qrels:
    """A qrels file by its extension: ``.tsv`` BEIR, ``.json``, ``.jsonl``, else TREC."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        return _read_beir_qrels(path)
    if suffix == ".json":
        return read_nested_json(path, "qrels")
    if suffix == ".jsonl":
        qrels = read_jsonl(path, "relevant")[1]
        assert qrels is not None
        return qrels
    return read_trec_qrels(path)


def ranked_lists(
    lists: Lists, qrels: Qrels, *, complete: bool = False, all_queries: bool = False
) -> RankedLists:
    """Pair ranked lists with judgments.

    Queries: those of the run that have judgments (trec_eval's default); ``complete`` adds every
    judged query missing from the run as an empty list (``trec_eval -c``); ``all_queries`` takes
    every query of either (a JSONL file that is its own qrels).
    """
    if all_queries:
        qids = sorted(set(lists) | set(qrels))
    elif complete:
        qids = sorted(qrels)
    else:
        qids = sorted(q for q in lists if q in qrels)
    graded = any(g > 1 for docs in qrels.values() for g in docs.values())
    relevant: list[Any] = []
    for qid in qids:
        judged = qrels.get(qid, {})
        if graded:
            relevant.append({d: g for d, g in judged.items() if g >= 1})
        else:
            relevant.append({d for d, g in judged.items() if g >= 1})
    notes = {
        "run_queries_without_qrels": sum(1 for q in lists if q not in qrels),
        "qrels_queries_without_run": sum(1 for q in qrels if q not in lists),
    }
    judgments = [qrels.get(qid, {}) for qid in qids]  # (read, never changed: not copied)
    return RankedLists(qids, [list(lists.get(q, [])) for q in qids], relevant, notes, judgments)


def _check_duplicates(duplicates: str) -> None:
    if duplicates not in ("first", "error"):
        raise ValueError(f'`duplicates` must be "first" or "error", got {duplicates!r}')


def read_ranked_lists(
    run: str | Path,
    qrels: str | Path | None = None,
    *,
    complete: bool = False,
    duplicates: str = "first",
) -> RankedLists:
    """Read a run and its judgments (formats by extension, see the module docstring) into
    queries ready for ``update(ranked_ids=..., relevant_ids=...)``.

    A ``.jsonl`` run whose lines carry ``"relevant"`` is read alone (``qrels`` must be None);
    every question in it is scored, unanswerable ones included. Otherwise ``qrels`` is required
    and the queries are those of the run with judgments, plus, with ``complete=True``, the judged
    queries the run lacks, as empty lists (``trec_eval -c``). ``duplicates``: see :func:`read_run`;
    give the metric the same value (``RetrievalMetrics(..., duplicates=...)``).
    """
    if qrels is None and Path(run).suffix.lower() != ".jsonl":
        raise FormatError(
            f"{run}: a run needs judgments: pass a qrels file (TREC, BEIR .tsv, .json or .jsonl), "
            'or give each line of a .jsonl run its "relevant" ids'
        )
    judged = None if qrels is None else read_qrels(qrels)
    lists, own = read_run(run, duplicates=duplicates)
    if own is not None:
        if qrels is not None:
            raise FormatError(
                f'{run}: its lines carry "relevant", so it is its own qrels; drop the qrels file '
                f"{qrels}"
            )
        return ranked_lists(lists, own, all_queries=True)
    if qrels is None:
        raise FormatError(
            f'{run}: its lines carry no "relevant" ids; pass a qrels file (TREC, BEIR .tsv, '
            ".json or .jsonl)"
        )
    assert judged is not None
    return ranked_lists(lists, judged, complete=complete)
