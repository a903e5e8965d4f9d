"""How ``retrieval-metrics evaluate`` prints a run's summary and writes it to ``--json``."""

from __future__ import annotations

import math
from typing import Any, TextIO

import torch

__all__ = ["default_protocol_note", "gallery_value", "number", "print_summary", "summary_json"]


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


def print_summary(summary: Any, out: TextIO) -> None:
    """The summary table; a CMC curve (a vector) goes below it, at a few K, not in a cell; the
    summary's notes (counts about the judgments) last."""
    from retrieval_metrics.functional.measures.stats import Summary

    curves = [r for r in summary.rows if isinstance(r["value"], torch.Tensor) and r["value"].dim()]
    table = Summary(rows=[r for r in summary.rows if r not in curves], level=summary.level)
    if table.rows:
        print(table, file=out)
    for row in curves:
        values, chance = row["value"], row["chance"]
        (lo, hi), ks = row["interval"], [k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
                                          if k <= values.numel()]
        level = f"{int(summary.level * 100)}% interval"
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
