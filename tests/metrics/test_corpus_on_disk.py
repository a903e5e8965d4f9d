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


def test_a_corpus_on_disk_on_the_emulated_device(tmp_path, fake_cuda, monkeypatch):
    """A metric on a device ranks a corpus on disk there: each chunk read from the file is
    copied to the device (every score block is a device tensor), the values the CPU's."""
    from retrieval_metrics.functional.ranking.engine import counting

    corpus, queries, ids, qrels = _case(tmp_path, np.float16)
    expected = _score(torch.from_numpy(corpus), ids, queries, qrels, "cosine")
    blocks_on = set()
    count = counting.QueryBlock.count

    def seen(self, s, *args, **kwargs):
        blocks_on.add(s.device.type)
        return count(self, s, *args, **kwargs)

    monkeypatch.setattr(counting.QueryBlock, "count", seen)
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, memory_budget=2**21).to("cuda")
    metric.set_gallery(tmp_path / "all.npy", ids=ids)
    for part in np.array_split(np.arange(len(queries)), 3):
        metric.update(torch.from_numpy(queries[part]).to("cuda"), ids=[f"q{i}" for i in part],
                      role="query")
    values = metric.compute()
    assert all(v.device.type == "cuda" for v in values.values())
    assert blocks_on == {"cuda"}  # (ranked on the host, before: {"cpu"})
    assert {k: float(v) for k, v in values.items()} == expected


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_half_rows_on_disk_are_read_once_by_the_tensor_cores_path(
    tmp_path, fake_cuda, monkeypatch, similarity
):
    """float16 queries against a float16 corpus on disk, the metric on the (emulated) device:
    the half rows go to the tensor cores as they are stored, and their norms (cosine's factors
    1/|g|) and the scan for NaN come from the blocks the ranking reads, so the file is read
    once (twice before: the norms' pass at set_gallery). The values are those of the same
    corpus in device memory, whose norms are computed before the ranking."""
    from retrieval_metrics.functional.ranking.engine import schedule, tensor_cores

    corpus, queries, ids, qrels = _case(tmp_path, np.float16)
    finished = []

    def half_stands(g, similarity_):
        finished.append(len(g))
        return tensor_cores.half_stands(g, similarity_)

    monkeypatch.setattr(schedule, "half_stands", half_stands)
    values = []
    for given in (torch.from_numpy(corpus).to("cuda"), str(tmp_path / "all.npy")):
        read = _rows_read_through_the_mapping(monkeypatch)
        metric = rm.RetrievalMetrics(NAMES, qrels=qrels, similarity=similarity,
                                     protocol="beir").to("cuda")
        metric.set_gallery(given, ids=ids)
        metric.update(torch.from_numpy(queries).to("cuda"), ids=[f"q{i}" for i in range(120)],
                      role="query")
        values.append(_values(metric))
        assert read[0] == (0 if isinstance(given, torch.Tensor) else len(corpus))
    assert finished == [len(corpus)]  # (the file's norms, as read; the tensor's before)
    assert values[1] == values[0]


@pytest.mark.parametrize(
    ("given", "message"),
    [("missing.npy", "no such file"), ("c.txt", "read from .npy files"),
     ("nothing-*.npy", "no file matches"), ("ints.npy", "float16, float32 or float64"),
     ("cube.npy", "2-D memory-mapped array"),
     # (files of two dtypes: named with theirs, not "row batches must share one dtype")
     ("half-*.npy", r"share one dtype, got float32 in '.*half-a\.npy' and float16 in "
                    r"'.*half-b\.npy'")],
)
def test_a_corpus_on_disk_that_cannot_be_read_is_named(tmp_path, given, message):
    np.save(tmp_path / "ints.npy", np.arange(12).reshape(4, 3))
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2), dtype=np.float32))
    np.save(tmp_path / "half-a.npy", np.ones((2, 3), dtype=np.float32))
    np.save(tmp_path / "half-b.npy", np.ones((2, 3), dtype=np.float16))
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


# the corpus of the tests of a process's peak: 1.2M x 256 float16 (586 MiB), written once
SPREAD_ROWS, SPREAD_DIM, SPREAD_QUERIES = 1_200_000, 256, 200


