"""Host synchronisations of one compute() on a CUDA device (emulated: tests/emulated_cuda.py).

On an accelerator each data-dependent size read on the host (a scalar, a nonzero, a bincount,
a copy either way) makes the GPU wait on Python, so the engine counts whole blocks there,
sends its index tensors without waiting, and reads a ranking's results back in one copy. The
counts are deterministic: they are pinned here at sizes the suite can afford (the emulated
device dispatches every operator in Python); benchmarks/gpu_check.sh counts them on a real
GPU, and at 24,000 items by hand.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import emulated_cuda
from retrieval_metrics.functional.ranking.engine import counting

DISTRIBUTED = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(DISTRIBUTED))

import launch  # noqa: E402

NAMES = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr"]
BUDGET = 200


def _syncs_of_compute(metric_factory, feed) -> tuple[int, int, list[str]]:
    """compute()'s host syncs and query blocks, on the emulated device."""
    blocks = []
    original = counting.QueryBlock.__init__

    def counted(self, *args, **kwargs):
        blocks.append(1)
        original(self, *args, **kwargs)

    with emulated_cuda() as emu:
        metric = metric_factory().to("cuda")
        feed(metric)
        counting.QueryBlock.__init__ = counted
        try:
            with emu.counting() as log:
                metric.compute()
        finally:
            counting.QueryBlock.__init__ = original
    return len(log), len(blocks), list(log)


def _same_source(n: int, memory_budget: int | None = None):
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 100, (n,), generator=gen)
    emb = torch.randint(-2, 3, (n, 32), generator=gen).float()

    def feed(metric):
        for start in range(0, n, 4096):
            rows = slice(start, start + 4096)
            metric.update(emb[rows].to("cuda"), labels[rows].to("cuda"))

    return lambda: rm.RetrievalMetrics(NAMES, similarity="dot", memory_budget=memory_budget), feed


# a sixteenth of the emulated device's default budget (256 MiB, the CPU's: it reports no free
# memory) at a quarter of the items, a sixteenth of the counting: 1, 11 and 48 query blocks,
# the largest in two query chunks, as 2,000, 8,000 and 12,000 items make 1, 7 and 47 at the
# default
SIZES, SIZES_BUDGET = (500, 2000, 3000), 16 * 2**20


@pytest.fixture(scope="module")
def same_source_syncs() -> dict[int, tuple[int, int, list[str]]]:
    return {n: _syncs_of_compute(*_same_source(n, SIZES_BUDGET)) for n in SIZES}


def test_same_source_syncs_do_not_grow_with_query_blocks(same_source_syncs):
    """The same host syncs at every size, whatever the query blocks (11 at 2,000 items, 48 at
    3,000, where the relevant pairs outgrow the budget and the queries are ranked in two
    chunks: each chunk's results reach the host in one copy, and that copy is one of the six):
    not one or more per block pair (the CPU's pruning made 2,565 at 24,000 items; blocking
    copies of each block's index tensors to the device made 398 at 12,000)."""
    counts = {n: syncs for n, (syncs, _, _) in same_source_syncs.items()}
    blocks = {n: b for n, (_, b, _) in same_source_syncs.items()}
    assert len(set(counts.values())) == 1 and counts[500] <= 10, counts
    assert blocks[3000] > blocks[2000] > blocks[500], blocks
    for n, (_, _, log) in same_source_syncs.items():
        # no data-dependent counting op is left in the ranking: only copies and scalar reads
        assert not {"nonzero", "bincount", "masked_select"} & {op.split()[0] for op in log}, n


def test_image_text_syncs_are_few():
    gen = torch.Generator().manual_seed(1)
    images = torch.randint(-2, 3, (600, 32), generator=gen).float()
    owner = torch.arange(600).repeat_interleave(5)
    captions = images[owner] + torch.randint(-1, 2, (3000, 32), generator=gen).float()

    def feed(metric):
        metric.update(images[owner].to("cuda"), captions.to("cuda"), owner.to("cuda"))

    syncs, _, log = _syncs_of_compute(lambda: rm.CrossModalRetrieval(similarity="dot"), feed)
    assert syncs < BUDGET, log


