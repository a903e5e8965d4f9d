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
from typing import Any, ClassVar

import torch
from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.labels import key_kind, label_codes
from retrieval_metrics.functional.ranking.options import RankingOptions
from retrieval_metrics.functional.ranking.settings import memory_budget_on
from retrieval_metrics.functional.table import RankTable, concat_tables
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.base import RetrievalMetricBase
from retrieval_metrics.metrics.chunks import ranking_budget
from retrieval_metrics.metrics.inputs import score_copy
from retrieval_metrics.metrics.named import cutoffs
from retrieval_metrics.metrics.plotting import Plotted
from retrieval_metrics.metrics.protocols import DEFAULTS, PROTOCOLS, protocol_name

__all__ = ["CrossModalRetrieval", "RSum"]

DIRECTIONS = ("i2t/", "t2i/")
# options of the one-direction metrics that mean nothing here (relevance is the image id, every
# reported value is a hit rate or a rank)
_NOT_APPLICABLE = (
    "relevance", "radius", "ignore_label", "average", "ap", "divisor", "gain", "gallery_sharded",
    "duplicates", "empty_lists", "ignore_identical_ids",
)
# defaults of the one-direction options that no protocol sets
_ONE_DIRECTION_DEFAULTS = {"gallery_sharded": False, "ignore_identical_ids": None}


