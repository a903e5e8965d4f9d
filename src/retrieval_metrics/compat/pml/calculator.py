"""The ``AccuracyCalculator`` class: PML's constructor, bookkeeping methods and keys, on the
blocked ranking."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.compat.pml.clustering import FaissKMeans, numpy_pair
from retrieval_metrics.compat.pml.inputs import as_embeddings, as_labels
from retrieval_metrics.compat.pml.knn import (
    blocked_knn,
    fill_index_as_pml_leaves_it,
    knn_convention,
    near_origin,
)
from retrieval_metrics.compat.pml.labels import (
    EQUALITY,
    LabelCounts,
    LabelIndex,
    count_matches,
    custom_relevance,
    label_index,
)
from retrieval_metrics.compat.pml.measures import (
    RankedQueries,
    nan_accuracy,
    pml_average,
    pml_per_query,
    ranked_from_knn,
)
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.embeddings import rank_relevance

__all__ = ["CLUSTERING_KEYS", "RANKED_KEYS", "AccuracyCalculator"]

# the package's name, the logger's name before the package was split into modules: this
# module's own messages (what it ranks)
LOGGER = logging.getLogger("retrieval_metrics.compat.pml")
# PML's own warnings (k below the largest match count, no query label in the reference) go
# where PML logs them, its logger "PML", so that code silencing logging.getLogger("PML")
# silences them after the import swap too
PML_LOGGER = logging.getLogger("PML")

#: The kNN keys this module computes from the rank table (PML's ``requires_knn()`` plus MRR,
#: which PML leaves out of that list, so that ``include=("mean_reciprocal_rank",)`` crashes there).
RANKED_KEYS = (
    "precision_at_1",
    "mean_average_precision",
    "mean_average_precision_at_r",
    "r_precision",
    "mean_reciprocal_rank",
)
CLUSTERING_KEYS = ("NMI", "AMI")


class AccuracyCalculator:
    """pytorch-metric-learning 2.x's ``AccuracyCalculator``, on the blocked ranking.

    Same arguments and the same keys (``precision_at_1``, ``r_precision``,
    ``mean_average_precision_at_r``, ``mean_average_precision``, ``mean_reciprocal_rank``,
    ``NMI``, ``AMI``) as ``pytorch_metric_learning.utils.accuracy_calculator.AccuracyCalculator``,
    and the same values, including its handling of ``k``: with an int ``k`` below a query's
    relevant count R, relevant items ranked beyond ``k`` do not count, so ``r_precision`` and
    ``mean_average_precision_at_r`` come out truncated as in PML (which logs that they "will be
    incorrect"; so does this class), and ``mean_average_precision`` (divided by R) and
    ``mean_reciprocal_rank`` (0 past ``k``) depend on ``k`` as there. ``k=None`` is the whole
    ranking; ``k="max_bin_count"`` is the largest match count of a query label, less one when the
    reference includes the query. Lone queries (no other item with their label) are left out,
    labels are compared after PML's cast to float32, and ``avg_of_avgs`` / ``return_per_class``
    average per query label in ``torch.unique`` order.

    What differs, on purpose:

    * **Exact distance ties.** PML keeps faiss' order among items at exactly the same distance
      (lower reference index first), so its value depends on how the data was stored. Here a tie
      counts as the expectation over its orders. The two agree whenever no tie touches a relevant
      item (float embeddings of distinct images); they differ for duplicated or quantised
      embeddings.
    * **Memory.** No queries x k neighbour matrix: the ranking is blocked under
      ``memory_budget`` bytes of scratch (a keyword this class adds), so ``k=None`` runs on
      Stanford-Online-Products-sized data (60,502 x 128) where PML needs the 60,502^2 matrix.
    * ``include=("mean_reciprocal_rank",)`` alone works (PML raises TypeError: its
      ``requires_knn()`` omits MRR); ``requires_knn()`` lists it.
    * An int ``k`` larger than the reference set ranks the whole set (PML's faiss pads with
      index -1, which reads the last reference label).
    * ``knn_func`` is honoured when it is an exact kNN this ranking reproduces: PML's
      ``FaissKNN`` with ``IndexFlatL2`` (the default) or ``IndexFlatIP``, or ``CustomKNN`` with
      ``LpDistance(p=2)``, ``CosineSimilarity`` or ``DotProductSimilarity``. Any other raises
      ValueError, and so does ``CosineSimilarity`` / ``DotProductSimilarity`` with
      ``power != 1`` (PML ranks by the similarity to that power, which lifts negative
      similarities or makes them NaN; a distance's positive power ranks as the distance and is
      accepted). The object is never called (a ``FaissKNN(reset_after=False)`` is left holding
      the reference in its index, as PML leaves it).
    * **Euclidean embeddings far from the origin** are translated before they are ranked: when
      the norm of their mean exceeds ``FAR_FROM_ORIGIN`` (4) times their spread (root mean
      square distance from the mean), a common point near the mean is subtracted, exactly (see
      :func:`~retrieval_metrics.compat.pml.knn.near_origin`). The ranking scores by the
      expansion 2 q.g - |g|^2, which loses such points' distances in float32, while PML's faiss
      computes |q - g|^2 directly; translated, the values are PML's. Data near the origin is
      ranked as given. (PML's own ``CustomKNN(LpDistance(normalize_embeddings=False))`` uses
      ``torch.cdist``, which takes the expansion too, so far from the origin PML's values
      there can drift from these.)
    * Inputs may be tensors, numpy arrays or lists; ``get_accuracy``'s ``include`` / ``exclude``
      are checked like the constructor's (PML ignores unknown names there).
    * Multi-column labels ``(Q, C)`` are compared row by row with the default comparison. PML's
      default ``torch.eq`` compares them cell by cell: with ``reference=None`` and for
      ``mean_average_precision``, ``mean_average_precision_at_r`` and ``r_precision`` it fails on
      the shapes, but with a separate reference ``precision_at_1`` is the fraction of matching
      label cells of the nearest neighbours (not of matching rows), and with ``k=1``
      ``mean_reciprocal_rank`` is the fraction of queries whose nearest neighbour matches in any
      column. Give PML a ``label_comparison_fn`` comparing whole rows (for example
      ``lambda x, y: (x == y).all(-1)``) for the values this class gives, with it or without.
    * PML's warnings (``k`` below the largest match count, no query label in the reference)
      are logged on PML's logger, ``"PML"``, so ``logging.getLogger("PML")`` silences them as
      it silences PML; this module's own messages go to ``"retrieval_metrics.compat.pml"``.

    ``NMI`` and ``AMI`` are computed as PML does: k-means on the query embeddings with as many
    clusters as distinct query labels (faiss' ``Kmeans(niter=20)`` unless ``kmeans_func`` is
    given, so faiss must be installed for the default), then scikit-learn's scores. They refuse
    a custom ``label_comparison_fn`` (NotImplementedError), as PML does.

    Subclasses work as in PML's documentation: a ``calculate_<name>(self, **kwargs)`` method adds
    the key ``<name>``; listed in ``requires_knn()`` it receives ``knn_labels`` and
    ``knn_distances`` (queries x k, computed exactly, a block of queries at a time), listed in
    ``requires_clustering()`` it receives ``cluster_labels``. ``knn_distances`` follow PML's
    convention for the ``knn_func``: squared L2 for ``FaissKNN()`` (``IndexFlatL2``), L2 (to
    the distance's ``power``) for ``CustomKNN(LpDistance(normalize_embeddings=False))``, the L2
    distance between the unit vectors, sqrt(max(0, 2 - 2 cos)) (to ``power``), for a
    normalised ``LpDistance``, and the similarity, largest first, for ``IndexFlatIP``,
    ``CosineSimilarity`` and ``DotProductSimilarity``. The built-in keys never build
    ``knn_labels``; a built-in ``calculate_*`` method called directly with ``knn_labels`` (PML's
    internal form) computes from them.

    Example:
        >>> import torch
        >>> from retrieval_metrics.compat.pml import AccuracyCalculator
        >>> emb = torch.tensor([[0.0], [0.1], [0.3], [0.7], [1.5], [1.6], [4.0]])
        >>> labels = torch.tensor([0, 1, 0, 1, 1, 0, 2])
        >>> calc = AccuracyCalculator(exclude=("NMI", "AMI"), k="max_bin_count")
        >>> acc = calc.get_accuracy(emb, labels)
        >>> round(acc["r_precision"], 4), round(acc["mean_reciprocal_rank"], 4)
        (0.3333, 0.3333)
        >>> full = AccuracyCalculator(include=("mean_reciprocal_rank",)).get_accuracy(emb, labels)
        >>> round(full["mean_reciprocal_rank"], 4)
        0.4444
    """

    def __init__(
        self,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        avg_of_avgs: bool = False,
        return_per_class: bool = False,
        k: int | str | None = None,
        label_comparison_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        device: torch.device | str | None = None,
        knn_func: Any = None,
        kmeans_func: Callable[[Tensor, int], Any] | None = None,
        *,
        memory_budget: int | None = None,
    ) -> None:
        self.function_keyword = "calculate_"
        function_names = [x for x in dir(self) if x.startswith(self.function_keyword)]
        metrics = [x.replace(self.function_keyword, "", 1) for x in function_names]
        self.original_function_dict = {
            x: getattr(self, y) for x, y in zip(metrics, function_names, strict=True)
        }
        self.check_primary_metrics(include, exclude)
        self.original_function_dict = self.get_function_dict(include, exclude)
        self.curr_function_dict = self.get_function_dict()

        if avg_of_avgs and return_per_class:
            raise ValueError("avg_of_avgs and return_per_class are mutually exclusive")
        self.avg_of_avgs = avg_of_avgs
        self.return_per_class = return_per_class

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        # the ranking, and the knn_distances PML hands a subclass's keys for this knn_func
        self.knn_convention = knn_convention(knn_func)
        self.similarity = self.knn_convention.similarity
        self.knn_func = knn_func
        self.kmeans_func = (
            FaissKMeans(niter=20, gpu=self.device.type == "cuda")
            if kmeans_func is None
            else kmeans_func
        )

        if (not (isinstance(k, int) and not isinstance(k, bool) and k > 0)) and (
            k not in (None, "max_bin_count")
        ):
            raise ValueError("k must be an integer greater than 0, or None, or 'max_bin_count'")
        self.k = k
        self.memory_budget = OPTIONS["memory_budget"].check(memory_budget)

        if label_comparison_fn:
            self.label_comparison_fn = label_comparison_fn
            if any(x in self.requires_clustering() for x in self.get_curr_metrics()):
                raise NotImplementedError("Unsupported: clustering + custom label comparison")
        else:
            self.label_comparison_fn = EQUALITY

    # --------------------------------------------------------------- PML's bookkeeping methods

    def get_function_dict(
        self, include: Sequence[str] = (), exclude: Sequence[str] = ()
    ) -> dict[str, Callable[..., Any]]:
        """The metric functions left after ``include`` (all when empty) and ``exclude``."""
        if len(include) == 0:
            include = list(self.original_function_dict.keys())
        included_metrics = [k for k in include if k not in exclude]
        return {k: v for k, v in self.original_function_dict.items() if k in included_metrics}

    def get_curr_metrics(self) -> list[str]:
        """The keys the last ``get_accuracy`` (or the constructor) selected."""
        return list(self.curr_function_dict.keys())

    def requires_clustering(self) -> list[str]:
        """Keys computed from k-means cluster labels."""
        return list(CLUSTERING_KEYS)

    def requires_knn(self) -> list[str]:
        """Keys computed from the ranking (PML's list, plus mean_reciprocal_rank)."""
        return list(RANKED_KEYS)

    def check_primary_metrics(
        self, include: Sequence[str] = (), exclude: Sequence[str] = ()
    ) -> None:
        """TypeError unless ``include`` / ``exclude`` are tuples or lists; ValueError for names
        that are not keys of this calculator."""
        primary_metrics = list(self.original_function_dict.keys())
        for met in (include, exclude):
            if not isinstance(met, (tuple, list)):
                raise TypeError(f"Arguments must be of type tuple, not {type(met)}.")
            if not set(met).issubset(set(primary_metrics)):
                raise ValueError(f"Primary metrics must be one or more of: {primary_metrics}.")

    def determine_k(
        self, bin_counts: Tensor, num_reference_embeddings: int, ref_includes_query: bool
    ) -> int:
        """PML's number of neighbours: the cut-off k of every kNN key (see the class docstring).

        Logs PML's warning when an int ``k`` is below the largest match count while
        r_precision or mean_average_precision_at_r is computed.
        """
        self_count = int(ref_includes_query)
        max_bin_count = int(torch.as_tensor(bin_counts).max().item())
        if self.k == "max_bin_count":
            return max_bin_count - self_count
        if self.k is None:
            return num_reference_embeddings - self_count
        if self.k < max_bin_count:
            intersection = set(self.get_curr_metrics()) & {
                "r_precision",
                "mean_average_precision_at_r",
            }
            if intersection:
                PML_LOGGER.warning(
                    "You are computing %s, but the value for k (%d) is less than the max bin "
                    "count (%d) so the values for these metrics will be incorrect. To fix this, "
                    "set k='max_bin_count'. If you're looking for MAP@%d instead of MAP@R, then "
                    "you should use 'mean_average_precision' rather than "
                    "mean_average_precision_at_r",
                    intersection,
                    self.k,
                    max_bin_count,
                    self.k,
                )
        return self.k

    def description(self) -> str:
        """``"avg_of_avgs"`` when averaging per class (PML's testers put it in file names)."""
        return "avg_of_avgs" if self.avg_of_avgs else ""

    def get_cluster_labels(self, query: Tensor, query_labels: Tensor, **kwargs: Any) -> Any:
        """k-means cluster of every query, with as many clusters as distinct query labels."""
        num_clusters = len(torch.unique(query_labels.flatten()))
        return self.kmeans_func(query, num_clusters)

    # --------------------------------------------------------------- the keys

    def calculate_NMI(self, query_labels: Tensor, cluster_labels: Any, **kwargs: Any) -> float:
        """scikit-learn's normalized_mutual_info_score of query labels and k-means clusters."""
        from sklearn.metrics import normalized_mutual_info_score

        return float(normalized_mutual_info_score(*numpy_pair(query_labels, cluster_labels)))

    def calculate_AMI(self, query_labels: Tensor, cluster_labels: Any, **kwargs: Any) -> float:
        """scikit-learn's adjusted_mutual_info_score of query labels and k-means clusters."""
        from sklearn.metrics import adjusted_mutual_info_score

        return float(adjusted_mutual_info_score(*numpy_pair(query_labels, cluster_labels)))

    def calculate_precision_at_1(self, **kwargs: Any) -> float | list[float]:
        """Whether the nearest reference item (self excluded) is relevant."""
        return self._ranked_key("precision_at_1", **kwargs)

    def calculate_mean_average_precision_at_r(self, **kwargs: Any) -> float | list[float]:
        """MAP@R: sum of P(i) rel(i) over the first min(R, k) positions, / R."""
        return self._ranked_key("mean_average_precision_at_r", **kwargs)

    def calculate_mean_average_precision(self, **kwargs: Any) -> float | list[float]:
        """Sum of P(i) rel(i) over the first k positions, / R (full AP with k=None)."""
        return self._ranked_key("mean_average_precision", **kwargs)

    def calculate_mean_reciprocal_rank(self, **kwargs: Any) -> float | list[float]:
        """1 / position of the first relevant item, 0 when it lies beyond k."""
        return self._ranked_key("mean_reciprocal_rank", **kwargs)

    def calculate_r_precision(self, **kwargs: Any) -> float | list[float]:
        """Relevant items in the first min(R, k) positions, / min(R, k)."""
        return self._ranked_key("r_precision", **kwargs)

    def _ranked_key(
        self,
        name: str,
        *,
        label_counts: tuple[Any, Any],
        query_labels: Tensor | None = None,
        not_lone_query_mask: Tensor | None = None,
        ref_includes_query: bool = False,
        knn_labels: Tensor | None = None,
        ranked: RankedQueries | None = None,
        **kwargs: Any,
    ) -> float | list[float]:
        if ranked is None and knn_labels is not None:
            if query_labels is None or not_lone_query_mask is None:
                raise ValueError(
                    "computing from `knn_labels` needs `query_labels` and `not_lone_query_mask`"
                )
            ranked = ranked_from_knn(
                knn_labels,
                query_labels,
                not_lone_query_mask,
                ref_includes_query,
                label_counts,
                self.label_comparison_fn,
            )
        if ranked is None:
            return nan_accuracy(len(label_counts[0]), self.return_per_class)
        values = pml_per_query(name, ranked)
        return pml_average(values, ranked.classes, self.avg_of_avgs, self.return_per_class)

    # --------------------------------------------------------------- evaluation

    def get_accuracy(
        self,
        query: Any,
        query_labels: Any,
        reference: Any = None,
        reference_labels: Any = None,
        ref_includes_query: bool = False,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Every selected key for ``query`` against ``reference`` (PML's ``get_accuracy``).

        Args:
            query: ``(Q, D)`` embeddings (tensor, numpy array or list), cast to float32.
            query_labels: ``(Q,)`` labels, or ``(Q, C)`` label rows (compared whole).
            reference: ``(N, D)`` embeddings retrieved from; ``None`` means the queries
                themselves, with ``ref_includes_query=True``.
            reference_labels: ``(N,)`` labels (or rows) of ``reference``.
            ref_includes_query: the first Q reference items are the queries, and each query's
                own item is left out of its ranking.
            include: keys for this call (all when empty), among those the constructor kept.
            exclude: keys to leave out of this call.

        Returns:
            key -> float (or a list per query label with ``return_per_class``).
        """
        if reference is None:
            reference, reference_labels, ref_includes_query = query, query_labels, True
        elif reference_labels is None:
            raise ValueError("`reference_labels` must be given with `reference`")
        query = as_embeddings(query, "query", self.device)
        reference = as_embeddings(reference, "reference", self.device)
        query_labels = as_labels(query_labels, "query_labels", self.device)
        reference_labels = as_labels(reference_labels, "reference_labels", self.device)
        if len(query) != len(query_labels) or len(reference) != len(reference_labels):
            raise ValueError(
                "embeddings and labels must have the same length: got "
                f"{len(query)} queries with {len(query_labels)} labels and {len(reference)} "
                f"reference items with {len(reference_labels)} labels"
            )
        if query.shape[1] != reference.shape[1]:
            raise ValueError(
                f"`query` and `reference` must have the same dimension, got {query.shape[1]} "
                f"and {reference.shape[1]}"
            )
        if ref_includes_query and not (
            len(reference) >= len(query)
            and torch.allclose(query, reference[: len(query)], equal_nan=True)  # (NaN: below)
            and torch.allclose(query_labels, reference_labels[: len(query)])
        ):
            raise ValueError(
                "When ref_includes_query is True, the first len(query) elements of reference "
                "must be equal to query.\nLikewise, the first len(query_labels) elements of "
                "reference_labels must be equal to query_labels.\n"
            )
        self.check_primary_metrics(include, exclude)
        self.curr_function_dict = self.get_function_dict(include, exclude)
        kwargs: dict[str, Any] = {
            "query": query,
            "reference": reference,
            "query_labels": query_labels,
            "reference_labels": reference_labels,
            "ref_includes_query": ref_includes_query,
            "label_comparison_fn": self.label_comparison_fn,
        }
        metrics = self.get_curr_metrics()
        if any(x in self.requires_knn() for x in metrics):
            kwargs.update(self._rank(metrics, **kwargs))
        if any(x in self.requires_clustering() for x in metrics):
            kwargs["cluster_labels"] = self.get_cluster_labels(**kwargs)
        return self._get_accuracy(self.curr_function_dict, **kwargs)

    def _get_accuracy(
        self, function_dict: dict[str, Callable[..., Any]], **kwargs: Any
    ) -> dict[str, Any]:
        return {k: v(**kwargs) for k, v in function_dict.items()}

    def _own(self, name: str) -> bool:
        """Whether key ``name`` is computed by this module's method (not a subclass's)."""
        method = getattr(type(self), self.function_keyword + name, None)
        return name in RANKED_KEYS and method is getattr(
            AccuracyCalculator, self.function_keyword + name
        )

    def _rank(
        self,
        metrics: list[str],
        *,
        query: Tensor,
        reference: Tensor,
        query_labels: Tensor,
        reference_labels: Tensor,
        ref_includes_query: bool,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The kNN inputs: PML's label bookkeeping, the rank table of the non-lone queries,
        and, only for a subclass's kNN keys, PML's ``knn_labels`` / ``knn_distances``."""
        index = label_index(query_labels, reference_labels)
        counts = count_matches(index, ref_includes_query, self.label_comparison_fn)
        unique_labels = index.labels_of(counts.unique_codes).to(query_labels.device)
        label_counts = (unique_labels, counts.match_counts.to(query_labels.device))
        num_k = self.determine_k(counts.match_counts, len(reference), ref_includes_query)
        mask = counts.not_lone_query_mask
        if not bool(mask.any()):
            PML_LOGGER.warning("None of the query labels are in the reference set.")
        LOGGER.info(
            "ranking %d queries against %d reference items (%s), k=%d",
            int(mask.sum()),
            len(reference),
            self.similarity,
            num_k,
        )
        out: dict[str, Any] = {
            "label_counts": label_counts,
            "lone_query_labels": index.labels_of(counts.unique_codes[counts.lone]).to(
                query_labels.device
            ),
            "not_lone_query_mask": mask.to(query_labels.device),
        }
        fill_index_as_pml_leaves_it(self.knn_func, reference)
        if self.similarity == "euclidean":
            # PML's faiss computes |q - g|^2 directly; the ranking's expansion needs data near
            # the origin for the same precision (distances do not change under translation)
            query, reference = near_origin(query, reference)
        wanted = [x for x in metrics if x in self.requires_knn()]
        if bool(mask.any()) and any(self._own(x) for x in wanted):
            out["ranked"] = self._ranked(query, reference, index, counts, num_k, ref_includes_query)
        if any(not self._own(x) for x in wanted):
            distances, indices = blocked_knn(
                query,
                reference,
                num_k,
                ref_includes_query,
                self.knn_convention,
                self.memory_budget,
            )
            out["knn_labels"] = reference_labels[indices]
            out["knn_distances"] = distances
        return out

    def _ranked(
        self,
        query: Tensor,
        reference: Tensor,
        index: LabelIndex,
        counts: LabelCounts,
        num_k: int,
        ref_includes_query: bool,
    ) -> RankedQueries:
        queries = flat_nonzero(counts.not_lone_query_mask)
        num_r = reference.shape[0]
        # Beyond the ranked items there is nothing to count (PML's faiss would pad with -1).
        k = max(0, min(num_k, num_r - int(ref_includes_query)))
        # Only positions <= k count for any key, so the ranking may stop there.
        depth = k if 0 < k < num_r - int(ref_includes_query) else None
        ids = {}
        if ref_includes_query:
            ids = {"query_ids": queries, "gallery_ids": torch.arange(num_r)}
        if counts.pairs is None and ref_includes_query and num_r == query.shape[0]:
            # The queries are the reference: one same-source ranking (which computes each pair
            # of blocks once, for both sides), then the non-lone queries' rows.
            table = rank_embeddings(
                query,
                None,
                query_labels=index.query,
                similarity=self.similarity,
                depth=depth,
                memory_budget=self.memory_budget,
            ).select(queries)
        elif counts.pairs is None:
            table = rank_embeddings(
                query[queries.to(query.device)],
                reference,
                query_labels=index.query[queries],
                gallery_labels=index.reference,
                similarity=self.similarity,
                depth=depth,
                memory_budget=self.memory_budget,
                **ids,
            )
        else:
            relevance = custom_relevance(index, counts.pairs, queries, num_r, ref_includes_query)
            table = rank_relevance(
                query[queries.to(query.device)],
                reference,
                relevance,
                similarity=self.similarity,
                depth=depth,
                memory_budget=self.memory_budget,
                query_order_key=index.query[queries],
                gallery_order_key=index.reference,
            )
        # R is PML's: match count less one with ref_includes_query (the same as the table's
        # count for label equality; PML's rule for a custom comparison).
        table = replace(table, num_relevant=counts.num_relevant[queries])
        return RankedQueries(table, k, index.query[queries])
