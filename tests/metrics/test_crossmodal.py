"""CrossModalRetrieval and RSum against a VSE++-style evaluation written here from the protocol.

VSE++ (evaluation.py i2t / t2i): image-to-text rank = best 0-based rank among the image's
captions; text-to-image rank = 0-based rank of the caption's image; R@K = 100 * mean(rank < K);
medr = floor(median(rank)) + 1; meanr = mean(rank) + 1; rsum = sum of the six recalls; 1K = five
folds of 1,000 consecutive images, every value averaged. Scores are distinct floats here, so the
tie rule does not matter.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm


def vsepp(images, captions, caption_image, ks=(1, 5, 10)):
    """images (N, D), captions (M, D), caption_image[j] = index of caption j's image."""
    sims = images @ captions.T
    i2t = []
    for i in range(len(images)):
        order = np.argsort(-sims[i])
        gt = np.nonzero(caption_image == i)[0]
        i2t.append(min(np.nonzero(np.isin(order, gt))[0]))
    t2i = []
    for j in range(len(captions)):
        order = np.argsort(-sims[:, j])
        t2i.append(np.nonzero(order == caption_image[j])[0][0])
    i2t, t2i = np.array(i2t), np.array(t2i)
    out = {}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in ks:
            out[f"{name}/hit_rate@{k}"] = float(np.mean(ranks < k))
        out[f"{name}/median_rank"] = float(np.floor(np.median(ranks)) + 1)
        out[f"{name}/mean_rank"] = float(ranks.mean() + 1)
    out["rsum"] = 100 * sum(out[f"{d}/hit_rate@{k}"] for d in ("i2t", "t2i") for k in ks)
    return out


def data(n_images, per_image=5, dim=16, seed=0):
    gen = np.random.default_rng(seed)
    images = gen.normal(size=(n_images, dim))
    caption_image = np.repeat(np.arange(n_images), per_image)
    captions = images[caption_image] + 1.5 * gen.normal(size=(len(caption_image), dim))
    return images, captions, caption_image


@pytest.mark.parametrize("seed", range(3))
def test_5k_style_matches_vsepp(seed):
    images, captions, cap_img = data(60, seed=seed)
    m = rm.CrossModalRetrieval(similarity="dot", prefix="val/")
    ids = torch.tensor(cap_img) * 7 + 3  # arbitrary ids, ascending with the image index
    # pairs in shuffled order, images repeated once per caption, two batches
    perm = np.random.default_rng(seed).permutation(len(cap_img))
    for part in np.array_split(perm, 2):
        m.update(torch.tensor(images[cap_img[part]]), torch.tensor(captions[part]), ids[part])
    out = {k.removeprefix("val/"): float(v) for k, v in m.compute().items()}
    ref = vsepp(images, captions, cap_img)
    assert out.keys() == ref.keys()
    for key, value in ref.items():
        assert out[key] == pytest.approx(value, abs=1e-4), key


def test_1k_folds_average_every_value():
    images, captions, cap_img = data(50, seed=4)
    m = rm.CrossModalRetrieval(folds=5, similarity="dot")
    m.update(torch.tensor(images), torch.tensor(captions), torch.arange(50),
             text_image_ids=torch.tensor(cap_img))
    out = {k: float(v) for k, v in m.compute().items()}
    folds = []
    for f in range(5):
        sel = (cap_img >= 10 * f) & (cap_img < 10 * (f + 1))
        folds.append(vsepp(images[10 * f:10 * (f + 1)], captions[sel], cap_img[sel] - 10 * f))
    for key in folds[0]:
        assert out[key] == pytest.approx(np.mean([r[key] for r in folds]), abs=1e-4), key
    # 1K and 5K differ: a smaller gallery is easier
    whole = rm.CrossModalRetrieval(similarity="dot")
    whole.update(torch.tensor(images), torch.tensor(captions), torch.arange(50),
                 text_image_ids=torch.tensor(cap_img))
    assert float(whole.compute()["rsum"]) < out["rsum"]


def test_rsum_is_zero_d_and_matches():
    images, captions, cap_img = data(30, seed=5)
    args = (torch.tensor(images[cap_img]), torch.tensor(captions), torch.tensor(cap_img))
    r = rm.RSum(similarity="dot")
    r.update(*args)
    value = r.compute()
    assert value.dim() == 0
    assert float(value) == pytest.approx(vsepp(images, captions, cap_img)["rsum"], abs=1e-3)
    assert 0 <= float(value) <= 600


