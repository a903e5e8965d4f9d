"""The compiled loop of the ranked-lists form (``_str_lists.c``) against the Python loop it
stands in for: every table field equal, on lists of str ids with repeats, lists and relevant
sets longer than the loop's stack tables, empty lists and judgments, relevant ids given as set,
frozenset, list (with repeats) and tuple, and queries the compiled loop must leave to Python (an
id that is not a str, a str subclass, graded judgments, a tuple of ranked ids, ids that mix ints
with their decimal text).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_metrics.functional.ranking import lists
from retrieval_metrics.functional.ranking.lists import rank_lists

compiled = pytest.importorskip("retrieval_metrics.functional.ranking._str_lists")


def python_loop_table(ranked, relevant, **options):
    """The same call with the compiled loop switched off."""
    saved = lists._str_lists
    lists._str_lists = None
    try:
        return rank_lists(ranked, relevant, **options)
    finally:
        lists._str_lists = saved


def assert_same_table(ours, theirs):
    for field in dataclasses.fields(ours):
        a, b = getattr(ours, field.name), getattr(theirs, field.name)
        if a is None or b is None:
            assert a is None and b is None, field.name
        else:
            assert torch.equal(a, b), (field.name, a, b)


class Text(str):
    """A str subclass: its own __eq__ could run Python code, so the compiled loop leaves it."""


@st.composite
def str_list_problems(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    vocab_size = draw(st.integers(1, 400))
    vocab = [f"d{i}" for i in range(vocab_size)]
    # equal text in another object: matching must compare text, not identity
    relevant_vocab = ["".join(["d", str(i)]) for i in range(vocab_size)]
    ranked, relevant = [], []
    for _ in range(draw(st.integers(0, 8))):
        length = int(rng.choice([0, 1, 5, 40, 300]))
        ids = [vocab[j] for j in rng.integers(0, vocab_size, length)]
        left = rng.random()
        if ids and left < 0.08:
            ids[int(rng.integers(0, len(ids)))] = 7  # not a str: left to Python
        elif ids and left < 0.12:
            ids[int(rng.integers(0, len(ids)))] = Text(ids[0])
        elif left < 0.16:
            ids = tuple(ids)
        ranked.append(ids)
        k = int(rng.choice([0, 1, 3, 300]))
        chosen = [relevant_vocab[j] for j in rng.integers(0, vocab_size, k)] + ["never"]
        kind = rng.choice(["set", "frozenset", "list", "tuple"])
        relevant.append({"set": set, "frozenset": frozenset, "list": list, "tuple": tuple}[kind](
            chosen
        ))
    return ranked, relevant


def warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = call()
    return table, [str(w.message) for w in caught]


@settings(max_examples=60, deadline=None)
@given(str_list_problems(), st.booleans(), st.sampled_from(["first", "warn"]))
def test_compiled_loop_gives_the_python_loops_table(problem, distinct, duplicates):
    ranked, relevant = problem
    options = {"distinct": distinct, "duplicates": duplicates}
    ours, our_warnings = warnings_of(lambda: rank_lists(ranked, relevant, **options))
    theirs, their_warnings = warnings_of(lambda: python_loop_table(ranked, relevant, **options))
    assert_same_table(ours, theirs)
    # under "warn": the same warning, naming the same first query and id, the same count
    assert our_warnings == their_warnings


def test_queries_the_compiled_loop_leaves_are_ranked_in_python():
    ranked = [["a", "b"], ["c", 7, "7"], ["x", "y"], ["p", "q"], ["u"]]
    relevant = [{"b"}, {"7"}, {"y", "zz"}, [3, "q"], ("u", "u")]
    status, *_ = compiled.match(ranked, relevant, True, False)
    assert list(status) == [0, 1, 0, 1, 0]
    table = rank_lists(ranked, relevant)
    assert_same_table(table, python_loop_table(ranked, relevant))
    # "7" and 7 are one id (ids compare as text): query 1 finds it at 1 and lists 2 distinct ids
    assert table.above.tolist() == [1, 1, 1, 1, 0]
    assert table.num_retrieved.tolist() == [2, 2, 2, 2, 1]
    assert table.num_relevant.tolist() == [1, 1, 2, 2, 1]


def test_graded_judgments_and_duplicates_error_take_the_python_loop(monkeypatch):
    calls = []
    real = compiled.match
    monkeypatch.setattr(
        lists._str_lists, "match", lambda *a: calls.append(a) or real(*a), raising=True
    )
    rank_lists([["a", "b"]], [{"b": 2}])
    with pytest.raises(ValueError, match="returns id 'a' more than once"):
        rank_lists([["a", "a"]], [{"a"}], duplicates="error")
    assert calls == []
    rank_lists([["a", "b"]], [{"b"}])
    with pytest.warns(UserWarning, match=r"1 queries repeat a relevant id \(first: query 0"):
        rank_lists([["a", "a"]], [{"a"}], duplicates="warn")
    assert len(calls) == 2


def test_the_compiled_loop_stops_once_every_relevant_id_is_found():
    """Without distinct counts, the ids after the chunk (64 ids) of the last hit are never read:
    an id there that is not a str leaves the query in the compiled loop, with the Python loop's
    values; with distinct counts every id is read, and the query is left to Python."""
    ranked, relevant = [["a", "b", *(f"x{i}" for i in range(70)), 7]], [{"b"}]
    status, *_ = compiled.match(ranked, relevant, False, False)
    assert list(status) == [0]
    status, *_ = compiled.match(ranked, relevant, True, False)
    assert list(status) == [1]
    for distinct in (False, True):
        assert_same_table(
            rank_lists(ranked, relevant, distinct=distinct),
            python_loop_table(ranked, relevant, distinct=distinct),
        )


def test_collections_that_are_not_sequences_are_read_once():
    """dict.values() of lists: the compiled loop reads it, and the Python loop is handed the query
    it leaves (an int among the ids) from the same collection, read once into a list."""
    ranked = {"a": ["x", 7, "y"], "b": ["p", "q"]}
    relevant = {"a": {"y"}, "b": {"q"}}
    table = rank_lists(ranked.values(), relevant.values())
    assert table.above.tolist() == [2, 1]
    assert table.num_relevant.tolist() == [1, 1]
    assert_same_table(table, python_loop_table(list(ranked.values()), list(relevant.values())))
