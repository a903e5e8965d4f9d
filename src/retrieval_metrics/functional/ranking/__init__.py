"""Ranking: from embeddings (or scores, or ranked lists) to a compact per-query rank table.

The :class:`RankTable` records, for every query, where its relevant items landed: for each
relevant item, how many gallery items score strictly higher (``above``) and how many score exactly
the same (``tied``, the item itself included). That is all any measure of docs/definitions.md
needs; the queries x gallery score matrix never exists in full.

How :func:`rank_embeddings` stays close to the cost of the similarity product:

* The gallery is cut into blocks of the same width and every block's scores come from one matrix
  product of the same shape, so a pair's score does not depend on which block it fell in.
* Each query's relevant scores are read from the blocks that hold its relevant items first.
  Items scoring below the query's lowest relevant score cannot move any relevant item, so each
  block is reduced to the maxima of its 64-wide segments (a fast vectorised pass) and only the
  segments whose maximum reaches the threshold are looked at item by item.
* Counting "how many items beat each relevant score" on those few segments is a batched binary
  search against the query's sorted relevant scores, accumulated into two small histograms.
* With ``depth=d`` only relevant items in the top ``d`` positions (and always the best one) need
  exact positions; the threshold then rises to the ``d``-th largest segment maximum seen so far,
  which prunes almost everything for a good model.
* A set ranked against itself has a symmetric score matrix: each pair of square blocks is one
  product whose rows serve one block's queries and whose columns serve the other's, so the pass
  computes half of the full product. :func:`rank_two_ways` does the same for two sets ranked
  against each other (image-to-text and text-to-image from one product).

The files of the package and the call chain from a metric class to the product are mapped once,
in the documentation's Contributing page (docs/contributing.md).
"""

from retrieval_metrics.functional.ranking.embeddings import rank_embeddings, rank_two_ways
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.lists import rank_lists
from retrieval_metrics.functional.ranking.options import (
    BlockedEngine,
    RankingEngine,
    RankingOptions,
)
from retrieval_metrics.functional.ranking.scores import rank_scores
from retrieval_metrics.functional.ranking.sharded import rank_embeddings_sharded
from retrieval_metrics.functional.ranking.top_lists import TopK, top_k
from retrieval_metrics.functional.table import RankTable

# the public surface (docs/api.md renders it): the entry points, their result types and the
# pluggable engine. The halves the package's other modules share (``check_embeddings``,
# ``rank_relevance``, ``Items``, ``Keys``, ``RankingSettings``, the scores form's
# ``rank_checked_scores`` ...) are imported from the modules that define them.
__all__ = [
    "BlockedEngine",
    "Exchange",
    "RankTable",
    "RankingEngine",
    "RankingOptions",
    "TopK",
    "rank_embeddings",
    "rank_embeddings_sharded",
    "rank_lists",
    "rank_scores",
    "rank_two_ways",
    "top_k",
]
