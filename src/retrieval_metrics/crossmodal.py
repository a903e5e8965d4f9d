"""Image-text retrieval in both directions (VSE++ / COCO / Flickr30K protocol), and rsum.

Image-to-text: each image is a query, its captions are relevant, r_q is the best rank among them.
Text-to-image: each caption is a query, its one image is relevant. Images are ordered by ascending
image id; an image that arrives once per caption is one gallery item. ``folds=5`` is COCO "1K":
5 folds of consecutive images (with their captions), each evaluated alone, every value (rsum,
median and mean rank included) averaged over folds; ``folds=None`` ranks against everything (COCO
"5K").

Example:
    >>> import torch
    >>> images = torch.eye(3)
    >>> captions = torch.eye(3)[[0, 0, 1, 1, 2, 2]] + 0.1
    >>> m = CrossModalRetrieval(k=(1,))
    >>> m.update(images[[0, 0, 1, 1, 2, 2]], captions, torch.tensor([0, 0, 1, 1, 2, 2]))
    >>> {k: float(v) for k, v in m.compute().items()}["rsum"]
    200.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics.utilities.data import dim_zero_cat

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional import stats
from retrieval_metrics.functional.ranking import (
    RankTable,
    _check_embeddings,
    concat_tables,
    rank_embeddings,
)
from retrieval_metrics.metric import RetrievalMetric, _score_copy, first_by_id, label_codes
from retrieval_metrics.metrics import _ks

__all__ = ["CrossModalRetrieval", "RSum"]


class CrossModalRetrieval(RetrievalMetric):
    """Image-to-text and text-to-image hit rates @K, median and mean rank, and rsum.

    Args:
        k: cut-offs for the hit rates ("R@K" of image-text papers); rsum adds them up.
        folds: ``None`` (one gallery of every image and caption, COCO "5K") or the number of
            folds of consecutive images by ascending id (``5`` on 5,000 images is COCO "1K").
        prefix: prepended to every key of ``compute()``.
        kwargs: the options of :class:`~retrieval_metrics.metric.RetrievalMetric` (``similarity``,
            ``ties``, ``percent``, ``median``, ...) and of ``torchmetrics.Metric``.

    ``update(image_embeddings, text_embeddings, image_ids, text_image_ids=None, text_ids=None)``:
    with ``text_image_ids=None`` the rows are (image, caption) pairs and ``image_ids`` names each
    pair's image (repeated images are kept once); otherwise images and captions are separate
    lists and ``text_image_ids`` names each caption's image. ``text_ids`` (optional, per caption)
    drops captions repeated by a distributed sampler.

    ``compute()`` keys: "i2t/hit_rate@K", "t2i/hit_rate@K", "i2t/median_rank",
    "i2t/mean_rank", "t2i/median_rank", "t2i/mean_rank", "rsum" (in percent, 0 to 200 x len(k)).
    """

    higher_is_better = True
    plot_upper_bound = None

    def __init__(
        self,
        k: int | Sequence[int] = (1, 5, 10),
        folds: int | None = None,
        prefix: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.k = _ks(k)
        if folds is not None and (
            isinstance(folds, bool) or not isinstance(folds, int) or folds < 1
        ):
            raise ValueError(f"`folds` must be None or a positive int, got {folds!r}")
        if not isinstance(prefix, str):
            raise ValueError(f"`prefix` must be a string, got {prefix!r}")
        self.folds = folds
        self.prefix = prefix
        for name in ("img_emb", "img_ids", "txt_emb", "txt_img_ids", "txt_ids"):
            self.add_state(name, [], dist_reduce_fx="cat")

    def metric_names(self) -> list[str]:
        return [f"hit_rate@{k}" for k in self.k] + ["median_rank", "mean_rank"]

    def update(  # type: ignore[override]
        self,
        image_embeddings: Tensor,
        text_embeddings: Tensor,
        image_ids: Any,
        text_image_ids: Any = None,
        text_ids: Any = None,
    ) -> None:
        """Add one batch of images and captions (see the class docstring)."""
        self._table = None
        img = _check_embeddings("image_embeddings", image_embeddings)
        txt = _check_embeddings("text_embeddings", text_embeddings)
        if img.shape[1] != txt.shape[1]:
            raise ValueError(
                "`image_embeddings` and `text_embeddings` must have the same dimension, got "
                f"{img.shape[1]} and {txt.shape[1]}"
            )
        img_ids = label_codes(image_ids, "image_ids")
        if img_ids.numel() != img.shape[0]:
            raise ValueError(
                f"`image_ids` must have {img.shape[0]} entries (one per image), got "
                f"{img_ids.numel()}"
            )
        if text_image_ids is None:
            if txt.shape[0] != img.shape[0]:
                raise ValueError(
                    "without `text_image_ids`, rows are (image, caption) pairs: "
                    f"`text_embeddings` must have {img.shape[0]} rows, got {txt.shape[0]}"
                )
            txt_img = img_ids
        else:
            txt_img = label_codes(text_image_ids, "text_image_ids")
            if txt_img.numel() != txt.shape[0]:
                raise ValueError(
                    f"`text_image_ids` must have {txt.shape[0]} entries (one per caption), got "
                    f"{txt_img.numel()}"
                )
        if text_ids is not None:
            tid = label_codes(text_ids, "text_ids")
            if tid.numel() != txt.shape[0]:
                raise ValueError(
                    f"`text_ids` must have {txt.shape[0]} entries (one per caption), got "
                    f"{tid.numel()}"
                )
            if len(self.txt_emb) and not len(self.txt_ids):
                raise ValueError("`text_ids` must be given on every update or on none")
            self._append_state("txt_ids", tid)
        elif len(self.txt_ids):
            raise ValueError("`text_ids` must be given on every update or on none")
        self._append_state("img_emb", _score_copy(img))
        self._append_state("img_ids", img_ids)
        self._append_state("txt_emb", _score_copy(txt))
        self._append_state("txt_img_ids", txt_img)

    def _gathered(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if isinstance(self.img_emb, list) and not self.img_emb:
            raise ValueError("no data: call `update` before `compute`")
        img, img_ids = dim_zero_cat(self.img_emb), dim_zero_cat(self.img_ids)
        txt, txt_img = dim_zero_cat(self.txt_emb), dim_zero_cat(self.txt_img_ids)
        # One gallery item per image id, in ascending id order.
        keep = first_by_id(img_ids)
        img, img_ids = img[keep.to(img.device)], img_ids[keep.to(img_ids.device)]
        txt_ids = self.txt_ids
        if not (isinstance(txt_ids, list) and not txt_ids):
            t_keep = first_by_id(dim_zero_cat(txt_ids))
            txt, txt_img = txt[t_keep.to(txt.device)], txt_img[t_keep.to(txt_img.device)]
        missing = ~torch.isin(txt_img.cpu(), img_ids.cpu())
        if bool(missing.any()):
            raise ValueError(
                f"{int(missing.sum())} captions name an image id that no update gave an embedding "
                f"for (e.g. {int(txt_img.cpu()[missing][0])})"
            )
        # Captions in the order of their images, so that folds take them along.
        c_order = torch.argsort(txt_img.cpu(), stable=True)
        return img, img_ids.cpu(), txt[c_order.to(txt.device)], txt_img.cpu()[c_order]

    def _direction_table(self, query, q_labels, gallery, g_labels) -> RankTable:
        return rank_embeddings(
            query,
            gallery,
            query_labels=q_labels,
            gallery_labels=g_labels,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
            depth=max(self.k),
            cover_relevant=False,
        )

    def _fold_tables(self) -> list[dict[str, RankTable]]:
        """Per fold, the image-to-text and text-to-image rank tables."""
        img, img_ids, txt, txt_img = self._gathered()
        n = img.shape[0]
        folds = self.folds or 1
        if n < folds:
            raise ValueError(f"`folds={folds}` needs at least {folds} images, got {n}")
        tables = []
        for f in range(folds):
            lo, hi = f * n // folds, (f + 1) * n // folds
            ids = img_ids[lo:hi]
            sel = torch.isin(txt_img, ids)
            fold_txt, fold_txt_img = txt[sel.to(txt.device)], txt_img[sel]
            tables.append({
                "i2t": self._direction_table(img[lo:hi], ids, fold_txt, fold_txt_img),
                "t2i": self._direction_table(fold_txt, fold_txt_img, img[lo:hi], ids),
            })
        return tables

    def _fold_values(self, tables: dict[str, RankTable]) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for direction, table in tables.items():
            values = M.retrieval_measures(
                table, self.metric_names(), ties=self.ties, empty_queries=self.empty_queries,
                percent=self.percent, median=self.median,
            )
            for name, value in values.items():
                out[f"{direction}/{name}"] = value
        scale = 1.0 if self.percent else 100.0
        out["rsum"] = sum(
            (out[f"{d}/hit_rate@{k}"] * scale for d in ("i2t", "t2i") for k in self.k),
            torch.tensor(0.0, dtype=torch.float64),
        )
        return out

    def compute_values(self) -> dict[str, Tensor]:
        """The unprefixed values, averaged over folds (float64)."""
        rows = [self._fold_values(tables) for tables in self._fold_tables()]
        return {key: torch.stack([r[key] for r in rows]).mean() for key in rows[0]}

    def compute(self) -> dict[str, Tensor]:  # type: ignore[override]
        return {f"{self.prefix}{k}": v.to(torch.float32) for k, v in self.compute_values().items()}

    def _direction_tables(self) -> dict[str, RankTable]:
        """Each direction's queries of every fold, in one table (folds in order)."""
        with self.sync_context(
            dist_sync_fn=self.dist_sync_fn, should_sync=self._to_sync,
            should_unsync=self._should_unsync,
        ):
            folds = self._fold_tables()
        return {d: concat_tables([f[d] for f in folds]) for d in ("i2t", "t2i")}

    def per_query(self) -> dict[str, Tensor]:
        """Per direction, each query's values ("i2t/...": one per image in ascending id order,
        "t2i/...": one per caption, grouped by image), folds concatenated."""
        out = {}
        for direction, table in self._direction_tables().items():
            for name in self.metric_names():
                spec = M.parse_metric(name)
                out[f"{direction}/{spec.name}"] = M.per_query_values(table, spec, ties=self.ties)
        return out

    def summary(self, level: float = 0.95, num_bootstrap: int = 1000, seed: int = 0) -> Any:
        """Per direction: value, interval, chance level, queries and gallery size per metric
        (each query ranked against its own fold's gallery; with equal folds the means equal the
        fold averages of compute())."""
        rows = []
        for direction, table in self._direction_tables().items():
            part = stats.summarize(
                table, self.metric_names(), ties=self.ties, empty_queries=self.empty_queries,
                percent=self.percent, median=self.median, level=level,
                num_bootstrap=num_bootstrap, seed=seed,
            )
            for row in part.rows:
                rows.append({**row, "name": f"{self.prefix}{direction}/{row['name']}"})
        return stats.Summary(rows=rows, level=level)


class RSum(CrossModalRetrieval):
    """rsum alone, as a 0-d tensor (for ``ModelCheckpoint(monitor="val/rsum")``): the sum of the
    image-to-text and text-to-image hit rates @1, @5, @10 in percent (0 to 600)."""

    def compute(self) -> Tensor:  # type: ignore[override]
        return self.compute_values()["rsum"].to(torch.float32)
