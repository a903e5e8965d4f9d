"""Readers of the files evaluations already have, and a writer of runs.

* :mod:`retrieval_metrics.formats.runs`: runs and judgments (qrels) in TREC, BEIR ``.tsv``, JSON
  and JSONL, as ranked lists ready for ``update(ranked_ids=..., relevant_ids=...)``; runs
  written in the same formats (:func:`write_run`);
* :mod:`retrieval_metrics.formats.embeddings`: saved embeddings and their per-item arrays
  (``.npz``, ``.npy``, ``.pt``), as ``retrieval-metrics evaluate`` reads them;
* :mod:`retrieval_metrics.formats.converters`: two protocols' inputs as the library's input
  forms (a TREC run and qrels as ranked lists, ann-benchmarks' distances as ranks);
* :mod:`retrieval_metrics.formats.ir_measures`: a scored run evaluated as ir_measures does,
  each measure string ranked by its provider's tie order (:func:`ir_measures_per_query`).

Every reader raises :class:`FormatError` (a ``ValueError``) naming the file and what was expected.
"""

from retrieval_metrics.formats.converters import ann_benchmarks_ranks, trec_run_to_lists
from retrieval_metrics.formats.embeddings import EmbeddingFile, load_items
from retrieval_metrics.formats.errors import FormatError
from retrieval_metrics.formats.ir_measures import ir_measures_per_query, provider_order
from retrieval_metrics.formats.run_writer import write_run, write_run_lines
from retrieval_metrics.formats.runs import (
    RankedLists,
    order_by_score,
    ranked_lists,
    read_qrels,
    read_ranked_lists,
    read_run,
    read_trec_qrels,
    read_trec_run,
    trec_eval_order,
)

__all__ = [
    "EmbeddingFile",
    "FormatError",
    "RankedLists",
    "ann_benchmarks_ranks",
    "ir_measures_per_query",
    "load_items",
    "order_by_score",
    "provider_order",
    "ranked_lists",
    "read_qrels",
    "read_ranked_lists",
    "read_run",
    "read_trec_qrels",
    "read_trec_run",
    "trec_eval_order",
    "trec_run_to_lists",
    "write_run",
    "write_run_lines",
]
