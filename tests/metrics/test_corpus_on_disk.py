"""A corpus on disk (``set_gallery("corpus.npy")``, a glob or list of shards, memory-mapped
arrays; ids from a text file or a .npy beside it): the values of the same corpus in memory, and
a process that holds about a block of it, not the corpus (measured in a fresh process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking.row_batches import MappedRows, RowBatches

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulated_cuda import fake_cuda_fixture  # noqa: F401

NAMES = ["ndcg@10", "recall@100", "mrr@10", "map"]


def _values(metric) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: float(v) for k, v in metric.compute().items()}


def _case(tmp_path, dtype, n=3000, dim=24):
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((300, dim))
    corpus = (centres[np.arange(n) % 300] + rng.standard_normal((n, dim))).astype(dtype)
    queries = (centres[:120] + rng.standard_normal((120, dim))).astype(dtype)
    ids = [f"doc-{i}" for i in range(n)]
    qrels = {f"q{i}": {ids[i + 300 * j]: 1 + j % 2 for j in range(4)} for i in range(120)}
    np.save(tmp_path / "all.npy", corpus)
    for k, part in enumerate(np.array_split(np.arange(n), 3)):
        np.save(tmp_path / f"shard-{k}.npy", corpus[part])
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    np.save(tmp_path / "ids.npy", np.array(ids))
    return corpus, queries, ids, qrels


def _score(corpus, ids, queries, qrels, similarity):
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, similarity=similarity, memory_budget=2**21)
    metric.set_gallery(corpus, ids=ids)
    for part in np.array_split(np.arange(len(queries)), 3):
        metric.update(torch.from_numpy(queries[part]), ids=[f"q{i}" for i in part], role="query")
    return _values(metric)


@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["float16", "float32"])
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_a_corpus_on_disk_scores_as_in_memory(tmp_path, dtype, similarity):
    corpus, queries, ids, qrels = _case(tmp_path, dtype)
    expected = _score(torch.from_numpy(corpus), ids, queries, qrels, similarity)
    assert expected["ndcg@10"] > 0
    shards = [tmp_path / f"shard-{k}.npy" for k in range(3)]
    for given, given_ids in (
        (str(tmp_path / "all.npy"), ids),
        (tmp_path / "all.npy", str(tmp_path / "ids.txt")),
        (str(tmp_path / "shard-*.npy"), tmp_path / "ids.npy"),
        (shards, ids),
        ([np.load(s, mmap_mode="r") for s in shards], ids),
        (np.load(tmp_path / "all.npy", mmap_mode="r"), ids),
    ):
        assert _score(given, given_ids, queries, qrels, similarity) == expected, given


def test_a_corpus_on_disk_on_the_emulated_device(tmp_path, fake_cuda):
    corpus, queries, ids, qrels = _case(tmp_path, np.float16)
    expected = _score(torch.from_numpy(corpus), ids, queries, qrels, "cosine")
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, memory_budget=2**21).to("cuda")
    metric.set_gallery(tmp_path / "all.npy", ids=ids)
    for part in np.array_split(np.arange(len(queries)), 3):
        metric.update(torch.from_numpy(queries[part]).to("cuda"), ids=[f"q{i}" for i in part],
                      role="query")
    values = metric.compute()
    assert all(v.device.type == "cuda" for v in values.values())
    assert {k: float(v) for k, v in values.items()} == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [("missing.npy", "no such file"), ("c.txt", "read from .npy files"),
     ("nothing-*.npy", "no file matches"), ("ints.npy", "float16, float32 or float64"),
     ("cube.npy", "2-D memory-mapped array")],
)
def test_a_corpus_on_disk_that_cannot_be_read_is_named(tmp_path, given, message):
    np.save(tmp_path / "ints.npy", np.arange(12).reshape(4, 3))
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2), dtype=np.float32))
    (tmp_path / "c.txt").write_text("1 2 3\n")
    metric = rm.RetrievalMetrics(["mrr"])
    with pytest.raises(ValueError, match=message):
        metric.set_gallery(str(tmp_path / given), torch.zeros(4, dtype=torch.int64))


def test_a_truncated_npy_file_is_named(tmp_path):
    # numpy alone says "mmap length is greater than file size", naming no file
    np.save(tmp_path / "whole.npy", np.ones((100, 8), dtype=np.float32))
    data = (tmp_path / "whole.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[: len(data) // 2])
    metric = rm.RetrievalMetrics(["mrr"])
    with pytest.raises(ValueError, match=r"`embeddings`: '.*cut\.npy' cannot be read as a \.npy"):
        metric.set_gallery(str(tmp_path / "cut.npy"), torch.zeros(100, dtype=torch.int64))
    np.save(tmp_path / "ids.npy", np.arange(100))
    data = (tmp_path / "ids.npy").read_bytes()
    (tmp_path / "ids_cut.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"`ids`: '.*ids_cut\.npy' cannot be read"):
        metric.set_gallery(str(tmp_path / "whole.npy"), ids=str(tmp_path / "ids_cut.npy"))


def test_ids_from_a_text_file_with_an_empty_line_are_refused(tmp_path):
    np.save(tmp_path / "c.npy", np.ones((3, 2), dtype=np.float32))
    (tmp_path / "ids.txt").write_text("a\n\nc\n")
    metric = rm.RetrievalMetrics(["mrr"], qrels={"q": ["a"]})
    with pytest.raises(ValueError, match="line 2 is empty"):
        metric.set_gallery(str(tmp_path / "c.npy"), ids=str(tmp_path / "ids.txt"))


_MEASURE = """
import sys, numpy as np, torch, warnings
import retrieval_metrics as rm
import retrieval_metrics.metrics.named  # the classes (and torchmetrics) before the peak's start
warnings.simplefilter("ignore")
path, n = sys.argv[1], int(sys.argv[2])
queries = torch.from_numpy(np.random.default_rng(1).standard_normal((64, 256)).astype(np.float16))
qrels = {i: {n - 1 - 7 * i - j: 1 for j in range(3)} for i in range(64)}
ids = np.arange(n)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

