"""The metric classes: thin :class:`RetrievalMetric` subclasses naming what they report.

Example:
    >>> import torch
    >>> import retrieval_metrics as rm
    >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> m = rm.HitRateAtK(k=(1, 2))
    >>> m.update(emb, torch.tensor([0, 0, 1, 1]))
    >>> {k: float(v) for k, v in m.compute().items()}
    {'hit_rate@1': 1.0, 'hit_rate@2': 1.0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.names import refuse_ambiguous_recall
from retrieval_metrics.metrics.plotting import Plotted
from retrieval_metrics.metrics.protocols import IR_PROTOCOLS, library_names, refuse_field_recall
from retrieval_metrics.metrics.retrieval import RetrievalMetric

__all__ = [
    "CMC",
    "MINP",
    "MRR",
    "HitRateAtK",
    "MAPAtR",
    "MeanAveragePrecision",
    "MeanRank",
    "MedianRank",
    "NDCGAtK",
    "PrecisionAtK",
    "RPrecision",
    "RecallAtK",
    "RetrievalMetrics",
]


def cutoffs(k: int | Sequence[int], name: str = "k") -> tuple[int, ...]:
    expected = f"`{name}` must be a positive int or a non-empty sequence of positive ints"
    if isinstance(k, int) and not isinstance(k, bool):
        values: tuple[Any, ...] = (k,)
    elif isinstance(k, Sequence) and not isinstance(k, (str, bytes)):
        values = tuple(k)
    else:
        # a float cut-off (k=1.5, or 4.0 from a config file) is refused rather than rounded
        raise ValueError(f"{expected}, got {k!r} ({type(k).__name__})")
    if not values:
        raise ValueError(f"{expected}, got {k!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{expected} (>= 1), got {k!r}")
    if len(set(values)) < len(values):
        # (each cut-off is one value: rsum would add a repeated one twice)
        raise ValueError(f"`{name}` must not repeat a cut-off, got {k!r}")
    return values


def _positive_int(name: str, value: Any, alternative: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"`{name}` must be {alternative}a positive int, got {value!r} ({type(value).__name__})"
        )
    return value


def _no_top_k(cls: type, kwargs: dict[str, Any]) -> None:
    # torchmetrics names the cut-off `top_k`; here it is `k`
    if "top_k" in kwargs:
        raise ValueError(
            f"{cls.__name__} takes the cut-off as `k` (torchmetrics' `top_k`), got "
            f"top_k={kwargs['top_k']!r}"
        )


class _AtK(Plotted, RetrievalMetric):
    """A measure at one or several cut-offs: a 0-d tensor for one, a dict for several."""

    base = ""

    def __init__(self, k: int | Sequence[int] = 1, **kwargs: Any) -> None:
        _no_top_k(type(self), kwargs)
        super().__init__(**kwargs)
        self.k = cutoffs(k)
        refuse_field_recall(self.protocol, self.metric_names())

    def metric_names(self) -> list[str]:
        return [f"{self.base}@{k}" for k in self.k]


class HitRateAtK(_AtK):
    """Hit rate @K: 1 if a relevant item is in the top K ("R@K" of image-text, metric-learning
    and re-id papers). ``k`` may be a tuple; ``compute()`` then returns a dict."""

    base = "hit_rate"


class RecallAtK(_AtK):
    """Recall @K (information retrieval): relevant items in the top K over all relevant items."""

    base = "recall"


class PrecisionAtK(_AtK):
    """Precision @K: relevant items in the top K over K (K even when the gallery is smaller)."""

    base = "precision"


class _Single(Plotted, RetrievalMetric):
    name = ""

    def metric_names(self) -> list[str]:
        return [self.name]


class RPrecision(_Single):
    """R-precision: relevant items in the top m_q over m_q."""

    name = "r_precision"


class MAPAtR(_Single):
    """MAP@R (Musgrave et al. 2020): mean over queries of (1/m) sum_{i<=m} P(i) rel(i)."""

    name = "map@r"


class _OptionalCutoff(Plotted, RetrievalMetric):
    """A measure over the whole ranking (``k=None``) or at one cut-off."""

    base = ""

    def __init__(self, k: int | None = None, **kwargs: Any) -> None:
        _no_top_k(type(self), kwargs)
        super().__init__(**kwargs)
        self.k = None if k is None else _positive_int("k", k, "None (the whole ranking) or ")

    def metric_names(self) -> list[str]:
        return [self.base if self.k is None else f"{self.base}@{self.k}"]


class MeanAveragePrecision(_OptionalCutoff):
    """Mean average precision over the whole ranking (``k=None``) or at a cut-off.

    ``ap="step"`` (torchreid, trec_eval) or ``"trapezoid"`` (official Market-1501 code).
    AP@K ``divisor``: "relevant" m_q (trec_eval map_cut), "min" min(m_q, K) (MSLS), "retrieved"
    relevant found in the top K (torchmetrics).
    """

    base = "map"


class MRR(_OptionalCutoff):
    """Mean reciprocal rank of the first relevant item; with ``k``, 0 beyond the top K."""

    base = "mrr"


class NDCGAtK(_AtK):
    """NDCG@K with gain 2^g - 1 (``gain="exponential"``, default) or g (``"linear"``)."""

    base = "ndcg"

    def __init__(self, k: int | Sequence[int] = 10, **kwargs: Any) -> None:
        super().__init__(k, **kwargs)


class CMC(Plotted, RetrievalMetric):
    """Cumulative matching characteristic: hit rate @k for k = 1..max_rank, as a vector.

    Under ``ties="expected"`` each query contributes P(r_q <= k).
    """

    def __init__(self, max_rank: int = 50, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_rank = _positive_int("max_rank", max_rank)

    def metric_names(self) -> list[str]:
        return [f"cmc@{self.max_rank}"]


class _Rank(_Single):
    higher_is_better = False
    plot_lower_bound = 1.0
    plot_upper_bound = None


class MedianRank(_Rank):
    """Median over queries of the rank of the first relevant item.

    ``median="vsepp"`` (default): floor(median(r - 1)) + 1 as in the VSE++ code; ``"plain"``:
    the ordinary median. Under ``ties="expected"`` it is the median of per-query expected ranks.
    """

    name = "median_rank"


class MeanRank(_Rank):
    """Mean over queries of the rank of the first relevant item."""

    name = "mean_rank"


class MINP(_Single):
    """mINP (Ye et al.): mean of m_q / rank of the query's last relevant item."""

    name = "minp"