@pytest.fixture(scope="module")
def spread_corpus(tmp_path_factory) -> Path:
    """A folder with the large corpus on disk, its ids, 200 queries and their qrels (three
    judged documents each, anywhere in the file): see ``_spread_case``."""
    folder = tmp_path_factory.mktemp("spread")
    _spread_case(folder, SPREAD_ROWS, SPREAD_DIM, SPREAD_QUERIES)
    return folder


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_process_holds_a_block_not_the_corpus(spread_corpus, tmp_path):
    """64 queries judged against the last documents of the file, integer ids, a budget of 32
    MiB: the peak above a fresh process's start is a small part of the corpus."""
    script = tmp_path / "measure.py"
    script.write_text(textwrap.dedent(_MEASURE))
    done = subprocess.run([sys.executable, str(script), str(spread_corpus / "corpus.npy"),
                           str(SPREAD_ROWS)], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    peak = int(done.stdout.split()[-1])
    corpus = SPREAD_ROWS * SPREAD_DIM * 2
    # the budget, a block, and a few int64 and float32 numbers per document: well under the
    # corpus (read whole, the peak would pass it; 56 MiB measured)
    assert peak < 0.25 * corpus, f"peak {peak >> 20} MiB above the start, corpus {corpus >> 20}"


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


def _spread_case(folder: Path, n: int, dim: int, num_q: int, judged: int = 3, seed: int = 0):
    """A float16 corpus on disk (ids d0.. beside it), ``num_q`` queries each judged to have
    ``judged`` documents at random rows spread through the whole file (near the first)."""
    rng = np.random.default_rng(seed)
    array = np.lib.format.open_memmap(folder / "corpus.npy", mode="w+", dtype=np.float16,
                                      shape=(n, dim))
    chunk = np.empty((min(n, 100_000), dim), dtype=np.float32)  # (one buffer: no fresh pages)
    for start in range(0, n, len(chunk)):
        stop = min(n, start + len(chunk))
        rng.standard_normal(out=chunk[: stop - start], dtype=np.float32)
        array[start:stop] = chunk[: stop - start]
    array.flush()
    docs = np.sort(rng.choice(n, size=(num_q, judged), replace=False), axis=1)
    queries = np.asarray(array[docs[:, 0]], dtype=np.float32)
    queries += 0.7 * rng.standard_normal(queries.shape, dtype=np.float32)
    del array
    np.save(folder / "corpus.ids.npy", np.array([f"d{i}" for i in range(n)]))
    q_ids = [f"q{i}" for i in range(num_q)]
    np.savez(folder / "q.npz", embeddings=queries, ids=np.array(q_ids))
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{d}\t{1 + j % 2}\n" for i in range(num_q) for j, d in enumerate(docs[i])))
    return queries, q_ids


def test_run_after_set_gallery_is_the_command_lines_run(tmp_path):
    """m.run() after set_gallery(path) lists what --write-run writes for the same files, and
    what functional.top_k lists from the path; the values are those of the corpus in memory."""
    from retrieval_metrics.formats import read_qrels, write_run
    from retrieval_metrics.functional import top_k

    queries, q_ids = _spread_case(tmp_path, 20_000, 32, 40)
    qrels = read_qrels(tmp_path / "qrels.tsv")
    doc_ids = np.load(tmp_path / "corpus.ids.npy")
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir")
    metric.set_gallery(str(tmp_path / "corpus.npy"), ids=str(tmp_path / "corpus.ids.npy"))
    metric.update(torch.from_numpy(queries), ids=q_ids, role="query")
    in_memory = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir")
    in_memory.set_gallery(torch.from_numpy(np.load(tmp_path / "corpus.npy")), ids=doc_ids)
    in_memory.update(torch.from_numpy(queries), ids=q_ids, role="query")
    values = _values(metric)
    assert values == _values(in_memory)
    assert values["mrr@10"] > 0.8  # each query finds the document it was drawn near
    run = metric.run(50, ids=q_ids + doc_ids.tolist())
    assert run == in_memory.run(50, ids=q_ids + doc_ids.tolist())
    write_run(run, tmp_path / "api.txt", tag="q")
    done = subprocess.run(
        [sys.executable, "-m", "retrieval_metrics", "evaluate", "--query", str(tmp_path / "q.npz"),
         "--gallery", str(tmp_path / "corpus.npy"), "--qrels", str(tmp_path / "qrels.tsv"),
         "--protocol", "beir", "--metrics", "ndcg@10", "--write-run", str(tmp_path / "cli.txt"),
         "--run-depth", "50", "--progress-delay", "-1"],
        capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stderr
    # the same lines (ranks, scores in full, ties' order); the metric lists its queries by id
    # code, the command line in the file's order
    by_query = [
        sorted((tmp_path / name).read_text().splitlines(), key=lambda line: line.split()[0])
        for name in ("api.txt", "cli.txt")
    ]
    assert by_query[0] == by_query[1] and len(by_query[0]) == 40 * 50
    found = top_k(torch.from_numpy(queries), str(tmp_path / "corpus.npy"), 50,
                  query_ids=q_ids, gallery_ids=doc_ids, exclude_identical_ids=True)
    assert found.run(q_ids, doc_ids) == run


def test_the_command_line_reads_the_file_once_to_score_and_list_the_run(tmp_path, monkeypatch):
    """``evaluate --gallery corpus.npy --write-run``: the evaluation's ranking reads the file
    once (its norms and scan for NaN with it), and keeps the run's lists as it counts
    (``engine.listing``): twice before, the run's ranking reading it again (and 3 times before
    that: the run's corpus was scanned by a pass of its own)."""
    from retrieval_metrics.cli import main

    n = 5_000
    _spread_case(tmp_path, n, 16, 30)
    read = _rows_read_through_the_mapping(monkeypatch)
    code = main(["evaluate", "--query", str(tmp_path / "q.npz"), "--gallery",
                 str(tmp_path / "corpus.npy"), "--qrels", str(tmp_path / "qrels.tsv"),
                 "--protocol", "beir", "--metrics", "ndcg@10", "--write-run",
                 str(tmp_path / "run.txt"), "--run-depth", "20", "--progress-delay", "-1"])
    assert code == 0
    assert read[0] == n
    assert len((tmp_path / "run.txt").read_text().splitlines()) == 30 * 20


_SPREAD = """
import contextlib, io, json, sys, warnings
import numpy as np, torch
import retrieval_metrics as rm
import retrieval_metrics.metrics.named  # the classes (and torchmetrics) before the start
from retrieval_metrics.__main__ import main
from retrieval_metrics.cli.commands import run as _run
from retrieval_metrics.formats import read_qrels
warnings.simplefilter("ignore")
folder, kind = sys.argv[1], sys.argv[2]

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

qrels = read_qrels(folder + "/qrels.tsv")
with np.load(folder + "/q.npz") as z:
    queries, q_ids = torch.from_numpy(z["embeddings"]), z["ids"].tolist()
start = status("VmRSS:")   # a fresh process: its high-water mark is its own
if kind == "api":
    metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels, protocol="beir")
    metric.set_gallery(folder + "/corpus.npy", ids=folder + "/corpus.ids.npy")
    metric.update(queries, ids=q_ids, role="query")
    metric.compute()
else:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["evaluate", "--query", folder + "/q.npz", "--gallery",
                     folder + "/corpus.npy", "--qrels", folder + "/qrels.tsv", "--protocol",
                     "beir", "--metrics", "ndcg@10,recall@100", "--write-run",
                     folder + "/run.txt", "--progress-delay", "-1"]) == 0
print(status("VmHWM:") - start)
"""


@pytest.mark.timeout(600)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_judged_documents_spread_through_the_file_stay_on_disk(spread_corpus):
    """1.2M x 256 float16 (586 MiB), 200 queries whose 3 judged documents each lie anywhere in
    the file: the API (set_gallery, update, compute) and the command line with --write-run
    each peak at most 0.25x the file (and 1 GiB) above a fresh process's start. Read through
    the mapping, the judged rows and the blocks held the file's pages: 1.03x and 2.76x."""
    script = spread_corpus / "spread.py"
    script.write_text(textwrap.dedent(_SPREAD))
    corpus = SPREAD_ROWS * SPREAD_DIM * 2
    for kind in ("api", "cli"):
        done = subprocess.run([sys.executable, str(script), str(spread_corpus), kind],
                              capture_output=True, text=True, timeout=280)
        assert done.returncode == 0, done.stderr
        peak = int(done.stdout.split()[-1])
        assert peak <= min(0.25 * corpus, 1 << 30), (kind, peak >> 20, corpus >> 20)
    assert len((spread_corpus / "run.txt").read_text().splitlines()) == SPREAD_QUERIES * 100


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_corpus_on_disk_with_a_nan_or_an_infinity_is_refused(tmp_path, bad, similarity):
    """Its values are scanned as its first ranking reads them (for cosine and dot by the norms
    that ranking computes block by block: the file is read once, not once to check it and
    again to rank it): set_gallery takes the file, the ranking refuses it by the argument's
    name, and so does every later ranking; top_k the same."""
    from retrieval_metrics.functional.ranking.top_lists import top_k

    corpus = np.ones((50, 4), dtype=np.float16)
    corpus[31, 2] = bad
    np.save(tmp_path / "c.npy", corpus)
    metric = rm.RetrievalMetrics(["mrr"], qrels={"q": ["d0"], "r": ["d1"]},
                                 similarity=similarity)
    metric.set_gallery(str(tmp_path / "c.npy"), ids=[f"d{i}" for i in range(50)])
    for query in ("q", "r"):  # (every ranking of the file refuses it, the first and later)
        metric.update(torch.ones(1, 4), ids=[query], role="query")  # (kept: no ranking)
        with pytest.raises(ValueError, match="`embeddings` contains NaN or infinite values"):
            metric.compute()
    with pytest.raises(ValueError, match="`gallery` contains NaN or infinite values"):
        top_k(torch.ones(1, 4), str(tmp_path / "c.npy"), 3, similarity=similarity)


def _rows_read_through_the_mapping(monkeypatch) -> list[int]:
    """A counter of the rows MappedRows.chunks yields (every read of a file in order)."""
    read = [0]
    real = MappedRows.chunks

    def chunks(self, start, stop, *args, **kwargs):
        for at, piece in real(self, start, stop, *args, **kwargs):
            read[0] += piece.shape[0]
            yield at, piece

    monkeypatch.setattr(MappedRows, "chunks", chunks)
    return read


@pytest.mark.parametrize("strong", [False, True], ids=["middling", "strong"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["float16", "float32"])
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_a_corpus_on_disk_is_read_once_by_its_first_ranking(
    tmp_path, monkeypatch, similarity, dtype, strong
):
    """set_gallery and the query updates read none of the file; compute()'s ranking reads
    each row once, for its norms, the scan for NaN and the products together (2x before: a
    pass of the norms at set_gallery, then the ranking's; and once per query update before
    the updates were ranked together), whatever the number of updates; a later ranking reads
    it once more. Whether the queries' rows finish early (a middling model: the rest of the
    file read for the norms alone) or are ranked to the end (a strong one). The values are
    those of the corpus in memory."""
    corpus, queries, ids, qrels = _case(tmp_path, dtype)
    if strong:
        queries = corpus[[i + 300 for i in range(120)]] + 0.01
    read = _rows_read_through_the_mapping(monkeypatch)
    # (the default budget: every query in one block, which reads the file once)
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, similarity=similarity, protocol="beir")
    metric.set_gallery(str(tmp_path / "all.npy"), ids=ids)
    assert read[0] == 0
    for part in np.array_split(np.arange(120), 3):
        metric.update(torch.from_numpy(queries[part]), ids=[f"q{i}" for i in part],
                      role="query")
    assert read[0] == 0
    computed = _values(metric)
    assert read[0] == len(corpus)
    metric.run(5, ids=[f"q{i}" for i in range(120)] + list(ids))
    assert read[0] == 2 * len(corpus)
    in_memory = rm.RetrievalMetrics(NAMES, qrels=qrels, similarity=similarity,
                                    protocol="beir")
    in_memory.set_gallery(torch.from_numpy(corpus), ids=ids)
    in_memory.update(torch.from_numpy(queries), ids=[f"q{i}" for i in range(120)],
                     role="query")
    assert computed == _values(in_memory)


def test_a_corpus_on_disk_whose_squares_overflow_is_finite(tmp_path):
    """A row whose squares overflow float32 has an infinite norm and finite values: it is
    scanned, not refused, and ranked (dot product of rows scaled to fit)."""
    corpus = np.ones((50, 4), dtype=np.float32)
    corpus[7] = 1e30
    np.save(tmp_path / "c.npy", corpus)
    metric = rm.RetrievalMetrics(["mrr"], qrels={"q": ["d7"]}, similarity="dot")
    metric.set_gallery(str(tmp_path / "c.npy"), ids=[f"d{i}" for i in range(50)])
    metric.update(torch.full((1, 4), 1e-30), ids=["q"], role="query")
    assert metric.compute()["mrr"].item() == 1.0
