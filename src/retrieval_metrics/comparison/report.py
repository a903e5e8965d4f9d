"""The result of ``compare_systems``: :class:`SystemComparison`, its rows read by measure and
system, and its renderings (an aligned table, Markdown, LaTeX, a dict, a pandas DataFrame);
the text of its cells is ``comparison/text.py``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrieval_metrics.comparison.text import (
    CORRECTION_TEXT,
    TEST_TEXT,
    alpha_of,
    latex,
    markdown_cell,
    number,
    p_text,
    percent_text,
    signed,
)

__all__ = ["SystemComparison"]


@dataclass
class SystemComparison:
    """Several systems against a baseline, measure by measure (:func:`compare_systems`).

    ``rows`` holds one dict per measure and system, measures in the metrics' order and systems
    in the order given: ``measure`` (its key, ``"map@r"``, ``"i2t/hit_rate@1"``), ``label``
    (the measure as printed), ``system``, ``is_baseline``, ``higher_is_better``, ``value``,
    ``interval``, ``queries``, and for every system but the baseline ``difference``,
    ``p_value``, ``p_corrected``, ``significant``, ``wins``, ``ties``, ``losses`` (``None`` in the
    baseline's rows). ``comparisons`` is the size of the family the correction saw (the
    comparisons with a p-value; with ``family="measure"``, all of them over the measures).

    Read a row with ``result[measure, system]``, a measure's rows with ``result[measure]``;
    print it (an aligned table), or write it with :meth:`to_markdown`, :meth:`to_latex`,
    :meth:`to_dataframe` or :meth:`as_dict`.
    """

    systems: list[str]
    baseline: str
    measures: list[str]
    rows: list[dict[str, Any]]
    test: str
    correction: str
    family: str
    comparisons: int
    level: float
    num_resamples: int
    seed: int

    # ------------------------------------------------------------------ reading

    def __getitem__(self, key: str | tuple[str, str]) -> Any:
        if isinstance(key, tuple):
            measure, system = key
            for row in self.rows:
                if row["measure"] == measure and row["system"] == system:
                    return dict(row)
            raise KeyError(
                f"no row for measure {measure!r} and system {system!r}; measures "
                f"{self.measures}, systems {self.systems}"
            )
        if key not in self.measures:
            raise KeyError(f"no measure {key!r}; the measures are {self.measures}")
        return {row["system"]: dict(row) for row in self.rows if row["measure"] == key}

    @property
    def alpha(self) -> float:
        """The level a corrected p-value is called significant below: 1 - ``level``, as the
        decimal numbers read (0.05 for 0.95, not 1 - 0.95 = 0.050000000000000044)."""
        return alpha_of(self.level)

    def description(self) -> str:
        """One sentence: the test, the baseline, the correction and its family."""
        test = TEST_TEXT[self.test]
        if self.test == "randomization":
            test += (
                f" ({self.num_resamples} random sign flips, seed {self.seed}; every sign flip "
                f"when 2^n <= {self.num_resamples})"
            )
        others, measures = len(self.systems) - 1, len(self.measures)
        if self.correction == "none":
            fix = "p-values not corrected for multiple comparisons"
        elif self.comparisons == 0:
            # (every p-value undefined: fewer than two queries both systems count, say)
            fix = "no comparison has a p-value to correct"
        elif self.family == "all":
            fix = (
                f"p-values corrected by {CORRECTION_TEXT[self.correction]} over the "
                f"{self.comparisons} "
                f"{'comparison' if self.comparisons == 1 else 'comparisons'} ({others} "
                f"{'system' if others == 1 else 'systems'} x {measures} "
                f"{'measure' if measures == 1 else 'measures'})"
            )
        else:
            fix = (
                f"p-values corrected by {CORRECTION_TEXT[self.correction]} within each "
                f"measure, over its {others} {'comparison' if others == 1 else 'comparisons'}"
            )
        return f"Two-sided {test} of each system against the baseline {self.baseline!r}; {fix}."

    # ------------------------------------------------------------------ tables

    def _cells(self, row: dict[str, Any]) -> list[str]:
        lo, hi = row["interval"]
        cells = [row["system"], number(row["value"]), f"[{number(lo)}, {number(hi)}]"]
        if row["is_baseline"]:
            cells += ["baseline", ""] + ([""] if self.correction != "none" else []) + [""]
        else:
            star = "*" if row["significant"] else ""
            cells += [signed(row["difference"]), p_text(row["p_value"])]
            if self.correction != "none":
                cells.append(p_text(row["p_corrected"]) + star)
            else:
                cells[-1] += star
            cells.append(f"{row['wins']}/{row['ties']}/{row['losses']}")
        cells.append(str(row["queries"]))
        return cells

    def _head(self) -> list[str]:
        head = ["measure", "system", "value", f"{percent_text(self.level)} interval", "difference",
                "p"]  # fmt: skip
        if self.correction != "none":
            head.append(f"p ({CORRECTION_TEXT[self.correction]})")
        return [*head, "wins/ties/losses", "queries"]

    def _footnote(self) -> str:
        which = "p" if self.correction == "none" else "corrected p"
        return (
            f"* {which} < {self.alpha:.6g} (1 - level); difference: system - baseline, "
            "mean over the queries both count; wins/ties/losses: queries where the system is "
            "better than, equal to (within 1e-12), worse than the baseline"
        )

    def _table(self) -> list[list[str]]:
        lines, previous = [], None
        for row in self.rows:
            label = row["label"] if row["measure"] != previous else ""
            previous = row["measure"]
            lines.append([label, *self._cells(row)])
        return lines

    def __str__(self) -> str:
        head, lines = self._head(), self._table()
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]

        def joined(cells: list[str]) -> str:
            return "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        return "\n".join(
            [self.description(), joined(head), *(joined(line) for line in lines),
             self._footnote()]
        )  # fmt: skip

    __repr__ = __str__

    def to_markdown(self) -> str:
        """The table as Markdown (GitHub's pipe table), after the sentence that names the test
        and the correction, and before the footnote.

        Example:
            >>> import torch, retrieval_metrics as rm
            >>> labels = torch.arange(40) % 8
            >>> a, b = rm.MAPAtR(), rm.MAPAtR()
            >>> a.update(torch.eye(8)[labels], labels)
            >>> b.update(torch.eye(8)[labels], labels)
            >>> print(rm.compare_systems(a, b, names=["a", "b"]).to_markdown().splitlines()[2])
            | measure | system | value | 95% interval | difference | p | p (Holm) | ...
        """
        head, lines = self._head(), self._table()
        rows = [
            "| " + " | ".join(markdown_cell(c) for c in cells) + " |" for cells in [head, *lines]
        ]
        rule = "|" + "|".join("---" if i < 2 else "--:" for i in range(len(head))) + "|"
        return "\n".join(
            [self.description(), "", rows[0], rule, *rows[1:], "", self._footnote(), ""]
        )

    def to_latex(self) -> str:
        """The table as a LaTeX ``tabular`` (booktabs rules: ``\\usepackage{booktabs}``), the
        sentence naming the test and the correction and the footnote as comments above it.

        Example:
            >>> import torch, retrieval_metrics as rm
            >>> labels = torch.arange(40) % 8
            >>> a, b = rm.MAPAtR(), rm.MAPAtR()
            >>> a.update(torch.eye(8)[labels], labels)
            >>> b.update(torch.eye(8)[labels], labels)
            >>> print(rm.compare_systems(a, b).to_latex().splitlines()[2])
            \\begin{tabular}{llrlrrrrr}
        """
        head, lines = self._head(), self._table()
        spec = "ll" + "".join("l" if "interval" in h else "r" for h in head[2:])
        out = [f"% {self.description()}", f"% {self._footnote()}", f"\\begin{{tabular}}{{{spec}}}",
               "\\toprule", " & ".join(latex(h) for h in head) + " \\\\", "\\midrule"]  # fmt: skip
        for i, cells in enumerate(lines):
            if i and cells[0]:
                out.append("\\midrule")
            out.append(" & ".join(latex(c) for c in cells) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", ""]
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        """Every number as plain Python values (lists, floats, ints, bools, None): the settings,
        and ``"measures"``: measure -> ``{"label", "higher_is_better", "systems"}``, system ->
        its row (``None`` for the baseline's difference, p-values, wins, ties and losses; NaN
        for a p-value that could not be computed)."""
        measures: dict[str, Any] = {}
        for row in self.rows:
            entry = measures.setdefault(
                row["measure"],
                {"label": row["label"], "higher_is_better": row["higher_is_better"],
                 "systems": {}},
            )  # fmt: skip
            entry["systems"][row["system"]] = {
                "baseline": row["is_baseline"],
                "value": row["value"],
                "interval": list(row["interval"]),
                "difference": row["difference"],
                "p_value": row["p_value"],
                "p_corrected": row["p_corrected"],
                "significant": row["significant"],
                "wins": row["wins"],
                "ties": row["ties"],
                "losses": row["losses"],
                "queries": row["queries"],
            }
        return {
            "test": self.test,
            "correction": self.correction,
            "family": self.family,
            "comparisons": self.comparisons,
            "level": self.level,
            "alpha": self.alpha,
            "num_resamples": self.num_resamples,
            "seed": self.seed,
            "baseline": self.baseline,
            "systems": list(self.systems),
            "description": self.description(),
            "measures": measures,
        }

    def to_dataframe(self) -> Any:
        """One pandas row per measure and system: ``measure``, ``system``, ``baseline``,
        ``value``, ``interval_low``, ``interval_high``, ``difference``, ``p_value``,
        ``p_corrected``, ``significant``, ``wins``, ``ties``, ``losses``, ``queries`` (pandas is
        imported here, and only here: ``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError(
                "SystemComparison.to_dataframe() needs pandas, which is not installed: "
                'pip install "retrieval-metrics[pandas]" (or pandas; or use as_dict(), '
                "to_markdown() or to_latex())"
            ) from err
        records = []
        for row in self.rows:
            lo, hi = row["interval"]
            records.append(
                {
                    "measure": row["measure"], "system": row["system"],
                    "baseline": row["is_baseline"], "value": row["value"],
                    "interval_low": lo, "interval_high": hi, "difference": row["difference"],
                    "p_value": row["p_value"], "p_corrected": row["p_corrected"],
                    "significant": row["significant"], "wins": row["wins"],
                    "ties": row["ties"], "losses": row["losses"], "queries": row["queries"],
                }
            )  # fmt: skip
        return pd.DataFrame.from_records(records)
