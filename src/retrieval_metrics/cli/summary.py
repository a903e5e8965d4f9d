"""How ``retrieval-metrics evaluate`` prints a run's summary and writes it to ``--json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TextIO

import torch

__all__ = [
    "curve_points",
    "default_protocol_note",
    "gallery_value",
    "number",
    "per_query_json",
    "print_summary",
    "summary_json",
    "write_per_query",
]


def gallery_value(text: str) -> int | list[int] | None:
    """A summary row's gallery cell ("-", "N" or "LO-HI") as JSON: None, N or [LO, HI]."""
    if text == "-":
        return None
    if "-" in text:
        lo, hi = text.split("-", 1)
        return [int(lo), int(hi)]
    return int(text)


def number(x: Any) -> Any:
    """A value for JSON: a float (None for NaN and None), a list for a vector."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        if x.dim() > 0:
            return [number(v) for v in x.tolist()]
        x = x.item()
    x = float(x)
    return None if math.isnan(x) else x


def summary_json(summary: Any) -> dict[str, Any]:
    """Every row of ``summary`` keyed by its name: value, interval, chance, counts."""
    out = {}
    for row in summary.rows:
        out[row["name"]] = {
            "value": number(row["value"]),
            "interval": [number(v) for v in row["interval"]],
            "chance": number(row["chance"]),
            "queries": int(row["queries"]),
            "skipped": int(row["skipped"]),
            "gallery_size": gallery_value(str(row["gallery"])),
        }
    return out


def per_query_json(metric: Any, query_ids: list[Any] | None) -> dict[str, dict[str, Any]]:
    """Each measure's value per query, ``{measure: {query id: value}}``, keyed by
    ``query_ids`` (as text, in the order given, each once; ``metric.per_query(ids=...)``) or,
    where the queries had no ids, by their row numbers in the order they arrived; None for a
    query left out, a list for a CMC curve."""
    if query_ids is None:
        rows = metric.per_query()
        return {name: {str(i): number(v) for i, v in enumerate(values)}
                for name, values in rows.items()}
    keyed = metric.per_query(ids=list(dict.fromkeys(query_ids)))
    return {
        name: {str(q): [number(x) for x in v] if isinstance(v, list) else number(v)
               for q, v in by_id.items()}
        for name, by_id in keyed.items()
    }


def write_per_query(path: Path, values: dict[str, dict[str, dict[str, Any]]]) -> None:
    """``values`` (``{run: {measure: {query id: value}}}``) to ``path``: JSON for ``.json``,
    else one tab-separated line ``run query_id measure value`` a value under a header (empty
    for a query left out; a CMC curve's values joined by commas)."""
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
        return

    def cell(v: Any) -> str:
        if isinstance(v, list):
            return ",".join(cell(x) for x in v)
        return "" if v is None else repr(v)

    lines = ["run\tquery_id\tmeasure\tvalue"]
    for run, measures in values.items():
        for measure, by_query in measures.items():
            lines += [f"{run}\t{q}\t{measure}\t{cell(v)}" for q, v in by_query.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def print_summary(summary: Any, out: TextIO) -> None:
    """The summary table; a CMC curve (a vector) goes below it, at a few K, not in a cell; the
    summary's notes (counts about the judgments) last."""
    from retrieval_metrics.functional.measures.stats import Summary, level_text

    curves = [r for r in summary.rows if isinstance(r["value"], torch.Tensor) and r["value"].dim()]
    table = Summary(rows=[r for r in summary.rows if r not in curves], level=summary.level)
    if table.rows:
        print(table, file=out)
    for row in curves:
        values, chance = row["value"], row["chance"]
        (lo, hi), ks = row["interval"], curve_points(values.numel())
        level = f"{level_text(summary.level)} interval"
        width = max(len(row["name"]), len(level))
        cells = "  ".join(f"@{k} {float(values[k - 1]):.4f}" for k in ks)
        print(f"{row['name'] + ':':<{width + 1}}  {cells}", file=out)
        cells = "  ".join(f"@{k} [{float(lo[k - 1]):.4f}, {float(hi[k - 1]):.4f}]" for k in ks)
        print(f"{level + ':':<{width + 1}}  {cells}", file=out)
        if chance is not None:
            cells = "  ".join(f"@{k} {float(chance[k - 1]):.4f}" for k in ks)
            print(f"{'chance:':<{width + 1}}  {cells}", file=out)
    for what, count in summary.notes.items():  # e.g. judged documents not in the corpus
        print(f"{what}: {count}", file=out)


def curve_points(width: int) -> list[int]:
    """The K at which a curve of ``width`` points (CMC @1..@K) is printed: 1, 2, 5, 10, 20,
    ... below K, and K itself, the cut-off its name gives (``cmc@3``: 1, 2, 3; ``cmc@15``: 1,
    2, 5, 10, 15)."""
    shown = [k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if k < width]
    return [*shown, width] if width > 0 else []


def default_protocol_note(metric: Any) -> str | None:
    """In words, where the command line's default for runs (trec_eval's conventions, taken when
    neither --protocol nor --empty-queries was given) scored queries with no relevant document
    otherwise than the Python API's default would."""
    try:
        empty = int((metric.rank_table().num_relevant == 0).sum())
    except ValueError:  # no whole table (a chunked ranking): nothing to say here
        return None
    if not empty:
        return None
    return (
        f"{empty} {'query' if empty == 1 else 'queries'} with no relevant document scored 0, as "
        "trec_eval scores them (runs default to --protocol trec_eval); the Python API's default "
        "leaves them out of the means: --protocol none (or --empty-queries skip) gives its "
        "numbers"
    )
