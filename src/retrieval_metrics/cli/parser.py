"""The command line of ``retrieval-metrics``: its subcommands, options and help text.

Only the description of the command line lives here; :mod:`retrieval_metrics.cli.commands`
parses with :func:`build_parser` and runs the subcommand ``args.command`` names.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from retrieval_metrics import __version__
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.metrics.protocols import PROTOCOLS

__all__ = [
    "APPLIES",
    "COMPARE_HELP",
    "CORRECTIONS",
    "EMBEDDING_METRICS",
    "EVALUATE_HELP",
    "FAMILIES",
    "FORMS",
    "PROTOCOL_NAMES",
    "QRELS_METRICS",
    "RUN_DEPTH",
    "TESTS",
    "TREC_METRICS",
    "Applies",
    "add_inputs",
    "build_parser",
]

EMBEDDING_METRICS = "hit_rate@1,hit_rate@5,hit_rate@10,map@r,r_precision"
TREC_METRICS = "map,r_precision,mrr,precision@10,recall@100,ndcg@10"
#: queries and a corpus judged by qrels (a dense retriever, as BEIR and MTEB score one)
QRELS_METRICS = "ndcg@10,recall@100,map@100,mrr@10"
#: every named protocol, as metrics/protocols.py's PROTOCOLS lists them (that module imports no
#: torch, so --help stays fast)
PROTOCOL_NAMES = tuple(PROTOCOLS)
#: compare's tests, corrections and families, as retrieval_metrics.functional.measures.significance
#: and retrieval_metrics.comparison name them (spelled out here: --help imports no torch)
TESTS = ("t-test", "randomization")
CORRECTIONS = ("holm", "bonferroni", "benjamini-hochberg", "none")
FAMILIES = ("all", "measure")
#: --run-depth when not given (the parser's default is None, so that a depth given without
#: --write-run is told from none and refused)
RUN_DEPTH = 100

#: The forms of input, as ``cli.runs.input_forms`` names those given: each option of
#: :data:`APPLIES` acts on some of them only.
FORMS = {
    "files": "same-source embedding FILEs",
    "pairs": "--query/--gallery embeddings without --qrels",
    "judged": "--query/--gallery embeddings judged by --qrels",
    "scored_run": "a TREC or .json --run",
    "jsonl_run": "a .jsonl --run judged by --qrels",
    "jsonl": 'a .jsonl --run with its own "relevant"',
}
_EMBEDDINGS = frozenset({"files", "pairs", "judged"})
_LABELLED = frozenset({"files", "pairs"})  # relevance by the files' labels or positions


@dataclass(frozen=True)
class Applies:
    """Where an option acts: on the input ``forms`` (keys of :data:`FORMS`; at least one given),
    and only when the option ``needs[0]`` (a dest) is given, or set by ``--protocol``, with the
    value ``needs[1]`` (None: any). ``to`` says it in words, for the message that refuses it."""

    to: str
    forms: frozenset[str] = frozenset(FORMS)
    needs: tuple[str, str | None] | None = None


_RADIUS_PROTOCOLS = ", ".join(
    name for name, (options, _) in PROTOCOLS.items() if options.get("relevance") == "radius"
)

#: Every option that acts on some inputs only, by its dest. An option given where it does not
#: act would change nothing, and a user who typed it would believe it did: ``cli.runs.
#: check_options`` refuses it by name (exit 2), one rule for all. Their defaults are None, so
#: that an option given is told from one left out even when given its default value.
APPLIES: dict[str, Applies] = {
    "similarity": Applies("embeddings (the score of a query and an item): FILEs or "
                          "--query/--gallery", _EMBEDDINGS),
    "ties": Applies("embeddings' tied scores: FILEs or --query/--gallery (a run's ties go by "
                    "document id, trec_eval's rule; a .jsonl list is in rank order)", _EMBEDDINGS),
    "keys": Applies("embedding files (the names of their arrays)", _EMBEDDINGS),
    "relevance": Applies("embeddings related by their labels or positions: FILEs, or "
                         "--query/--gallery without --qrels (with --qrels the judgments "
                         "decide)", _LABELLED),
    "radius": Applies(f"--relevance radius (or a --protocol that sets it: {_RADIUS_PROTOCOLS}), "
                      "with FILEs or --query/--gallery without --qrels", _LABELLED,
                      ("relevance", "radius")),
    "ignore_label": Applies("embeddings related by their labels: FILEs, or --query/--gallery "
                            "without --qrels", _LABELLED),
    "ignore_identical_ids": Applies("embeddings judged by qrels (--query, --gallery and "
                                    "--qrels), and --run files",
                                    frozenset({"judged", "scored_run", "jsonl_run"})),
    "complete": Applies("--run files judged by --qrels (it scores the judged queries a run "
                        "lacks as empty lists; embeddings have no ranking for a query the "
                        "query file lacks)", frozenset({"scored_run", "jsonl_run"})),
    "duplicates": Applies(".jsonl --run files (a list that retrieves an id twice; a TREC or "
                          ".json run lists a document once, or is refused)",
                          frozenset({"jsonl_run", "jsonl"})),
    "write_run": Applies("embeddings: FILEs or --query/--gallery (a --run is a run already)",
                         _EMBEDDINGS),
    "run_depth": Applies("--write-run (the depth of the run it writes)", _EMBEDDINGS,
                         ("write_run", None)),
    "plot_k": Applies("--plot (the largest K it draws)", needs=("plot", None)),
    "device": Applies("embeddings (where they are ranked): FILEs or --query/--gallery (a --run "
                      "is ranked already)", _EMBEDDINGS),
}


def _protocol_argument(text: str) -> str:
    """--protocol's value as PROTOCOL_NAMES spells it, matched as the API matches it (case,
    spaces, ``-`` for ``_``); an unknown name is left for argparse's choices to refuse."""
    key = text.strip().lower()
    for name in (*PROTOCOL_NAMES, "none"):
        if key in (name, name.replace("_", "-")):
            return name
    return text


