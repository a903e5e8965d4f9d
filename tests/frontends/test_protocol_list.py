"""The named protocols are listed once, in metrics/protocols.py's PROTOCOLS: the command line's
--protocol choices and help, the documentation's table and the IR protocols (under which "R@K"
is recall) all read that list, and nothing lists one of them alone."""

from __future__ import annotations

import re
from pathlib import Path

from retrieval_metrics.cli.parser import PROTOCOL_NAMES, build_parser
from retrieval_metrics.metrics.protocols import IR_PROTOCOLS, PROTOCOLS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _protocol_action():
    evaluate = next(
        action.choices["evaluate"] for action in build_parser()._actions
        if getattr(action, "choices", None) and "evaluate" in action.choices
    )
    return next(a for a in evaluate._actions if "--protocol" in a.option_strings)


def test_the_command_line_offers_every_protocol():
    assert PROTOCOL_NAMES == tuple(PROTOCOLS)
    assert len(PROTOCOLS) == 16
    action = _protocol_action()
    assert tuple(action.choices) == (*PROTOCOLS, "none")
    for name in PROTOCOLS:
        assert name in action.help, name


def test_the_documentation_lists_every_protocol_in_its_order():
    text = (DOCS / "protocols.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)
    assert rows[: len(PROTOCOLS)] == list(PROTOCOLS)


def test_the_ir_protocols_are_protocols():
    assert IR_PROTOCOLS <= set(PROTOCOLS)
    assert {"trec_eval", "beir", "mteb"} <= IR_PROTOCOLS
    assert not {"vsepp", "pml", "torchreid", "netvlad"} & IR_PROTOCOLS
