"""The text files the readers of :mod:`retrieval_metrics.formats.runs` read: a file's text and
its lines (each problem a :class:`FormatError` naming the file), and runs and qrels in JSON
(``{qid: {docid: score}}``, as ranx and pytrec_eval write them) and JSONL (one query a line),
read with the line of each problem."""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_metrics.formats.errors import FormatError

__all__ = ["Lists", "Qrels", "file_lines", "file_text", "read_jsonl", "read_nested_json"]

#: qid -> docids in rank order
Lists = dict[str, list[str]]
#: qid -> docid -> grade
Qrels = dict[str, dict[str, int]]


def file_text(path: Path) -> str:
    if not path.exists():
        raise FormatError(f"{path}: no such file")
    if path.is_dir():
        raise FormatError(f"{path}: is a directory, not a file")
    try:
        # (utf-8-sig: a byte order mark, as some Windows editors write, is no part of the
        # first query's id)
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise FormatError(f"{path}: cannot be read as UTF-8 text: {err}") from None


def file_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) for every line that is not blank.

    Lines end at ``\n`` alone, as JSON Lines and trec_eval end them: ``str.splitlines()`` also
    broke at U+2028, U+2029, U+0085, ``\x0b``, ``\x0c`` and ``\x1c``-``\x1e``, which JSON
    keeps inside strings, so a valid line was refused and every later line number was off.
    (``\r\n`` and ``\r`` end lines too: ``file_text`` reads them as ``\n``.)"""
    for lineno, line in enumerate(file_text(path).split("\n"), 1):
        if line and not line.isspace():  # (str.strip's blanks, no stripped copy made)
            yield lineno, line


# ---------------------------------------------------------------------------- JSON


class _LocatingDecoder(json.JSONDecoder):
    """Decodes like ``json.loads`` and remembers where each object starts and which keys it
    repeats, so that a bad value can be reported with its line (slow: used only to explain an
    error the fast decoder's result showed)."""

    def __init__(self) -> None:
        super().__init__(object_pairs_hook=self._pairs)
        self.starts: dict[int, int] = {}
        self.repeated: dict[int, list[str]] = {}
        self._last: list[str] = []
        self.parse_object = self._parse_object  # type: ignore[assignment]
        self.scan_once = json.scanner.py_make_scanner(self)

    def _pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        repeated = []
        for key, value in pairs:
            if key in out:
                repeated.append(key)
            out[key] = value
        self._last = repeated
        return out

    def _parse_object(self, s_and_end: tuple[str, int], *args: Any) -> tuple[Any, int]:
        obj, end = json.decoder.JSONObject(s_and_end, *args)
        self.starts[id(obj)] = s_and_end[1] - 1
        if self._last:
            self.repeated[id(obj)] = self._last
            self._last = []
        return obj, end


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _key_line(text: str, start: int, key: str, nth: int = 1) -> int:
    """The line of the ``nth`` ``"key"`` after ``start``, the offset of the object that holds it
    (the object's own line if the key is written with escapes the search does not see)."""
    for needle in (json.dumps(key, ensure_ascii=False), json.dumps(key)):
        at = start - 1
        for _ in range(nth):
            at = text.find(needle, at + 1)
            if at < 0:
                break
        if at >= 0:
            return _line_of(text, at)
    return _line_of(text, start)


def read_nested_json(path: Path, what: str) -> dict[str, dict[str, Any]]:
    """``{"qid": {"docid": value}}`` with its values checked: scores (``what="run"``) are finite
    numbers, grades (``"qrels"``) integers. Duplicate keys are refused."""
    text = file_text(path)
    try:
        data = json.loads(text, object_pairs_hook=_refuse_repeats)
    except json.JSONDecodeError as err:
        raise FormatError(f"{path}, line {err.lineno}: not valid JSON: {err.msg}") from None
    except _Repeated:
        data = None  # located below
    problem = None if data is None else _nested_problem(data, what)
    if data is not None and problem is None:
        if not data:
            raise FormatError(f"{path}: the {what} is empty")
        return data
    # Decode again, slowly, to name the line of the first problem.
    decoder = _LocatingDecoder()
    located = decoder.decode(text)
    where, message = _locate_problem(located, decoder, text, what)
    raise FormatError(f"{path}, line {where}: {message}")


class _Repeated(Exception):
    pass


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Repeated
    return out


def _value_problem(value: Any, what: str) -> str | None:
    if what == "run":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"score {value!r} is not a number"
        try:
            finite = math.isfinite(value)
        except OverflowError:  # (an int beyond a double's range)
            finite = False
        if not finite:
            return f"score {_short(value)} is not finite"
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"relevance {value!r} is not an integer"
    if not -(2**63) <= value < 2**63:
        return f"relevance {_short(value)} is out of the range of a 64-bit integer"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:20]}..."


