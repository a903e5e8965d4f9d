"""`val/rsum` under Lightning DDP without any ids, for tests: `python rsum_ddp.py OUT ROOT`.

The example's two-tower model (examples/image_text_selection.py) logs ``RSum`` as ``val/rsum``
with no ``text_ids`` under ``Trainer(accelerator="cpu", devices=2, strategy="ddp")`` and
``SelectOnValidation(monitor="val/rsum")``; it learns for two epochs and then un-learns, so the
best epoch is not the last. Lightning re-launches this script for rank 1. Rank 0 writes each
epoch's logged value, the same value computed in this one process on the whole validation set
with that epoch's weights, the selected epoch, and the warnings that samples come without ids.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from image_text_selection import ImageText, TwoTower

import retrieval_metrics as rm
from retrieval_metrics.lightning import SelectOnValidation

SCHEDULE = (1.0, 1.0, -1.0, -1.0)


class NoIdsTwoTower(TwoTower):
    """Validation without sample ids: rows are (image, caption) pairs, images named by id."""

    def training_step(self, batch, batch_idx):
        sign = SCHEDULE[min(self.current_epoch, len(SCHEDULE) - 1)]
        return sign * super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        images, captions, image_ids, _ = batch
        img, txt = self.encode(images, captions)
        self.rsum.update(img, txt, image_ids)
        self.log("val/rsum", self.rsum)


class Recorder(Callback):
    def __init__(self) -> None:
        self.logged: dict[int, float] = {}
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self.logged[trainer.current_epoch] = float(trainer.callback_metrics["val/rsum"])
        self.weights[trainer.current_epoch] = {
            k: v.detach().clone() for k, v in pl_module.state_dict().items()
        }


def main() -> None:
    out, root = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    train = DataLoader(ImageText(200, seed=1, id_offset=0), batch_size=100, shuffle=True)
    val_set = ImageText(60, seed=2, id_offset=100_000)  # 300 pairs: an even split, no padding
    recorder = Recorder()
    select = SelectOnValidation(monitor="val/rsum", mode="max", dirpath=root)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=len(SCHEDULE),
        callbacks=[recorder, select],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    model = NoIdsTwoTower()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, train, DataLoader(val_set, batch_size=32))
    # RSum without text_ids on two processes: the warning that padded captions count twice
    no_ids = [str(w.message) for w in caught if "cannot be detected" in str(w.message)]
    if trainer.is_global_zero:
        single = {}
        for epoch, weights in recorder.weights.items():
            model.load_state_dict(weights)
            model.eval()
            with torch.no_grad():
                img, txt = model.encode(val_set.images[val_set.owner], val_set.captions)
            metric = rm.RSum(sync_on_compute=False)
            metric.update(img, txt, val_set.owner + val_set.id_offset)
            single[epoch] = float(metric.compute())
        Path(out).write_text(
            json.dumps(
                {
                    "logged": recorder.logged,
                    "single": single,
                    "selection": select.selection,
                    "no_ids_warnings": no_ids,
                }
            )
        )


if __name__ == "__main__":
    main()
