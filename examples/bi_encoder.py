"""A bi-encoder LightningModule scored against judgments (qrels), as BEIR and MTEB score a dense
retriever, on generated data (no download).

Run:  python examples/bi_encoder.py               (one CPU process)
      python examples/bi_encoder.py --devices 2   (two processes, DDP on CPU)

What it shows:
* validation encodes the queries and the whole corpus (two validation dataloaders) and feeds one
  ``RetrievalMetrics(..., qrels=qrels)`` with ``role="query"`` / ``role="gallery"`` and str ids;
  ``compute()`` ranks every query against the whole corpus, exactly, and ``val/ndcg@10`` is logged;
* ``SelectOnValidation(monitor="val/ndcg@10")`` (a ``ModelCheckpoint``) keeps the best epoch, and
  ``trainer.test`` runs on exactly those weights (held-out test queries, the same corpus);
* on two processes each one encodes its share of the queries and of the corpus (DistributedSampler
  repeats a few items to even them out; the ids drop the repeats), and the logged value equals the
  one-process value of the same weights, which the script recomputes and prints beside it.
"""

from __future__ import annotations

import argparse
import tempfile

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import retrieval_metrics as rm
from retrieval_metrics.lightning import SelectOnValidation

DIM, NUM_DOCS, TOPICS = 32, 401, 40
NAMES = ["ndcg@10", "recall@10", "mrr@10", "map@100"]


def make_data(seed: int = 0):
    """A corpus of documents around topic centres, and queries that are noisy views of one
    document each; the qrels grade that document 2 and the other documents of its topic 1."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(TOPICS, DIM, generator=gen)
    topic = torch.randint(0, TOPICS, (NUM_DOCS,), generator=gen)
    docs = centres[topic] + 0.8 * torch.randn(NUM_DOCS, DIM, generator=gen)
    doc_ids = [f"doc-{i}" for i in range(NUM_DOCS)]

    def queries(n: int, name: str):
        target = torch.randint(0, NUM_DOCS, (n,), generator=gen)
        x = docs[target] + 1.2 * torch.randn(n, DIM, generator=gen)
        ids = [f"{name}-{i}" for i in range(n)]
        qrels = {
            qid: {doc_ids[d]: (2 if d == int(t) else 1)
                  for d in torch.nonzero(topic == topic[t]).flatten().tolist()}
            for qid, t in zip(ids, target, strict=True)
        }
        return x, target, ids, qrels

    return docs, doc_ids, queries(600, "train"), queries(151, "val"), queries(149, "test")


class Texts(Dataset):
    """(features, id) pairs: the queries or the corpus, as a text dataset would yield them."""

    def __init__(self, x: torch.Tensor, ids: list[str]) -> None:
        self.x, self.ids = x, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int):
        return self.x[i], self.ids[i]


class Pairs(Dataset):
    """(query features, its document's features) for the in-batch contrastive loss."""

    def __init__(self, queries: torch.Tensor, docs: torch.Tensor) -> None:
        self.queries, self.docs = queries, docs

    def __len__(self) -> int:
        return len(self.queries)

    def __getitem__(self, i: int):
        return self.queries[i], self.docs[i]


class BiEncoder(L.LightningModule):
    def __init__(self, val_qrels: dict, test_qrels: dict) -> None:
        super().__init__()
        self.query_encoder = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 16))
        self.doc_encoder = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 16))
        # the judgments are fixed at construction; queries and corpus arrive in batches
        self.val_metrics = rm.RetrievalMetrics(NAMES, qrels=val_qrels, prefix="val/")
        self.test_metrics = rm.RetrievalMetrics(NAMES, qrels=test_qrels, prefix="test/")

    def training_step(self, batch, batch_idx):
        q, d = batch
        scores = nn.functional.normalize(self.query_encoder(q), dim=1) @ nn.functional.normalize(
            self.doc_encoder(d), dim=1
        ).T
        loss = nn.functional.cross_entropy(scores / 0.05, torch.arange(len(q)))
        self.log("train/loss", loss)
        return loss

    def _encode(self, metric, batch, dataloader_idx: int) -> None:
        x, ids = batch
        if dataloader_idx == 0:
            metric.update(self.query_encoder(x), ids=ids, role="query")
        else:
            metric.update(self.doc_encoder(x), ids=ids, role="gallery")

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self._encode(self.val_metrics, batch, dataloader_idx)

    def on_validation_epoch_end(self):
        # Lightning's sanity check runs two batches of each dataloader: a partial corpus, whose
        # ranking would warn that most judged documents are missing from it. Its steps have run
        # (a mistake in them shows before training); the value waits for a whole validation.
        if not self.trainer.sanity_checking:
            # compute() syncs every process's queries and corpus; sync_dist=True only tells
            # Lightning the values are the same on every process, and their maximum keeps them
            # exact (a mean may change a last bit)
            self.log_dict(self.val_metrics.compute(), sync_dist=True, reduce_fx="max")
        self.val_metrics.reset()

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._encode(self.test_metrics, batch, dataloader_idx)

    def on_test_epoch_end(self):
        self.log_dict(self.test_metrics.compute(), sync_dist=True, reduce_fx="max")
        self.test_metrics.reset()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


def one_process_value(model: BiEncoder, queries, query_ids, docs, doc_ids, qrels) -> float:
    """ndcg@10 of ``model``'s weights computed in this process alone (no sync), whole sets."""
    metric = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels, sync_on_compute=False)
    with torch.no_grad():
        metric.update(model.query_encoder(queries), ids=query_ids, role="query")
        metric.update(model.doc_encoder(docs), ids=doc_ids, role="gallery")
    return float(metric.compute()["ndcg@10"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    docs, doc_ids, train, val, test = make_data()
    torch.manual_seed(0)
    model = BiEncoder(val_qrels=val[3], test_qrels=test[3])
    corpus = DataLoader(Texts(docs, doc_ids), batch_size=64)
    train_loader = DataLoader(Pairs(train[0], docs[train[1]]), batch_size=64, shuffle=True)
    val_loaders = [DataLoader(Texts(val[0], val[2]), batch_size=50), corpus]
    test_loaders = [DataLoader(Texts(test[0], test[2]), batch_size=50), corpus]
    # checkpoints in a temporary folder, not the working directory (under DDP every process
    # uses the first process's: ModelCheckpoint shares its dirpath)
    with tempfile.TemporaryDirectory() as root:
        select = SelectOnValidation(dirpath=root, monitor="val/ndcg@10", mode="max")
        trainer = L.Trainer(
            accelerator="cpu",
            devices=args.devices,
            strategy="ddp" if args.devices > 1 else "auto",
            max_epochs=args.epochs,
            callbacks=[select],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
        )
        trainer.fit(model, train_loader, val_loaders)
        # no ckpt_path: the selected weights are loaded on every process before testing
        tested = trainer.test(model, test_loaders, verbose=False)[0]
    if trainer.is_global_zero:
        selection = select.selection
        print(f"selected epoch {selection['epoch']}: val/ndcg@10 = {selection['score']:.6f}")
        recomputed = one_process_value(model, val[0], val[2], docs, doc_ids, val[3])
        print(f"the same weights in one process: val/ndcg@10 = {recomputed:.6f}")
        print({k: round(float(v), 4) for k, v in tested.items()})


if __name__ == "__main__":
    main()
