"""The ``retrieval-metrics`` command: ``demo``, ``evaluate`` and ``compare``.

``retrieval-metrics demo`` runs the protocols on data the package generates or scikit-learn ships
(no download; see :mod:`retrieval_metrics.cli.demo`).

``retrieval-metrics evaluate`` scores saved embeddings or ranked lists (IR, RAG):

* ``evaluate FILE``: same source (every item queries all the others, never itself);
* ``evaluate --query Q --gallery G``: separate query and gallery sets (re-id, place recognition,
  a fixed index); repeat the pair to compare runs;
* ``evaluate --query Q --gallery CORPUS --qrels QRELS``: queries and a corpus judged by qrels (a
  dense retriever, as BEIR and MTEB score one), by the ids in both files; the queries without
  judgments are left out (as BEIR's loader and trec_eval leave them), and the notes of
  ``summary()`` (judged documents not in the corpus, ...) are printed under each table;
* ``evaluate --run RUN --qrels QRELS``: a run and its judgments, in TREC, BEIR (``.tsv``
  qrels), ranx / pytrec_eval JSON (``.json``) or one-question-per-line JSONL (``.jsonl``; a JSONL
  run whose lines carry ``"relevant"`` needs no ``--qrels``). Scored runs are ranked as trec_eval
  ranks them (by score, ties by document id in descending byte order); ``--protocol trec_eval``
  unless ``--protocol`` says otherwise. The readers are in :mod:`retrieval_metrics.formats.runs`.

Embedding files: ``.npz`` or ``.pt`` (a dict of arrays / tensors) with named arrays ``embeddings``
(required), ``labels``, ``ids``, ``cameras``, ``positions`` (rename with ``--keys``); a ``.npy``
(or a ``.pt`` holding one tensor) is the embeddings alone, its other arrays in files beside it
named ``STEM.labels.npy``, ``STEM.ids.npy``, ... (read by
:mod:`retrieval_metrics.formats.embeddings`).

It prints one aligned table per run (value, 95% interval, chance level, queries counted and
skipped, gallery size), writes them with ``--json`` and draws hit rate vs K with the chance curve
(all runs on one axis; recall vs K for embeddings judged by qrels) with ``--plot``.

``retrieval-metrics compare`` reads the same inputs, for two or more systems scored on the same
queries, and prints one table: each system against a baseline (``--baseline``), measure by
measure, with a paired test (``--test``) and its p-values corrected for multiple comparisons
(``--correction``), by :func:`retrieval_metrics.compare_systems`; ``--markdown``, ``--latex``
and ``--json`` write it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from retrieval_metrics.cli import data
from retrieval_metrics.cli.parser import (
    build_parser,
)
from retrieval_metrics.cli.progress import Progress
from retrieval_metrics.cli.runs import (
    CLIError,
    Run,
    check_options,
    check_plot_depth,
    describe,
    effective_options,
    evaluate_embeddings,
    evaluate_trec,
    options_line,
    runs_from_args,
    scored,
    version,
)
from retrieval_metrics.cli.summary import (
    default_protocol_note,
    number,
    per_query_json,
    print_summary,
    summary_json,
    write_per_query,
)

__all__ = ["CLIError", "Progress", "evaluate_embeddings", "evaluate_trec", "main", "run"]


def cmd_evaluate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    check_options(args)  # (an option that does not act on the input: before any other check)
    if args.plot_k is not None and args.plot_k < 1:
        raise CLIError("--plot-k must be a positive integer")
    if not 0 < args.level < 1:
        raise CLIError(f"--level must be between 0 and 1, got {args.level}")
    if args.bootstrap < 1:
        raise CLIError(f"--bootstrap must be a positive integer, got {args.bootstrap}")
    if (problem := data.write_run_problem(args)) is not None:
        raise CLIError(problem)
    _check_outputs((("--json", args.json), ("--per-query", args.per_query), ("--plot", args.plot)))
    runs, trec = runs_from_args(args)
    report: dict[str, Any] = {
        "retrieval_metrics": version(),
        "options": effective_options(runs[0].metric)
        | {"metrics": runs[0].metric.metric_names(), "level": args.level},
        "runs": [],
    }
    curves = []
    for i, run in enumerate(runs):
        metric = run.metric
        summary = run.summary
        if i:
            print(file=out)
        print(f"== {run.name}: {describe(run)}", file=out)
        print(f"   {options_line(metric, trec, scored(run))}", file=out)
        print_summary(summary, out)
        default_note = (
            trec and args.protocol is None and args.empty_queries is None
            and default_protocol_note(metric)
        )
        if default_note:
            print(f"   {default_note}", file=out)
        entry: dict[str, Any] = {
            "name": run.name,
            "kind": run.kind,
            "files": run.files,
            "queries": run.num_queries,
            "metrics": summary_json(summary),
        }
        if run.notes:
            entry["notes"] = run.notes
        if summary.notes:  # counts about the data as summary() gives them (judgments)
            entry["summary_notes"] = dict(summary.notes)
        if args.plot:
            from retrieval_metrics.plot import hit_rate_curve, measure_curve

            if run.kind == "qrels":
                # several judged documents per query: the share of them found by K (BEIR's
                # Recall@K), the measure a first stage feeding a reranker is chosen by
                check_plot_depth(metric.rank_table(), args.plot_k, metric.protocol)
                curve = measure_curve(
                    metric.rank_table(),
                    "recall",
                    args.plot_k,
                    options=metric.measure_options,
                    label=run.name,
                )
            else:
                curve = hit_rate_curve(
                    metric.rank_table(),
                    args.plot_k,
                    ties=metric.ties,
                    empty_queries=metric.empty_queries,
                    percent=metric.percent,
                    label=run.name,
                )
            if run.kind == "trec":
                curve.chance = None  # the collection a run was drawn from is unknown
            curves.append(curve)
            entry["curve"] = curve.as_dict()
        report["runs"].append(entry)
    if len(runs) == 2:
        report["comparison"] = _compare(runs, args, out)
    if args.plot:
        from retrieval_metrics.plot import save_curves

        what = "recall" if all(run.kind == "qrels" for run in runs) else "hit rate"
        dashed = " (dashed: chance)" if any(c.chance is not None for c in curves) else ""
        try:
            save_curves(curves, args.plot, title=f"{what} vs K{dashed}")
        except ModuleNotFoundError as err:
            raise CLIError(f"--plot: {err}") from None
        except (OSError, ValueError) as err:
            raise CLIError(f"--plot {args.plot}: {err}") from None
        print(f"\nplot written to {args.plot}", file=out)
    if args.per_query:
        values = {run.name: per_query_json(run.metric, run.query_ids) for run in runs}
        try:
            write_per_query(Path(args.per_query), values)
        except OSError as err:
            raise CLIError(f"--per-query {args.per_query}: {err}") from None
        print(f"\nper-query values written to {args.per_query}", file=out)
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as err:
            raise CLIError(f"--json {args.json}: {err}") from None
        print(f"{'' if args.plot else chr(10)}json written to {args.json}", file=out)
    return 0


def _check_outputs(outputs: Sequence[tuple[str, str | None]]) -> None:
    """Refuse an output path that cannot be written (its folder missing, ...) before the
    evaluation, which can take minutes, rather than after it."""
    for flag, path in outputs:
        if path is not None and (problem := data.output_problem(flag, str(path))) is not None:
            raise CLIError(problem)


def _compare(runs: list[Run], args: argparse.Namespace, out: TextIO) -> dict[str, Any] | None:
    """Paired comparison of two runs scored on the same queries (rm.compare), when it applies."""
    try:
        from retrieval_metrics import compare
    except ImportError:  # pragma: no cover - older library
        return None
    a, b = runs
    if a.queries_key != b.queries_key:
        print(f"\n(no paired comparison: {a.name} and {b.name} score different queries)", file=out)
        return None
    try:
        result = compare(
            a.metric, b.metric, level=args.level, num_bootstrap=args.bootstrap, seed=args.seed
        )
    except ValueError as err:
        print(f"\n(no paired comparison: {err})", file=out)
        return None
    print(f"\n== {a.name} vs {b.name}, paired on the same queries", file=out)
    for row in result.values():
        print(f"   {row}", file=out)
    return {
        name: {
            "difference": number(r.difference),
            "interval": [number(v) for v in r.interval],
            "p_value": number(r.p_value),
            "test": r.test,
            "queries": r.queries,
        }
        for name, r in result.items()
    }


def cmd_compare(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``retrieval-metrics compare``: the systems evaluate would score, compared with a baseline
    (:func:`retrieval_metrics.compare_systems`)."""
    from retrieval_metrics.comparison import compare_systems

    out = out if out is not None else sys.stdout
    check_options(args)
    if not 0 < args.level < 1:
        raise CLIError(f"--level must be between 0 and 1, got {args.level}")
    if args.resamples < 1:
        raise CLIError(f"--resamples must be a positive integer, got {args.resamples}")
    _check_outputs((("--markdown", args.markdown), ("--latex", args.latex), ("--json", args.json)))
    runs, trec = runs_from_args(args)
    names = [run.name for run in runs]
    if len(runs) < 2:
        raise CLIError(
            f"compare needs two or more systems, got one ({names[0]}): give several embedding "
            "FILEs, --query/--gallery pairs, or --run files"
        )
    other = [run.name for run in runs if run.queries_key != runs[0].queries_key]
    if other:
        raise CLIError(
            f"{', '.join(other)} {'scores' if len(other) == 1 else 'score'} other queries than "
            f"{runs[0].name}: compare pairs the systems query by query, so every system must "
            "score the same queries (the same judged queries, or the same items and labels)"
        )
    baseline = _baseline_of(args.baseline, names)
    with Progress(1, "comparing", delay=args.progress_delay) as bar:
        try:
            result = compare_systems(
                *(run.metric for run in runs), baseline=baseline, names=names, test=args.test,
                correction=args.correction, family=args.family, level=args.level,
                num_resamples=args.resamples, seed=args.seed,
            )  # fmt: skip
        except ValueError as err:
            raise CLIError(str(err)) from None
        bar.advance()
    for run in runs:
        print(f"== {run.name}: {describe(run)}", file=out)
    print(f"   {options_line(runs[0].metric, trec, scored(runs[0]))}", file=out)
    default_note = (
        trec and args.protocol is None and args.empty_queries is None
        and default_protocol_note(runs[0].metric)
    )
    if default_note:
        print(f"   {default_note}", file=out)
    print(file=out)
    print(result, file=out)
    written = []
    for path, text, flag in (
        (args.markdown, result.to_markdown, "--markdown"),
        (args.latex, result.to_latex, "--latex"),
        (args.json, lambda: json.dumps(_compare_report(runs, result), indent=2) + "\n", "--json"),
    ):
        if path is None:
            continue
        try:
            Path(path).write_text(text(), encoding="utf-8")
        except OSError as err:
            raise CLIError(f"{flag} {path}: {err}") from None
        written.append(f"{flag[2:]} written to {path}")
    if written:
        print("\n" + "\n".join(written), file=out)
    return 0


