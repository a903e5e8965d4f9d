"""The values of every option of a ranking of embeddings, in one record checked once.

A :class:`RankingSettings` goes down whole, from the entry point through the relevance rules to
the engine's passes (``Direction`` and ``Pass`` hold it): nothing below the entry point unpacks
it into keywords. The keyword functions (``rank_embeddings(similarity=..., depth=...)``) make one
at their boundary; :class:`~retrieval_metrics.functional.ranking.options.RankingOptions` is the
same record plus the engine that ranks by it, which the metric classes make.

The defaults are the library's (``functional/options.py``, ``OPTIONS``); the values are checked
here, once, with the messages the entry points have always raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from retrieval_metrics.functional.options import OPTIONS, check_option
from retrieval_metrics.functional.ranking.qrels import Judgments

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "DEVICE_BUDGET_CAP",
    "DEVICE_BUDGET_FRACTION",
    "RELEVANCE_RULES",
    "RankingSettings",
    "memory_budget_on",
]

#: The scratch a ranking takes on the CPU where ``memory_budget`` is None: blocks the CPU's
#: caches hold, a ranking's working set small beside the machine's memory.
DEFAULT_MEMORY_BUDGET = 256 * 2**20
#: On an accelerator, where ``memory_budget`` is None: this fraction of the device's free memory
#: when the ranking starts (read once, with ``torch.<device>.mem_get_info``), at most
#: :data:`DEVICE_BUDGET_CAP`. A quarter leaves the rest to what the caller holds beside the
#: metric (a model, its optimizer states) and to the allocator's fragmentation; 256 MiB on a
#: 139 GiB device cut SOP's 60,502 x 60,502 scores into 55 blocks whose per-block work, not the
#: products, took the time. The cap keeps one score block a few seconds of work at most.
DEVICE_BUDGET_FRACTION = 0.25
DEVICE_BUDGET_CAP = 32 * 2**30


def memory_budget_on(memory_budget: int | None, device: torch.device | str | None) -> int:
    """The bytes of scratch a ranking on ``device`` may use: ``memory_budget`` where it is given
    (an explicit budget always wins), else :data:`DEFAULT_MEMORY_BUDGET` on the CPU and a share
    of an accelerator's free memory (:data:`DEVICE_BUDGET_FRACTION`, capped at
    :data:`DEVICE_BUDGET_CAP`, never below the CPU's default).

    >>> memory_budget_on(2**20, "cpu"), memory_budget_on(None, "cpu") == DEFAULT_MEMORY_BUDGET
    (1048576, True)
    """
    if memory_budget is not None:
        return memory_budget
    free = device_free_memory(torch.device("cpu" if device is None else device))
    if free is None:
        return DEFAULT_MEMORY_BUDGET
    return max(DEFAULT_MEMORY_BUDGET, min(DEVICE_BUDGET_CAP, int(free * DEVICE_BUDGET_FRACTION)))


def device_free_memory(device: torch.device) -> int | None:
    """The free memory of an accelerator in bytes: its backend module's ``mem_get_info``
    (``torch.cuda``, ``torch.xpu``); on Apple's MPS, which has none, the working set Metal
    recommends for the process less what its driver already holds; None for the CPU or a
    backend that does not say."""
    if device.type == "cpu":
        return None
    if device.type == "mps":
        try:
            recommended = torch.mps.recommended_max_memory()
            return max(0, int(recommended) - int(torch.mps.driver_allocated_memory()))
        except (AttributeError, RuntimeError):
            return None
    info = getattr(getattr(torch, device.type, None), "mem_get_info", None)
    if info is None:
        return None
    try:
        free, _total = info(device)
    except (RuntimeError, TypeError, ValueError, AssertionError):
        return None
    return int(free)

#: the relevance rules of a ranking of embeddings: the metric classes' three (``OPTIONS``) and
#: listed relevant ids, which the functional layer also takes
RELEVANCE_RULES = ("label", "radius", "qrels", "ids")


@dataclass(frozen=True)
class RankingSettings:
    """Every option of a ranking of embeddings (see ``rank_embeddings``).

    Attributes:
        relevance: ``"label"``, ``"radius"`` (with positions), ``"qrels"`` (with ``qrels``) or
            ``"ids"`` (with relevant ids listed per query).
        radius: metres, inclusive, for ``relevance="radius"``.
        ignore_label: gallery items with this label are removed from every ranking.
        similarity: ``"cosine"``, ``"dot"`` or ``"euclidean"``.
        memory_budget: bytes of scratch memory the ranking may use, the prepared (normalised)
            copy of the embeddings included (see ``engine/plan.py``); None: the device's
            default (:func:`memory_budget_on`).
        depth: locate exactly only the relevant items within the top ``depth`` positions (and
            each query's best, unless ``locate_first`` is False); None: all of them.
        cover_relevant: with ``depth``, every relevant item within the top max(depth, m_q).
        locate_first: with ``depth``, also locate each query's best relevant item wherever it
            lies (what MRR, CMC and the ranks without a cut-off read). False: a query whose
            relevant items all lie below the depth has none listed, and on the CPU it stops
            being ranked once that is known (measures whose cut-offs are at most the depth
            need no more).
        block_size: ``(queries, gallery items)`` per block, overriding the choice made from
            ``memory_budget``; results do not depend on it (see ``rank_embeddings``).
        qrels: for ``relevance="qrels"``, the judgments (a mapping query id -> document ids or
            -> {document id: grade}, or ``Judgments``) read by the queries' and the gallery
            items' ids (the metric classes' ``qrels=``).
        ignore_identical_ids: a gallery item whose id equals the query's id is excluded from
            its ranking (None, the default, or True); False ranks it as any other item.
        judged_documents: with qrels, also locate the judged documents that are not
            relevant (grade <= 0), for Judged@K, bpref and the condensed lists: the table's
            ``judged_*`` fields.
    """

    relevance: str = OPTIONS["relevance"].default
    radius: float | None = OPTIONS["radius"].default
    ignore_label: int | None = OPTIONS["ignore_label"].default
    similarity: str = OPTIONS["similarity"].default
    memory_budget: int | None = OPTIONS["memory_budget"].default
    depth: int | None = None
    cover_relevant: bool = False
    locate_first: bool = True
    block_size: tuple[int, int] | None = None
    qrels: Any = None
    ignore_identical_ids: bool | None = OPTIONS["ignore_identical_ids"].default
    judged_documents: bool = False

    def __post_init__(self) -> None:
        check_option("similarity", self.similarity)
        # (the classes check it as they are made; unchecked here, 1.5 ignored nothing and True
        # ignored label 1)
        check_option("ignore_label", self.ignore_label)
        if self.relevance not in RELEVANCE_RULES:
            raise ValueError(
                f'`relevance` must be "label", "radius", "qrels" or "ids", got {self.relevance!r}'
            )
        if (self.relevance == "qrels") != (self.qrels is not None):
            raise ValueError(
                'relevance="qrels" reads the judgments of `qrels=`, and `qrels=` needs '
                f'relevance="qrels" (got relevance={self.relevance!r} and '
                f"{'no' if self.qrels is None else 'the'} qrels)"
            )
        if self.relevance == "radius" and (self.radius is None or not self.radius >= 0):
            raise ValueError(
                f"`radius` must be a non-negative number of metres, got {self.radius!r}"
            )
        if self.qrels is not None:
            # read once, whatever form they came in (a mapping, or Judgments already)
            object.__setattr__(self, "qrels", Judgments.of(self.qrels))
        check_option("ignore_identical_ids", self.ignore_identical_ids)
        if self.judged_documents and self.qrels is None:
            raise ValueError("`judged_documents=True` places judged documents: give `qrels`")
        depth = self.depth
        if depth is not None and (
            not isinstance(depth, int) or isinstance(depth, bool) or depth < 1
        ):
            raise ValueError(f"`depth` must be a positive int or None, got {depth!r}")
        budget = self.memory_budget
        if budget is not None and (not isinstance(budget, int) or budget < 2**16):
            raise ValueError(
                f"`memory_budget` must be an int of at least 65536 bytes or None, got {budget!r}"
            )

    def budget_on(self, device: torch.device | str | None) -> int:
        """The bytes this ranking may use on ``device`` (see :func:`memory_budget_on`)."""
        return memory_budget_on(self.memory_budget, device)