def add_inputs(parser: argparse.ArgumentParser) -> None:
    """The inputs and measure options ``evaluate`` and ``compare`` share: embedding FILEs,
    ``--query``/``--gallery`` pairs or ``--run`` files with ``--qrels``, the metrics and their
    options, and ``--name``."""
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="same-source embedding files (every item queries all the others); several FILEs "
        "are several runs",
    )
    parser.add_argument("--query", action="append", metavar="FILE", help="query embeddings")
    parser.add_argument(
        "--gallery",
        action="append",
        metavar="FILE",
        help="gallery embeddings (one, or one per --query)",
    )
    parser.add_argument(
        "--run",
        action="append",
        metavar="RUN",
        help="run file: TREC, .json or .jsonl (repeatable)",
    )
    parser.add_argument(
        "--qrels",
        metavar="QRELS",
        help="qrels file: TREC, BEIR .tsv, .json or .jsonl; judges --run files, or --query and "
        "--gallery embeddings by their ids",
    )
    parser.add_argument(
        "--complete",
        "-c",
        action="store_true",
        default=None,  # None: not given (APPLIES)
        help="runs: also score judged queries missing from the run, as empty lists "
        "(trec_eval -c)",
    )
    parser.add_argument(
        "--metrics",
        metavar="LIST",
        help=f"comma-separated metric names (default {EMBEDDING_METRICS}; for runs "
        f"{TREC_METRICS}; for embeddings with --qrels {QRELS_METRICS})",
    )
    parser.add_argument(
        "--protocol",
        type=_protocol_argument,
        choices=(*PROTOCOL_NAMES, "none"),
        metavar="NAME",
        help=f"a field's official evaluation, one of {', '.join(PROTOCOL_NAMES)} (sets the "
        "options it fixes); runs default to trec_eval, 'none' turns that off",
    )
    parser.add_argument(
        "--ties",
        choices=OPTIONS["ties"].allowed,
        help="tied scores: expected, the exact expectation over their orders (default); "
        "optimistic / pessimistic, relevant items first / last; id, by ascending document id "
        "(as sentence-transformers ranks them)",
    )
    parser.add_argument(
        "--similarity", choices=OPTIONS["similarity"].allowed, help="score (default cosine)"
    )
    parser.add_argument(
        "--empty-queries",
        dest="empty_queries",
        choices=OPTIONS["empty_queries"].allowed,
        help="queries with no relevant item: skip, left out (default); zero, scored 0; error, "
        "refused; nan, left out only where a measure divides by zero (ragas)",
    )
    parser.add_argument(
        "--relevance",
        choices=OPTIONS["relevance"].allowed,
        help="equal labels (default), or positions within --radius metres",
    )
    parser.add_argument("--radius", type=float, help="metres, with --relevance radius (25)")
    parser.add_argument(
        "--ignore-identical-ids",
        dest="ignore_identical_ids",
        choices=("true", "false"),
        help="embeddings with --qrels: leave the document whose id is the query's out of its "
        "ranking (true: the queries are corpus documents, as BEIR) or rank every document "
        "(false: two numberings); by default left out, and integer ids that collide refused. "
        "A --run: drop it from the run before scoring (true; --protocol beir's default, as "
        "BEIR's evaluate does) or score the run as written (false; the default otherwise)",
    )
    parser.add_argument(
        "--ignore-label", dest="ignore_label", type=int, help="e.g. -1 (Market-1501)"
    )
    parser.add_argument(
        "--duplicates",
        choices=OPTIONS["duplicates"].allowed,
        help="a JSONL list that retrieves an id twice: count it once, at its first position, "
        "the repeat a non-relevant slot (default, as the Python API), stop with an error, or "
        "count it once and warn when the id is relevant",
    )
    parser.add_argument(
        "--average",
        choices=OPTIONS["average"].allowed,
        help="over queries (default macro); micro sums hits over relevant items for recall, "
        "precision and r_precision (the other measures stay per query); class: mean over "
        "labels. One name may fix its own: recall@10/micro",
    )
    parser.add_argument(
        "--device",
        metavar="DEVICE",
        help="embeddings: rank them on this torch device, e.g. cuda or cuda:1 (default cpu); a "
        ".npy corpus is read from disk a block at a time and sent there, half precision goes "
        "to a GPU's tensor cores",
    )
    parser.add_argument("--percent", action="store_true", help="report fractions in percent")
    parser.add_argument(
        "--keys",
        metavar="NAME=ARRAY,...",
        help="array names in the files, e.g. embeddings=feats,labels=pids,cameras=camids",
    )
    parser.add_argument("--name", action="append", metavar="NAME", help="run names, in order")