def _baseline_of(text: str, names: list[str]) -> int:
    """--baseline as an index: a system's name (first), else its position from 0."""
    if text in names:
        return names.index(text)
    try:
        index = int(text)
    except ValueError:
        index = None
    if index is None or not 0 <= index < len(names):
        raise CLIError(
            f"--baseline {text!r} is neither a system's name ({', '.join(names)}) nor a "
            f"position from 0 to {len(names) - 1}"
        )
    return index


def _compare_report(runs: list[Run], result: Any) -> dict[str, Any]:
    """What ``compare --json`` writes: the systems as read, and every value of the comparison
    (NaN written as null)."""

    def plain(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        if isinstance(x, float) and math.isnan(x):
            return None
        return x

    return {
        "retrieval_metrics": version(),
        "options": effective_options(runs[0].metric)
        | {"metrics": runs[0].metric.metric_names()},
        "systems": [
            {"name": run.name, "kind": run.kind, "files": run.files, "queries": run.num_queries}
            | ({"notes": run.notes} if run.notes else {})
            for run in runs
        ],
        "comparison": plain(result.as_dict()),
    }


def cmd_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from retrieval_metrics.cli.demo import run_demo

    run_demo(out=out, seed=args.seed)
    return 0


#: What each subcommand of the parser (:mod:`retrieval_metrics.cli.parser`) runs.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": cmd_demo,
    "evaluate": cmd_evaluate,
    "compare": cmd_compare,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retrieval-metrics`` command; returns the exit status."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The command ``args`` (parsed by ``cli.parser.build_parser``) run; the exit status."""
    try:
        return int(COMMANDS[args.command](args))
    # ValueError: the library refusing an input, or a file (formats.FormatError is one)
    except (CLIError, ValueError) as err:
        print(f"retrieval-metrics: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("retrieval-metrics: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output left (`... | head`): stop quietly, as other commands do. The
        # output is pointed at devnull so that the interpreter's last flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe stopped


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
