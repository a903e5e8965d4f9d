"""How a ranking split over processes talks to the other processes (no-ops for one process).

Two rankings split their work: :func:`~retrieval_metrics.functional.ranking.rank_embeddings_sharded`
(each process holds part of the gallery) and a same-source ranking whose processes all hold the
same items and share its block products out (``rank_embeddings(..., exchange=)``). Both reach the
other processes only through an :class:`Exchange`, so the engine imports no ``torch.distributed``.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor


class Exchange:
    """Collectives over the processes of one ranking; this base class is a single process.

    ``gather(tensors)`` concatenates each tensor over processes along dimension 0 (process
    order); ``sum`` and ``max`` reduce elementwise over processes, and ``min_async`` starts an
    elementwise minimum and returns the wait for its result. ``rank`` and ``world`` say which
    process this is and how many there are. ``sent`` counts the bytes this process contributed,
    for the benchmarks.
    """

    sent = 0
    rank = 0
    world = 1

    def gather(self, tensors: list[Tensor]) -> list[Tensor]:
        return tensors

    def sum(self, tensor: Tensor) -> Tensor:
        return tensor

    def max(self, tensor: Tensor) -> Tensor:
        return tensor

    def min_async(self, tensor: Tensor) -> Callable[[], Tensor]:
        return lambda: tensor
