"""Run and qrels readers (retrieval_metrics.formats) and ``evaluate --run/--qrels`` on them.

The JSON path is held against pytrec_eval (trec_eval's own C code) and ranx on the same files;
the other formats against hand-worked values and against the same data written as TREC files.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from retrieval_metrics import cli
from retrieval_metrics.formats import (
    FormatError,
    read_qrels,
    read_ranked_lists,
    read_run,
)

# ----------------------------------------------------------------------------- hand-worked


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_json_run_ranks_like_trec_eval(tmp_path):
    # ties broken by document id in descending byte order: "9" > "2" > "10"
    run = write(tmp_path / "run.json", json.dumps({"q1": {"10": 1.0, "9": 1.0, "2": 1.0, "5": 2}}))
    lists, own = read_run(run)
    assert own is None
    assert lists == {"q1": ["5", "9", "2", "10"]}


def test_beir_tsv_qrels(tmp_path):
    path = write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\tdoc 1\t1\nq1\td2\t0\n"
                 "q2\td3\t2\n")  # fmt: skip
    assert read_qrels(path) == {"q1": {"doc 1": 1, "d2": 0}, "q2": {"d3": 2}}
    # without the header every line is a judgment
    path = write(tmp_path / "plain.tsv", "q1\td1\t1\n")
    assert read_qrels(path) == {"q1": {"d1": 1}}
    # a header that names the columns otherwise (BEIR's loader skips any first line): it was
    # refused as "relevance 'score' is not an integer" (found by an audit)
    for header in ("query_id\tcorpus_id\tscore", "qid\tdocid\trel"):
        path = write(tmp_path / "named.tsv", f"{header}\nq1\tdoc 1\t1\nq2\td3\t2\n")
        assert read_qrels(path) == {"q1": {"doc 1": 1}, "q2": {"d3": 2}}
    # and a score that is no integer on a later line is still refused by name
    path = write(tmp_path / "bad.tsv", "query_id\tcorpus_id\tscore\nq1\td1\tx\n")
    with pytest.raises(FormatError, match=r"bad.tsv, line 2: relevance 'x' is not an integer"):
        read_qrels(path)


def test_jsonl_questions_with_their_relevant_ids(tmp_path):
    lines = [
        {"id": "a", "retrieved": ["d3", "d7", "d1"], "relevant": ["d1", "d9"]},
        {"id": "b", "retrieved": ["d4", "d5"], "relevant": {"d4": 2, "d6": 1, "d8": 0}},
        {"id": 7, "retrieved": ["d1"], "relevant": []},  # unanswerable
    ]
    path = write(tmp_path / "q.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    lists = read_ranked_lists(path)
    assert lists.qids == ["7", "a", "b"]
    assert lists.ranked_ids == [["d1"], ["d3", "d7", "d1"], ["d4", "d5"]]
    # a grade above 1 makes every query graded; grade 0 is not relevant
    assert lists.relevant_ids == [{}, {"d1": 1, "d9": 1}, {"d4": 2, "d6": 1}]

    # recall@3: a finds 1 of 2, b finds 1 of 2; the unanswerable question follows empty_queries
    for empty, expected in (("skip", 0.5), ("zero", 1 / 3)):
        m = rm.RecallAtK(k=3, empty_queries=empty)
        m.update(ranked_ids=lists.ranked_ids, relevant_ids=lists.relevant_ids)
        assert float(m.compute()) == pytest.approx(expected)
    m = rm.RecallAtK(k=3, empty_queries="error")
    m.update(ranked_ids=lists.ranked_ids, relevant_ids=lists.relevant_ids)
    with pytest.raises(ValueError, match="1 queries have no relevant"):
        m.compute()


def test_jsonl_run_with_separate_qrels(tmp_path):
    run = write(tmp_path / "run.jsonl", '{"id": "q1", "retrieved": ["d2", "d1"]}\n'
                '{"id": "q2", "retrieved": []}\n{"id": "q9", "retrieved": ["d1"]}\n')  # fmt: skip
    qrels = write(tmp_path / "qrels.jsonl", "".join(
        f'{{"id": "{q}", "relevant": ["d1"]}}\n' for q in ("q1", "q2", "q3")
    ))  # fmt: skip
    lists = read_ranked_lists(run, qrels)
    assert lists.qids == ["q1", "q2"]
    assert lists.notes == {"run_queries_without_qrels": 1, "qrels_queries_without_run": 1}
    complete = read_ranked_lists(run, qrels, complete=True)
    assert complete.qids == ["q1", "q2", "q3"] and complete.ranked_ids[2] == []


def test_every_format_gives_the_same_report(tmp_path):
    """One run and its qrels written as TREC, JSON, BEIR TSV and JSONL: the same values."""
    rng = random.Random(3)
    run = {
        f"q{q}": {f"d{d}": round(rng.random(), 1) for d in rng.sample(range(40), 12)}
        for q in range(15)
    }
    qrels = {f"q{q}": {f"d{d}": rng.randint(0, 2) for d in rng.sample(range(40), 5)}
             for q in range(15)}  # fmt: skip
    write(tmp_path / "run.txt", "".join(
        f"{q} Q0 {d} {i + 1} {s} t\n"
        for q, docs in run.items()
        for i, (d, s) in enumerate(docs.items())
    ))  # fmt: skip
    write(tmp_path / "qrels.txt", "".join(
        f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()
    ))  # fmt: skip
    write(tmp_path / "run.json", json.dumps(run, indent=1))
    write(tmp_path / "qrels.json", json.dumps(qrels, indent=1))
    write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items()
    ))  # fmt: skip
    ordered, _ = read_run(tmp_path / "run.json")
    write(tmp_path / "both.jsonl", "".join(
        json.dumps({"id": q, "retrieved": ordered[q], "relevant": qrels[q]}) + "\n" for q in run
    ))  # fmt: skip
    names = "map,ndcg@10,precision@5,recall@10,mrr,r_precision"
    reports = []
    for files in (["--run", "run.txt", "--qrels", "qrels.txt"],
                  ["--run", "run.json", "--qrels", "qrels.json"],
                  ["--run", "run.json", "--qrels", "qrels.tsv"],
                  ["--run", "run.txt", "--qrels", "qrels.tsv"],
                  ["--run", "both.jsonl"]):  # fmt: skip
        out = tmp_path / "out.json"
        argv = [a if a.startswith("--") else str(tmp_path / a) for a in files]
        assert cli.main(["evaluate", *argv, "--metrics", names, "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text())["runs"][0]["metrics"])
    for report in reports[1:]:
        assert report == reports[0]


# ----------------------------------------------------------------------------- peers


def random_run_and_qrels(seed: int, ties: bool) -> tuple[dict, dict]:
    """Numeric doc ids (so byte order differs from numeric order), graded judgments, a query
    with no relevant document, run queries without judgments and judged queries without a run."""
    rng = random.Random(seed)
    run, qrels = {}, {}
    for q in range(30):
        docs = rng.sample(range(200), rng.randint(1, 40))
        if ties:
            run[f"q{q}"] = {str(d): float(rng.randint(0, 6)) for d in docs}
        else:
            run[f"q{q}"] = {str(d): rng.random() for d in docs}
        judged = rng.sample(range(200), 8) + docs[:2]
        qrels[f"q{q}"] = {str(d): rng.choice((0, 0, 1, 2)) for d in judged}
    qrels["q0"] = {d: 0 for d in qrels["q0"]}  # judged, nothing relevant
    qrels["q_only_judged"] = {"1": 1}
    run["q_only_run"] = {"1": 1.0}
    return run, qrels


PYTREC = {
    "map": "map",
    "map@10": "map_cut_10",
    "ndcg@10": "ndcg_cut_10",
    "ndcg": "ndcg",
    "precision@5": "P_5",
    "recall@10": "recall_10",
    "mrr": "recip_rank",
    "r_precision": "Rprec",
    "hit_rate@5": "success_5",
}


@pytest.mark.parametrize("ties", [True, False])
def test_json_run_and_qrels_match_pytrec_eval(tmp_path, ties):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = random_run_and_qrels(1 if ties else 2, ties)
    (tmp_path / "run.json").write_text(json.dumps(run, indent=2))
    (tmp_path / "qrels.json").write_text(json.dumps(qrels, indent=2))
    out = tmp_path / "out.json"
    files = ["--run", str(tmp_path / "run.json"), "--qrels", str(tmp_path / "qrels.json")]
    argv = ["evaluate", *files, "--metrics", ",".join(PYTREC), "--json", str(out)]
    assert cli.main(argv) == 0
    got = json.loads(out.read_text())["runs"][0]["metrics"]

    measures = {"map", "map_cut.10", "ndcg_cut.10", "ndcg", "P.5", "recall.10", "recip_rank",
                "Rprec", "success.5"}  # fmt: skip
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    # trec_eval 9 averages over the run's queries that have judgments
    assert sorted(per_query) == sorted(q for q in run if q in qrels)
    for name, key in PYTREC.items():
        expected = sum(v[key] for v in per_query.values()) / len(per_query)
        assert got[name]["value"] == pytest.approx(expected, abs=1e-12), name
        assert got[name]["queries"] == len(per_query)

    # -c: every judged query, missing ones as empty lists (scored 0, as trec_eval -c)
    assert cli.main([*argv, "-c"]) == 0
    got = json.loads(out.read_text())["runs"][0]["metrics"]
    for name, key in PYTREC.items():
        expected = sum(v[key] for v in per_query.values()) / len(qrels)
        assert got[name]["value"] == pytest.approx(expected, abs=1e-12), name


def test_json_run_and_qrels_match_ranx(tmp_path):
    """ranx on a run without ties (ranx's own tie order is not trec_eval's) and the same
    queries on both sides (ranx requires it); ranx scores a query without relevant documents 0,
    as the trec_eval protocol does."""
    ranx = pytest.importorskip("ranx")
    run, qrels = random_run_and_qrels(4, ties=False)
    common = sorted(set(run) & set(qrels))
    run = {q: run[q] for q in common}
    qrels = {q: qrels[q] for q in common}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "qrels.json").write_text(json.dumps(qrels))
    names = {"map": "map", "ndcg@10": "ndcg@10", "precision@5": "precision@5",
             "recall@10": "recall@10", "mrr": "mrr", "mrr@5": "mrr@5",
             "r_precision": "r-precision", "hit_rate@5": "hit_rate@5"}  # fmt: skip
    out = tmp_path / "out.json"
    assert cli.main(["evaluate", "--run", str(tmp_path / "run.json"), "--qrels",
                     str(tmp_path / "qrels.json"), "--metrics", ",".join(names),
                     "--json", str(out)]) == 0  # fmt: skip
    got = json.loads(out.read_text())["runs"][0]["metrics"]
    expected = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(names.values()))
    for ours, theirs in names.items():
        assert got[ours]["value"] == pytest.approx(float(expected[theirs]), abs=1e-9), ours


# ----------------------------------------------------------------------------- bad lines


def error(path: Path, reader=read_run) -> str:
    with pytest.raises(FormatError) as info:
        reader(path)
    return str(info.value)


def test_bad_lines_name_the_file_and_line(tmp_path):
    cases = [
        # (file name, content, reader, what the message must hold)
        ("r.txt", "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 x t\n", read_run, ["r.txt, line 2", "'x'"]),
        ("r.txt", "q1 Q0 d1 1 0.5 t\n\nq1 Q0 d2 2\n", read_run, ["line 3", "6 fields"]),
        ("q.txt", "q1 0 d1 1\nq1 0 d2 high\n", read_qrels, ["q.txt, line 2", "'high'"]),
        ("q.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1 d2 1\n", read_qrels,
         ["q.tsv, line 3", "3 tab-separated fields"]),
        ("q.tsv", "query-id\tcorpus-id\tscore\nq1\td1\tyes\n", read_qrels,
         ["q.tsv, line 2", "'yes'"]),
        ("r.json", '{\n "q1": {\n  "d1": 1.0,\n  "d2": "high"\n }\n}', read_run,
         ["r.json, line 4", "'d2'", "not a number"]),
        ("r.json", '{\n "q1": {\n  "d1": 1.0,\n  "d1": 2.0\n }\n}', read_run,
         ["r.json, line 4", "'d1' listed twice"]),
        ("r.json", '{\n "q1": {"d1": 1.0},\n "q2": [1, 2]\n}', read_run,
         ["r.json, line 3", "'q2'", "expected an object"]),
        ("r.json", '{\n "q1": {"d1": 1.0,}\n}', read_run, ["r.json, line 2", "not valid JSON"]),
        ("q.json", '{\n "q1": {\n  "d1": 1.5\n }\n}', read_qrels,
         ["q.json, line 3", "not an integer"]),
        ("q.json", "[1, 2]", read_qrels, ["q.json, line 1", "must be a JSON object"]),
        ("r.jsonl", '{"id": "q1", "retrieved": ["d1"]}\n{"id": "q2"}\n', read_run,
         ["r.jsonl, line 2", '"retrieved"']),
        ("r.jsonl", '{"id": "q1", "retrieved": ["d1"]}\n{"id": "q2", "retrieved": "d1"}\n',
         read_run, ["line 2", "must be a list"]),
        ("r.jsonl", '{"id": "q1", "retrieved": ["d1", "d2", "d1"]}\n',
         functools.partial(read_run, duplicates="error"), ["line 1", "'d1' twice"]),
        ("r.jsonl", '{"id": "q1", "retrieved": ["d1"], "relevant": ["d1"]}\n'
         '{"id": "q2", "retrieved": ["d1"]}\n', read_run, ["r.jsonl, line 2", "lacks"]),
        ("r.jsonl", '{"id": "q1", "retrieved": ["d1"]}\n{"id": "q1", "retrieved": []}\n',
         read_run, ["line 2", "'q1' appears twice"]),
        ("r.jsonl", '{"id": "q1", "retrieved": ["d1"]}\n{"id": "q2", "retrieved": [\n',
         read_run, ["r.jsonl, line 2", "not valid JSON"]),
        ("q.jsonl", '{"id": "q1", "relevant": {"d1": "yes"}}\n', read_qrels,
         ["q.jsonl, line 1", "not an integer"]),
        ("q.jsonl", '{"relevant": ["d1"]}\n', read_qrels, ["q.jsonl, line 1", '"id"']),
        # (found by an audit) Python reads "1_0" as 10, trec_eval's atof and atoi as 1
        ("r.txt", "q1 Q0 d1 1 1_0 t\n", read_run, ["r.txt, line 1", "'1_0' is not a number"]),
        ("q.txt", "q1 0 d1 1_0\n", read_qrels, ["q.txt, line 1", "'1_0' is not an integer"]),
        # (a second audit) and "٣" (Arabic-Indic) or "３" (fullwidth) as 3, trec_eval as 0
        ("r.txt", "q1 Q0 d1 1 \u0663 t\n", read_run,
         ["r.txt, line 1", "'\u0663' is not a number"]),
        ("q.txt", "q1 0 d1 \uff13\n", read_qrels, ["q.txt, line 1", "'\uff13' is not an integer"]),
        # an integer beyond a double's range: one line naming the file, not an OverflowError
        ("r.json", '{"q1": {"d1": 1' + "0" * 400 + "}}", read_run,
         ["r.json, line 1", "'d1'", "is not finite"]),
        ("q.json", '{"q1": {"d1": 1' + "0" * 400 + "}}", read_qrels,
         ["q.json, line 1", "out of the range of a 64-bit integer"]),
    ]  # fmt: skip
    for name, content, reader, expected in cases:
        message = error(write(tmp_path / name, content), reader)
        for part in expected:
            assert part in message, (name, content, message)


def test_empty_missing_and_misplaced_files(tmp_path):
    assert "no such file" in error(tmp_path / "nothing.json")
    assert "the run is empty" in error(write(tmp_path / "e.json", "{}"))
    assert "no questions" in error(write(tmp_path / "e.jsonl", "\n\n"))
    assert "the qrels are empty" in error(write(tmp_path / "e.tsv", "query-id\tcorpus-id\tscore\n"),
                                          read_qrels)  # fmt: skip
    both = write(tmp_path / "both.jsonl", '{"id": "q1", "retrieved": ["d1"], "relevant": ["d1"]}\n')
    qrels = write(tmp_path / "q.txt", "q1 0 d1 1\n")
    with pytest.raises(FormatError, match="its own qrels"):
        read_ranked_lists(both, qrels)
    with pytest.raises(FormatError, match="needs judgments"):
        read_ranked_lists(write(tmp_path / "r.json", '{"q1": {"d1": 1}}'))


def test_cli_reports_the_bad_line(tmp_path, capsys):
    write(tmp_path / "run.json", '{\n "q1": {\n  "d1": "high"\n }\n}\n')
    write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    status = cli.main(["evaluate", "--run", str(tmp_path / "run.json"), "--qrels",
                       str(tmp_path / "qrels.tsv")])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and "run.json, line 3" in err and "not a number" in err
    both = write(tmp_path / "both.jsonl", '{"id": "q1", "retrieved": ["d1"], "relevant": ["d1"]}\n')
    assert cli.main(["evaluate", "--run", str(both), "--qrels", str(tmp_path / "qrels.tsv")]) == 2
    assert "drop the qrels file" in capsys.readouterr().err
    assert cli.main(["evaluate", "--run", str(tmp_path / "run.json")]) == 2
    assert "--qrels" in capsys.readouterr().err


def test_a_byte_order_mark_is_no_part_of_the_first_id(tmp_path):
    """A UTF-8 byte order mark (some Windows editors write one) became part of the first query's
    id, which then met no judgment: MAP 0.25 for 0.75 (found by an audit)."""
    run = "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq2 Q0 d3 1 1.0 t\n"
    qrels = "q1 0 d1 1\nq2 0 d3 1\n"
    values = []
    for bom in ("", "\ufeff"):
        (tmp_path / "run.txt").write_text(bom + run, encoding="utf-8")
        (tmp_path / "qrels.txt").write_text(bom + qrels, encoding="utf-8")
        assert set(read_run(tmp_path / "run.txt")[0]) == {"q1", "q2"}
        lists = read_ranked_lists(tmp_path / "run.txt", tmp_path / "qrels.txt")
        assert sorted(lists.qids) == ["q1", "q2"]
        values.append(lists.relevant_ids)
    assert values[0] == values[1]


def test_write_run_refuses_one_query_given_twice(tmp_path):
    """7 and "7" are one query id: two lists for it wrote one of them silently (found by an
    audit)."""
    from retrieval_metrics.formats import write_run

    with pytest.raises(ValueError, match=r"`run` gives query '7' twice \(7 and '7'"):
        write_run({7: [("a", 1.0)], "7": [("b", 2.0)]}, tmp_path / "r.trec")
    assert not (tmp_path / "r.trec").exists()


def test_lines_end_at_newline_alone(tmp_path):
    """JSON keeps U+2028, U+2029, U+0085 and form feeds inside strings, and JSON Lines ends a
    line at '\\n' alone: the readers split lines with str.splitlines(), which also breaks at
    those, so a valid file was refused ("Unterminated string") and every later line number was
    off (found by an audit). CRLF still ends a line."""
    odd = ["chunk\u2028one", "p\u2029q", "nel\u0085x", "ff\x0cy", "gs\x1dz"]
    rows = [{"id": "q1", "retrieved": [odd[0], odd[1], "d2"], "relevant": [odd[1]]},
            {"id": "q\u20282", "retrieved": odd[2:], "relevant": {odd[4]: 2}}]
    text = "\r\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\r\n"
    run = write(tmp_path / "run.jsonl", text)
    assert read_run(run) == ({"q1": [odd[0], odd[1], "d2"], "q\u20282": odd[2:]},
                             {"q1": {odd[1]: 1}, "q\u20282": {odd[4]: 2}})
    # a bad third line is named line 3, whatever the lines above hold
    bad = write(tmp_path / "bad.jsonl", text + '{"id": "q3", "retrieved": ["a"]\n')
    with pytest.raises(FormatError, match=r"bad.jsonl, line 3: not valid JSON"):
        read_run(bad)
    # (TREC: a U+2028 ending line 1 counted as a line of its own, so line 2 was named line 3)
    qrels = write(tmp_path / "qrels.txt", "q1 0 a 1\u2028\nq1 0 b x\n")
    with pytest.raises(FormatError, match=r"qrels.txt, line 2: "):
        read_qrels(qrels)


def test_write_run_refuses_ids_that_are_not_text_or_integers(tmp_path):
    """write_run made ids text with str(): bytes ids (np.bytes_, as h5py gives them) were
    written as b'd1', and a float id as 1.0 (found by an audit). A str or an int is written;
    anything else is refused by name."""
    from retrieval_metrics.formats import write_run

    path = tmp_path / "r.txt"
    with pytest.raises(ValueError, match=r"`run\['q1'\]`'s document id must be a str or an int, "
                                         r"got np.bytes_\(b'd1'\) .*decode bytes first"):
        write_run({"q1": {np.bytes_(b"d1"): 1.0}}, path)
    with pytest.raises(ValueError, match=r"`run`'s query id must be a str or an int, got b'q1'"):
        write_run({b"q1": [("d1", 1.0)]}, path)
    with pytest.raises(ValueError, match=r"document id must be a str or an int, got 1.0 \(float"):
        write_run({"q1": [(1.0, 1.0)]}, path.with_suffix(".jsonl"))
    assert not path.exists() and not path.with_suffix(".jsonl").exists()
    write_run({np.int64(3): {np.str_("x"): 1.0, 7: 0.5}}, path)
    assert path.read_text() == "3 Q0 x 1 1.0 retrieval-metrics\n3 Q0 7 2 0.5 retrieval-metrics\n"


# ----------------------------------------------------------------------------- write_run (audit)


def _read_back(path: Path) -> list[str]:
    return read_run(path)[0]["q1"]


@pytest.mark.parametrize("suffix", [".txt", ".json", ".jsonl"])
def test_write_run_ranks_a_dict_by_its_scores(tmp_path, suffix):
    """A {document: score} dict (ranx's and pytrec_eval's form) was written in dict order: the
    TREC rank 1 went to the lowest score, and a .jsonl copy read back lowest first (found by an
    audit). By hand: 0.75 > 0.5 > 0.25, and the tie of c and a at 1.0 goes to c (document id
    descending, trec_eval's rule)."""
    from retrieval_metrics.formats import write_run

    path = write_run({"q1": {"d1": 0.25, "d3": 0.5, "d2": 0.75}}, tmp_path / f"run{suffix}")
    assert _read_back(path) == ["d2", "d3", "d1"]
    if suffix == ".txt":
        lines = [line.split() for line in path.read_text().splitlines()]
        assert [(f[2], f[3], f[4]) for f in lines] == [("d2", "1", "0.75"), ("d3", "2", "0.5"),
                                                       ("d1", "3", "0.25")]
    elif suffix == ".jsonl":
        row = json.loads(path.read_text())
        assert row["retrieved"] == ["d2", "d3", "d1"] and row["scores"] == [0.75, 0.5, 0.25]
    tied = write_run({"q1": {"a": 1.0, "b": 0.5, "c": 1.0}}, tmp_path / f"tied{suffix}")
    assert _read_back(tied) == ["c", "a", "b"]


@pytest.mark.parametrize("suffix", [".txt", ".json", ".jsonl"])
def test_tied_scores_are_written_in_the_readers_order(tmp_path, suffix):
    """Four tied documents given best first as a, b, c, d: the TREC reader ranked them d, c, b, a
    (id descending) and the .jsonl reader, which takes the order listed, a, b, c, d; MRR 0.25
    against 1.0 for one written ranking (found by an audit). Now every format lists and reads
    them d, c, b, a: the relevant a 4th, MRR 1/4 as trec_eval gives."""
    from retrieval_metrics.formats import write_run

    pairs = [(doc, 0.5) for doc in "abcd"] + [("e", 0.25)]
    path = write_run({"q1": pairs}, tmp_path / f"run{suffix}")
    assert _read_back(path) == ["d", "c", "b", "a", "e"]
    lists = read_ranked_lists(path, write(tmp_path / "qrels.txt", "q1 0 a 1\n"))
    m = rm.RetrievalMetrics(["mrr"])
    m.update(ranked_ids=lists.ranked_ids, relevant_ids=lists.relevant_ids)
    assert float(m.compute()["mrr"]) == 0.25


def test_write_run_refuses_pairs_that_are_not_best_first(tmp_path):
    """Pairs given as a list are best first: scores that rise (distances, say) were written
    with rank 1 at the lowest score; which order was meant is unknown, so they are refused."""
    from retrieval_metrics.formats import write_run

    with pytest.raises(ValueError, match=r"`run\['q1'\]` must list its .* best first, but 'd2' "
                                         r"\(score 0.9\) comes after 'd1' \(score 0.1\)"):
        write_run({"q1": [("d1", 0.1), ("d2", 0.9)]}, tmp_path / "r.txt")
    assert not (tmp_path / "r.txt").exists()
    with pytest.raises(ValueError, match=r"`run\['q1'\]`, document 'd1': the score 'high' is "
                                         "not a number"):
        write_run({"q1": [("d1", "high")]}, tmp_path / "r.txt")


@pytest.mark.parametrize("suffix", [".txt", ".json", ".jsonl"])
def test_float64_scores_equal_as_float32_are_written_as_the_readers_tie_them(tmp_path, suffix):
    """1.0 and 0.999999999 are one float32 (the readers, as trec_eval 9 and pytrec_eval, compare
    scores so): the TREC copy read back b, a (id descending) and the .jsonl copy a, b (found by
    an audit). Written in that tie order, every copy reads b, a; the scores stay in full."""
    from retrieval_metrics.formats import write_run

    assert float(np.float32(1.0)) == float(np.float32(0.999999999))  # (the premise)
    path = write_run({"q1": [("a", 1.0), ("b", 0.999999999), ("c", 0.5)]},
                     tmp_path / f"run{suffix}")
    assert _read_back(path) == ["b", "a", "c"]
    assert "0.999999999" in path.read_text()


# ----------------------------------------------------------------------------- comments (audit)


def test_trec_comment_lines_are_skipped_as_trec_eval_10_skips_them(tmp_path, capsys):
    """'# pool depth 100' has 4 fields ending in a number: it became query '#', document 'depth',
    grade 100 (and made the qrels graded); with -c it was scored, MAP 0.3333 (found by an
    audit). A line that starts with '#' is a comment (trec_eval 10): by hand, -c over q1 (AP 1)
    and q2 (not retrieved, AP 0) gives MAP 0.5, trec_eval 10's value."""
    from retrieval_metrics.formats import read_trec_qrels, read_trec_run

    qrels = write(tmp_path / "qrels.txt", "# pool depth 100\nq1 0 a 1\nq2 0 b 1\n")
    run = write(tmp_path / "run.txt", "# run: bm25 top 2\nq1 Q0 a 1 2 t\nq1 Q0 c 2 1 t\n")
    assert read_trec_qrels(qrels) == {"q1": {"a": 1}, "q2": {"b": 1}}
    assert read_trec_run(run) == {"q1": {"a": 2.0, "c": 1.0}}
    status = cli.main(["evaluate", "--run", str(run), "--qrels", str(qrels), "-c", "--metrics",
                       "map", "--bootstrap", "10", "--json", str(tmp_path / "out.json")])
    assert status == 0
    entry = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert entry["queries"] == 2 and entry["metrics"]["map"]["value"] == 0.5
    # a '#' after blanks: a comment or a query id? refused, naming the line
    indented = write(tmp_path / "indented.txt", "q1 0 a 1\n  # pool depth 100\n")
    assert "indented.txt, line 2" in error(indented, read_trec_qrels)


def test_trec_fields_split_at_ascii_blanks_as_trec_eval_reads_them(tmp_path):
    """A non-breaking space (or another Unicode space) inside an id is part of the id, as
    trec_eval's C reads it; str.split() cut there, and the line had too many fields."""
    from retrieval_metrics.formats import read_trec_qrels, read_trec_run

    nbsp, ideographic = "\u00a0", "\u3000"
    qrels = write(tmp_path / "qrels.txt", f"q1 0 doc{nbsp}1 1\nq1\t0\tdoc{ideographic}2\t0\n")
    run = write(tmp_path / "run.txt", f"q1 Q0 doc{nbsp}1 1 2.5 t\n")
    assert read_trec_qrels(qrels) == {"q1": {f"doc{nbsp}1": 1, f"doc{ideographic}2": 0}}
    assert read_trec_run(run) == {"q1": {f"doc{nbsp}1": 2.5}}


def test_a_trec_qrels_in_a_tsv_is_told_how_to_be_read(tmp_path):
    """MS MARCO's qrels.dev.tsv is TREC qrels with tabs; read as BEIR's .tsv it was refused
    with only the field count."""
    from retrieval_metrics.formats import read_qrels

    tsv = write(tmp_path / "qrels.dev.tsv", "1102432\t0\t2026790\t1\n")
    message = error(tsv, read_qrels)
    assert "got 4" in message and "another extension" in message
    trec = write(tmp_path / "qrels.dev.txt", "1102432\t0\t2026790\t1\n")
    assert read_qrels(trec) == {"1102432": {"2026790": 1}}


# ----------------------------------------------------------------------------- converters (audit)


def test_converters_refuse_what_the_file_readers_refuse():
    """trec_run_to_lists and ir_measures_per_query ranked a NaN score wherever the input put it
    (RR 1.0 for a NaN relevant document), truncated a grade 0.5 to 0 and read True and "2" as
    grades (found by an audit); each is now a ValueError naming the argument, the query and the
    document."""
    from retrieval_metrics.formats import ir_measures_per_query, trec_eval_order, trec_run_to_lists

    nan = float("nan")
    bad_runs = [({"q": {"a": 1.0, "b": nan}}, "`run`, query 'q', document 'b': the score is NaN"),
                ({"q": {"a": "high"}}, "`run`, query 'q', document 'a': the score 'high' is not"),
                ({"q": {"a": True}}, "`run`, query 'q', document 'a': the score True is not"),
                ({"q": {"a": float("inf")}}, "document 'a': the score inf is not finite")]
    for run, message in bad_runs:
        for convert in (lambda r: trec_run_to_lists(r, {"q": {"a": 1}}),
                        lambda r: ir_measures_per_query(r, {"q": {"a": 1}}, ["RR"])):
            with pytest.raises(ValueError) as info:
                convert(run)
            assert message in str(info.value), (run, str(info.value))
    for grade in (0.5, True, "2"):
        for convert in (lambda q: trec_run_to_lists({"q": {"a": 1.0}}, q),
                        lambda q: ir_measures_per_query({"q": {"a": 1.0}}, q, ["RR"])):
            with pytest.raises(ValueError) as info:
                convert({"q": {"a": grade}})
            assert f"`qrels`, query 'q', document 'a': the grade {grade!r} is not an integer" \
                in str(info.value)
    with pytest.raises(ValueError, match="document 'b' has the score nan"):
        trec_eval_order({"a": 1.0, "b": nan})
    # whole numbers of any type are grades, numbers of any type scores: by hand, b (2) above a
    ranked, relevant, _ = trec_run_to_lists({"q": {"a": np.float32(1), "b": np.int64(2)}},
                                            {"q": {"a": np.int64(2), "b": 1.0}})
    assert ranked == [["b", "a"]] and relevant == [{"a": 2, "b": 1}]
    assert all(type(g) is int for g in relevant[0].values())


def test_a_float16_pt_file_stays_float16(tmp_path):
    """A .pt file's float16 embeddings were upcast to float32 on loading (twice the memory; a
    .npy of float16 stays float16); bfloat16, which numpy lacks, is widened exactly."""
    from retrieval_metrics.formats.embeddings import load_items

    emb = torch.tensor([[1.0, 0.5], [0.25, -1.0], [3.0, 2.0]])
    labels = torch.tensor([0, 0, 1])
    torch.save({"embeddings": emb.half(), "labels": labels}, tmp_path / "half.pt")
    torch.save({"embeddings": emb.bfloat16(), "labels": labels}, tmp_path / "brain.pt")
    half = load_items(tmp_path / "half.pt")
    assert half.embeddings.dtype == np.float16
    np.testing.assert_array_equal(half.embeddings.astype(np.float32), emb.numpy())
    brain = load_items(tmp_path / "brain.pt")
    assert brain.embeddings.dtype == np.float32
    np.testing.assert_array_equal(brain.embeddings, emb.numpy())


@settings(max_examples=200, deadline=None)
@given(
    run=st.dictionaries(
        st.text(alphabet=st.sampled_from(["a", "b", "z", "é", "日", "\U0001f600", "0", "9"]),
                min_size=1, max_size=4),
        st.sampled_from([0.1, 0.100000001, 0.5, -0.0, 0.0, 1e-30, 3.0, -2.5, 1e39]),
        max_size=12,
    )
)
def test_trec_eval_order_is_float32_scores_then_ids_in_descending_byte_order(run):
    """trec_eval_order against its definition, the ids compared as their UTF-8 bytes (a longer
    id before its prefix, "z" before "é" before "日"): scores as float32 (0.1 and 0.100000001
    tie; 1e39 is float32's inf), ties by id in descending byte order. Ids of prefixes, of
    several bytes a character and of four."""
    from retrieval_metrics.formats import trec_eval_order

    def descending_bytes(doc):
        return [-b for b in doc.encode()] + [1]

    with np.errstate(over="ignore"):
        expected = sorted(run, key=lambda d: (-float(np.float32(run[d])), descending_bytes(d)))
        assert trec_eval_order(run) == expected


@pytest.mark.parametrize("space", [" ", "\t", "\u00a0", "\u2003", "\u3000", "\x1c", "\x85"])
def test_a_trec_run_refuses_any_character_python_calls_space(space, tmp_path):
    """A TREC run's ids are words: an id holding any character str.isspace() calls space (the
    no-break and ideographic spaces, the file separators, NEL) is refused, by name, where the
    same run is written to .jsonl as it is."""
    from retrieval_metrics.formats import write_run

    for run, named in (({"q1": [(f"d{space}1", 0.5)]}, f"d{space}1"),
                       ({"q1": [("d0", 0.9), (f"d{space}1", 0.5)]}, f"d{space}1"),
                       ({f"q{space}1": [("d1", 0.5)]}, "d1")):
        with pytest.raises(ValueError, match="a TREC run's ids are words without spaces") as err:
            write_run(run, tmp_path / "run.txt")
        assert f"document {named!r}" in str(err.value)  # the id that is no word, by name
        write_run(run, tmp_path / "run.jsonl")


def test_a_trec_run_is_read_a_line_at_a_time(tmp_path):
    """read_trec_run splits and files one line at a time: 100,000 lines (3 MiB) peak at about
    twice what the run they make holds, where holding every line's fields first peaked at 6x
    (62 MiB), and at 2,000,000 lines kept the garbage collector walking millions of lists (9.8
    s to read, 2.7 s a line at a time). The values are the lines'."""
    import tracemalloc

    from retrieval_metrics.formats import read_trec_run

    path = tmp_path / "run.txt"
    gen = random.Random(0)
    docs = {q: [f"d{gen.randrange(10**6)}-{r}" for r in range(1000)] for q in range(100)}
    with open(path, "w") as out:
        for q, listed in docs.items():
            out.write("".join(f"q{q} Q0 {doc} {r + 1} {1000 - r}.5 run\n"
                              for r, doc in enumerate(listed)))
    tracemalloc.start()
    try:
        run = read_trec_run(path)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * kept, (peak, kept)
    assert run == {f"q{q}": {doc: 1000 - r + 0.5 for r, doc in enumerate(listed)}
                   for q, listed in docs.items()}


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70),
        st.sampled_from([10**400, -(10**400), 2**63, -(2**63), -(2**63) - 1, True, False]),
        st.text(max_size=2), st.none(),
    ), max_size=6),
    what=st.sampled_from(["run", "qrels"]),
)
def test_a_json_files_values_are_checked_a_query_at_a_time_as_one_at_a_time(values, what):
    """The check of a JSON run's scores and a JSON qrels' grades takes a query's values in one
    array where they are all floats or ints; it finds a problem exactly where the check of each
    value alone finds one: NaN and infinities, ints beyond a double (10**400) or beyond 64 bits
    (a grade of 2**63), bools, text and null."""
    from retrieval_metrics.formats import json_files

    docs = {f"d{i}": value for i, value in enumerate(values)}
    one_at_a_time = any(json_files._value_problem(v, what) for v in docs.values())
    assert json_files._any_value_problem(docs.values(), what) == one_at_a_time


