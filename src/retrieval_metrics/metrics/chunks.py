"""Query chunks: how many queries to rank at once so that their relevant pairs fit a budget.

A rank table holds one entry per (query, relevant item) pair, and so do the relevance sets and
tie groups it is built from and reduced with. Ten classes of 6,000 make 36 million pairs per
6,000 queries whatever the model: ranked all at once their tables take gigabytes. Ranked a chunk
of queries at a time, and each chunk reduced to per-query values before the next is ranked, the
pairs held at once stay below what :func:`queries_per_chunk` allows.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["PAIR_BYTES", "label_pair_counts", "query_chunks", "ranking_budget"]

#: Scratch per relevant pair of a chunk, everything at once at worst: the relevance sets being
#: built (a few int64 per pair), the ranking's outputs, the table and its reordering, and the tie
#: groups with their temporaries.
PAIR_BYTES = 256


def ranking_budget(memory_budget: int, pairs: int | None = None) -> int:
    """The ranking's share of ``memory_budget``: what the relevant pairs held at once (rank
    tables, relevance sets, tie groups; :data:`PAIR_BYTES` each) leave of it, and at least half.
    ``pairs``: the relevant pairs of the ranking where they are known before it (label
    relevance: a chunk holds at most ``memory_budget / PAIR_BYTES``); unknown, half. (Half
    always narrowed the symmetric pass of SOP-sized data, 83 MiB of pairs, to blocks below what
    its kept products need.)

    >>> ranking_budget(2**20) == 2**19, ranking_budget(2**20, pairs=16) == 2**20 - 16 * PAIR_BYTES
    (True, True)
    """
    half = max(2**16, memory_budget // 2)
    if pairs is None:
        return half
    held = min(pairs, memory_budget // PAIR_BYTES) * PAIR_BYTES
    return max(half, memory_budget - held)


def label_pair_counts(query_labels: Tensor, gallery_labels: Tensor) -> Tensor:
    """Per query, the gallery items sharing its label: its relevant pairs before exclusions.

    >>> label_pair_counts(torch.tensor([0, 1, 2]), torch.tensor([1, 0, 1, 1])).tolist()
    [1, 3, 0]
    """
    sorted_labels = torch.sort(gallery_labels.cpu()).values
    q = query_labels.cpu()
    return torch.searchsorted(sorted_labels, q, right=True) - torch.searchsorted(sorted_labels, q)


def query_chunks(pairs: Tensor, memory_budget: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges of queries whose pairs take at most ``memory_budget``
    bytes at :data:`PAIR_BYTES` each (a query with more pairs than that is a chunk alone).

    >>> query_chunks(torch.tensor([3, 3, 3, 9, 1]), 6 * PAIR_BYTES)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    if not isinstance(memory_budget, int) or memory_budget < 1:
        raise ValueError(f"`memory_budget` must be a positive int, got {memory_budget!r}")
    limit = max(1, memory_budget // PAIR_BYTES)
    counts = pairs.to(torch.int64).cpu().tolist()
    chunks: list[tuple[int, int]] = []
    start, held = 0, 0
    for i, c in enumerate(counts):
        if i > start and held + c > limit:
            chunks.append((start, i))
            start, held = i, 0
        held += c
    if counts:
        chunks.append((start, len(counts)))
    return chunks
