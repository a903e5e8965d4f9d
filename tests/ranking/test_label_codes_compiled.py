"""The compiled codes of str ids (``_labels.c``) equal labels.py's numpy codes, id by id.

A million corpus ids are coded at every update; the C loop reads each id where Python holds it.
Here it is held to the numpy path (``_str_codes``) on ids of every shape that path treats apart:
plain decimal text (leading zeros, 18 and 19 digits), text that starts like a number ("-5",
"7a"), NUL inside and at the end, odd and even lengths, the empty string, and code points of one,
two and four bytes; and to ``canonical_id`` on the rule itself (decimal text is its integer).
So is the compiled part of ``key_kind`` (``_labels.undecided_ids``), which reads the plain
decimal ids of a list and leaves ``canonical_id`` the ones it cannot decide.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.ranking import labels

pytestmark = pytest.mark.skipif(labels._labels is None, reason="_labels is not built")

ALPHABET = st.sampled_from([*"0123456789-dxé\x00", "漢", "😀", " "])
IDS = st.one_of(
    st.text(ALPHABET, max_size=12),
    st.integers(-(10**20), 10**20).map(str),
    st.from_regex(r"0[0-9]{0,20}", fullmatch=True),
    st.text(max_size=40),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(IDS, max_size=60))
def test_compiled_codes_equal_the_numpy_codes(values):
    compiled = labels._compiled_str_codes(values)
    assert compiled is not None
    assert torch.equal(compiled, labels._str_codes(values))
    for value, code in zip(values, compiled.tolist(), strict=True):
        key = labels.canonical_id(value)
        if isinstance(key, int) and -(2**63) <= key < 2**63:
            assert code == key, value


def test_anything_but_exact_str_goes_the_other_ways():
    class Text(str):
        pass

    assert labels._compiled_str_codes(["a", 3]) is None
    assert labels._compiled_str_codes(["a", Text("b")]) is None
    assert torch.equal(labels.label_codes(["a", Text("b")], "ids"),
                       labels._str_codes(["a", "b"]))


def test_a_million_corpus_ids_are_coded_alike():
    values = [f"doc-{i}" for i in range(0, 10**6, 7)] + [str(i) for i in range(0, 10**5, 3)]
    assert torch.equal(labels.label_codes(values, "ids"), labels._str_codes(values))


def _kind_by_canonical_id(values):
    """key_kind's rule read id by id: "int" when every id is an integer's decimal text."""
    return "int" if all(isinstance(labels.canonical_id(v), int) for v in values) else "str"


@settings(max_examples=300, deadline=None)
@given(st.lists(IDS, max_size=60), st.booleans())
def test_the_key_kind_of_str_ids_is_canonical_ids(values, decimal_only):
    """key_kind of a list of str, whose plain decimal ids the compiled loop reads, equals the
    rule read id by id with canonical_id; so do lists of decimal text only (the common case:
    MS MARCO's passage ids), with ids that only canonical_id decides ("-5", 19 digits)."""
    if decimal_only:
        values = [v for v in values if isinstance(labels.canonical_id(v), int)] + ["12", "-7"]
    assert labels.key_kind(values) == _kind_by_canonical_id(values)
    undecided = labels._labels.undecided_ids(values)
    if undecided is not None:  # every id left out is plain decimal text: an int
        kept = set(undecided)
        assert all(isinstance(labels.canonical_id(v), int)
                   for i, v in enumerate(values) if i not in kept)


def test_millions_of_decimal_ids_are_not_read_one_by_one(monkeypatch):
    """8.8M decimal ids took key_kind's Python loop of canonical_id 4.6 s; the compiled loop
    reads them and leaves canonical_id only the ids it cannot decide."""
    read = []
    real = labels.canonical_id
    monkeypatch.setattr(labels, "canonical_id", lambda v: read.append(v) or real(v))
    values = [str(i) for i in range(200_000)] + ["-3", "1" * 19]
    assert labels.key_kind(values) == "int"
    assert read == ["-3", "1" * 19]
    read.clear()
    assert labels.key_kind([*values, "d7"]) == "str"
    assert read == []


@settings(max_examples=200, deadline=None)
@given(st.lists(IDS, max_size=60), st.sampled_from(["=", ">", "<"]), st.integers(1, 3))
def test_a_numpy_text_array_is_coded_as_its_python_strings(values, order, step):
    """A corpus's ids from a .npy file are a numpy text array, read by the compiled loop where
    numpy holds them (``_labels.ucs4_codes``): the codes, and key_kind, of the Python str numpy
    makes of them (``tolist``: an id's trailing NULs dropped), in either byte order and from a
    strided view. An array of the other byte order goes the way of its Python str."""
    array = np.array(values, dtype=str)
    array = array.astype(array.dtype.newbyteorder(order))[::step]
    strings = array.tolist()
    assert torch.equal(labels.label_codes(array, "ids"), labels._str_codes(strings))
    assert labels.key_kind(array) == _kind_by_canonical_id(strings)


def test_a_numpy_text_array_makes_no_python_str_of_its_ids(monkeypatch):
    """2M corpus ids made Python str took 0.13 s of a corpus on disk's set_gallery: the
    compiled loop reads the array itself, and canonical_id only the ids it cannot decide."""
    read = []
    real = labels.canonical_id
    monkeypatch.setattr(labels, "canonical_id", lambda v: read.append(v) or real(v))
    # (the ways of a list of str, compiled or numpy's: not taken)
    only_arrays = SimpleNamespace(ucs4_codes=labels._labels.ucs4_codes,
                                  ucs4_undecided=labels._labels.ucs4_undecided)
    monkeypatch.setattr(labels, "_labels", only_arrays)
    monkeypatch.setattr(labels, "_str_codes", None)
    ids = np.array([f"D{i}" for i in range(100_000)] + ["-3", "0x1", str(10**18)])
    codes = labels.label_codes(ids, "ids")
    assert codes[-3:].tolist() == [-3, labels._text_hashes(["0x1"])[0], 10**18]
    assert read == ["-3", "0x1", str(10**18)]
    assert labels.key_kind(ids) == "str"
    read.clear()
    assert labels.key_kind(np.array(["12", "-3", "7"])) == "int"
    assert read == ["-3"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(IDS, st.booleans()), max_size=40))
