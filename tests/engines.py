"""Engines plugged in where the blocked engine would rank, counting their calls: the library's
reference engine (every score, a full sort of each row) and a test engine written here, one
dense product and a count per relevant item. Each implements only ``rank_input``, the ranking of
prepared inputs; the relevance sets and the finishing of the table are the template's
(``RankingEngine.rank``), so both give the blocked engine's values on every form."""

from __future__ import annotations

import torch

from retrieval_metrics.functional.ranking import RankingEngine
from retrieval_metrics.functional.ranking.engine.fp32 import in_full_fp32
from retrieval_metrics.functional.ranking.engine.similarity import prepare, score_dtype
from retrieval_metrics.functional.ranking.reference import ReferenceEngine
from retrieval_metrics.functional.ranking.table_build import ItemResults, table_from_items


class CountedReference(ReferenceEngine):
    """The library's reference engine, counting its rankings."""

    def __init__(self) -> None:
        self.calls = 0

    def rank_input(self, inputs, options, exchange):
        self.calls += 1
        return super().rank_input(inputs, options, exchange)


class DenseEngine(RankingEngine):
    """Every query against the kept gallery in one product; per relevant item, the items of its
    row (exclusions left out) scoring above it and tied with it."""

    def __init__(self) -> None:
        self.calls = 0

    def rank_input(self, inputs, options, exchange):
        self.calls += 1
        rel = inputs.relevance
        query, gallery = inputs.query, inputs.gallery
        gallery = gallery[rel.gallery_index.to(gallery.device)]
        q_mat, g_mat = prepare(query, gallery, options.similarity, score_dtype(query, gallery))
        scores = in_full_fp32(torch.mm)(q_mat, g_mat.T).cpu()
        above = torch.zeros(rel.relevant_index.numel(), dtype=torch.int64)
        tied = torch.zeros_like(above)
        key = None if inputs.tie_key is None else inputs.tie_key.cpu()
        for q in range(scores.shape[0]):
            r0, r1 = int(rel.relevant_ptr[q]), int(rel.relevant_ptr[q + 1])
            keep = torch.ones(scores.shape[1], dtype=torch.bool)
            keep[rel.excluded_index[int(rel.excluded_ptr[q]) : int(rel.excluded_ptr[q + 1])]] = 0
            row, relevant = scores[q][keep], scores[q][rel.relevant_index[r0:r1]]
            above[r0:r1] = (row[None, :] > relevant[:, None]).sum(1)
            equal = row[None, :] == relevant[:, None]
            tied[r0:r1] = equal.sum(1)
            if key is not None:  # ties by key: the tied items of a smaller key come first
                smaller = key[keep][None, :] < key[rel.relevant_index[r0:r1]][:, None]
                above[r0:r1] += (equal & smaller).sum(1)
                tied[r0:r1] = 1
        gallery_size = scores.shape[1] - rel.excluded_ptr.diff()
        items = ItemResults(rel.relevant_ptr, above, tied, grade=rel.query_grades)
        return table_from_items(items, rel.num_relevant, gallery_size, gallery_size.clone())


#: the engines every engine test plugs in, by name
ENGINES = {"reference": CountedReference, "dense": DenseEngine}