EVALUATE_HELP = """\
Score saved embeddings, ranked lists (IR, RAG), or query and corpus embeddings against qrels;
print one table per run (value, 95% interval, chance level, queries counted and skipped, gallery
size).

  retrieval-metrics evaluate emb.npz                      same source: every item queries
                                                          all the others, never itself
  retrieval-metrics evaluate --query q.npz --gallery g.npz  separate sets (re-id, places)
  retrieval-metrics evaluate --query q.npz --gallery corpus.npz --qrels qrels.tsv --protocol beir
                                                          a dense retriever against judgments
  retrieval-metrics evaluate --query a.npz --query b.npz --gallery corpus.npz --qrels qrels.tsv
                                                          two query encoders, one corpus
  retrieval-metrics evaluate --run run.txt --qrels qrels.txt  TREC (protocol trec_eval)
  retrieval-metrics evaluate --run run.json --qrels qrels.tsv  ranx/pytrec_eval run, BEIR qrels
  retrieval-metrics evaluate --run questions.jsonl         JSONL with "retrieved" and "relevant"
  retrieval-metrics evaluate a.npz b.npz --plot cmc.png   two runs: both curves on one axis

Embedding files: .npz or .pt (a dict of arrays / tensors) with arrays named embeddings
(required), labels, ids, cameras, positions (rename with --keys). A .npy (or a .pt holding one
tensor) is the embeddings alone; its other arrays are files beside it: STEM.labels.npy,
STEM.ids.npy, STEM.cameras.npy, STEM.positions.npy (STEM.labels.pt, ... beside a .pt).

Embeddings judged by qrels (--query/--gallery with --qrels): the query file's ids are the
qrels' query ids, the gallery file's ids its document ids (an 'ids' array in both, integers or
strings; other arrays are not read). Every judged document gets its exact rank in the whole
corpus. Queries of the file without judgments are left out, as BEIR's loader and trec_eval leave
them (the count is printed); a query judged with grade 0 only follows --empty-queries. Below each
table: judged documents not in the corpus (relevant, never retrieved), queries without
judgments, judged queries not given. Default metrics: ndcg@10,recall@100,map@100,mrr@10;
--protocol beir, mteb or sentence_transformers gives those evaluators' numbers (default: the
library's options). Two retrievers (two --query files and one --gallery, or two --query/--gallery
pairs, e.g. two models) get the paired test when they score the same queries. --plot draws recall
vs K (BEIR's Recall@K) for each, with the chance level when every judged document is in the
corpus. A document whose id is the query's is left out of its ranking (and of its judgments;
true: BEIR's and MTEB's rule, its judgment kept, never retrieved); integer ids that collide are
refused unless --ignore-identical-ids says true or false. --protocol beir defaults to true, mteb
and sentence_transformers to false, as those evaluators do.

Runs and qrels, by extension:
  --run    .json   {"qid": {"docid": score}} (ranx, pytrec_eval)
           .jsonl  {"id": ..., "retrieved": [docid, ...]} per line, in rank order; with
                   "relevant": [docid, ...] or {"docid": grade} on every line, no --qrels
           other   TREC run: 'qid Q0 docid rank score tag'
  --qrels  .tsv    BEIR: header 'query-id corpus-id score', then tab-separated lines
           .json   {"qid": {"docid": grade}}
           .jsonl  {"id": ..., "relevant": [docid, ...] or {"docid": grade}} per line
           other   TREC qrels: 'qid iter docid rel'
Scored runs are ranked by score, ties by docid in descending byte order (trec_eval's rule), and
list a document once per query; a JSONL list is taken as given, an id it repeats counted once at
its first position (--duplicates error refuses it). Grade >= 1 is relevant. Queries: those of the
run with judgments (trec_eval's default; -c adds the others); a JSONL run with "relevant": every
line. Queries with no relevant document follow --empty-queries.
"""


