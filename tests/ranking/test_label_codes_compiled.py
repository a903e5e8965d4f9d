"""The compiled codes of str ids (``_labels.c``) equal labels.py's numpy codes, id by id.

A million corpus ids are coded at every update; the C loop reads each id where Python holds it.
Here it is held to the numpy path (``_str_codes``) on ids of every shape that path treats apart:
plain decimal text (leading zeros, 18 and 19 digits), text that starts like a number ("-5",
"7a"), NUL inside and at the end, odd and even lengths, the empty string, and code points of one,
two and four bytes; and to ``canonical_id`` on the rule itself (decimal text is its integer).
"""

from __future__ import annotations

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