open("/proc/self/clear_refs", "w").write("5")   # the peak starts here
start = status("VmRSS:")
metric = rm.RetrievalMetrics(["ndcg@10", "mrr@10"], qrels=qrels, protocol="beir",
                             ignore_identical_ids=False, memory_budget=32 << 20)
metric.set_gallery(path, ids=ids)
metric.update(queries, ids=list(range(64)), role="query")
metric.compute()
print(status("VmHWM:") - start)
"""


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_process_holds_a_block_not_the_corpus(tmp_path):
    n, dim = 800_000, 256  # 391 MiB of float16
    array = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.float16,
                                      shape=(n, dim))
    rng = np.random.default_rng(0)
    for start in range(0, n, 100_000):
        array[start : start + 100_000] = rng.standard_normal((100_000, dim)).astype(np.float16)
    array.flush()
    del array
    script = tmp_path / "measure.py"
    script.write_text(textwrap.dedent(_MEASURE))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "c.npy"), str(n)],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    peak = int(done.stdout.split()[-1])
    corpus = n * dim * 2
    # the budget, a block, and a few int64 and float32 numbers per document: well under the
    # corpus (read whole, the peak would pass it)
    assert peak < 0.4 * corpus, f"peak {peak >> 20} MiB above the start, corpus {corpus >> 20}"


_CLI = """
import resource, subprocess, sys
done = subprocess.run([sys.executable, "-m", "retrieval_metrics", "evaluate", *sys.argv[1:]],
                      capture_output=True, text=True)
assert done.returncode == 0, done.stderr
print(done.stdout)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB")
def test_the_command_line_reads_a_npy_corpus_from_disk(tmp_path):
    """``--gallery corpus.npy`` (ids in corpus.ids.npy beside it): the values of the same corpus
    in a .npz, which is read into memory, and a peak that lacks most of the corpus."""
    n, dim = 600_000, 256  # 293 MiB of float16
    rng = np.random.default_rng(2)
    array = np.lib.format.open_memmap(tmp_path / "corpus.npy", mode="w+", dtype=np.float16,
                                      shape=(n, dim))
    for start in range(0, n, 100_000):
        array[start : start + 100_000] = rng.standard_normal((100_000, dim)).astype(np.float16)
    array.flush()
    ids = np.array([f"d{i}" for i in range(n)])
    np.save(tmp_path / "corpus.ids.npy", ids)
    queries = np.asarray(array[:50], dtype=np.float32) + rng.standard_normal((50, dim))
    np.savez(tmp_path / "q.npz", embeddings=queries.astype(np.float32),
             ids=np.array([f"q{i}" for i in range(50)]))
    np.savez(tmp_path / "corpus.npz", embeddings=np.asarray(array), ids=ids)
    del array
    (tmp_path / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\nq{i}\td{i + 7}\t2\n"
                                                 for i in range(50)))
    script = tmp_path / "cli.py"
    script.write_text(textwrap.dedent(_CLI))
    results = {}
    for corpus in ("corpus.npy", "corpus.npz"):
        done = subprocess.run(
            [sys.executable, str(script), "--query", str(tmp_path / "q.npz"), "--gallery",
             str(tmp_path / corpus), "--qrels", str(tmp_path / "qrels.tsv"), "--protocol",
             "beir", "--metrics", "ndcg@10,recall@100", "--bootstrap", "10",
             "--progress-delay", "-1"],
            capture_output=True, text=True, timeout=280,
        )
        assert done.returncode == 0, done.stderr
        *table, peak = done.stdout.strip().splitlines()
        results[corpus] = ([line for line in table if line.startswith(("ndcg", "recall"))],
                           int(peak))
    assert results["corpus.npy"][0] == results["corpus.npz"][0]
    assert float(results["corpus.npy"][0][0].split()[1]) > 0.3  # each query finds its own
    corpus_bytes = n * dim * 2
    # the .npz is read whole (and each query chunk ranked against it); the .npy is not
    saved = results["corpus.npz"][1] - results["corpus.npy"][1]
    assert saved > 0.6 * corpus_bytes, (saved >> 20, corpus_bytes >> 20)


def test_a_copy_on_write_mapping_keeps_the_callers_changes(tmp_path):
    """mmap_mode="c" holds changes in private pages: they are read, and not handed back."""
    np.save(tmp_path / "c.npy", np.ones((20_000, 32), dtype=np.float32))
    changed = np.load(tmp_path / "c.npy", mmap_mode="c")
    changed[7] = 5.0
    rows = RowBatches([MappedRows(changed)])
    for _ in range(2):  # (read twice: the first read gives nothing back)
        assert float(rows.joined()[7, 0]) == 5.0
        assert float(rows.row_norms()[7, 0]) == pytest.approx(5.0 * 32**0.5)
