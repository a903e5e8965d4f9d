"""The command line of ``retrieval-metrics``: its subcommands, options and help text.

Only the description of the command line lives here; :mod:`retrieval_metrics.cli` parses with
:func:`build_parser` and runs the subcommand ``args.command`` names.
"""

from __future__ import annotations

import argparse

from retrieval_metrics import __version__
from retrieval_metrics.functional.options import OPTIONS

__all__ = [
    "EMBEDDING_METRICS",
    "EVALUATE_HELP",
    "PROTOCOL_NAMES",
    "QRELS_METRICS",
    "TREC_METRICS",
    "build_parser",
]

EMBEDDING_METRICS = "hit_rate@1,hit_rate@5,hit_rate@10,map@r,r_precision"
TREC_METRICS = "map,r_precision,mrr,precision@10,recall@100,ndcg@10"
#: queries and a corpus judged by qrels (a dense retriever, as BEIR and MTEB score one)
QRELS_METRICS = "ndcg@10,recall@100,map@100,mrr@10"
PROTOCOL_NAMES = (
    "vsepp",
    "pml",
    "torchreid",
    "market1501_official",
    "netvlad",
    "msls",
    "ann_benchmarks",
    "trec_eval",
    "llama_index",
    "haystack",
    "haystack<3.1",
    "ragas",
    "beir",
    "mteb",
    "sentence_transformers",
)



def _protocol_argument(text: str) -> str:
    """--protocol's value as PROTOCOL_NAMES spells it, matched as the API matches it (case,
    spaces, ``-`` for ``_``); an unknown name is left for argparse's choices to refuse."""
    key = text.strip().lower()
    for name in (*PROTOCOL_NAMES, "none"):
        if key in (name, name.replace("_", "-")):
            return name
    return text


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
corpus. A document whose id is the query's is left out of its ranking, as BEIR does; integer ids
that collide are refused unless --ignore-identical-ids says true or false.

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


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``retrieval-metrics``; ``args.command`` names the subcommand."""
    parser = argparse.ArgumentParser(
        prog="retrieval-metrics",
        description="Exact retrieval metrics: a demo of the protocols, and evaluation of saved "
        "embeddings or of runs against qrels.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{demo,evaluate}")
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
    ev.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="same-source embedding files (every item queries all the others); several FILEs "
        "are several runs",
    )
    ev.add_argument("--query", action="append", metavar="FILE", help="query embeddings")
    ev.add_argument(
        "--gallery",
        action="append",
        metavar="FILE",
        help="gallery embeddings (one, or one per --query)",
    )
    ev.add_argument(
        "--run",
        action="append",
        metavar="RUN",
        help="run file: TREC, .json or .jsonl (repeatable)",
    )
    ev.add_argument(
        "--qrels",
        metavar="QRELS",
        help="qrels file: TREC, BEIR .tsv, .json or .jsonl; judges --run files, or --query and "
        "--gallery embeddings by their ids",
    )
    ev.add_argument(
        "--complete",
        "-c",
        action="store_true",
        help="runs: also score judged queries missing from the run, as empty lists "
        "(trec_eval -c)",
    )
    ev.add_argument(
        "--metrics",
        metavar="LIST",
        help=f"comma-separated metric names (default {EMBEDDING_METRICS}; for runs "
        f"{TREC_METRICS}; for embeddings with --qrels {QRELS_METRICS})",
    )
    ev.add_argument(
        "--protocol",
        type=_protocol_argument,
        choices=(*PROTOCOL_NAMES, "none"),
        metavar="NAME",
        help=f"a field's official evaluation, one of {', '.join(PROTOCOL_NAMES)} (sets the "
        "options it fixes); runs default to trec_eval, 'none' turns that off",
    )
    ev.add_argument(
        "--ties",
        choices=OPTIONS["ties"].allowed,
        help="tied scores: expected, the exact expectation over their orders (default); "
        "optimistic / pessimistic, relevant items first / last; id, by ascending document id "
        "(as sentence-transformers ranks them)",
    )
    ev.add_argument(
        "--similarity", choices=OPTIONS["similarity"].allowed, help="score (default cosine)"
    )
    ev.add_argument(
        "--empty-queries",
        dest="empty_queries",
        choices=OPTIONS["empty_queries"].allowed,
        help="queries with no relevant item: skip, left out (default); zero, scored 0; error, "
        "refused; nan, left out only where a measure divides by zero (ragas)",
    )
    ev.add_argument(
        "--relevance",
        choices=OPTIONS["relevance"].allowed,
        help="equal labels (default), or positions within --radius metres",
    )
    ev.add_argument("--radius", type=float, help="metres, with --relevance radius (25)")
    ev.add_argument(
        "--ignore-identical-ids",
        dest="ignore_identical_ids",
        choices=("true", "false"),
        help="embeddings with --qrels: leave the document whose id is the query's out of its "
        "ranking (true: the queries are corpus documents, as BEIR) or rank every document "
        "(false: two numberings); by default left out, and integer ids that collide refused",
    )
    ev.add_argument("--ignore-label", dest="ignore_label", type=int, help="e.g. -1 (Market-1501)")
    ev.add_argument(
        "--duplicates",
        choices=OPTIONS["duplicates"].allowed,
        help="a JSONL list that retrieves an id twice: count it once, at its first position, "
        "the repeat a non-relevant slot (default, as the Python API), stop with an error, or "
        "count it once and warn when the id is relevant",
    )
    ev.add_argument(
        "--average",
        choices=OPTIONS["average"].allowed,
        help="over queries (default macro); micro sums hits over relevant items for recall, "
        "precision and r_precision (the other measures stay per query); class: mean over "
        "labels. One name may fix its own: recall@10/micro",
    )
    ev.add_argument("--percent", action="store_true", help="report fractions in percent")
    ev.add_argument(
        "--keys",
        metavar="NAME=ARRAY,...",
        help="array names in the files, e.g. embeddings=feats,labels=pids,cameras=camids",
    )
    ev.add_argument("--name", action="append", metavar="NAME", help="run names, in order")
    ev.add_argument("--json", metavar="OUT.json", help="write every value to a JSON file")
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
        default=100,
        metavar="K",
        help="items per query in --write-run's run (100)",
    )
    ev.add_argument("--level", type=float, default=0.95, help="interval level (0.95)")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (1000)")
    ev.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    ev.add_argument(
        "--progress-delay",
        dest="progress_delay",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="show a progress bar on stderr after this long (2; negative: never)",
    )
    return parser
