"""``retrieval-metrics evaluate ... --write-run RUN``: the run file equals a brute-force top K
(every score in a Python list, ties by the rule), and read back by this library's run reader
and by pytrec_eval it gives the same values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reference import reference_top_k
from retrieval_metrics import cli
from retrieval_metrics.formats import read_run, read_trec_run

pytrec_eval = pytest.importorskip("pytrec_eval")


def evaluate(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["evaluate", *args, "--bootstrap", "20", "--progress-delay", "-1"])
    out = capsys.readouterr()
    return status, out.out, out.err


def readers_order(pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """A top list as the run writer writes it: by decreasing score, tied scores by document id
    in descending byte order (trec_eval's order, the one every run reader here reads), so that
    a .jsonl copy, read in the order it lists, ranks as the TREC copy."""
    return sorted(pairs, key=lambda pair: (pair[1], pair[0].encode()), reverse=True)


def _codes(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, (n, dim)).astype(np.float32)


@pytest.fixture
def judged(tmp_path):
    """Binary codes (scores full of ties); a corpus that repeats one document (its id and
    embedding: kept once) and holds a document whose id is a query's (left out of its list,
    as BEIR leaves it)."""
    queries, corpus = _codes(12, 6, 0), _codes(40, 6, 1)
    corpus[39] = corpus[5]
    q_ids = np.array([f"q{i}" for i in range(12)])
    d_ids = np.array([f"d{j:02d}" for j in range(40)])
    d_ids[39] = "d05"  # a repeat of d05: the first kept
    d_ids[20] = "q3"  # the query's own id
    qrels = {f"q{i}": {f"d{(i * 7 + j) % 39:02d}": 1 + j % 2 for j in range(3)}
             for i in range(12)}
    np.savez(tmp_path / "q.npz", embeddings=queries, ids=q_ids)
    np.savez(tmp_path / "c.npz", embeddings=corpus, ids=d_ids)
    # the same corpus as a .npy read from disk, its ids beside it
    np.save(tmp_path / "c.npy", corpus)
    np.save(tmp_path / "c.ids.npy", d_ids)
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
    (tmp_path / "qrels.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path, queries, corpus, q_ids, d_ids, qrels


@pytest.mark.parametrize("corpus_file", ["c.npz", "c.npy"])
@pytest.mark.parametrize("suffix", [".txt", ".json", ".jsonl"])
def test_the_run_of_a_judged_corpus_is_the_brute_force_top_k(judged, suffix, corpus_file,
                                                             capsys):
    tmp, queries, corpus, q_ids, d_ids, qrels = judged
    run_path = tmp / f"run{suffix}"
    status, _, err = evaluate(
        capsys, "--query", str(tmp / "q.npz"), "--gallery", str(tmp / corpus_file), "--qrels",
        str(tmp / "qrels.tsv"), "--similarity", "dot", "--metrics", "ndcg@5,mrr@10",
        "--write-run", str(run_path), "--run-depth", "9", "--json", str(tmp / "out.json"),
    )
    assert status == 0 and f"written to {run_path}" in err
    kept = [j for j in range(40) if j != 39]  # the repeated id's second row is dropped
    excluded = {(3, kept.index(20))}
    brute = reference_top_k(queries, corpus[kept], 9, list(range(len(kept))), excluded)
    written = {x["id"]: x for x in map(json.loads, run_path.read_text().splitlines())} if (
        suffix == ".jsonl") else None
    for i, qid in enumerate(q_ids):
        # the brute force's top 9 (ties at the cut: the first in the file), in the readers'
        # order
        want = readers_order([(d_ids[kept[j]], float(s)) for s, j in brute[i]])
        if suffix == ".txt":
            lines = [line.split() for line in run_path.read_text().splitlines()
                     if line.startswith(f"{qid} ")]
            got = [(f[2], float(f[4])) for f in lines]
            assert [int(f[3]) for f in lines] == list(range(1, 10))
        elif suffix == ".json":
            got = list(json.loads(run_path.read_text())[qid].items())
        else:
            got = list(zip(written[qid]["retrieved"], written[qid]["scores"], strict=True))
        assert got == want, qid
    # read back: our reader and pytrec_eval score the run alike. A scored run is ranked by
    # score, ties by document id (trec_eval's rule, both sides); a .jsonl list is taken in its
    # order (ties as written): pytrec_eval is given that order as scores
    if suffix == ".txt":
        run = read_trec_run(run_path)
    elif suffix == ".json":
        run = json.loads(run_path.read_text())
    else:
        run = {x["id"]: {d: -float(r) for r, d in enumerate(x["retrieved"])}
               for x in written.values()}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5"}).evaluate(run)
    status, _, _ = evaluate(capsys, "--run", str(run_path), "--qrels", str(tmp / "qrels.tsv"),
                            "--metrics", "ndcg@5", "--protocol", "beir",
                            "--json", str(tmp / "back.json"))
    assert status == 0
    back = json.loads((tmp / "back.json").read_text())["runs"][0]["metrics"]["ndcg@5"]["value"]
    assert back == pytest.approx(np.mean([v["ndcg_cut_5"] for v in theirs.values()]), abs=1e-6)
    assert set(read_run(run_path)[0]) == set(q_ids)


@pytest.mark.parametrize("protocol", ["beir", "sentence_transformers"])
def test_a_judged_run_is_listed_by_the_evaluations_own_ranking(judged, protocol, capsys,
                                                                monkeypatch):
    """--write-run multiplies the queries by the corpus once: the run's lists are kept as the
    evaluation's ranking counts its blocks (``engine.listing``; the corpus was ranked a second
    time for the run). Ties ordered by id (sentence-transformers' preset) are top_k's own: the
    run is listed again there, twice the products. The same run file either way as top_k's."""
    from retrieval_metrics.functional.ranking.engine import listing
    from work_counts import counting_work

    tmp = judged[0]
    base = ["--query", str(tmp / "q.npz"), "--gallery", str(tmp / "c.npz"), "--qrels",
            str(tmp / "qrels.tsv"), "--similarity", "dot", "--metrics", "ndcg@5",
            "--protocol", protocol]
    with counting_work() as alone:
        assert evaluate(capsys, *base)[0] == 0
    with counting_work() as listed:
        status, _, err = evaluate(capsys, *base, "--write-run", str(tmp / "run.txt"),
                                  "--run-depth", "7")
    assert status == 0 and "written to" in err
    assert alone.multiply_adds > 0
    assert listed.multiply_adds == alone.multiply_adds * (1 if protocol == "beir" else 2)
    # the run top_k writes, where no listing is kept
    monkeypatch.setattr(listing.RunListing, "found", lambda self, num_queries: None)
    status, _, _ = evaluate(capsys, *base, "--write-run", str(tmp / "top_k.txt"),
                            "--run-depth", "7")
    assert status == 0
    assert (tmp / "run.txt").read_text() == (tmp / "top_k.txt").read_text()


def test_same_source_runs_never_list_the_query_and_several_runs_get_their_names(tmp_path, capsys):
    items = _codes(30, 5, 2)
    labels = np.arange(30) % 6
    np.savez(tmp_path / "a.npz", embeddings=items, labels=labels)
    np.savez(tmp_path / "b.npz", embeddings=items[::-1].copy(), labels=labels[::-1].copy())
    status, _, _ = evaluate(capsys, str(tmp_path / "a.npz"), str(tmp_path / "b.npz"),
                            "--similarity", "dot", "--metrics", "mrr",
                            "--write-run", str(tmp_path / "run.txt"), "--run-depth", "40")
    assert status == 0
    for name, x in (("a", items), ("b", items[::-1])):
        run = (tmp_path / f"run.{name}.txt").read_text().splitlines()
        by_query: dict[str, list[tuple[str, float]]] = {}
        for line in run:
            qid, _, doc, _, score, _ = line.split()
            by_query.setdefault(qid, []).append((doc, float(score)))
        brute = reference_top_k(x, x, 40, list(range(30)), {(i, i) for i in range(30)})
        for i in range(30):
            assert by_query[str(i)] == readers_order([(str(j), float(s)) for s, j in brute[i]])
            assert len(by_query[str(i)]) == 29


def test_write_run_refusals(judged, capsys):
    tmp = judged[0]
    base = ["--query", str(tmp / "q.npz"), "--gallery", str(tmp / "c.npz"), "--qrels",
            str(tmp / "qrels.tsv"), "--metrics", "mrr"]
    status, _, err = evaluate(capsys, *base, "--write-run", str(tmp / "r.txt"), "--run-depth", "0")
    assert status != 0 and "--run-depth must be a positive integer, got 0" in err
    (tmp / "given.txt").write_text("q1 Q0 d01 1 0.5 x\n")
    status, _, err = evaluate(capsys, "--run", str(tmp / "given.txt"), "--qrels",
                              str(tmp / "qrels.tsv"), "--write-run", str(tmp / "r.txt"))
    assert status != 0 and "a --run is a run already" in err


def test_a_depth_beyond_the_corpus_reports_what_was_written(judged, capsys):
    """--run-depth 5000 over 39 distinct documents printed "the top 5000 of each query
    written", where 39 were (found by an audit): the message says what the file holds."""
    tmp = judged[0]
    run = tmp / "deep.txt"
    status, _, err = evaluate(capsys, "--query", str(tmp / "q.npz"), "--gallery",
                              str(tmp / "c.npz"), "--qrels", str(tmp / "qrels.tsv"), "--metrics",
                              "mrr", "--write-run", str(run), "--run-depth", "5000")
    assert status == 0
    per_query = read_trec_run(run)
    assert max(len(docs) for docs in per_query.values()) == 39  # d05 once; q3's own id left out
    assert f"q: the top 39 of each query (every item it ranks; --run-depth 5000) written to {run}" \
        in err
    status, _, err = evaluate(capsys, "--query", str(tmp / "q.npz"), "--gallery",
                              str(tmp / "c.npz"), "--qrels", str(tmp / "qrels.tsv"), "--metrics",
                              "mrr", "--write-run", str(run), "--run-depth", "39")
    assert status == 0 and f"q: the top 39 of each query written to {run}" in err


def test_a_scored_run_is_ranked_by_its_float32_scores_as_trec_eval_ranks_it(tmp_path):
    """trec_eval holds scores as float32: 0.100000001 and 0.1 tie there, and the tie goes to the
    document id in descending byte order (d2 before d1). The readers ranked by float64 and put
    d1 first: P@1 1 where pytrec_eval gives 0. 16777217 and 16777216 (JSON integers) tie too."""
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 0.100000001 x\nq1 Q0 d2 2 0.1 x\nq1 Q0 d0 3 0.05 x\n")
    lists, _ = read_run(run)
    assert lists == {"q1": ["d2", "d1", "d0"]}
    nested = tmp_path / "run.json"
    nested.write_text(json.dumps({"q1": {"a": 16777217, "b": 16777216, "c": 1}}))
    assert read_run(nested)[0] == {"q1": ["b", "a", "c"]}
    pytrec_eval = pytest.importorskip("pytrec_eval")
    scored = {"q1": {"d1": 0.100000001, "d2": 0.1, "d0": 0.05}}
    got = pytrec_eval.RelevanceEvaluator({"q1": {"d1": 1}}, {"P_1", "recip_rank"}).evaluate(scored)
    assert got["q1"]["P_1"] == 0.0 and got["q1"]["recip_rank"] == 0.5  # d1 second there too


def test_float64_scores_that_tie_as_float32_are_noted_and_read_back_alike(tmp_path, capsys):
    """float64 embeddings: 'a' (relevant) scores 1.0, 'b' 0.999999999, one float32. The .trec run
    read back gave MRR 0.5 (b first, by id descending) and the .jsonl run 1.0 (found by an
    audit). Both are now written b, a, as the readers tie them, read back at MRR 1/2, and the
    command says why the run's value can differ from the table's (1.0: a first)."""
    np.savez(tmp_path / "c.npz", embeddings=np.array([[1.0, 0.0], [1.0 - 1e-9, 0.0]]),
             ids=np.array(["a", "b"]))
    np.savez(tmp_path / "q.npz", embeddings=np.array([[1.0, 0.0]]), ids=np.array(["q1"]))
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\n")
    base = ["--metrics", "mrr", "--protocol", "beir"]
    for suffix in (".trec", ".jsonl"):
        run = tmp_path / f"run{suffix}"
        status, _, err = evaluate(capsys, "--query", str(tmp_path / "q.npz"), "--gallery",
                                  str(tmp_path / "c.npz"), "--qrels", str(tmp_path / "qrels.txt"),
                                  *base, "--similarity", "dot", "--write-run", str(run),
                                  "--json", str(tmp_path / "a.json"))
        assert status == 0 and "in 1 query, scores that differ by less than float32's" in err
        table = json.loads((tmp_path / "a.json").read_text())["runs"][0]["metrics"]["mrr"]
        assert table["value"] == 1.0
        assert read_run(run)[0] == {"q1": ["b", "a"]}
        status, _, _ = evaluate(capsys, "--run", str(run), "--qrels", str(tmp_path / "qrels.txt"),
                                *base, "--json", str(tmp_path / "b.json"))
        back = json.loads((tmp_path / "b.json").read_text())["runs"][0]["metrics"]["mrr"]
        assert status == 0 and back["value"] == 0.5


@pytest.mark.parametrize("flag", ["--write-run", "--json", "--per-query"])
def test_an_output_in_a_missing_folder_stops_before_the_evaluation(judged, capsys, flag):
    """--write-run into a missing folder ended in a FileNotFoundError traceback, exit 1, after the
    whole evaluation (found by an audit): now one line naming the flag and the folder, exit 2,
    and nothing evaluated (no table printed)."""
    tmp = judged[0]
    target = tmp / "missing" / "out.txt"
    status, out, err = evaluate(capsys, "--query", str(tmp / "q.npz"), "--gallery",
                                str(tmp / "c.npz"), "--qrels", str(tmp / "qrels.tsv"),
                                "--metrics", "mrr", flag, str(target))
    assert status == 2 and out == ""
    assert err.strip() == (f"retrieval-metrics: error: {flag} {target}: its folder "
                           f"{target.parent} does not exist")


def test_messages_name_the_users_ids(tmp_path, capsys):
    """(a) One query id given to two embeddings was named by its 64-bit code
    ('e.g. 7818327418847251472'); (b) --duplicates warn named the question by its position
    ('first: query 1') in a Python warning with a source line (found by an audit)."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", embeddings=rng.normal(size=(5, 3)), ids=np.array(list("abcde")))
    np.savez(tmp_path / "q.npz", embeddings=rng.normal(size=(2, 3)), ids=np.array(["q1", "q1"]))
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\n")
    status, _, err = evaluate(capsys, "--query", str(tmp_path / "q.npz"), "--gallery",
                              str(tmp_path / "c.npz"), "--qrels", str(tmp_path / "qrels.txt"),
                              "--metrics", "mrr")
    assert status == 2 and "(e.g. 'q1')" in err
    # the second question, 'q2', retrieves its relevant 'a' twice
    run = tmp_path / "run.jsonl"
    run.write_text('{"id": "q1", "retrieved": ["a", "b"], "relevant": ["a"]}\n'
                   '{"id": "q2", "retrieved": ["b", "a", "a"], "relevant": ["a"]}\n')
    status, _, err = evaluate(capsys, "--run", str(run), "--metrics", "mrr",
                              "--duplicates", "warn")
    assert status == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"retrieval-metrics: warning: {run}: 1 ")
    assert "first: query 'q2', id 'a'" in lines[0]


def test_an_id_for_two_samples_is_refused_by_the_files_ids(tmp_path, capsys):
    """A corpus file naming two different passages 'a' (and two 'b') was ranked with the first
    of each, the others dropped in silence; it is refused as a gallery in updates is, naming
    the file's ids. A file ranked against itself with two such ids named them by their 64-bit
    codes (one was mapped back, not several). Repeats of the same passage still count once."""
    rng = np.random.default_rng(1)
    corpus = rng.normal(size=(5, 3))
    ids = np.array(["a", "b", "a", "c", "b"])
    np.savez(tmp_path / "c.npz", embeddings=corpus, ids=ids)
    np.savez(tmp_path / "q.npz", embeddings=rng.normal(size=(2, 3)), ids=np.array(["q1", "q2"]))
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\nq2 0 b 1\n")
    judged = ("--query", str(tmp_path / "q.npz"), "--qrels", str(tmp_path / "qrels.txt"),
              "--metrics", "mrr")
    status, _, err = evaluate(capsys, *judged, "--gallery", str(tmp_path / "c.npz"))
    assert status == 2 and "`ids` of the gallery items: 2 id(s)" in err
    assert "(e.g. 'b', 'a')" in err or "(e.g. 'a', 'b')" in err
    np.savez(tmp_path / "s.npz", embeddings=corpus, labels=np.array([0, 1, 0, 1, 1]), ids=ids)
    status, _, err = evaluate(capsys, str(tmp_path / "s.npz"), "--metrics", "mrr")
    assert status == 2 and "`ids` of the queries: 2 id(s)" in err
    assert "(e.g. 'b', 'a')" in err or "(e.g. 'a', 'b')" in err
    # the same passages given twice (a corpus written with a sampler's padding): kept once
    np.savez(tmp_path / "twice.npz", embeddings=corpus[[0, 1, 3, 0, 1]],
             ids=np.array(["a", "b", "c", "a", "b"]))
    np.savez(tmp_path / "once.npz", embeddings=corpus[[0, 1, 3]], ids=np.array(["a", "b", "c"]))
    outs = []
    for name in ("twice", "once"):
        status, out, _ = evaluate(capsys, *judged, "--gallery", str(tmp_path / f"{name}.npz"))
        assert status == 0
        outs.append(out.replace(f"{name}.npz", "corpus"))
    assert outs[0] == outs[1]


def test_the_heap_is_given_back_only_where_the_c_library_has_a_way(monkeypatch):
    """``--write-run`` hands the freed heap back with glibc's ``malloc_trim`` where there is
    one, and goes on where there is not: no such symbol (musl, macOS), no C library to open
    (an OSError), or Windows, whose ctypes takes no ``CDLL(None)`` (a TypeError)."""
    import ctypes

    from retrieval_metrics.cli import data

    for error in (TypeError, OSError, AttributeError):
        def refused(name, *args, error=error, **kwargs):
            raise error("argument of type 'NoneType' is not iterable")

        monkeypatch.setattr(ctypes, "CDLL", refused)
        assert data.give_back_freed() is None
    trimmed = []

    class Libc:
        def malloc_trim(self, pad: int) -> int:
            trimmed.append(pad)
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda name, *args, **kwargs: Libc())
    data.give_back_freed()
    assert trimmed == [0]


@pytest.mark.parametrize("listed", [True, False])
@pytest.mark.parametrize("ignore", [None, 3])
def test_a_labelled_run_leaves_out_what_the_ranking_leaves_out(tmp_path, capsys, monkeypatch,
                                                                listed, ignore):
    """Query and gallery files with ids, labels and cameras (re-identification): the run lists
    what the table ranks, the brute force over every pair the definitions keep. A query's own
    id among the gallery's is the query itself, the items of its label and camera are left
    out, and so are the ignore label's; kept by the ranking as it counts (``listed``), or
    listed again (where it cannot: the ignore label's items out of its gallery), the same."""
    if not listed:
        from retrieval_metrics.functional.ranking.engine import listing

        monkeypatch.setattr(listing.RunListing, "found", lambda self, num_queries: None)
    q, g = _codes(10, 5, 30), _codes(45, 5, 31)
    q_labels, g_labels = np.arange(10) % 4, np.arange(45) % 5
    q_cams, g_cams = np.arange(10) % 2, np.arange(45) % 3
    q_ids, g_ids = np.arange(100, 110), np.arange(200, 245)
    g_ids[[4, 9, 30]] = [100, 103, 107]  # queries' own ids among the gallery's: the same
    g_labels[[4, 9, 30]], g_cams[[4, 9, 30]] = q_labels[[0, 3, 7]], q_cams[[0, 3, 7]]  # samples
    np.savez(tmp_path / "q.npz", embeddings=q, labels=q_labels, cameras=q_cams, ids=q_ids)
    np.savez(tmp_path / "g.npz", embeddings=g, labels=g_labels, cameras=g_cams, ids=g_ids)
    flags = [] if ignore is None else ["--ignore-label", str(ignore)]
    status, _, err = evaluate(capsys, "--query", str(tmp_path / "q.npz"), "--gallery",
                              str(tmp_path / "g.npz"), "--similarity", "dot", "--metrics",
                              "mrr", "--write-run", str(tmp_path / "run.txt"), "--run-depth",
                              "12", *flags)
    assert status == 0, err
    excluded = {(i, j) for i in range(10) for j in range(45)
                if g_ids[j] == q_ids[i] or (g_labels[j] == q_labels[i] and g_cams[j] == q_cams[i])
                or g_labels[j] == ignore}
    brute = reference_top_k(q, g, 12, list(range(45)), excluded)
    by_query: dict[str, list[tuple[str, float]]] = {}
    for line in (tmp_path / "run.txt").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        by_query.setdefault(qid, []).append((doc, float(score)))
    for i in range(10):
        want = readers_order([(str(g_ids[j]), float(s)) for s, j in brute[i]])
        assert by_query[str(q_ids[i])] == want, i


@pytest.mark.parametrize("corpus_file", ["c.npz", "c.npy"])
@pytest.mark.parametrize("depth", ["7", "50"])
def test_device_ranks_there_with_the_cpus_values_and_run(judged, corpus_file, depth, capsys,
                                                         monkeypatch):
    """--device cuda (the emulated device): the metric and its ranking on the device, a .npy
    corpus read from disk and sent there a block at a time; the values (the JSON) and the run
    file are the CPU's, whether the evaluation's ranking listed it (depth 7) or the run was
    listed again by top_k on the device (depth 50, past the lists a pass keeps on a device
    where ties fall at a cut)."""
    import retrieval_metrics as rm
    from emulated_cuda import emulated_cuda

    seen = []
    set_gallery = rm.RetrievalMetrics.set_gallery

    def recorded(self, *args, **kwargs):
        seen.append(self.device.type)
        return set_gallery(self, *args, **kwargs)

    monkeypatch.setattr(rm.RetrievalMetrics, "set_gallery", recorded)
    tmp = judged[0]
    base = ["--query", str(tmp / "q.npz"), "--gallery", str(tmp / corpus_file), "--qrels",
            str(tmp / "qrels.tsv"), "--metrics", "ndcg@5,mrr@10,recall@20",
            "--run-depth", depth]
    outputs = {}
    for device in ("cpu", "cuda"):
        args = [*base, "--json", str(tmp / f"{device}.json"),
                "--write-run", str(tmp / f"{device}.txt")]
        if device == "cuda":
            with emulated_cuda():
                status, _, err = evaluate(capsys, *args, "--device", "cuda")
        else:
            status, _, err = evaluate(capsys, *args)
        assert status == 0, err
        report = json.loads((tmp / f"{device}.json").read_text())["runs"][0]["metrics"]
        outputs[device] = ({k: v["value"] for k, v in report.items()},
                           (tmp / f"{device}.txt").read_text())
    assert seen == ["cpu", "cuda"]
    assert outputs["cuda"] == outputs["cpu"]


def test_device_refusals(judged, capsys):
    """--device is refused by name where it would act on nothing (a --run is ranked already)
    and where torch has no such device here, before any file is read."""
    import torch

    tmp = judged[0]
    (tmp / "given.txt").write_text("q1 Q0 d01 1 0.5 x\n")
    status, _, err = evaluate(capsys, "--run", str(tmp / "given.txt"), "--qrels",
                              str(tmp / "qrels.tsv"), "--device", "cpu")
    assert status != 0 and "--device applies to embeddings" in err
    base = ["--query", str(tmp / "q.npz"), "--gallery", str(tmp / "c.npz"), "--qrels",
            str(tmp / "qrels.tsv"), "--metrics", "mrr"]
    status, _, err = evaluate(capsys, *base, "--device", "gpu0")
    assert status != 0 and "--device gpu0: " in err
    if not torch.cuda.is_available():
        status, _, err = evaluate(capsys, *base, "--device", "cuda")
        assert status != 0 and "--device cuda: " in err
    assert evaluate(capsys, *base, "--device", "cpu")[0] == 0


@pytest.mark.parametrize("flag", [None, "true", "false"])
def test_a_run_that_retrieves_the_query_itself_scores_as_beir_does(tmp_path, capsys, flag):
    """A BM25 run over a corpus that holds the queries (ArguAna, Quora) retrieves each query
    first: BEIR's evaluate (ignore_identical_ids=True, its default) pops it from the run before
    scoring, which --protocol beir now does too (and --ignore-identical-ids true on any
    protocol); false scores the run as written, as trec_eval does. Before, the self-hit counted
    as a miss at rank 1 and the flag was refused for runs (NDCG@10 0.622 where BEIR gives 0.807)."""
    import copy
    import logging

    evaluation = pytest.importorskip("beir.retrieval.evaluation")
    run = {"q1": {"q1": 0.9, "d1": 0.8, "d2": 0.7}, "q2": {"d3": 0.9, "q2": 0.8}}
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1, "d4": 1}}
    lines = [f"{q} Q0 {d} {r} {s} bm25" for q, docs in run.items()
             for r, (d, s) in enumerate(docs.items(), 1)]
    (tmp_path / "run.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    flags = [] if flag is None else ["--ignore-identical-ids", flag]
    status, _, err = evaluate(capsys, "--run", str(tmp_path / "run.txt"), "--qrels",
                              str(tmp_path / "qrels.txt"), "--protocol", "beir", "--metrics",
                              "NDCG@10,P@1,MAP@10", "--json", str(tmp_path / "o.json"), *flags)
    assert status == 0, err
    got = {k: v["value"] for k, v in
           json.loads((tmp_path / "o.json").read_text())["runs"][0]["metrics"].items()}
    logging.disable(logging.CRITICAL)
    try:
        ndcg, map_, _, precision = evaluation.EvaluateRetrieval.evaluate(
            qrels, copy.deepcopy(run), [1, 10], ignore_identical_ids=flag != "false")
    finally:
        logging.disable(logging.NOTSET)
    assert got == pytest.approx(
        {"ndcg@10": ndcg["NDCG@10"], "precision@1": precision["P@1"], "map@10": map_["MAP@10"]},
        abs=1e-5)
    if flag != "false":  # by hand: d1 first for q1, d3 first for q2 (of 2 relevant)
        assert got["precision@1"] == 1.0 and got["map@10"] == pytest.approx(0.75)
