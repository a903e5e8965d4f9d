"""SelectOnValidation under DDP, for tests: ``python select_ddp.py OUT_DIR``.

Trains a tiny embedding model on generated class data with ``Trainer(accelerator="cpu",
devices=2, strategy="ddp")`` and ``SelectOnValidation(monitor="val/map_at_r")``, then runs
``trainer.test(model, test_loader)`` with no ``ckpt_path``. Lightning re-launches this script for
rank 1. Each rank writes ``rank{R}.json`` with a hash of its parameters after the test; rank 0
also writes ``result.json`` with the logged test metrics, the selection and each epoch's validation
value. The test compares them with the best checkpoint's weights evaluated in one process.

The data, the model and the hashing live here so that the test (one process) imports the very
same definitions.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, Dataset

import retrieval_metrics as rm
from retrieval_metrics.lightning import SelectOnValidation

DIM = 16
NUM_CLASSES = 6
# per-epoch sign of the loss: +1 learns, -1 un-learns (gradient ascent), so the validation value
# rises, then falls and the best epoch is not the last
SCHEDULE = (1.0, 1.0, -1.0, -1.0)


class ClassData(Dataset):
    """Points around fixed class centres; each item is (features, label, sample id)."""

    def __init__(self, per_class: int, seed: int, id_offset: int, size: int | None = None) -> None:
        centres = 1.2 * torch.randn(NUM_CLASSES, DIM, generator=torch.Generator().manual_seed(0))
        gen = torch.Generator().manual_seed(seed)
        labels = torch.arange(NUM_CLASSES).repeat_interleave(per_class)
        x = centres[labels] + torch.randn(len(labels), DIM, generator=gen)
        ids = torch.arange(len(labels)) + id_offset
        keep = slice(None) if size is None else slice(0, size)
        self.x, self.labels, self.ids = x[keep], labels[keep], ids[keep]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.x[i], self.labels[i], self.ids[i]


class TinyEmbedder(L.LightningModule):
    """A linear embedding trained through a classification head, MAP@R on validation and test."""

    def __init__(self, schedule: tuple[float, ...] = SCHEDULE, lr: float = 0.3) -> None:
        super().__init__()
        self.schedule = schedule
        self.lr = lr
        self.encoder = nn.Linear(DIM, 8)
        self.head = nn.Linear(8, NUM_CLASSES)
        self.val_map = rm.MAPAtR()
        self.test_map = rm.MAPAtR()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def training_step(self, batch, batch_idx):
        x, labels, _ = batch
        loss = nn.functional.cross_entropy(self.head(self(x)), labels)
        self.log("train/loss", loss)
        sign = self.schedule[min(self.current_epoch, len(self.schedule) - 1)]
        return sign * loss

    def validation_step(self, batch, batch_idx):
        x, labels, ids = batch
        self.val_map.update(self(x), labels, ids=ids)
        self.log("val/map_at_r", self.val_map)

    def test_step(self, batch, batch_idx):
        x, labels, ids = batch
        self.test_map.update(self(x), labels, ids=ids)
        self.log("test/map_at_r", self.test_map)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class EpochRecorder(Callback):
    """Each validated epoch's monitored value and a copy of the weights it was measured on."""

    def __init__(self, monitor: str = "val/map_at_r") -> None:
        self.monitor = monitor
        self.values: dict[int, float] = {}
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        self.values[trainer.current_epoch] = float(trainer.callback_metrics[self.monitor])
        self.weights[trainer.current_epoch] = {
            k: v.detach().clone() for k, v in pl_module.state_dict().items()
        }


def params_hash(module: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def map_at_r(module: nn.Module, data: ClassData) -> float:
    """MAP@R of ``module``'s embeddings of ``data``, in this process alone."""
    module.eval()
    with torch.no_grad():
        emb = module(data.x)
    metric = rm.MAPAtR(sync_on_compute=False)
    metric.update(emb, data.labels, ids=data.ids)
    return float(metric.compute())


def loaders(batch_size: int = 16) -> tuple[DataLoader, DataLoader, DataLoader, ClassData]:
    train = DataLoader(ClassData(24, seed=1, id_offset=0), batch_size=batch_size, shuffle=True)
    val = DataLoader(ClassData(10, seed=2, id_offset=10_000), batch_size=batch_size)
    # 59 items: DistributedSampler pads 2 processes to 30 each by repeating item 0
    test_set = ClassData(10, seed=3, id_offset=20_000, size=59)
    test = DataLoader(test_set, batch_size=batch_size)
    return train, val, test, test_set


def main() -> None:
    out_dir = Path(sys.argv[1])
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    train, val, test, _ = loaders()
    select = SelectOnValidation(monitor="val/map_at_r", mode="max", dirpath=out_dir / "ckpt")
    recorder = EpochRecorder()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=len(SCHEDULE),
        callbacks=[recorder, select],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out_dir,
    )
    model = TinyEmbedder()
    trainer.fit(model, train, val)
    results = trainer.test(model, test, verbose=False)  # no ckpt_path: the selected weights
    tested_hash = params_hash(model)
    results_best = trainer.test(model, test, ckpt_path="best", verbose=False)
    rank = trainer.global_rank
    (out_dir / f"rank{rank}.json").write_text(
        json.dumps(
            {
                "hash": tested_hash,
                "best_model_path": select.best_model_path,
                "test": results[0],
                "test_best": results_best[0],
            }
        )
    )
    if trainer.is_global_zero:
        (out_dir / "result.json").write_text(
            json.dumps(
                {
                    "test": results[0],
                    "best_model_path": select.best_model_path,
                    "best_model_score": float(select.best_model_score),
                    "selection": select.selection,
                    "val_by_epoch": recorder.values,
                    "world_size": trainer.world_size,
                }
            )
        )


if __name__ == "__main__":
    main()
