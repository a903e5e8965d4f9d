"""A complete LightningModule with retrieval metrics, on generated class data (no download).

Run:  python examples/lightning_module.py            (one CPU process)
      python examples/lightning_module.py --devices 2  (two processes, DDP on CPU)

What it shows:
* ``self.log("val/map_at_r", self.map_at_r)`` with the metric object: Lightning calls
  ``compute()`` at the end of the epoch (gathering every process's embeddings) and resets it;
* ``self.log_dict(...)`` of a ``RetrievalMetrics`` result (several values from one ranking);
* ``ModelCheckpoint(monitor="val/map_at_r")`` choosing the checkpoint by it;
* ``ids=`` on every update, so the samples that DistributedSampler repeats to even out the
  processes are dropped after gathering and two devices report exactly what one would.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset

import retrieval_metrics as rm


class ClassData(Dataset):
    """Points around class centres in 32-D; each item is (features, label, sample id)."""

    def __init__(self, num_classes: int, per_class: int, seed: int, id_offset: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        centres = torch.randn(num_classes, 32, generator=torch.Generator().manual_seed(0))
        self.labels = torch.arange(num_classes).repeat_interleave(per_class)
        self.x = centres[self.labels] + 1.5 * torch.randn(len(self.labels), 32, generator=gen)
        self.ids = torch.arange(len(self.labels)) + id_offset

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.x[i], self.labels[i], self.ids[i]


class EmbeddingModule(L.LightningModule):
    def __init__(self, num_classes: int = 20) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
        self.head = nn.Linear(16, num_classes)
        # one metric object per logged value: Lightning computes and resets it
        self.map_at_r = rm.MAPAtR()
        # several values from one ranking pass: log_dict of its compute()
        self.val_metrics = rm.RetrievalMetrics(
            ["hit_rate@1", "hit_rate@4", "r_precision", "mrr"], prefix="val/"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def training_step(self, batch, batch_idx):
        x, labels, _ = batch
        loss = nn.functional.cross_entropy(self.head(self(x)), labels)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, labels, ids = batch
        emb = self(x)
        self.map_at_r.update(emb, labels, ids=ids)
        self.val_metrics.update(emb, labels, ids=ids)
        self.log("val/map_at_r", self.map_at_r)

    def on_validation_epoch_end(self):
        # the values are already synced; sync_dist=True only tells Lightning so (no warning),
        # and their maximum keeps them exact (a mean may change a last bit)
        self.log_dict(self.val_metrics.compute(), sync_dist=True, reduce_fx="max")
        self.val_metrics.reset()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    train = DataLoader(ClassData(20, 20, seed=1), batch_size=32, shuffle=True)
    val = DataLoader(ClassData(20, 7, seed=2, id_offset=10_000), batch_size=25)
    # checkpoints in a temporary folder, not the working directory (under DDP every process
    # uses the first process's: ModelCheckpoint shares its dirpath)
    with tempfile.TemporaryDirectory() as root:
        checkpoint = ModelCheckpoint(dirpath=root, monitor="val/map_at_r", mode="max")
        trainer = L.Trainer(
            accelerator="cpu",
            devices=args.devices,
            strategy="ddp" if args.devices > 1 else "auto",
            max_epochs=args.epochs,
            callbacks=[checkpoint],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
        )
        trainer.fit(EmbeddingModule(), train, val)
        if trainer.is_global_zero:
            print({k: round(float(v), 4) for k, v in trainer.callback_metrics.items()})
            print(
                "best checkpoint:",
                Path(checkpoint.best_model_path).name,
                "val/map_at_r =",
                round(float(checkpoint.best_model_score), 4),
            )


if __name__ == "__main__":
    main()