class RetrievalMetrics(Plotted, RetrievalMetric):
    """Many named metrics from one ranking pass: what a user with several metrics reaches for.

    Args:
        metrics: names like "hit_rate@1", "recall@10", "precision@10", "f1@10", "map@r",
            "r_precision", "map", "map@100", "mrr", "ndcg@10", "cmc@50", "median_rank",
            "mean_rank", "minp", "granular_mrr"; hit rate, recall, precision and F1 without a
            cut-off cover the whole ranking (a ranked list's every id). A suffix fixes a name's
            own average, whatever ``average`` says: "recall@10/micro". Under a protocol of an
            evaluator, its own names are accepted too and reported under the library's
            (:data:`retrieval_metrics.protocols.EVALUATOR_NAMES`: "ap" is "map" under
            ``protocol="llama_index"``).
        prefix: prepended to every key of ``compute()`` (e.g. "val/").

    Example:
        >>> import torch
        >>> m = RetrievalMetrics(["hit_rate@1", "map@r"], prefix="val/")
        >>> m.update(torch.eye(4)[[0, 0, 1, 1]] + 0.1 * torch.eye(4), torch.tensor([0, 0, 1, 1]))
        >>> sorted(m.compute())
        ['val/hit_rate@1', 'val/map@r']
    """

    higher_is_better = None
    plot_upper_bound = None

    def __init__(self, metrics: Sequence[str], prefix: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(metrics, str) or not metrics:
            raise ValueError("`metrics` must be a non-empty list of metric names")
        # an evaluator's own names under its protocol ("ap" under "llama_index" is "map")
        specs = [M.parse_metric(name) for name in library_names(self.protocol, metrics)]
        for spec in specs:
            refuse_ambiguous_recall(
                spec, self.qrels is not None or self.protocol in IR_PROTOCOLS
            )
        names = [s.name for s in specs]
        refuse_field_recall(self.protocol, names)
        if len(set(names)) != len(names):
            twice = {name for name in names if names.count(name) > 1}
            renamed = [
                f"{given!r} is {spec.name!r}" for given, spec in zip(metrics, specs, strict=True)
                if str(given).strip().lower() != spec.name and spec.name in twice
            ]
            raise ValueError(
                f"`metrics` names a metric twice: {names}"
                + (f" ({', '.join(renamed)} under protocol={self.protocol!r})" if renamed else "")
            )
        if not isinstance(prefix, str):
            raise ValueError(f"`prefix` must be a string, got {prefix!r}")
        self.names = names
        self.prefix = prefix

    def metric_names(self) -> list[str]:
        return list(self.names)

    def _format(self, values: dict[str, Tensor]) -> dict[str, Tensor]:
        return {f"{self.prefix}{k}": v for k, v in values.items()}