def test_numpy_str_in_a_list_is_coded_as_its_str(pairs):
    """Ids listed from a numpy array (``list(array)``: numpy's str, a subclass of str) are
    coded, and their key kind read, as the str they are, by the compiled loops."""
    values = [np.str_(v) if numpy else v for v, numpy in pairs]
    strings = [str(v) for v in values]
    assert torch.equal(labels.label_codes(values, "ids"), labels._str_codes(strings))
    assert labels.key_kind(values) == _kind_by_canonical_id(strings)


def test_numpy_str_in_a_list_is_not_read_one_by_one(monkeypatch):
    """200,000 ids as numpy's str were read one by one in Python (0.4 s; their str, 3 ms): now
    made the str they are, for the compiled loops, and canonical_id reads only the ids they
    leave it."""
    read = []
    real = labels.canonical_id
    monkeypatch.setattr(labels, "canonical_id", lambda v: read.append(v) or real(v))
    monkeypatch.setattr(labels, "_canonical_values", None)  # (the way of any other list)
    ids = list(np.array([f"doc{i}" for i in range(50_000)] + ["-3"]))
    assert labels.label_codes(ids, "ids")[-1].item() == -3
    assert read == ["-3"]
    read.clear()
    assert labels.key_kind(list(np.array(["12", "-3", "7"]))) == "int"
    assert read == ["-3"]


try:  # (pandas' columns where it is installed: statsmodels, a dev dependency, brings it)
    import pandas
except ImportError:  # pragma: no cover
    pandas = None
COLUMNS = [list, lambda v: np.array(v, dtype=object)] + (
    [] if pandas is None else [lambda v: pandas.Series(v, dtype=object)]
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), IDS), max_size=40),
       st.sampled_from(COLUMNS))
def test_ints_and_columns_of_objects_are_coded_as_their_values(values, container):
    """A list of Python ints (their own codes, taken at once), pandas' column of str or ints
    (a Series, listed by its own ``tolist``) and its ``to_numpy()`` (an object array: read as
    the list of its objects): the codes of each value read one by one (``canonical_id``; a
    text hashed as ``_str_codes`` hashes it)."""
    expected = []
    for v in values:
        key = labels.canonical_id(v)
        expected.append(key if isinstance(key, int) else int(labels._str_codes([key])[0]))
    given_ = container(values)
    assert labels.label_codes(given_, "ids").tolist() == expected
    assert labels.key_kind(given_) == ("int" if all(isinstance(labels.canonical_id(v), int)
                                                    for v in values) else "str")


def test_ids_of_a_list_are_not_read_one_by_one_and_beyond_int64_are_refused(monkeypatch):
    """200,000 Python ints, or a pandas column's str ids as an object array, were read one by
    one in Python (0.2 s): now at once; a pandas Series or Index is listed by its own tolist,
    not iterated. An integer beyond int64 is refused by the argument's name, with the value
    (torch's message named neither)."""
    for wide, value in (([2**63, 1], 2**63), (["a", -(2**63) - 1], -(2**63) - 1)):
        with pytest.raises(ValueError, match=rf"`ids` must hold integers within int64.*{value}"):
            labels.label_codes(wide, "ids")
    monkeypatch.setattr(labels, "_canonical_values", None)  # (the way of one by one)
    assert labels.label_codes(list(range(200_000)), "ids")[-1].item() == 199_999
    texts = np.array([f"doc{i}" for i in range(1000)], dtype=object)
    assert torch.equal(labels.label_codes(texts, "ids"),
                       labels.label_codes(texts.astype(str), "ids"))
    if pandas is None:  # pragma: no cover
        pytest.skip("pandas is not installed")

    def value_by_value(self):
        raise AssertionError("a pandas column iterated value by value (0.44 s for 500,000)")

    for kind in (pandas.Series, pandas.Index):  # (listed by their own tolist, 0.045 s)
        monkeypatch.setattr(kind, "__iter__", value_by_value)
    for column in (pandas.Series(texts.astype(str)), pandas.Index(texts)):
        assert torch.equal(labels.label_codes(column, "ids"),
                           labels.label_codes(texts.astype(str), "ids"))
        assert labels.key_kind(column) == "str"