def _expected(what: str) -> str:
    inner = "score" if what == "run" else "grade"
    return f'{{"qid": {{"docid": {inner}, ...}}, ...}}'


def _nested_problem(data: Any, what: str) -> str | None:
    if not isinstance(data, dict):
        return "top"
    for docs in data.values():
        if not isinstance(docs, dict):
            return "query"
        if _any_value_problem(docs.values(), what):
            return "value"
    return None


def _any_value_problem(values: Any, what: str) -> bool:
    """Whether any of a query's ``values`` has a :func:`_value_problem`: where they are all
    floats or ints (no bool: its type is not int's), as a JSON file's scores and grades are, in
    one array (a run of 2,000,000 scores: 1.1 s a value at a time); else a value at a time."""
    kinds = set(map(type, values))
    try:
        if what == "run" and kinds <= {float, int}:
            return not np.isfinite(np.fromiter(values, np.float64, len(values))).all()
        if what != "run" and kinds <= {int}:
            np.fromiter(values, np.int64, len(values))  # (a grade beyond 64 bits overflows)
            return False
    except OverflowError:
        return True
    return any(_value_problem(value, what) for value in values)


def _locate_problem(
    data: Any, decoder: _LocatingDecoder, text: str, what: str
) -> tuple[int, str]:
    if not isinstance(data, dict):
        return 1, f"the {what} must be a JSON object {_expected(what)}, got a {type(data).__name__}"
    top = decoder.starts[id(data)]
    if id(data) in decoder.repeated:
        qid = decoder.repeated[id(data)][0]
        return _key_line(text, top, qid, nth=2), f"query {qid!r} appears twice"
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            return _key_line(text, top, qid), (
                f"query {qid!r} maps to a {type(docs).__name__}, expected an object "
                f"{{\"docid\": {'score' if what == 'run' else 'grade'}, ...}}"
            )
        start = decoder.starts[id(docs)]
        if id(docs) in decoder.repeated:
            doc = decoder.repeated[id(docs)][0]
            line = _key_line(text, start, doc, nth=2)
            return line, f"document {doc!r} listed twice for query {qid!r}"
        for doc, value in docs.items():
            problem = _value_problem(value, what)
            if problem:
                return _key_line(text, start, doc), f"query {qid!r}, document {doc!r}: {problem}"
    raise AssertionError("no problem found on the second decoding")  # pragma: no cover


# ---------------------------------------------------------------------------- JSONL


