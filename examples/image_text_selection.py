"""Image-text retrieval: train, select the checkpoint on validation rsum, test exactly that one.

A small two-tower model on generated "images" and "captions" (5 captions per image, from shared
latent concepts; no download). ``RSum`` is logged as ``val/rsum``; ``SelectOnValidation`` keeps
the best epoch by it; ``trainer.test(model, ...)`` then runs on those weights and prints the
"1K" (5 folds of consecutive images, averaged) and "5K" (one gallery) tables, the way image-text
papers report them, with the selection that chose the weights.

Run:  python examples/image_text_selection.py  (about half a minute on 2 CPU cores)
"""

from __future__ import annotations

import tempfile

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import retrieval_metrics as rm
from retrieval_metrics.lightning import SelectOnValidation

CAPTIONS_PER_IMAGE = 5


class ImageText(Dataset):
    """(image features, caption features, image id, caption id) pairs, 5 captions per image."""

    def __init__(self, num_images: int, seed: int, id_offset: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        mix = torch.Generator().manual_seed(0)  # the same "world" for every split
        to_image, to_text = torch.randn(24, 48, generator=mix), torch.randn(24, 40, generator=mix)
        concepts = torch.randn(num_images, 24, generator=gen)
        self.images = concepts @ to_image + 1.0 * torch.randn(num_images, 48, generator=gen)
        owner = torch.arange(num_images).repeat_interleave(CAPTIONS_PER_IMAGE)
        noisy = concepts[owner] + 1.6 * torch.randn(len(owner), 24, generator=gen)
        self.captions = noisy @ to_text
        self.owner = owner
        self.id_offset = id_offset

    def __len__(self) -> int:
        return len(self.owner)

    def __getitem__(self, i: int):
        image = int(self.owner[i])
        return self.images[image], self.captions[i], image + self.id_offset, i + self.id_offset


class TwoTower(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.image_encoder = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, 32))
        self.text_encoder = nn.Sequential(nn.Linear(40, 64), nn.ReLU(), nn.Linear(64, 32))
        self.rsum = rm.RSum()  # logged as val/rsum, monitored by the checkpoint callback
        self.test_1k = rm.CrossModalRetrieval(folds=5, prefix="test/1k/", protocol="vsepp")
        self.test_5k = rm.CrossModalRetrieval(folds=None, prefix="test/5k/", protocol="vsepp")

    def encode(self, images, captions):
        return self.image_encoder(images), self.text_encoder(captions)

    def training_step(self, batch, batch_idx):
        images, captions, _, _ = batch
        img, txt = self.encode(images, captions)
        logits = nn.functional.normalize(img, dim=1) @ nn.functional.normalize(txt, dim=1).T
        target = torch.arange(len(images))
        loss = nn.functional.cross_entropy(logits / 0.1, target)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        images, captions, image_ids, caption_ids = batch
        img, txt = self.encode(images, captions)
        self.rsum.update(img, txt, image_ids, text_ids=caption_ids)
        self.log("val/rsum", self.rsum)

    def test_step(self, batch, batch_idx):
        images, captions, image_ids, caption_ids = batch
        img, txt = self.encode(images, captions)
        self.test_1k.update(img, txt, image_ids, text_ids=caption_ids)
        self.test_5k.update(img, txt, image_ids, text_ids=caption_ids)

    def on_test_epoch_end(self):
        # compute() already returns the same values on every process; sync_dist=True tells
        # Lightning so, which keeps it from warning once per key under DDP, and their maximum
        # keeps them exact (a mean may change a last bit)
        self.log_dict(self.test_1k.compute(), sync_dist=True, reduce_fx="max")
        self.log_dict(self.test_5k.compute(), sync_dist=True, reduce_fx="max")
        self.test_1k.reset()
        self.test_5k.reset()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def print_table(metrics: dict[str, float], prefix: str, title: str) -> None:
    print(f"\n{title}")
    print(f"{'':6}{'R@1':>8}{'R@5':>8}{'R@10':>8}{'medr':>8}{'meanr':>8}")
    for direction in ("i2t", "t2i"):
        row = [metrics[f"{prefix}{direction}/hit_rate@{k}"] for k in (1, 5, 10)]
        row += [
            metrics[f"{prefix}{direction}/median_rank"],
            metrics[f"{prefix}{direction}/mean_rank"],
        ]
        print(f"{direction:6}" + "".join(f"{v:8.1f}" for v in row))
    print(f"rsum {metrics[prefix + 'rsum']:.1f}")


def main() -> None:
    torch.manual_seed(0)
    train = DataLoader(ImageText(800, seed=1, id_offset=0), batch_size=100, shuffle=True)
    val = DataLoader(ImageText(200, seed=2, id_offset=100_000), batch_size=250)
    test = DataLoader(ImageText(500, seed=3, id_offset=200_000), batch_size=250)
    with tempfile.TemporaryDirectory() as root:
        selector = SelectOnValidation(dirpath=root, monitor="val/rsum", mode="max")
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=6,
            callbacks=[selector],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
        )
        model = TwoTower()
        trainer.fit(model, train, val)
        results = trainer.test(model, test, verbose=False)[0]
    print(
        f"selected epoch {int(results['selection/epoch'])} "
        f"(step {int(results['selection/step'])}) with val/rsum "
        f"{results['selection/val/rsum']:.1f}"
    )
    print_table(results, "test/1k/", "test, 1K protocol (5 folds of 100 images, averaged):")
    print_table(results, "test/5k/", "test, 5K protocol (all 500 images as one gallery):")
    print(
        "\n1K ranks each caption against 100 images instead of 500, so its recalls are higher;"
        " only numbers computed on the same gallery size are comparable."
    )


if __name__ == "__main__":
    main()