class CrossModalRetrieval(Plotted, RetrievalMetricBase):
    """Image-to-text and text-to-image hit rates @K, median and mean rank, and rsum.

    Args:
        k: cut-offs for the hit rates ("R@K" of image-text papers); rsum adds them up.
        folds: ``None`` (one gallery of every image and caption, COCO "5K") or the number of
            folds of consecutive images by ascending id (``5`` on 5,000 images is COCO "1K").
        prefix: prepended to every key of ``compute()``.
        kwargs: ``similarity``, ``ties``, ``empty_queries``, ``percent``, ``median``,
            ``memory_budget``, ``protocol`` (see
            :class:`~retrieval_metrics.metrics.base.RetrievalMetricBase`) and the options of
            ``torchmetrics.Metric``.

    ``update(image_embeddings, text_embeddings, image_ids, text_image_ids=None, text_ids=None)``:
    with ``text_image_ids=None`` the rows are (image, caption) pairs and ``image_ids`` names each
    pair's image (repeated images are kept once); otherwise images and captions are separate
    lists and ``text_image_ids`` names each caption's image. ``text_ids`` (optional, per caption)
    drops captions repeated by a distributed sampler.

    ``compute()`` keys: "i2t/hit_rate@K", "t2i/hit_rate@K", "i2t/median_rank",
    "i2t/mean_rank", "t2i/median_rank", "t2i/mean_rank", "rsum" (in percent, 0 to 200 x len(k)).
    ``rank_tables()`` has one table per direction ("i2t/", "t2i/"), folds concatenated; so do
    ``per_query()``, ``summary()``, ``plot()`` and :func:`retrieval_metrics.compare`.
    """

    higher_is_better = True
    plot_upper_bound = None
    kind_sides: ClassVar[dict[str, str]] = {"img": "images", "txt": "captions"}

    def __init__(
        self,
        k: int | Sequence[int] = (1, 5, 10),
        folds: int | None = None,
        prefix: str = "",
        **kwargs: Any,
    ) -> None:
        if kwargs.get("protocol") is not None:
            kwargs["protocol"] = protocol_name(kwargs["protocol"])
        fixed = PROTOCOLS[kwargs["protocol"]][0] if kwargs.get("protocol") in PROTOCOLS else {}
        for name in _NOT_APPLICABLE:
            # the default, or a protocol's own value, changes nothing; anything else would be
            # silently dropped
            given = kwargs.get(name)
            default = DEFAULTS.get(name, _ONE_DIRECTION_DEFAULTS.get(name))
            if given is not None and given != fixed.get(name, default):
                raise ValueError(
                    f"`{name}` does not apply to {type(self).__name__}: a caption is relevant to "
                    "its image, and every value is a hit rate or a rank"
                )
        for name in _ONE_DIRECTION_DEFAULTS:  # options of the one-direction kind only
            kwargs.pop(name, None)
        super().__init__(**kwargs)
        self.k = cutoffs(k)
        if folds is not None and (
            isinstance(folds, bool) or not isinstance(folds, int) or folds < 1
        ):
            raise ValueError(f"`folds` must be None or a positive int, got {folds!r}")
        if not isinstance(prefix, str):
            raise ValueError(f"`prefix` must be a string, got {prefix!r}")
        self.folds = folds
        self.prefix = prefix
        # images: embedding and id; captions: embedding, the id of their image, their own id
        self.store.add_side("img", ("emb", "ids"))
        self.store.add_side("txt", ("emb", "labels", "ids"))
        # queries per fold, by direction; not annotated, as torch.jit.script warns about an
        # annotated empty dict in __init__
        self._fold_sizes = {}  # type: ignore[var-annotated]

    def metric_names(self) -> list[str]:
        return [f"hit_rate@{k}" for k in self.k] + ["median_rank", "mean_rank"]

    def set_gallery(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(
            f"{type(self).__name__} ranks images and captions against each other, both given to "
            "update(); a fixed gallery does not apply. Use a one-direction metric (e.g. "
            "HitRateAtK) with set_gallery for a fixed image or caption gallery"
        )

    def update(  # type: ignore[override]
        self,
        image_embeddings: Tensor,
        text_embeddings: Tensor,
        image_ids: Any,
        text_image_ids: Any = None,
        text_ids: Any = None,
    ) -> None:
        """Add one batch of images and captions (see the class docstring)."""
        self._tables = None
        img, img_finite = self.store.scanned("image_embeddings", image_embeddings)
        txt, txt_finite = self.store.scanned("text_embeddings", text_embeddings)
        if img.shape[1] != txt.shape[1]:
            raise ValueError(
                "`image_embeddings` and `text_embeddings` must have the same dimension, got "
                f"{img.shape[1]} and {txt.shape[1]}"
            )
        if self.folds is not None and key_kind(image_ids) == "str":
            # (strings are compared by a hash: their order is no order of the images)
            raise ValueError(
                f"`folds={self.folds}` takes consecutive images by ascending image id, which "
                "string `image_ids` do not give: pass integer image ids in the order the folds "
                "should follow (e.g. each image's position in the split), or use folds=None"
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
        tid = None
        if text_ids is not None:
            tid = label_codes(text_ids, "text_ids")
            if tid.numel() != txt.shape[0]:
                raise ValueError(
                    f"`text_ids` must have {txt.shape[0]} entries (one per caption), got "
                    f"{tid.numel()}"
                )
        self.store.check_width("image_embeddings", img)
        self.store.note_key_kinds("img", {"ids": image_ids})
        self.store.note_key_kinds(
            "txt", {"labels": image_ids if text_image_ids is None else text_image_ids,
                    "ids": text_ids},
        )
        self.store.append_items(
            "txt", Items(emb=score_copy(txt), labels=txt_img, ids=tid), "captions: `text_ids`"
        )
        self.store.append_items("img", Items(emb=score_copy(img), ids=img_ids), "images")
        self.store.note_scans({"image_embeddings": img_finite, "text_embeddings": txt_finite})

    def sample_ids(self) -> dict[str, Tensor]:
        out = {}
        for kind, name in (("image", "img_ids"), ("text", "txt_ids")):
            value = self.store.read(name)
            if value is not None and value.numel():
                out[kind] = torch.unique(value.reshape(-1).cpu())
        return out

    # ------------------------------------------------------------------ ranking

    def _gathered(self) -> tuple[Items, Items]:
        """Images (one per id, ascending ids) and captions (grouped by image, in image order)."""
        self.store.check_kinds()
        images, captions = self.store.side("img"), self.store.side("txt")
        if images is None or captions is None:
            raise ValueError("no data: call `update` before `compute`")
        if len(images) == 0 or len(captions) == 0:
            raise ValueError(
                f"no items were given: the updates held {len(images)} images and "
                f"{len(captions)} captions in all"
            )
        # an image arrives once per caption: one gallery item per image id, whatever its rows
        # (the same rule as every repeat: the same image has the same embedding, to rounding)
        images = images.select(
            D.dedupe_by_id(images.ids, "`image_ids`", embeddings=images.emb)
        )
        if captions.ids is None:
            # images are deduplicated by their ids, captions only with text_ids
            self.store.warn_without_ids("`text_ids=`")
        else:
            captions = captions.select(
                D.dedupe_by_id(
                    captions.ids, "`text_ids`", embeddings=captions.emb, image_ids=captions.labels
                )
            )
        missing = ~torch.isin(captions.labels.cpu(), images.ids.cpu())
        if bool(missing.any()):
            raise ValueError(
                f"{int(missing.sum())} captions name an image id that no update gave an embedding "
                f"for (e.g. {int(captions.labels.cpu()[missing][0])})"
            )
        # captions in the order of their images, so that folds take them along
        return images, captions.select(torch.argsort(captions.labels.cpu(), stable=True))

    def _build_tables(self) -> dict[str, RankTable]:
        images, captions = self._gathered()
        n = len(images)
        folds = self.folds or 1
        if n < folds:
            raise ValueError(f"`folds={folds}` needs at least {folds} images, got {n}")
        # a caption's one image, and each image its captions: two relevant pairs a caption
        options = RankingOptions(
            similarity=self.similarity,
            memory_budget=ranking_budget(
                memory_budget_on(self.memory_budget, self.device), 2 * len(captions)
            ),
            depth=max(self.k),
            engine=self.engine,
        )
        distributed = self._distributed()
        image_ids = images.ids.cpu()
        per_fold: dict[str, list[RankTable]] = {d: [] for d in DIRECTIONS}
        for f in range(folds):
            fold = slice(f * n // folds, (f + 1) * n // folds)
            # relevance is the image id: images are labelled by it, captions by their image's
            fold_images = Items(emb=images.emb[fold], labels=image_ids[fold])
            in_fold = torch.isin(captions.labels.cpu(), image_ids[fold])
            kept = captions.select(in_fold)  # every caption when there is one fold: no copy
            fold_captions = Items(emb=kept.emb, labels=kept.labels.cpu())
            # both directions count the same image x caption scores
            tables = D.rank_two_ways(
                fold_images, fold_captions, options, self.process_group, distributed
            )
            for direction, table in zip(DIRECTIONS, tables, strict=True):
                per_fold[direction].append(table)
        self._fold_sizes = {d: [t.num_queries for t in per_fold[d]] for d in DIRECTIONS}
        return {d: concat_tables(per_fold[d]) for d in DIRECTIONS}

    # ------------------------------------------------------------------ values

    def _fold_values(self, tables: dict[str, RankTable]) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for direction, table in tables.items():
            values = M.retrieval_measures(table, self.metric_names(), options=self.measure_options)
            for name, value in values.items():
                out[f"{direction}{name}"] = value
        scale = 1.0 if self.percent else 100.0
        out["rsum"] = sum(
            (out[f"{d}hit_rate@{k}"] * scale for d in DIRECTIONS for k in self.k),
            torch.tensor(0.0, dtype=torch.float64),
        )
        return out

    def fold_tables(self) -> list[dict[str, RankTable]]:
        """Each fold's rank tables by direction (one fold without ``folds``): what compute()
        averages over, and ``plot()`` too."""
        tables = self.rank_tables()
        folds = []
        starts = {d: 0 for d in DIRECTIONS}
        for f in range(self.folds or 1):
            fold_tables = {}
            for d in DIRECTIONS:
                size = self._fold_sizes[d][f]
                # (one fold is the whole table: no copy of it)
                fold_tables[d] = tables[d] if size == tables[d].num_queries else tables[d].select(
                    torch.arange(starts[d], starts[d] + size)
                )
                starts[d] += size
            folds.append(fold_tables)
        return folds

    def compute_values(self) -> dict[str, Tensor]:
        """The unprefixed values, averaged over folds (float64)."""
        self._warn_if_cutoffs_reach_gallery(self.rank_tables())
        rows = [self._fold_values(fold_tables) for fold_tables in self.fold_tables()]
        if len(rows) == 1:
            return rows[0]  # (the mean of one fold is its value)
        return {key: torch.stack([r[key] for r in rows]).mean() for key in rows[0]}

    def compute(self) -> dict[str, Tensor]:  # type: ignore[override]
        return self._refuse_several_in_log({
            f"{self.prefix}{k}": self._result(v)
            for k, v in self.compute_values().items()
        })


class RSum(CrossModalRetrieval):
    """rsum alone, as a 0-d tensor (for ``ModelCheckpoint(monitor="val/rsum")``): the sum of the
    image-to-text and text-to-image hit rates @1, @5, @10 in percent (0 to 600)."""

    def compute(self) -> Tensor:  # type: ignore[override]
        return self._result(self.compute_values()["rsum"])
