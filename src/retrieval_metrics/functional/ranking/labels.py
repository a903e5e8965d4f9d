"""Labels, ids and cameras as int64 codes that compare like the values given.

One rule for every front end (metric classes, functional layer, command line, files): integers
are themselves, a string that is the decimal text of an integer is that integer (ids compare as
text), other strings are strings, and floats are taken only when they hold whole numbers their
dtype stores exactly. :func:`label_codes` hashes strings (the same code in every process, so
string labels survive a distributed gather); :func:`encode_labels` numbers them through one
vocabulary shared by the sets it is given.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

try:  # label_codes of str ids in C (setup.py builds it; optional)
    from retrieval_metrics.functional.ranking import _labels
except ImportError:  # pragma: no cover - a build without a C compiler
    _labels = None

__all__ = [
    "all_distinct",
    "canonical_id",
    "encode_labels",
    "key_kind",
    "label_codes",
    "scalar_value",
    "whole_float_labels",
    "whole_float_value",
]


def whole_float_labels(values: Tensor, name: str) -> Tensor:
    """Float labels as int64, when every value is a whole number its dtype holds exactly
    (below 2**24 for float32, 2**53 for float64); otherwise a ValueError naming ``name``.

    The one rule for float labels, ids and cameras, in the functional layer, the metric classes
    and the command line."""
    # Every integer of magnitude below 2**(mantissa bits + 1) has its own float; at or above that
    # bound two labels may already have been rounded into one, so they are refused.
    bits = round(-math.log2(torch.finfo(values.dtype).eps)) + 1  # 24 for float32, 53 for float64
    # checked where they are, in a dtype that holds them exactly (half precision as float32; no
    # float64 copy, which a device without float64, Apple's MPS, cannot hold)
    wide = values if values.dtype in (torch.float32, torch.float64) else values.float()
    bad = ~torch.isfinite(wide) | (wide != torch.round(wide)) | (wide.abs() >= 2.0**bits)
    if bool(bad.any()):
        example = float(wide[bad][0])
        raise ValueError(
            f"`{name}` must hold integers or strings; floats are accepted only when they hold "
            f"whole numbers below 2**{bits} ({values.dtype} stores those exactly), got "
            f"{example!r}. Labels are compared exactly and never rounded"
        )
    return wide.to(torch.int64)


_INT64 = 2**63


def canonical_id(value: Any) -> Any:
    """The key a label or id is compared by: ids and labels compare as text, so the integer
    ``7`` and the string ``"7"`` are one id (as in the command line's files, where a JSON object's
    keys are always strings), while ``"007"`` and ``"7.0"`` are not ``7``.

    A string that is the plain decimal text of an int64 becomes that int; anything else is
    returned as it is (numpy integers as Python ints, numpy strings as Python strings). The one
    rule of the metric classes, the functional layer and the files.

    >>> canonical_id("7"), canonical_id(7), canonical_id("007"), canonical_id("d7")
    (7, 7, '007', 'd7')
    """
    if isinstance(value, str):
        if type(value) is not str:  # numpy's str (an id taken from an array) is its text
            value = str(value)
        digits = value[1:] if value[:1] == "-" else value
        if digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0"):
            number = int(value)
            if -_INT64 <= number < _INT64 and value != "-0":
                return number
        return value
    if isinstance(value, np.integer):
        return int(value)
    return value


def whole_float_value(value: float, name: str) -> int:
    """One float label as an int, by the rule of :func:`whole_float_labels`."""
    return int(whole_float_labels(torch.tensor([float(value)], dtype=torch.float64), name)[0])


def encode_labels(*label_sets: Any, names: Sequence[str] | None = None) -> list[Tensor]:
    """Turn one or several label collections into int64 tensors that compare like the originals.

    Integer tensors and arrays are kept as int64. Strings (or other hashable Python objects) are
    mapped to integers through one vocabulary shared by all the sets, so equal labels in different
    sets get equal codes. Floats are taken only when they hold whole numbers their dtype stores
    exactly (:func:`whole_float_labels`): a float label beyond that may already have merged two
    distinct integers.

    >>> q, g = encode_labels(["cat", "dog"], ["dog", "dog", "cat"])
    >>> (q[:, None] == g[None, :]).tolist()
    [[False, False, True], [True, True, False]]
    """
    names = list(names) if names is not None else [f"labels[{i}]" for i in range(len(label_sets))]
    as_tensors: list[Tensor | None] = []
    objects: list[list[Any] | None] = []
    for labels, name in zip(label_sets, names, strict=True):
        tensor = _numeric_tensor(labels, name)
        if tensor is not None:
            if tensor.dim() != 1:
                raise ValueError(f"`{name}` must be 1-D, got shape {tuple(tensor.shape)}")
            as_tensors.append(_as_int64(tensor, name))
            objects.append(None)
            continue
        values = _canonical_values(labels, name)
        if values and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values
        ):
            as_tensors.append(torch.tensor([int(v) for v in values], dtype=torch.int64))
            objects.append(None)
            continue
        as_tensors.append(None)
        objects.append(values)
    if all(o is None for o in objects):
        return [t for t in as_tensors if t is not None]
    vocabulary: dict[Any, int] = {}
    encoded = []
    for values, tensor in zip(objects, as_tensors, strict=True):
        # an integer tensor beside string labels: its ints compare as text too
        values = values if values is not None else (tensor.tolist() if tensor is not None else [])
        codes = [vocabulary.setdefault(v, len(vocabulary)) for v in values]
        encoded.append(torch.tensor(codes, dtype=torch.int64))
    return encoded


def _numeric_tensor(labels: Any, name: str) -> Tensor | None:
    """Tensors and numeric arrays as a tensor (no copy of an array), None for anything else;
    complex values refused."""
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "iubf":
        labels = torch.from_numpy(np.ascontiguousarray(labels))
    if not isinstance(labels, Tensor):
        return None
    if labels.is_complex():
        raise ValueError(f"`{name}` must hold integers or strings, got a {labels.dtype} tensor")
    return labels


def _as_int64(labels: Tensor, name: str) -> Tensor:
    if labels.is_floating_point():
        return whole_float_labels(labels, name)
    return labels.to(torch.int64)


def scalar_value(value: Any) -> Any:
    """A 0-d tensor or array, or a numpy scalar, as the Python value it holds (a list of a
    tensor's elements, an id taken from an array), any other value as it is: read alike by the
    codes, by the kind of key and by messages that name an id."""
    if (isinstance(value, (Tensor, np.ndarray)) and value.ndim == 0) or isinstance(
        value, np.generic
    ):
        return value.item()
    return value


def _canonical_values(labels: Any, name: str) -> list[int | str]:
    """A collection of Python values, each as it is compared: whole floats as ints, the decimal
    text of an int as that int (:func:`canonical_id`), a 0-d tensor as its value.
    Anything else (None, bytes, bool, other objects) is refused: hashed by its repr it became a
    label of its own (``[None] * 12`` read as one class)."""
    if isinstance(labels, np.ndarray):
        labels = labels.tolist()
    values = []
    for v in map(scalar_value, labels):
        if isinstance(v, (float, np.floating)):
            v = whole_float_value(v, name)
        v = canonical_id(v)
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            hint = " (decode bytes to str first)" if isinstance(v, bytes) else ""
            raise ValueError(
                f"`{name}` must hold integers or strings, got {v!r} ({type(v).__name__}){hint}"
            )
        values.append(v)
    return values


_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
#: numpy text read a chunk at a time (label_codes, key_kind): its python strings are made
#: per chunk, not for a million ids at once
TEXT_CHUNK = 1 << 16
_HASH_CHUNK = 1 << 16  # strings per numpy array: bounds the fixed-width copy of long ids


def _code_point_chunks(values: list[str]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """The strings, :data:`_HASH_CHUNK` at a time: each chunk's start, its UTF-32 code points
    ``(n, width)`` uint32 zero-padded to an even width, and its lengths (taken from Python:
    numpy's fixed-width strings drop trailing NULs)."""
    for start in range(0, len(values), _HASH_CHUNK):
        part = values[start : start + _HASH_CHUNK]
        lengths = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        width = max(int(lengths.max()), 1)
        width += width % 2  # whole 64-bit words
        points = np.array(part, dtype=f"<U{width}").view(np.uint32).reshape(len(part), width)
        yield start, points, lengths


def _hash_points(points: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The 64-bit hash of each row of a :func:`_code_point_chunks` chunk (see
    :func:`_text_hashes`)."""
    words = points.view(np.uint64)
    word_counts = (lengths + 1) // 2
    shared = int(word_counts.min())
    with np.errstate(over="ignore"):
        h = _FNV_OFFSET ^ (lengths.astype(np.uint64) * _MIX1)
        for j in range(words.shape[1]):
            step = (h ^ words[:, j]) * _FNV_PRIME
            h = step if j < shared else np.where(word_counts > j, step, h)
        h ^= h >> np.uint64(30)
        h *= _MIX1
        h ^= h >> np.uint64(27)
        h *= _MIX2
        h ^= h >> np.uint64(31)
    return h.view(np.int64)


def _text_hashes(values: list[str]) -> np.ndarray:
    """A 64-bit hash of each string, computed with numpy a column at a time (a Python hash
    call per id cost 2 s on a million corpus ids; this costs a tenth of that).

    The hash of a string depends on its code points and its length only, never on the other
    strings of the call (the width of the array they share): FNV-1a over the UTF-32 code points
    taken two to a 64-bit word, each row stopping at its own length, seeded by the length (so
    trailing NULs, which numpy's fixed-width strings drop, still count), then splitmix64's
    finaliser to spread the bits. The same in every process and on every platform.
    """
    out = np.empty(len(values), dtype=np.int64)
    for start, points, lengths in _code_point_chunks(values):
        out[start : start + len(lengths)] = _hash_points(points, lengths)
    return out


_POWERS = 10 ** np.arange(18, dtype=np.int64)[::-1]  # 10**17 .. 1


def _plain_decimals(points: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which rows are the decimal text of a non-negative integer below 10**18 (digits only, no
    leading zero but in "0"), and their values: :func:`canonical_id` for most numeric ids,
    without a Python call each."""
    width = min(points.shape[1], 18)
    digits = points[:, :width].astype(np.int64) - 48
    inside = np.arange(width) < lengths[:, None]
    is_digit = (digits >= 0) & (digits <= 9)
    plain = (lengths >= 1) & (lengths <= 18) & (is_digit | ~inside).all(axis=1)
    plain &= (lengths == 1) | (digits[:, 0] != 0)
    # right-align each number's digits on the powers of ten
    shifted = np.where(inside, digits, 0) * _POWERS[None, 18 - width :]
    values = shifted.sum(axis=1) // (10 ** (width - np.minimum(lengths, width)))
    return plain, values


def _compiled_str_codes(values: list[Any]) -> Tensor | None:
    """:func:`_str_codes` by the compiled loop (``_labels.c``, the same codes); None where it
    is not built or ``values`` holds anything but exact str (the callers' other paths)."""
    if _labels is None:
        return None
    codes = np.empty(len(values), dtype=np.int64)
    try:
        left = _labels.str_codes(values, codes)
    except TypeError:
        return None
    return _read_left(codes, left, values)


def _listed(labels: Any) -> Any:
    """``labels`` as a list where they are a column of Python objects: a 1-D numpy object
    array (``Series.to_numpy()`` of str), or a collection with a ``tolist`` of its own that
    is neither a tensor nor an array (pandas' Series and Index, whose iteration makes a call
    per value: 500,000 ids 0.44 s, their list 0.045 s); anything else as it is."""
    if isinstance(labels, np.ndarray):
        return labels.tolist() if labels.dtype == object and labels.ndim == 1 else labels
    if isinstance(labels, (list, tuple, str, bytes, Tensor)):
        return labels
    tolist = getattr(labels, "tolist", None)
    listed = tolist() if callable(tolist) else labels
    return listed if isinstance(listed, list) else labels


def _exact_texts(values: list[Any], kinds: set[type] | None = None) -> list[str] | None:
    """``values`` as exact str where every one is text: numpy's str (ids listed from a numpy
    array, ``list(array)``) made the str it is, for the compiled loops, which take exact str
    only (200,000 of them were read one by one in Python, 0.4 s, where their str take 3 ms).
    None where some value is not text. ``kinds``: the values' types, where known."""
    kinds = set(map(type, values)) if kinds is None else kinds
    if not kinds or not kinds <= {str, np.str_}:
        return None
    return values if kinds == {str} else list(map(str, values))


def _undecided_ids(values: list[Any]) -> tuple[list[str], list[int] | None] | None:
    """key_kind's compiled reading of the list ``values`` (``_labels.undecided_ids``): the ids
    as exact str, and None where one is certainly text, else the indices of those only
    canonical_id can read ("-5", 19 digits): every other one is plain decimal text, an int
    (8.8M decimal ids, MS MARCO's passages, took a Python loop 4.6 s). None where some value
    is not text (read in Python)."""
    try:
        return values, _labels.undecided_ids(values)
    except TypeError:  # (not exact str: numpy's str made the str it is)
        texts = _exact_texts(values)
        return None if texts is None else (texts, _labels.undecided_ids(texts))


def _read_left(codes: np.ndarray, left: list[int], values: Sequence[Any]) -> Tensor:
    """``codes`` as a tensor, the ids at ``left`` read by :func:`canonical_id` first: those
    that start like a number but are not plain decimal text ("-5", 19 digits), which the
    compiled loops leave to Python (an integer's text is that integer)."""
    for i in left:
        if isinstance(number := canonical_id(str(values[i])), int):
            codes[i] = number
    return torch.from_numpy(codes)


def _code_point_rows(labels: np.ndarray) -> np.ndarray | None:
    """The ids of the 1-D numpy text array ``labels`` as the compiled loops read them where
    numpy holds them: their UTF-32 code points, a C-contiguous uint32 matrix of one row an id
    (an id's trailing NULs are not part of it, as numpy reads it). None where the loops cannot
    take them: not built, or code points not in the host's byte order."""
    if _labels is None or not labels.dtype.isnative or labels.dtype.itemsize == 0:
        return None
    width = labels.dtype.itemsize // 4
    return np.ascontiguousarray(labels).view(np.uint32).reshape(labels.size, width)


def _compiled_text_array_codes(labels: np.ndarray) -> Tensor | None:
    """label_codes of a 1-D numpy text array read where numpy holds it (``_labels.c``, the
    codes of its ids as Python str): no str made of each id (2M corpus ids "D0", "D1", ...:
    0.10-0.16 s made str and coded, 0.02-0.06 s read here). None where the compiled loop
    cannot take the array."""
    rows = _code_point_rows(labels)
    if rows is None:
        return None
    codes = np.empty(rows.shape[0], dtype=np.int64)
    return _read_left(codes, _labels.ucs4_codes(rows, codes), labels)


def _str_codes(values: list[str]) -> Tensor:
    """label_codes of python strings: the decimal text of an int64 as that int, any other
    string its :func:`_text_hashes` code."""
    codes = np.empty(len(values), dtype=np.int64)
    for start, points, lengths in _code_point_chunks(values):
        chunk = _hash_points(points, lengths)
        first = points[:, 0]
        numeric = np.flatnonzero(((first >= ord("0")) & (first <= ord("9"))) | (first == ord("-")))
        if len(numeric):
            plain, numbers = _plain_decimals(points[numeric], lengths[numeric])
            chunk[numeric[plain]] = numbers[plain]
            # the other ids that start like a number ("-", 19 digits, "0x") are read in Python
            for i in numeric[~plain].tolist():
                if isinstance(number := canonical_id(values[start + i]), int):
                    chunk[i] = number
        codes[start : start + len(lengths)] = chunk
    return torch.from_numpy(codes)


def label_codes(labels: Any, name: str) -> Tensor:
    """int64 codes that compare like the labels: integers as they are, strings by a 64-bit hash,
    except a string that is the decimal text of an integer, which is that integer: labels and ids
    compare as text (``7`` and ``"7"`` are one label; see :func:`canonical_id`).

    Floats are taken when they hold whole numbers their type stores exactly (below 2**24 for
    float32, 2**53 for float64), the rule the command line applies to the arrays of its files;
    other floats are refused, since labels are compared exactly. The hash is the same in every
    process, so string labels survive a distributed gather.
    """
    labels = _listed(labels)
    tensor = _numeric_tensor(labels, name)
    if tensor is not None:
        if sum(size > 1 for size in tensor.shape) > 1:
            # (a column, (N, 1), is one entry a row; a matrix is no list of entries)
            raise ValueError(
                f"`{name}` must be 1-D, one entry per item, got shape {tuple(tensor.shape)}"
            )
        return _as_int64(tensor.reshape(-1), name)
    if isinstance(labels, np.ndarray) and labels.dtype.kind == "U" and labels.ndim == 1:
        compiled = _compiled_text_array_codes(labels)
        if compiled is not None:
            return compiled
        if labels.size > TEXT_CHUNK:
            # a chunk at a time: a million ids as python str would take 80 MB at once
            return torch.cat([label_codes(labels[i : i + TEXT_CHUNK], name)
                              for i in range(0, labels.size, TEXT_CHUNK)])
        labels = labels.tolist()  # (numpy text: the compiled hash of a list of str below)
    if isinstance(labels, (str, bytes, set, frozenset, dict)) or not isinstance(
        labels, Iterable
    ):
        # a bare string would be split into its characters, a set taken in hash order (which
        # differs between processes): one entry per item, in the items' order, is needed
        raise ValueError(
            f"`{name}` must be a sequence with one entry per item (a list, tuple, array or "
            f"tensor), got {type(labels).__name__} {reprlib.repr(labels)}"
        )
    # (a list as it is: a copy of 8.8M ids took 0.07 s)
    values = labels if isinstance(labels, (list, np.ndarray)) else list(labels)
    if not isinstance(values, np.ndarray):
        compiled = _compiled_str_codes(values)  # (a million corpus ids: 0.25 s -> 0.03 s)
        if compiled is not None:
            return compiled
        kinds = set(map(type, values))
        if kinds == {int}:  # (Python ints are their own codes: 200,000 read one by one, 0.2 s)
            return _int64_codes(values, name)
        texts = _exact_texts(values, kinds)
        if texts is not None:
            compiled = _compiled_str_codes(texts)
            return compiled if compiled is not None else _str_codes(texts)
    canonical = _canonical_values(values, name)
    texts = [i for i, v in enumerate(canonical) if isinstance(v, str)]
    text_codes = _text_hashes([canonical[i] for i in texts]).tolist()
    codes: list[int | str] = list(canonical)
    for i, code in zip(texts, text_codes, strict=True):
        codes[i] = code
    return _int64_codes(codes, name)


def _int64_codes(codes: list[Any], name: str) -> Tensor:
    """The int codes as an int64 tensor; an integer beyond int64 refused by name (torch's own
    message named neither the argument nor the value)."""
    try:
        return torch.tensor(codes, dtype=torch.int64)
    except (OverflowError, RuntimeError, ValueError):
        wide = next((c for c in codes if isinstance(c, int) and not -(2**63) <= c < 2**63),
                    None)
        if wide is None:
            raise
        raise ValueError(
            f"`{name}` must hold integers within int64 or strings, got {wide}"
        ) from None


def all_distinct(codes: Tensor | np.ndarray) -> bool:
    """Whether no code repeats.

    Codes in ascending order (a corpus numbered 0..N-1, as most are) repeat none: one
    comparison of neighbours, where they are (8.8M ids: 7 ms, against 1.0 s for a sort on this
    project's CI machine; on a device, no copy of them to the host). Otherwise one sorted copy
    of them: on a device, torch's sort there; on the host numpy's, which holds 8 bytes an id
    above them (torch's radix sort is twice as fast but holds 32, a stable argsort 32 too: 2M
    ids 16 MiB against 63 MiB, and a corpus on disk is ranked in less than that)."""
    on_device = isinstance(codes, Tensor) and codes.device.type != "cpu"
    values = codes.reshape(-1) if on_device else (
        codes.numpy() if isinstance(codes, Tensor) else np.asarray(codes)
    )
    if len(values) < 2 or bool((values[1:] > values[:-1]).all()):
        return True
    values = torch.sort(values).values if on_device else np.sort(values)
    return not bool((values[1:] == values[:-1]).any())


def key_kind(labels: Any) -> str:
    """``"str"`` when some of ``labels`` is a string other than an integer's decimal text (it is
    compared by its hash), else ``"int"``: numbers, tensors and arrays of numbers, and decimal
    text. Labels of the two kinds never match each other."""
    labels = _listed(labels)
    if _numeric_tensor(labels, "labels") is not None:
        return "int"
    text_array = isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind == "U"
    rows = _code_point_rows(labels) if text_array else None
    if rows is not None:
        # read where numpy holds them, as label_codes reads them; the undecided ones below
        undecided = _labels.ucs4_undecided(rows)
        if undecided is None:
            return "str"
        values = [str(labels[i]) for i in undecided]
    elif isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.size > TEXT_CHUNK:
        # a chunk at a time (a million ids as python str would take 80 MB at once)
        kinds = (key_kind(labels[i : i + TEXT_CHUNK]) for i in range(0, labels.size, TEXT_CHUNK))
        return "str" if "str" in kinds else "int"
    else:
        values = labels.tolist() if isinstance(labels, np.ndarray) else labels
        if _labels is not None and isinstance(values, list):
            read = _undecided_ids(values)
            if read is not None:
                texts, undecided = read
                if undecided is None:
                    return "str"
                values = [texts[i] for i in undecided]
            elif set(map(type, values)) == {int}:  # (Python ints, not read one by one)
                return "int"
    for v in map(scalar_value, values):
        if isinstance(v, (str, bytes)) and not isinstance(canonical_id(v), int):
            return "str"
        if not isinstance(v, (str, bytes, int, float, np.integer, np.floating)):
            return "str"
    return "int"