def _jsonl_id(value: Any, where: str, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise FormatError(f"{where}: {name} {value!r} is not a string or an integer")
    return str(value)


def read_jsonl(
    path: Path, need: str, duplicates: str = "first"
) -> tuple[Lists, Qrels | None]:
    """One question per line. ``need``: "retrieved" (a run; "relevant" optional, but on every line
    or on none) or "relevant" (qrels). ``duplicates``: "first" keeps a retrieved list as it is
    (the metric counts a repeated id once), "error" refuses a list that repeats an id."""
    lists: Lists = {}
    qrels: Qrels = {}
    with_relevant: bool | None = None
    for lineno, line in file_lines(path):
        where = f"{path}, line {lineno}"
        try:
            row = json.loads(line, object_pairs_hook=_one_value_a_key)
        except json.JSONDecodeError as err:
            raise FormatError(f"{where}: not valid JSON: {err.msg}") from None
        except _KeyTwice as err:
            key, first, second = err.args
            raise FormatError(
                f"{where}: {key!r} is given twice in one object, as {first!r} and {second!r} "
                "(JSON would keep the last silently): give each key once, a document one grade"
            ) from None
        if not isinstance(row, dict):
            raise FormatError(
                f'{where}: expected an object {{"id": ..., "{need}": [...]}}, got a '
                f"{type(row).__name__}"
            )
        if "id" not in row:
            raise FormatError(f'{where}: no "id" (the question\'s id)')
        qid = _jsonl_id(row["id"], where, '"id"')
        if qid in lists or qid in qrels:
            raise FormatError(f"{where}: question {qid!r} appears twice")
        if need == "retrieved":
            if "retrieved" not in row:
                raise FormatError(
                    f'{where}: no "retrieved" (the document ids in rank order) for question '
                    f"{qid!r}"
                )
            lists[qid] = _jsonl_ranked(row["retrieved"], where, qid, duplicates)
            has = "relevant" in row
            if with_relevant is None:
                with_relevant = has
            elif has != with_relevant:
                state = "has" if has else "lacks"
                other = "lack" if has else "have"
                raise FormatError(
                    f'{where}: question {qid!r} {state} "relevant" while the lines above '
                    f"{other} it; give it on every line (the file is its own qrels) or on none "
                    "(pass --qrels)"
                )
            if not has:
                continue
        elif "relevant" not in row:
            raise FormatError(f'{where}: no "relevant" (the relevant ids) for question {qid!r}')
        qrels[qid] = _jsonl_relevant(row["relevant"], where, qid)
    if not lists and not qrels:
        raise FormatError(f"{path}: no questions")
    return lists, (qrels if need == "relevant" or with_relevant else None)


class _KeyTwice(Exception):
    """A key given twice in one JSON object with two values: ``(key, first, second)``."""


def _one_value_a_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: the object's dict, a key repeated at another value refused
    (``{"d1": 1, "d1": 2}``: which grade holds is unknown); the same value repeated kept once."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen and seen[key] != value:
                raise _KeyTwice(key, seen[key], value)
            seen[key] = value
    return out


def _jsonl_ranked(value: Any, where: str, qid: str, duplicates: str) -> list[str]:
    if not isinstance(value, list):
        raise FormatError(
            f'{where}: "retrieved" of question {qid!r} must be a list of ids in rank order, got '
            f"a {type(value).__name__}"
        )
    ranked = [_jsonl_id(v, where, "retrieved id") for v in value]
    if duplicates == "error" and len(set(ranked)) != len(ranked):
        seen: set[str] = set()
        doc = next(d for d in ranked if d in seen or seen.add(d))  # type: ignore[func-returns-value]
        raise FormatError(
            f"{where}: question {qid!r} retrieves {doc!r} twice (duplicates='error'; with "
            "'first' it counts once, at its first position)"
        )
    return ranked


def _jsonl_relevant(value: Any, where: str, qid: str) -> dict[str, int]:
    if isinstance(value, dict):
        out = {}
        for doc, grade in value.items():
            if isinstance(grade, bool) or not isinstance(grade, int):
                raise FormatError(
                    f"{where}: question {qid!r}, document {doc!r}: relevance {grade!r} is not an "
                    "integer"
                )
            out[str(doc)] = grade
        return out
    if not isinstance(value, list):
        raise FormatError(
            f'{where}: "relevant" of question {qid!r} must be a list of ids or an object '
            f"{{id: grade}}, got a {type(value).__name__}"
        )
    return {_jsonl_id(v, where, "relevant id"): 1 for v in value}
