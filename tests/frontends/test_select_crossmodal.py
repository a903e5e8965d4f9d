"""SelectOnValidation with image-text metrics: a test set that shares image or caption ids with
validation is refused, whether it is the same objects or a copy (the example's TwoTower logs
``RSum`` as ``val/rsum`` and tests with two ``CrossModalRetrieval``)."""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from image_text_selection import ImageText, TwoTower

import retrieval_metrics as rm
from retrieval_metrics.lightning import SelectOnValidation

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning",
    "ignore:.*does not have many workers.*",
    "ignore:Checkpoint directory .* exists and is not empty",
)

VAL_OFFSET = 100_000


class Shifted(ImageText):
    """ImageText whose image ids and caption ids start at offsets of their own."""

    def __init__(self, num_images, seed, image_offset, caption_offset):
        super().__init__(num_images, seed, id_offset=0)
        self.image_offset, self.caption_offset = image_offset, caption_offset

    def __getitem__(self, i):
        image, caption, image_id, caption_id = super().__getitem__(i)
        return image, caption, image_id + self.image_offset, caption_id + self.caption_offset


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("select_crossmodal")
    L.seed_everything(0, verbose=False)
    select = SelectOnValidation(monitor="val/rsum", mode="max", dirpath=root)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, callbacks=[select], logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )
    model = TwoTower()
    train = DataLoader(ImageText(50, seed=1, id_offset=0), batch_size=50)
    trainer.fit(model, train, DataLoader(ImageText(20, seed=2, id_offset=VAL_OFFSET), 32))
    return trainer, model


def run_test(fitted, data):
    trainer, model = fitted
    # a refused test run stops before the module's epoch end resets its test metrics
    model.test_1k.reset()
    model.test_5k.reset()
    return trainer.test(model, DataLoader(data, batch_size=32), verbose=False)[0]


def test_a_copy_of_the_validation_set_is_refused(fitted):
    copy = ImageText(20, seed=2, id_offset=VAL_OFFSET)  # new objects, the same ids
    with pytest.raises(ValueError, match=r"120 of the 120 test sample ids"):
        run_test(fitted, copy)


@pytest.mark.parametrize(
    ("image_offset", "caption_offset", "shared"),
    [
        (VAL_OFFSET, 500_000, 20),  # the same images, other captions: 20 image ids shared
        (500_000, VAL_OFFSET, 100),  # other images, caption ids of validation: 100 shared
    ],
)
def test_shared_image_or_caption_ids_are_refused(fitted, image_offset, caption_offset, shared):
    data = Shifted(20, seed=5, image_offset=image_offset, caption_offset=caption_offset)
    with pytest.raises(ValueError, match=rf"{shared} of the 120 test sample ids"):
        run_test(fitted, data)


def test_disjoint_ids_are_tested_on_the_selection(fitted):
    data = Shifted(20, seed=5, image_offset=500_000, caption_offset=500_000)
    result = run_test(fitted, data)
    assert result["selection/epoch"] == 0


def test_image_ids_and_caption_ids_are_kept_apart():
    # caption 3 and image 3 are different samples: the same number in two kinds is not shared
    metric = rm.RSum()
    metric.update(torch.eye(4), torch.eye(4), torch.arange(4), text_ids=torch.arange(4) + 2)
    ids = metric.sample_ids()
    assert ids["image"].tolist() == [0, 1, 2, 3] and ids["text"].tolist() == [2, 3, 4, 5]
