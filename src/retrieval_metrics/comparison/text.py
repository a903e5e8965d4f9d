"""The text of a :class:`~retrieval_metrics.comparison.SystemComparison`: numbers, p-values,
table cells for Markdown and LaTeX, and the checks of its systems' names and baseline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal

__all__ = [
    "CORRECTION_TEXT",
    "LATEX_SPECIAL",
    "TEST_TEXT",
    "alpha_of",
    "baseline_index",
    "latex",
    "markdown_cell",
    "number",
    "p_text",
    "percent_text",
    "signed",
    "system_names",
]

TEST_TEXT = {"t-test": "paired t-test", "randomization": "paired randomization test"}
CORRECTION_TEXT = {
    "holm": "Holm", "bonferroni": "Bonferroni", "benjamini-hochberg": "Benjamini-Hochberg",
    "none": "none",
}  # fmt: skip


def number(x: float | None) -> str:
    return "nan" if x is None or math.isnan(x) else f"{x:.4f}"


def signed(x: float | None) -> str:
    return "nan" if x is None or math.isnan(x) else f"{x:+.4f}"


def p_text(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.4g}"


def percent_text(level: float) -> str:
    return f"{level * 100:.6g}%"


def alpha_of(level: float) -> float:
    """1 - ``level``, the level a p-value is called significant below, as the decimal numbers
    read: 0.05 for 0.95. In floats 1 - 0.95 is 0.050000000000000044, and a p-value of exactly
    0.05 (2 x 25 / 1000 from 999 sign flips) came out "below" it."""
    return float(Decimal(1) - Decimal(repr(float(level))))


def markdown_cell(text: str) -> str:
    return text.replace("|", "\\|")


LATEX_SPECIAL = {
    "\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#", "_": "\\_",
    "{": "\\{", "}": "\\}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}",
}  # fmt: skip


def latex(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(c, c) for c in text)


def system_names(names: Sequence[str] | None, count: int) -> list[str]:
    if names is None:
        return [f"system {i}" for i in range(count)]
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ValueError(
            f"`names` must be a list of {count} strings, one per metric, got {names!r}"
        )
    labels = list(names)
    if len(labels) != count or not all(isinstance(n, str) and n for n in labels):
        raise ValueError(
            f"`names` must be a list of {count} non-empty strings, one per metric, got {labels!r}"
        )
    twice = sorted({n for n in labels if labels.count(n) > 1})
    if twice:
        raise ValueError(f"`names` must name each system once, got {twice} more than once")
    return labels


def baseline_index(baseline: int | str, names: list[str]) -> int:
    if isinstance(baseline, str):
        if baseline in names:
            return names.index(baseline)
        raise ValueError(
            f"`baseline` {baseline!r} names no system; the systems are {names} (or give its "
            "index, 0 for the first)"
        )
    if isinstance(baseline, bool) or not isinstance(baseline, int):
        raise ValueError(
            f"`baseline` must be a system's index (0 to {len(names) - 1}) or its name, got "
            f"{baseline!r}"
        )
    if not 0 <= baseline < len(names):
        raise ValueError(
            f"`baseline` must be an index from 0 to {len(names) - 1} ({len(names)} systems), "
            f"got {baseline}"
        )
    return baseline