_FAULTS = {
    "id twice": lambda pairs, at: pairs.insert(at, pairs[0]),
    "a rise": lambda pairs, at: pairs.insert(at, ("rises", float(pairs[0][1]) + 1.0)),
    "nan": lambda pairs, at: pairs.insert(at, ("nan", float("nan"))),
    "inf": lambda pairs, at: pairs.insert(at, ("inf", float("inf"))),
    "a space": lambda pairs, at: pairs.insert(at, ("x y", float(pairs[at - 1][1]))),
    "empty id": lambda pairs, at: pairs.insert(at, ("", float(pairs[at - 1][1]))),
    "numpy id": lambda pairs, at: pairs.__setitem__(at - 1, (np.str_(pairs[at - 1][0]),
                                                             pairs[at - 1][1])),
    "int id": lambda pairs, at: pairs.__setitem__(at - 1, (7, pairs[at - 1][1])),
    "float32 score": lambda pairs, at: pairs.__setitem__(
        at - 1, (pairs[at - 1][0], np.float32(pairs[at - 1][1]))),
    "bytes id": lambda pairs, at: pairs.__setitem__(at - 1, (b"d", pairs[at - 1][1])),
}


@settings(max_examples=300, deadline=None)
@given(
    lists=st.lists(
        st.tuples(
            st.lists(
                st.tuples(st.sampled_from(["d1", "d2", "d10", "a", "b", "é", "日", "zz"]),
                          st.sampled_from([1.0, 0.5, 0.100000001, 0.1, 0.0, -0.0, -2.5,
                                           1e39, 3e38])),
                min_size=1, max_size=8, unique_by=lambda pair: pair[0],
            ),
            st.sampled_from([None, None, None, *_FAULTS]),
            st.floats(0, 1),
            st.booleans(),
        ),
        min_size=1, max_size=4,
    ),
    suffix=st.sampled_from([".txt", ".jsonl"]),
)
def test_the_writers_column_checks_write_what_the_checks_a_pair_at_a_time_write(
    lists, suffix, tmp_path_factory
):
    """write_run checks a listing's (str, float) pairs, or a {str: float} dict, a column at a
    time and keeps an order whose float32 scores fall strictly (run_writer._plain_pairs): the
    bytes it writes, or the error it raises, are those of the checks a pair at a time and
    trec_eval_order's sort. Lists (and their dicts) best first with ties (equal, and at
    float32: 0.1 and 0.100000001, 3e38 and 1e39 beyond float32's range), some with a fault at
    any place: an id twice, a score that rises, NaN, inf, an id that is no word, numpy and int
    ids, a float32 score, a bytes id."""
    from retrieval_metrics.formats import run_writer, write_run

    run = {}
    for n, (pairs, fault, where, as_dict) in enumerate(lists):
        pairs = sorted(pairs, key=lambda pair: -pair[1])
        if fault is not None:
            with np.errstate(over="ignore"):  # (1e39 as a float32 score: inf)
                _FAULTS[fault](pairs, 1 + min(int(where * len(pairs)), len(pairs) - 1))
        run[f"q{n}"] = dict(pairs) if as_dict else pairs
    folder = tmp_path_factory.mktemp("w")

    def written(name):
        try:
            return write_run(run, folder / f"{name}{suffix}").read_bytes()
        except ValueError as err:
            return f"ValueError: {err}"

    columns = written("columns")
    with mock.patch.object(run_writer, "_plain_pairs", lambda docs: None):
        assert columns == written("pairs")