def test_errors():
    m = rm.CrossModalRetrieval()
    with pytest.raises(ValueError, match="same dimension"):
        m.update(torch.randn(2, 3), torch.randn(2, 4), torch.arange(2))
    with pytest.raises(ValueError, match="`text_embeddings` must have 2 rows"):
        m.update(torch.randn(2, 3), torch.randn(3, 3), torch.arange(2))
    with pytest.raises(ValueError, match="`image_ids` must have 2 entries"):
        m.update(torch.randn(2, 3), torch.randn(2, 3), torch.arange(3))
    with pytest.raises(ValueError, match="`folds` must be"):
        rm.CrossModalRetrieval(folds=0)
    m.update(torch.randn(2, 3), torch.randn(2, 3), torch.arange(2), text_image_ids=[0, 5])
    with pytest.raises(ValueError, match="no update gave an embedding"):
        m.compute()


def test_per_query_and_summary_per_direction():
    images, captions, cap_img = data(40, seed=6)
    m = rm.CrossModalRetrieval(k=(1, 5), similarity="dot")
    m.update(torch.tensor(images[cap_img]), torch.tensor(captions), torch.tensor(cap_img))
    per = m.per_query()
    assert per["i2t/hit_rate@1"].shape == (40,) and per["t2i/hit_rate@1"].shape == (200,)
    ref = vsepp(images, captions, cap_img, ks=(1, 5))
    assert float(per["t2i/hit_rate@5"].mean()) == pytest.approx(ref["t2i/hit_rate@5"], abs=1e-6)
    summary = m.summary()
    row = summary["i2t/hit_rate@1"]
    assert row["queries"] == 40 and row["gallery"] == "200"
    # one image among 200 captions of which 5 are relevant: 1 - C(195, 1) / C(200, 1) = 5 / 200
    assert float(row["chance"]) == pytest.approx(5 / 200)
    assert summary["t2i/hit_rate@1"]["gallery"] == "40"


def test_one_fold_is_its_whole_tables(monkeypatch):
    """With one fold (the default) the values are read off the two ranked tables as they are:
    no copy of a table per fold (``RankTable.select``: every part of it copied, a third of the
    operations of a small compute()), and the values are those of folds=1 by the fold path."""
    from retrieval_metrics.functional.table import RankTable

    gen = torch.Generator().manual_seed(0)
    img = torch.randn(30, 16, generator=gen)
    owner = torch.arange(30).repeat_interleave(5)
    cap = img[owner] + 0.5 * torch.randn(150, 16, generator=gen)
    whole = rm.CrossModalRetrieval()
    whole.update(img[owner], cap, owner)
    selected = []
    original = RankTable.select

    def select(self, queries):
        selected.append(queries.numel())
        return original(self, queries)

    monkeypatch.setattr(RankTable, "select", select)
    got = whole.compute()
    assert selected == []
    # the same tables through the fold path (each fold the whole): the same values
    tables = whole.rank_tables()
    by_select = whole._fold_values({d: t.select(torch.arange(t.num_queries))
                                    for d, t in tables.items()})
    for key, value in by_select.items():
        assert float(got[key]) == pytest.approx(float(value), rel=1e-6), key  # (float32 out)


def test_repeated_images_are_compared_a_part_at_a_time(monkeypatch):
    """Each image comes once per caption; its repeats are compared with its first row a part
    of the rows at a time (float64 copies of every repeat at once were several times the
    stored embeddings): a repeat that differs in the last part is still refused, and the
    values are those of each image given once."""
    from retrieval_metrics.metrics import distributed

    monkeypatch.setattr(distributed, "REPEAT_ROWS", 3)
    gen = torch.Generator().manual_seed(0)
    images, texts = torch.randn(6, 8, generator=gen), torch.randn(30, 8, generator=gen)
    owner = torch.arange(6).repeat_interleave(5)
    repeated = rm.CrossModalRetrieval()
    repeated.update(images[owner], texts, owner)
    once = rm.CrossModalRetrieval()
    once.update(images, texts, torch.arange(6), text_image_ids=owner)
    got, want = repeated.compute(), once.compute()
    assert all(torch.equal(got[k], want[k]) for k in want)
    changed = images[owner].clone()
    changed[-1, 0] += 1.0  # the last caption's copy of image 5
    bad = rm.CrossModalRetrieval()
    bad.update(changed, texts, owner)
    with pytest.raises(ValueError, match=r"`image_ids`: 1 id\(s\).*\(e\.g\. 5\)"):
        bad.compute()