COMPARE_HELP = """\
Compare several systems, scored on the same queries, with a baseline: for each measure and
system the value and its interval, the mean per-query difference to the baseline, the p-value of
a paired test over queries, that p-value corrected for multiple comparisons (by default Holm's,
over every comparison: the systems other than the baseline x the measures), and the queries
where the system wins, ties and loses. The inputs are evaluate's (see retrieval-metrics evaluate
--help), for two or more systems:

  retrieval-metrics compare a.npz b.npz c.npz                   same-source embeddings
  retrieval-metrics compare --query q.npz --gallery g.npz --query q2.npz --gallery g2.npz
  retrieval-metrics compare --query a.npz --query b.npz --gallery corpus.npz --qrels qrels.tsv
  retrieval-metrics compare --run bm25.txt --run dense.txt --run hybrid.txt --qrels qrels.txt \\
      --name bm25 --name dense --name hybrid --baseline bm25 --test randomization \\
      --correction benjamini-hochberg --markdown table.md --latex table.tex

Every system must score the same queries (the same judged queries of the qrels, or the same
items and labels). Queries a system leaves out (nothing relevant, under --empty-queries skip)
are left out of the test pairwise; the table's last column counts the queries each test used.
--test t-test is scipy's ttest_rel; --test randomization flips the sign of each query's
difference at random (--resamples, --seed), or every way when 2^queries <= --resamples.
"""


