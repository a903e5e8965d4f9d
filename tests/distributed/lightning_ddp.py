"""Lightning DDP run for tests: ``python lightning_ddp.py OUT_JSON ROOT_DIR``.

Trains the example LightningModule with ``Trainer(accelerator="cpu", devices=2,
strategy="ddp")``. Lightning re-launches this script for rank 1. Rank 0 writes the logged values
and, for comparison, the same metrics computed in this single process on the whole validation
set with the final weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from lightning_module import ClassData, EmbeddingModule

import retrieval_metrics as rm


def main() -> None:
    out, root = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train = DataLoader(ClassData(20, 20, seed=1), batch_size=32, shuffle=True)
    # 139 items: DistributedSampler pads the 2 processes to 70 each, repeating item 0
    val_set = ClassData(20, 7, seed=2, id_offset=10_000)
    val_set.labels, val_set.x, val_set.ids = (
        val_set.labels[:139],
        val_set.x[:139],
        val_set.ids[:139],
    )
    val = DataLoader(val_set, batch_size=16)
    checkpoint = ModelCheckpoint(dirpath=root, monitor="val/map_at_r", mode="max")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=2,
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    model = EmbeddingModule()
    trainer.fit(model, train, val)
    if trainer.is_global_zero:
        model.eval()
        with torch.no_grad():
            emb = model(val_set.x)
        single = {"val/map_at_r": rm.MAPAtR(sync_on_compute=False)}
        single["val/map_at_r"].update(emb, val_set.labels, ids=val_set.ids)
        reference = {"val/map_at_r": float(single["val/map_at_r"].compute())}
        many = rm.RetrievalMetrics(
            ["hit_rate@1", "hit_rate@4", "r_precision", "mrr"], prefix="val/", sync_on_compute=False
        )
        many.update(emb, val_set.labels, ids=val_set.ids)
        reference.update({k: float(v) for k, v in many.compute().items()})
        logged = {k: float(v) for k, v in trainer.callback_metrics.items()}
        Path(out).write_text(
            json.dumps(
                {
                    "logged": logged,
                    "reference": reference,
                    "best_model_path": checkpoint.best_model_path,
                    "best_model_score": float(checkpoint.best_model_score),
                }
            )
        )


if __name__ == "__main__":
    main()