if __name__ == "__main__":
    # the measurements for people, by operator, at the default budget: 2,000 to 24,000 items,
    # and image-text at COCO 5K's shape (benchmarks/results/device_syncs.json records them)
    import collections

    for n in (2000, 8000, 12000, 24000):
        syncs, blocks, log = _syncs_of_compute(*_same_source(n))
        print(f"{n}: {syncs} host syncs, {blocks} query blocks;",
              collections.Counter(log).most_common())


# Every form's compute() on the emulated device at 1x, 4x and 16x the queries and items, at a
# budget that makes the larger ones many blocks: the same host syncs at every size (reads of
# the states' bits, the synced sides, and the finished table once per direction), none per
# block. A fixed gallery ranks each query batch at update(): its syncs are the update's and
# the compute's together.
FORM_BUDGET = 16 * 2**20
FORM_NAMES = ["hit_rate@1", "map@r", "mrr", "ndcg@10"]


def _form_data(n: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    return torch.randint(-2, 3, (n, 16), generator=gen).to(dtype), torch.randint(
        0, max(2, n // 4), (n,), generator=gen
    )


def _compute_syncs(metric, emu) -> list[str]:
    with emu.counting() as log:
        metric.compute()
    return log


def _same_source_form(n, emu, dtype):
    emb, labels = _form_data(n, dtype)
    m = rm.RetrievalMetrics(FORM_NAMES, similarity="dot", memory_budget=FORM_BUDGET).to("cuda")
    m.update(emb.cuda(), labels.cuda())
    return _compute_syncs(m, emu)


def _query_gallery_form(n, emu, dtype):
    emb, labels = _form_data(n, dtype)
    q = n // 4
    m = rm.RetrievalMetrics(FORM_NAMES, similarity="dot", memory_budget=FORM_BUDGET).to("cuda")
    m.update(emb[:q].cuda(), labels[:q].cuda(), role="query")
    m.update(emb[q:].cuda(), labels[q:].cuda(), role="gallery")
    return _compute_syncs(m, emu)


def _qrels_form(n, emu, dtype):
    emb, _ = _form_data(n, dtype)
    q = n // 4
    step = max(1, (n - q) // 5)
    qrels = {f"q{i}": {f"d{j}": 1 for j in range(i % 7, n - q, step)} for i in range(q)}
    m = rm.RetrievalMetrics(FORM_NAMES, similarity="dot", qrels=qrels,
                            memory_budget=FORM_BUDGET).to("cuda")
    m.update(emb[:q].cuda(), ids=[f"q{i}" for i in range(q)], role="query")
    m.update(emb[q:].cuda(), ids=[f"d{j}" for j in range(n - q)], role="gallery")
    return _compute_syncs(m, emu)


def _fixed_gallery_form(n, emu, dtype):
    emb, labels = _form_data(n, dtype)
    q = n // 4
    m = rm.RetrievalMetrics(FORM_NAMES, similarity="dot", memory_budget=FORM_BUDGET).to("cuda")
    m.set_gallery(emb[q:].cuda(), labels[q:].cuda())
    queries, query_labels = emb[:q].cuda(), labels[:q].cuda()
    with emu.counting() as log:
        # (updates of 64 queries, as a dataloader gives them: 1, 4 and 16 of them here)
        for start in range(0, q, 64):
            m.update(queries[start : start + 64], query_labels[start : start + 64],
                     role="query")
        m.compute()
    return log


def _image_text_form(n, emu, dtype):
    emb, _ = _form_data(n, dtype)
    images = n // 5
    owner = torch.arange(images).repeat_interleave(5)
    cm = rm.CrossModalRetrieval(similarity="dot", memory_budget=FORM_BUDGET).to("cuda")
    cm.update(emb[:images][owner].cuda(), emb[: 5 * images].cuda(), owner.cuda())
    return _compute_syncs(cm, emu)


def _gallery_batches_form(n, emu, dtype):
    """The gallery in several updates: ranked from the batches it arrived in (RowBatches)."""
    emb, labels = _form_data(n, dtype)
    q = n // 4
    m = rm.RetrievalMetrics(FORM_NAMES, similarity="cosine", memory_budget=FORM_BUDGET).to("cuda")
    m.update(emb[:q].cuda(), labels[:q].cuda(), role="query")
    for part in torch.arange(q, n).tensor_split(4):
        m.update(emb[part].cuda(), labels[part].cuda(), role="gallery")
    return _compute_syncs(m, emu)


def _corpus_on_disk_form(n, emu, dtype):
    """A corpus in a .npy file given to set_gallery, streamed to the device a chunk at a time
    (float16 on disk for the half-precision case, and float16 queries: numpy has no bfloat16,
    and the tensor cores' path takes one dtype): the queries' update (kept, not ranked) and
    compute() (which ranks them against the fixed corpus) counted together."""
    emb, _ = _form_data(n, dtype)
    q = n // 4
    step = max(1, (n - q) // 5)
    qrels = {f"q{i}": {f"d{j}": 1 for j in range(i % 7, n - q, step)} for i in range(q)}
    stored = np.float32 if dtype == torch.float32 else np.float16
    # (float16 queries beside a float16 file: the tensor cores' path, which takes one dtype)
    queries = emb[:q].to(torch.float32 if dtype == torch.float32 else torch.float16).cuda()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "corpus.npy"
        np.save(path, emb[q:].to(torch.float32).numpy().astype(stored))
        m = rm.RetrievalMetrics(FORM_NAMES, qrels=qrels, memory_budget=FORM_BUDGET).to("cuda")
        m.set_gallery(path, ids=[f"d{j}" for j in range(n - q)])
        with emu.counting() as log:
            m.update(queries, ids=[f"q{i}" for i in range(q)], role="query")
            m.compute()
        del m
    return log


@pytest.mark.parametrize(
    "form",
    [_same_source_form, _query_gallery_form, _qrels_form, _fixed_gallery_form, _image_text_form,
     _gallery_batches_form, _corpus_on_disk_form],
    ids=["same source", "query/gallery", "qrels", "fixed gallery", "image-text",
         "gallery in batches", "corpus on disk"],
)
# bfloat16: the tensor cores' path (engine/tensor_cores.py), its norms checked in one read
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_host_syncs_do_not_grow_with_queries_items_or_blocks(form, dtype):
    syncs, blocks = [], []
    original = counting.QueryBlock.__init__

    def counted(self, *args, **kwargs):
        blocks[-1] += 1
        original(self, *args, **kwargs)

    counting.QueryBlock.__init__ = counted
    try:
        for n in (256, 1024, 4096):
            blocks.append(0)
            with emulated_cuda() as emu:
                syncs.append(len(form(n, emu, dtype)))
    finally:
        counting.QueryBlock.__init__ = original
    assert syncs[0] == syncs[1] == syncs[2], syncs
    assert syncs[0] <= 20, syncs  # (the GPU target: at most 20 a compute())
    assert blocks[2] > blocks[0], blocks  # the largest is ranked in more blocks



def _listed_blocks(monkeypatch) -> list[int]:
    """A counter of the gallery blocks top_k multiplies (its calls of padded_block)."""
    from retrieval_metrics.functional.ranking import top_lists

    seen = [0]
    original = top_lists.padded_block

    def counted(*args, **kwargs):
        seen[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(top_lists, "padded_block", counted)
    return seen


def _metric_with(n: int, same_source: bool, device: str) -> rm.RetrievalMetrics:
    emb, labels = _form_data(n)  # (small integers: dot products full of ties at every cut)
    m = rm.RetrievalMetrics(["mrr"], similarity="dot", memory_budget=FORM_BUDGET // 4)
    m = m.to(device)
    if same_source:
        m.update(emb.to(device), labels.to(device))
    else:
        m.update(emb[: n // 4].to(device), labels[: n // 4].to(device), role="query")
        m.update(emb[n // 4 :].to(device), labels[n // 4 :].to(device), role="gallery")
    return m


@pytest.mark.parametrize("same_source", [True, False], ids=["same source", "query/gallery"])
def test_a_runs_host_syncs_do_not_grow_with_queries_items_or_blocks(same_source, monkeypatch):
    """run(k) on the emulated device, at 1x, 4x and 16x the queries and items:
    the same host syncs at every size, however many blocks the largest is listed in. Each
    block's lists are kept with no host read (running_best.UnwaitedBest), its -inf pairs (a
    query itself) written with no copy from the host, and the ties at the cuts that such data
    is full of listed again with no host read either (the tied columns taken smallest first).
    The lists are the CPU's."""
    blocks = _listed_blocks(monkeypatch)
    syncs, listed = [], []
    for n in (256, 1024, 4096):
        expected = _metric_with(n, same_source, "cpu").run(k=10)
        with emulated_cuda() as emu:
            m = _metric_with(n, same_source, "cuda")
            blocks[0] = 0
            with emu.counting() as log:
                run = m.run(k=10)
        syncs.append(len(log))
        listed.append(blocks[0])
        assert run == expected
    assert syncs[0] == syncs[1] == syncs[2], syncs
    assert syncs[0] <= 12, syncs
    assert listed[2] > listed[0] > 0, listed


def test_top_k_on_a_device_takes_the_devices_budget(monkeypatch):
    """top_k's blocks on an accelerator: a share of its (mocked) free memory where no budget
    is given, far fewer blocks than the CPU's of 64 MiB of scores, and under an explicit
    budget the blocks it allows; the same lists whichever."""
    from retrieval_metrics.functional.ranking.top_lists import top_k

    gen = torch.Generator().manual_seed(0)
    q, g = torch.randn(300, 8, generator=gen), torch.randn(20_000, 8, generator=gen)
    blocks = _listed_blocks(monkeypatch)
    on_cpu = top_k(q, g, 20)
    cpu_blocks = blocks[0]
    found = {}
    for free, budget in ((2**34, None), (2**34, 2**18)):
        blocks[0] = 0
        with emulated_cuda():
            monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None, f=free: (f, f))
            listed = top_k(q.cuda(), g.cuda(), 20, memory_budget=budget)
            found[budget] = (blocks[0], listed.indices.cpu(), listed.scores.cpu())
    assert found[None][0] == 1 < cpu_blocks < found[2**18][0], (cpu_blocks, found)
    for _, indices, scores in found.values():
        assert torch.equal(indices, on_cpu.indices) and torch.equal(scores, on_cpu.scores)


SHARDED_SIZES = (256, 1024, 4096)
_TWO_PROCESSES: list[list[dict]] = []


def _two_processes(tmp_path_factory) -> list[list[dict]]:
    """Every rank's results of the two-process scenarios of this file (the sharded gallery's
    syncs at each size, then the NaN on one rank), on one gloo group started once: starting
    the processes costs more than the scenarios."""
    if not _TWO_PROCESSES:
        scenarios = [f"syncs:{n}" for n in SHARDED_SIZES] + ["nan"]
        _TWO_PROCESSES.append(launch.run_workers(
            DISTRIBUTED / "device_worker.py", [",".join(scenarios), "emulated"], 2,
            tmp_path_factory.mktemp("two_processes"),
        ))
    return _TWO_PROCESSES[0]


@pytest.mark.timeout(600)
def test_host_syncs_of_a_sharded_gallery_do_not_grow(tmp_path_factory):
    """A gallery sharded over 2 processes (gallery_sharded=True; each rank ranks every query
    against its shard and the counts are summed), the states on the emulated device: every
    rank's compute() makes the same host syncs at 1x, 4x and 16x the queries and items, while
    the largest is ranked in more query blocks."""
    sizes = SHARDED_SIZES
    runs = _two_processes(tmp_path_factory)
    for rank, payload in enumerate(runs):
        got = [payload[f"syncs:{n}"] for n in sizes]
        counts = [g["syncs"] for g in got]
        assert counts[0] == counts[1] == counts[2], (rank, counts, got[2]["log"])
        assert counts[0] <= 20, (rank, got[0]["log"])
        assert got[2]["blocks"] > got[0]["blocks"], (rank, [g["blocks"] for g in got])



def _state_bit_reads(monkeypatch, emu) -> list[str]:
    """Where each host sync from now on happened: the innermost frame of the metric layer's
    state handling (metrics/retrieval.py, metrics/store.py), else "elsewhere"."""
    import traceback

    where: list[str] = []
    original = emu.record_sync

    def record(why: str) -> None:
        frames = [f for f in traceback.extract_stack() if "retrieval_metrics" in f.filename]
        inner = frames[-1] if frames else None
        states = inner is not None and inner.filename.endswith(
            ("metrics/retrieval.py", "metrics/store.py")
        )
        where.append(f"{inner.name}" if states else "elsewhere")
        original(why)

    monkeypatch.setattr(emu, "record_sync", record)
    return where


@pytest.mark.parametrize("case", ["same source", "qrels"])
def test_the_state_bits_are_read_once_per_update_and_per_compute(monkeypatch, case):
    """The form's bits (which input form the states hold) are read in one host read by the
    first update() and by none of the later ones (one each before); the form's and the keys'
    kinds (integers or strings) in one per compute(), not one read per bit (6 per update and
    12 to 14 per compute before)."""
    emb, labels = _form_data(64)
    with emulated_cuda() as emu:
        if case == "same source":
            m = rm.RetrievalMetrics(["hit_rate@1", "map@r"]).to("cuda")
            feeds = [
                lambda: m.update(emb[:32].cuda(), labels[:32].cuda(), ids=torch.arange(32).cuda()),
                lambda: m.update(emb[32:].cuda(), labels[32:].cuda(),
                                 ids=torch.arange(32, 64).cuda()),
            ]
        else:
            qrels = {f"q{i}": {f"d{j}": 1 for j in range(i % 5, 32, 7)} for i in range(32)}
            m = rm.RetrievalMetrics(["ndcg@10", "recall@10"], qrels=qrels).to("cuda")
            feeds = [
                lambda: m.update(emb[:32].cuda(), ids=[f"q{i}" for i in range(32)], role="query"),
                lambda: m.update(emb[32:].cuda(), ids=[f"d{j}" for j in range(32)],
                                 role="gallery"),
            ]
        where = _state_bit_reads(monkeypatch, emu)
        for i, feed in enumerate(feeds):
            where.clear()
            feed()
            # the first update reads the bits; a later one takes them from the host, where the
            # update before kept them with the tensor it wrote
            assert len([w for w in where if w != "elsewhere"]) == (i == 0), where
        where.clear()
        m.compute()
        assert len([w for w in where if w != "elsewhere"]) == 1, where
        where.clear()
        m.compute()  # the ranking is kept: its form is not read again
        assert [w for w in where if w != "elsewhere"] == [], where


def test_the_form_bits_kept_on_the_host_follow_the_state():
    """The form bits an update keeps on the host stand for the ``form`` tensor it wrote only:
    after a reset or a state set anew (as a load of states sets it) they are read again, so
    the next update sees what the states hold (kept bits of same-source updates would refuse
    the query update below as a mix of forms)."""
    emb, labels = _form_data(16)
    with emulated_cuda():
        m = rm.RetrievalMetrics(["hit_rate@1"]).to("cuda")
        for clear in (
            lambda: m.reset(),
            lambda: setattr(m, "form", torch.zeros_like(m.form)),
        ):
            m.reset()
            m.update(emb.cuda(), labels.cuda())
            with pytest.raises(ValueError, match="one metric takes one input form"):
                m.update(emb.cuda(), labels.cuda(), role="query")
            m.reset()
            m.update(emb.cuda(), labels.cuda())
            m.update(emb.cuda(), labels.cuda())  # (the bits kept from the update before)
            clear()
            m.update(emb.cuda(), labels.cuda(), role="query")  # no longer a mix of forms
            assert m._form_bits() == [int(b) for b in m.form.tolist()]


def test_run_reads_the_ids_kinds_once(monkeypatch):
    """run() after compute(): the form is the ranking's, and whether either side's ids were
    strings is one host read of the kind bits (one per side before: two with integer ids)."""
    emb, labels = _form_data(64)
    with emulated_cuda() as emu:
        m = rm.RetrievalMetrics(["hit_rate@1"], similarity="dot").to("cuda")
        m.update(emb[:16].cuda(), labels[:16].cuda(), ids=torch.arange(16).cuda(), role="query")
        m.update(emb[16:].cuda(), labels[16:].cuda(), ids=torch.arange(16, 64).cuda(),
                 role="gallery")
        m.compute()
        where = _state_bit_reads(monkeypatch, emu)
        run = m.run(k=2)
        assert [w for w in where if w != "elsewhere"] == ["has_string"], where
    assert len(run) == 16 and all(len(listed) == 2 for listed in run.values())


def test_updates_on_a_device_do_not_wait_for_it():
    """An update on a device waits for nothing there (the model's forward pass queued before
    it runs on): the form's bits are kept on the host and the scan for NaN and infinities is
    left on the device, read by compute() with the state bits. Later updates of each form make
    no host sync (one or two each before; queries against a gallery given once, ranked at
    each update before, made a ranking's syncs each)."""
    emb, labels = _form_data(64)
    qrels = {f"q{i}": {f"d{j}": 1 for j in range(i % 5, 32, 7)} for i in range(32)}
    q_ids = [f"q{i}" for i in range(32)]
    with emulated_cuda() as emu:
        # (the batches on the device before counting: the test's copies are not the update's)
        emb, labels, own = emb.cuda(), labels.cuda(), torch.arange(64).cuda()
        cases = {
            "same source": (rm.RetrievalMetrics(["hit_rate@1", "map@r"]).to("cuda"),
                            lambda m, r: m.update(emb[r], labels[r])),
            "qrels": (rm.RetrievalMetrics(["ndcg@10"], qrels=qrels).to("cuda"),
                      lambda m, r: m.update(emb[r], ids=q_ids[r], role="query")),
            "image-text": (rm.CrossModalRetrieval(k=(1, 5)).to("cuda"),
                           lambda m, r: m.update(emb[r], emb[r].flip(0), own[r])),
        }
        for name, metric in (("fixed gallery", rm.RetrievalMetrics(["ndcg@10"], qrels=qrels)),
                             ("fixed gallery, labels", rm.RetrievalMetrics(["map@r"]))):
            metric = metric.to("cuda")
            labelled = name.endswith("labels")
            metric.set_gallery(emb[32:], labels[32:] if labelled else None,
                               ids=[f"d{j}" for j in range(32)])
            cases[name] = (metric, (lambda m, r: m.update(emb[r], labels[r], role="query"))
                           if labelled else cases["qrels"][1])
        for name, (metric, feed) in cases.items():
            feed(metric, slice(0, 8))
            with emu.counting() as log:
                feed(metric, slice(8, 16))
                feed(metric, slice(16, 32))
            assert list(log) == [], (name, list(log))


@pytest.mark.parametrize("where", ["same source", "query", "image", "caption", "inf"])
def test_a_nan_given_on_a_device_is_refused_by_compute(where):
    """The scan an update leaves on the device refuses the metric at compute() (and at run()),
    naming the argument, as an update on the host does at once; a batch refused by another
    check leaves no scan behind; reset() forgets it."""
    emb, labels = _form_data(32)
    bad = emb.clone()
    bad[3, 1] = float("inf") if where == "inf" else float("nan")
    with emulated_cuda():
        if where in ("same source", "inf", "query"):
            metric = rm.RetrievalMetrics(["hit_rate@1", "mrr"]).to("cuda")
            role = "query" if where == "query" else None

            def feed(x, keys=labels):
                metric.update(x.cuda(), keys.cuda(), role=role)
                if role:
                    metric.update(emb.cuda(), labels.cuda(), role="gallery")

            name = "embeddings"
        else:
            metric, role = rm.CrossModalRetrieval(k=(1,)).to("cuda"), None

            def feed(x, keys=None):
                keys = torch.arange(32) if keys is None else keys
                pair = (x, emb) if where == "image" else (emb, x)
                metric.update(pair[0].cuda(), pair[1].cuda(), keys.cuda())

            name = f"{where.replace('caption', 'text')}_embeddings"
        feed(emb)
        feed(bad)  # (no error yet: the scan's answer stays on the device)
        for call in (metric.compute, *((lambda: metric.run(k=3),) if role else ())):
            with pytest.raises(ValueError, match=f"`{name}` contains NaN or infinite values"):
                call()
        metric.reset()
        feed(emb)
        with pytest.raises(ValueError):
            feed(bad, torch.arange(31))  # refused by its keys' count: its scan is not kept
        metric.compute()  # (a batch refused at update leaves no scan behind)


@pytest.mark.timeout(600)
def test_a_nan_given_on_one_process_is_refused_on_every_process(tmp_path_factory):
    """2 processes, the states on the emulated device (gloo reporting "nccl"), the last rank's
    second update holding a NaN: no update raises, and compute() refuses on both ranks, the
    scan's bit reduced with the state bits (a rank raising alone would leave the other waiting
    in its next collective)."""
    for rank, payload in enumerate(_two_processes(tmp_path_factory)):
        for name, errors in payload["nan"].items():
            argument = "embeddings" if name == "same source" else "text_embeddings"
            assert len(errors) == 1 and errors[0].startswith("compute: "), (rank, name, errors)
            assert f"`{argument}` contains NaN or infinite values" in errors[0], (rank, errors)


def _scores_batch(bad: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    preds, target = torch.rand(40, generator=gen), (torch.rand(40, generator=gen) > 0.5).long()
    if bad == "preds":
        preds[7] = float("nan")
    if bad == "target":
        target[7] = -1
    return preds, target, torch.arange(40) // 8


@pytest.mark.parametrize("bad", ["preds", "target", "positions"])
@pytest.mark.parametrize("cls", ["RetrievalMetrics", "RecallAtK", "compat RetrievalRecall"])
def test_the_checks_of_scores_and_positions_on_a_device_are_read_by_compute(cls, bad):
    """torchmetrics' form (preds, target, indexes) and positions (relevance="radius") on a
    device: later updates make no host sync (2 and 1 before), and a NaN score, a negative
    target or a NaN position is refused by compute(), naming the argument, as the host refuses
    it at update. (The compat class checks targets as torchmetrics does, reading them at
    update, with torchmetrics' messages; its scan of the scores is the library's.)"""
    from retrieval_metrics.compat import torchmetrics as C

    if bad == "positions" and cls != "RetrievalMetrics":
        pytest.skip("positions are given with embeddings")
    if bad == "target" and cls.startswith("compat"):
        pytest.skip("torchmetrics' own check of the targets, at update")
    if bad == "positions":
        make = lambda: rm.RetrievalMetrics(["hit_rate@1"], relevance="radius", radius=1.0)  # noqa: E731
        emb = torch.randn(20, 8)
        pos = torch.randn(20, 2, dtype=torch.float64)
        wrong = pos.clone()
        wrong[4, 1] = float("nan")

        def feed(m, dev, good=True):
            m.update(emb.to(dev), positions=pos.to(dev), role="query")
            m.update(emb.to(dev), positions=(pos if good else wrong).to(dev), role="gallery")
    else:
        make = {
            "RetrievalMetrics": lambda: rm.RetrievalMetrics(["hit_rate@1", "ndcg@5"]),
            "RecallAtK": lambda: rm.RecallAtK(k=2),
            "compat RetrievalRecall": lambda: C.RetrievalRecall(top_k=2),
        }[cls]

        def feed(m, dev, good=True):
            batch = _scores_batch("none" if good else bad)
            m.update(*(x.to(dev) for x in batch[:2]), indexes=batch[2].to(dev))

    message = (
        "`target` must be non-negative" if bad == "target" else f"`{bad}` contains NaN or infinite"
    )
    with pytest.raises(ValueError, match=message):
        feed(make(), "cpu", good=False)  # the host refuses it at once
    with emulated_cuda() as emu:
        metric = make().to("cuda")
        feed(metric, "cuda")
        with emu.counting() as log:
            feed(metric, "cuda")
        # (the test's own copies to the device are the only syncs; torchmetrics' checks of the
        # targets read the device)
        waits = [s for s in log if "host-to-device" not in s]
        assert len(waits) == cls.startswith("compat"), list(log)
        metric.compute()
        feed(metric, "cuda", good=False)
        with pytest.raises(ValueError, match=message):
            metric.compute()