def _add_progress_delay(parser: argparse.ArgumentParser) -> None:
    """``--progress-delay``, of every command that evaluates (``evaluate``, ``compare``)."""
    parser.add_argument(
        "--progress-delay",
        dest="progress_delay",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="show a progress bar on stderr after this long (2; negative: never)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``retrieval-metrics``; ``args.command`` names the subcommand."""
    parser = argparse.ArgumentParser(
        prog="retrieval-metrics",
        description="Exact retrieval metrics: a demo of the protocols, evaluation of saved "
        "embeddings or of runs against qrels, and the comparison of several systems.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{demo,evaluate,compare}")
    sub.required = True

    demo = sub.add_parser(
        "demo",
        help="run every protocol on generated data and scikit-learn's digits (no download)",
        description="Image-text 1K vs 5K, the four 'recalls', ties under the three rules, and "
        "class retrieval where R@1 and MAP@R disagree (generated data and scikit-learn's bundled "
        "handwritten digits). No arguments, no download, under a minute on 2 CPU cores.",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the generated data (0)")

    ev = sub.add_parser(
        "evaluate",
        help="score saved embeddings (.npz/.npy/.pt) or a run against qrels (TREC, BEIR, JSON, "
        "JSONL)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=EVALUATE_HELP,
    )
    add_inputs(ev)
    ev.add_argument("--json", metavar="OUT.json", help="write every value to a JSON file")
    ev.add_argument(
        "--per-query",
        dest="per_query",
        metavar="OUT",
        help="write each query's value of every measure, keyed by the query ids (TREC run "
        "qids, the query file's ids; row numbers where a file has none): .json {run: {measure: "
        "{query id: value}}}, else tab-separated lines 'run query_id measure value' (null / "
        "empty for a query left out), for significance tests and error analysis elsewhere",
    )
    ev.add_argument(
        "--plot",
        metavar="OUT.png",
        help="draw hit rate vs K with the chance curve, every run on one axis; embeddings with "
        "--qrels: recall vs K (chance shown when every judged document is in the corpus)",
    )
    ev.add_argument(
        "--plot-k",
        dest="plot_k",
        type=int,
        metavar="K",
        help="largest K on the plot (default: the gallery size, at most 100)",
    )
    ev.add_argument(
        "--write-run",
        dest="write_run",
        metavar="RUN",
        help="embeddings: write each query's top --run-depth items as a run (TREC, .json or "
        ".jsonl by the extension; several runs: RUN's name + the run's name)",
    )
    ev.add_argument(
        "--run-depth",
        dest="run_depth",
        type=int,
        metavar="K",
        help=f"items per query in --write-run's run ({RUN_DEPTH})",
    )
    ev.add_argument("--level", type=float, default=0.95, help="interval level (0.95)")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (1000)")
    ev.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    _add_progress_delay(ev)
    cmp = sub.add_parser(
        "compare",
        help="compare several systems (embeddings or runs, as evaluate reads them) with a "
        "baseline: paired tests, corrected for multiple comparisons",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=COMPARE_HELP,
    )
    add_inputs(cmp)
    cmp.add_argument(
        "--baseline",
        default="0",
        metavar="NAME_OR_INDEX",
        help="the system the others are compared with: its name (--name, else the file's stem) "
        "or its position, from 0 (default 0, the first)",
    )
    cmp.add_argument(
        "--test",
        choices=TESTS,
        default="t-test",
        help="the paired test over queries: t-test (paired t-test, default) or randomization "
        "(Fisher's sign-flip test, --resamples sign flips, exact for few queries)",
    )
    cmp.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default="holm",
        help="multiple-comparison correction of the p-values (default holm)",
    )
    cmp.add_argument(
        "--family",
        choices=FAMILIES,
        default="all",
        help="what the correction treats as one family: all, every comparison (systems x "
        "measures, default); measure, each measure's comparisons apart",
    )
    cmp.add_argument(
        "--level",
        type=float,
        default=0.95,
        help="interval level (0.95); a corrected p below 1 - level is marked significant",
    )
    cmp.add_argument(
        "--resamples",
        type=int,
        default=10_000,
        metavar="N",
        help="bootstrap resamples of the intervals and sign flips of the randomization test "
        "(10000)",
    )
    cmp.add_argument("--seed", type=int, default=0, help="seed of the resamples (0)")
    cmp.add_argument("--markdown", metavar="OUT.md", help="write the table as Markdown")
    cmp.add_argument("--latex", metavar="OUT.tex", help="write the table as a LaTeX tabular")
    cmp.add_argument("--json", metavar="OUT.json", help="write every value to a JSON file")
    _add_progress_delay(cmp)
    # evaluate's outputs, which compare does not write; and no summary per system (the
    # comparison summarizes them together)
    cmp.set_defaults(write_run=None, run_depth=None, plot=None, plot_k=None, summarize=False)
    return parser
