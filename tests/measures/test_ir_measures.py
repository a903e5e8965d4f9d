"""IR evaluation as IR researchers run it: Judged@K, bpref, condensed lists, relevance levels,
DCG, ERR and RBP, and ir_measures' names.

Three kinds of reference:

* brute force: every order of each group of tied documents enumerated and the measure's plain
  definition averaged over them ("expected" ties), or the one order of "optimistic" (relevant
  documents first, higher grades first, then the judged ones) and "pessimistic" (the reverse);
* ir_measures 0.4.3 with its providers (pytrec_eval, judged, gdeval, trectools, cwl_eval) on
  random graded qrels (grades 0-3, unjudged documents in the top ranks, judged documents the
  corpus lacks, queries judged grade 0 only), on the full ranking of ranked lists and of
  embeddings, every measure string at three cut-offs, to 1e-9;
* pytrec_eval itself (trec_eval's -l and -J) for bpref and the condensed measures.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.formats import ir_measures_per_query
from retrieval_metrics.functional.measures import (
    MeasureOptions,
    parse_metric,
    per_query_values,
)
from retrieval_metrics.functional.measures.aggregation import counted_values
from retrieval_metrics.functional.ranking import rank_lists
from retrieval_metrics.functional.table import RankTable

ir_measures = pytest.importorskip("ir_measures")
pytrec_eval = pytest.importorskip("pytrec_eval")

# ----------------------------------------------------------------------------- brute force


def one_query_table(scores: list[int], grades: dict[int, int]) -> RankTable:
    """The rank table of one query over documents 0..n-1 with ``scores``, judged as
    ``grades`` says (grade <= 0: judged not relevant; absent: unjudged), counted by hand."""
    n = len(scores)

    def above(i: int) -> int:
        return sum(scores[j] > scores[i] for j in range(n))

    def tied(i: int) -> int:
        return sum(scores[j] == scores[i] for j in range(n))

    rel = sorted((i for i in grades if grades[i] > 0), key=lambda i: (-scores[i], -grades[i]))
    non = sorted((i for i in grades if grades[i] <= 0), key=lambda i: -scores[i])
    ideal = sorted((grades[i] for i in rel), reverse=True)

    def ints(values):
        return torch.tensor(list(values), dtype=torch.int64)

    return RankTable(
        ptr=ints([0, len(rel)]), above=ints(map(above, rel)), tied=ints(map(tied, rel)),
        num_relevant=ints([len(rel)]), gallery_size=ints([n]), depth=ints([n]),
        grade=torch.tensor([float(grades[i]) for i in rel], dtype=torch.float64),
        ideal_ptr=ints([0, len(ideal)]), ideal_grade=torch.tensor(ideal, dtype=torch.float64),
        judged_ptr=ints([0, len(non)]), judged_above=ints(map(above, non)),
        judged_tied=ints(map(tied, non)), num_nonrelevant=ints([len(non)]),
    )


def orders(scores: list[int], grades: dict[int, int], ties: str):
    """The orders of the documents a tie rule averages over."""
    by_score: dict[int, list[int]] = {}
    for i, s in enumerate(scores):
        by_score.setdefault(s, []).append(i)
    groups = [by_score[s] for s in sorted(by_score, reverse=True)]
    if ties == "expected":
        for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
            yield [i for part in parts for i in part]
        return

    def rank_in_group(i: int) -> tuple:
        # relevant (higher grade first), judged not relevant, unjudged
        if i in grades and grades[i] > 0:
            return (0, -grades[i])
        return (1, 0) if i in grades else (2, 0)

    order = []
    for group in groups:
        part = sorted(group, key=rank_in_group)
        order += part if ties == "optimistic" else part[::-1]
    yield order


def plain(name: str, order: list[int], grades: dict[int, int]) -> float:
    """The measure's textbook definition on one order of the documents."""
    spec = parse_metric(name)
    options = dict(spec.options)
    level = options.get("relevance_level", 1)
    if options.get("judged_only"):
        order = [i for i in order if i in grades]
    k = len(order) if spec.k is None else spec.k
    top = order[:k]
    g = [grades.get(i, 0) for i in order]
    relevant = [i for i in grades if grades[i] >= level]
    big_r = len(relevant)
    if spec.base == "precision":
        return sum(grades.get(i, 0) >= level for i in top) / k
    if spec.base == "judged":
        return sum(i in grades for i in top) / min(k, len(order))
    if spec.base == "dcg":
        return sum((2 ** g[p] - 1) / math.log2(p + 2) for p in range(min(k, len(g))) if g[p] > 0)
    if spec.base == "ndcg":
        gain = (lambda x: 2**x - 1) if options.get("gain", "exponential") == "exponential" else (
            lambda x: x)
        dcg = sum(gain(g[p]) / math.log2(p + 2) for p in range(min(k, len(g))) if g[p] > 0)
        ideal = sorted((grades[i] for i in grades if grades[i] > 0), reverse=True)[:k]
        return dcg / sum(gain(x) / math.log2(p + 2) for p, x in enumerate(ideal))
    if spec.base == "map":
        hits, total = 0, 0.0
        for p, i in enumerate(top, 1):
            if grades.get(i, 0) >= level:
                hits += 1
                total += hits / p
        return total / big_r
    if spec.base == "err":
        score, keep = 0.0, 1.0
        for p, i in enumerate(top, 1):
            r = (2 ** max(grades.get(i, 0), 0) - 1) / 2 ** options.get("max_grade", 4)
            score += r * keep / p
            keep *= 1 - r
        return score
    if spec.base in ("rbp", "rbp_residual"):
        p = options.get("persistence", 0.8)
        if spec.base == "rbp_residual":
            return 1 - sum((1 - p) * p**q for q, i in enumerate(top) if i in grades)
        gain = options.get("gain", "binary")
        weights = [(1 - p) * p**q for q in range(len(top))]
        if gain == "binary":
            return sum(w for w, i in zip(weights, top, strict=True) if grades.get(i, 0) >= level)
        return sum(w * max(grades.get(i, 0), 0) for w, i in zip(weights, top, strict=True))
    if spec.base == "bpref":
        big_n = sum(1 for i in grades if grades[i] < level)
        seen, total = 0, 0.0
        for i in order:
            if i not in grades:
                continue
            if grades[i] < level:
                seen += 1
            else:
                total += 1 - min(seen, big_r) / min(big_n, big_r) if seen else 1.0
        return total / big_r
    raise AssertionError(name)


BRUTE_NAMES = [
    "judged@3", "bpref", "bpref(rel=2)", "dcg@3", "ndcg(judged_only=true)@3",
    "map(judged_only=true)", "precision(rel=2)@2", "err@3", "err(max_grade=3)", "rbp(p=0.7)@4",
    "rbp(p=0.6,gain=linear)", "rbp(p=0.6,rel=2)", "rbp_residual(p=0.7)@3", "rbp_residual",
    "precision(judged_only=true,rel=2)@2", "map(rel=2)",
]


@pytest.mark.parametrize("ties", ["expected", "optimistic", "pessimistic"])
def test_every_new_measure_is_its_definition_over_the_orders_of_its_ties(ties):
    rng = random.Random(7)
    checked = 0
    for _ in range(120):
        n = rng.randint(2, 7)
        scores = [rng.randint(0, 2) for _ in range(n)]  # ties everywhere
        docs = rng.sample(range(n), rng.randint(1, n))
        grades = {i: rng.choice([0, 1, 2, 3]) for i in docs}
        grades[docs[0]] = rng.choice([2, 3])  # something relevant at every level used
        table = one_query_table(scores, grades)
        for name in BRUTE_NAMES:
            spec = parse_metric(name)
            if spec.k is not None and spec.k > n:
                continue
            every = [plain(name, o, grades) for o in orders(scores, grades, ties)]
            expected = sum(every) / len(every)
            got = float(per_query_values(table, spec, options=MeasureOptions(ties=ties))[0])
            assert got == pytest.approx(expected, abs=1e-12), (name, scores, grades)
            checked += 1
    assert checked > 1000


@pytest.mark.parametrize("terms", [1, 5, 13])
def test_err_sums_a_wide_tie_group_in_parts_to_its_definition(monkeypatch, terms):
    """ERR under "expected" holds at most ``TERMS`` (group, relevant, position) terms at once:
    a group wider than that (a collapsed model ties the whole gallery) sums its positions a
    part at a time. Parts of 1 to 13 terms give the definition over every order."""
    from retrieval_metrics.functional.measures import user_models

    monkeypatch.setattr(user_models, "TERMS", terms)
    rng = random.Random(11)
    checked = 0
    for _ in range(40):
        n = rng.randint(3, 7)
        scores = [rng.randint(0, 1) for _ in range(n)]
        docs = rng.sample(range(n), rng.randint(2, n))
        grades = {i: rng.choice([0, 1, 2, 3, 4]) for i in docs}
        grades[docs[0]] = rng.choice([2, 3])
        table = one_query_table(scores, grades)
        for name in ("err", "err@3", "err(max_grade=5)@5"):
            spec = parse_metric(name)
            every = [plain(name, o, grades) for o in orders(scores, grades, "expected")]
            got = float(per_query_values(table, spec, options=MeasureOptions())[0])
            assert got == pytest.approx(sum(every) / len(every), abs=1e-12), (name, scores)
            checked += 1
    assert checked == 120


def test_worked_examples_of_the_definitions_page():
    # scores 5 4 3 2 1 for documents a..e; a unjudged, b grade 0, c grade 2, d unjudged,
    # e grade 1; one judged document (grade 3) is not in the gallery
    lists = rank_lists(
        [["a", "b", "c", "d", "e"]], [{"b": 0, "c": 2, "e": 1, "x": 3}], judged_documents=True
    )
    values = rm.functional.retrieval_measures(
        lists, ["judged@2", "judged@5", "bpref", "ndcg(judged_only=true)@2", "err@3", "rbp(p=0.5)",
                "rbp_residual(p=0.5)", "precision(rel=2)@3"],
    )
    got = {k: round(float(v), 6) for k, v in values.items()}
    assert got["judged@2"] == 0.5  # b of a, b
    assert got["judged@5"] == 0.6  # b, c, e
    # R = 3 (c, e, x), N = 1 (b): c and e each have b above, min(1, 3) / min(1, 3) = 1 -> 0
    assert got["bpref"] == 0.0
    # the condensed list is b, c, e: DCG@2 = 0 + 3 / log2(3); ideal 7, 3
    assert got["ndcg(judged_only=true)@2"] == round((3 / math.log2(3)) / (7 + 3 / math.log2(3)), 6)
    assert got["err@3"] == round((3 / 16) / 3, 6)  # c at 3: R = (2^2 - 1) / 2^4
    assert got["rbp(p=0.5)"] == round(0.5 * (0.25 + 0.0625), 6)  # c at 3, e at 5
    # judged at 2, 3, 5: 1 - 0.5 (0.5 + 0.25 + 0.0625)
    assert got["rbp_residual(p=0.5)"] == round(1 - 0.5 * (0.5 + 0.25 + 0.0625), 6)
    assert got["precision(rel=2)@3"] == round(1 / 3, 6)


# --------------------------------------------------------------------- ir_measures as oracle


def random_collection(seed: int, num_queries: int = 24, num_docs: int = 70):
    """Graded qrels (0-3) with unjudged documents everywhere, judged documents the corpus
    lacks, queries judged grade 0 only; numeric query ids (gdeval reads them as numbers)."""
    rng = random.Random(seed)
    qrels = {}
    for q in range(num_queries):
        docs = rng.sample(range(num_docs), rng.randint(1, 30))
        judged = {f"d{d}": rng.choice([0, 0, 1, 2, 3]) for d in docs}
        if q % 6 == 0:
            judged = {doc: 0 for doc in judged}
        judged[f"absent{q}"] = rng.choice([0, 1, 3])
        qrels[str(q + 1)] = judged
    return qrels, [f"d{d}" for d in range(num_docs)]


CUT_STRINGS = ["nDCG@{k}", "Judged@{k}", "P(rel=2)@{k}", "ERR@{k}", "AP@{k}", "R@{k}", "RR@{k}",
               "P(judged_only=True)@{k}", "nDCG(judged_only=True)@{k}", "Success@{k}",
               "R(rel=3)@{k}", "RBP(p=0.8)@{k}"]
WHOLE_STRINGS = ["AP", "Bpref", "Bpref(rel=2)", "RBP(p=0.8)", "RBP(p=0.5,rel=2)", "Rprec",
                 "AP(judged_only=True)", "RR", "nDCG", "Rprec(rel=2)", "AP(rel=3)"]
CUTOFFS = (1, 5, 20)
STRINGS = [s.format(k=k) for s in CUT_STRINGS for k in CUTOFFS] + WHOLE_STRINGS


def gdeval_err(qrels: dict, run: dict, k: int) -> dict[str, float]:
    """ERR@k per query from ir_measures' copy of gdeval.pl, run with every digit printed
    (its own output rounds to 5 places)."""
    perl = shutil.which("perl")
    if perl is None:
        pytest.skip("gdeval needs perl")
    source = Path(ir_measures.__file__).parent / "bin" / "gdeval.pl"
    script = source.read_text().replace("%.5f", "%.17g")
    return _run_gdeval(perl, script, qrels, run, k)


def _run_gdeval(perl: str, script: str, qrels: dict, run: dict, k: int) -> dict[str, float]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / name for name in ("gdeval.pl", "qrels", "run")]
        paths[0].write_text(script)
        paths[1].write_text("".join(
            f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()
        ))
        paths[2].write_text("".join(
            f"{q} Q0 {d} {i + 1} {s!r} run\n" for q, docs in run.items()
            for i, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1]))
        ))
        out = subprocess.run([perl, *map(str, paths), str(k)], capture_output=True, text=True,
                             check=True, timeout=60).stdout
    # gdeval skips a query with nothing relevant (its ideal DCG is 0); its ERR is 0, as
    # ir_measures reports it
    values = dict.fromkeys(qrels, 0.0)
    for line in out.splitlines()[1:]:
        _, topic, _, err = line.split(",")
        if topic != "amean":
            values[topic] = float(err)
    return values


def reference(name: str, qrels: dict, run: dict) -> dict[str, float]:
    """ir_measures' per-query values of ``name`` (ERR from gdeval at every digit)."""
    measure = ir_measures.parse_measure(name)
    if name.startswith("ERR@"):
        return gdeval_err(qrels, run, int(name.split("@")[1]))
    provider = ir_measures
    registry = ir_measures.providers.registry
    if name.startswith("RBP"):
        # without rel, trectools' graded RBP; with it, cwl_eval's binary one (ir_measures'
        # default pipeline lists neither)
        provider = registry["cwl_eval"] if "rel" in name else registry["trectools"]
        if not provider.is_available():
            pytest.skip(f"ir_measures' {provider.NAME} provider is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {m.query_id: m.value for m in provider.iter_calc([measure], qrels, run)}


def check_against_ir_measures(values: dict[str, torch.Tensor], qids: list[str], qrels, run):
    failures = []
    for name in STRINGS:
        ref = reference(name, qrels, run)
        assert set(ref) == set(qids), name
        got = values[name]
        for i, qid in enumerate(qids):
            if abs(float(got[i]) - ref[qid]) > 1e-9:
                failures.append((name, qid, float(got[i]), ref[qid]))
    assert not failures, failures[:10]


def per_query_of(table: RankTable, names: list[str]) -> dict[str, torch.Tensor]:
    options = MeasureOptions(empty_queries="zero")
    out = {}
    for name in names:
        spec = parse_metric(name)
        out[name] = counted_values(per_query_values(table, spec, options=options), table, spec,
                                   options)
    return out


def test_ranked_lists_equal_ir_measures_for_every_measure_string():
    qrels, docs = random_collection(1)
    rng = random.Random(2)
    run = {q: {d: rng.random() for d in rng.sample(docs, rng.randint(5, len(docs)))}
           for q in qrels}
    qids = sorted(qrels)
    ranked = [sorted(run[q], key=lambda d: -run[q][d]) for q in qids]
    table = rank_lists(ranked, [qrels[q] for q in qids], judged_documents=True)
    check_against_ir_measures(per_query_of(table, STRINGS), qids, qrels, run)


def test_queries_and_a_corpus_with_qrels_equal_ir_measures_for_every_measure_string():
    qrels, docs = random_collection(3, num_queries=20, num_docs=60)
    g = torch.Generator().manual_seed(5)
    queries = torch.randn(len(qrels), 12, generator=g, dtype=torch.float64)
    corpus = torch.randn(len(docs), 12, generator=g, dtype=torch.float64)
    qids = list(qrels)
    metric = rm.RetrievalMetrics(STRINGS, qrels=qrels, empty_queries="zero",
                                 ignore_identical_ids=False)
    metric.update(queries, ids=qids, role="query")
    metric.update(corpus, ids=docs, role="gallery")
    scores = torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(
        corpus, dim=1).T
    run = {q: {d: float(scores[i, j]) for j, d in enumerate(docs)} for i, q in enumerate(qids)}
    per_query = metric.per_query()
    check_against_ir_measures({n: per_query[n] for n in STRINGS}, qids, qrels, run)
    # the means are the mean over every judged query (empty_queries="zero", as trec_eval)
    values = metric.compute()
    for name in ("nDCG@5", "Bpref", "Judged@20", "P(rel=2)@5"):
        ref = reference(name, qrels, run)
        assert float(values[name]) == pytest.approx(sum(ref.values()) / len(ref), abs=1e-6)


def test_bpref_and_the_condensed_measures_are_trec_evals():
    qrels, docs = random_collection(4)
    rng = random.Random(5)
    run = {q: {d: rng.random() for d in rng.sample(docs, 40)} for q in qrels}
    qids = sorted(qrels)
    ranked = [sorted(run[q], key=lambda d: -run[q][d]) for q in qids]
    table = rank_lists(ranked, [qrels[q] for q in qids], judged_documents=True)
    for level in (1, 2):
        for judged_only in (False, True):
            evaluator = pytrec_eval.RelevanceEvaluator(
                qrels, {"bpref", "map", "P_5", "ndcg_cut_10", "recall_10"},
                relevance_level=level, judged_docs_only_flag=judged_only,
            )
            ref = evaluator.evaluate(run)
            params = f"rel={level}" + (",judged_only=true" if judged_only else "")
            ours = per_query_of(table, [f"bpref(rel={level})", f"map({params})",
                                        f"precision({params})@5", f"recall({params})@10"])
            trec = {"bpref": "bpref", "map": "map", "precision": "P_5", "recall": "recall_10"}
            for name, values in ours.items():
                key = trec[parse_metric(name).base]
                for i, q in enumerate(qids):
                    assert float(values[i]) == pytest.approx(ref[q][key], abs=1e-9), (name, q)
            # nDCG keeps its graded gains at any level (trec_eval -l): only -J changes it
            ndcg = per_query_of(table, [
                "ndcg(gain=linear" + (",judged_only=true" if judged_only else "") + ")@10"
            ])
            for i, q in enumerate(qids):
                assert float(next(iter(ndcg.values()))[i]) == pytest.approx(
                    ref[q]["ndcg_cut_10"], abs=1e-9)


# ------------------------------------------------------------------------ names and refusals


def test_ir_measures_names_are_keyed_as_written_and_carry_their_conventions():
    qrels = {"q1": {"d1": 2, "d2": 1, "d3": 0}, "q2": {"d2": 3}}
    g = torch.Generator().manual_seed(0)
    metric = rm.RetrievalMetrics(["nDCG@3", "ndcg@3", "P(rel=2)@2", "Judged@2"], qrels=qrels)
    metric.update(torch.randn(2, 4, generator=g), ids=["q1", "q2"], role="query")
    metric.update(torch.randn(6, 4, generator=g), ids=[f"d{i}" for i in range(6)],
                  role="gallery")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = metric.compute()
    assert list(values) == ["nDCG@3", "ndcg@3", "P(rel=2)@2", "Judged@2"]
    assert parse_metric("nDCG@3").options == (("gain", "linear"),)  # trec_eval's gain
    assert parse_metric("ndcg@3").options == ()  # the library's (exponential by default)
    assert parse_metric("AP@10").options == (("ap", "step"), ("divisor", "relevant"))


@pytest.mark.parametrize(("name", "message"), [
    ("ndcg(rel=2)@10", "takes no `rel`"),
    ("nDCG(gains={1:2})@10", "key=value options"),
    ("judged(judged_only=true)@5", "takes no `judged_only`"),
    ("rbp(p=1.2)", "(0, 1)"),
    ("P(rel=two)@5", "is a number"),
    ("precision(rel=2,rel=3)@5", "given twice"),
    ("err(max_grade=0)@5", "positive number"),
    ("bpref@10", "takes no cut-off"),
    ("Bpref@10", "takes no cut-off"),
    # unknown names: the nearest one
    ("ndgc@10", "did you mean ndcg@10"),
    ("judgd@10", "did you mean judged@10"),
    ("bpreff", "did you mean bpref"),
    # written as ir_measures writes its strings: the ir_measures string (nDCG@10 is trec_eval's
    # linear gain, the library's ndcg@10 the exponential one)
    ("nDCG @10", "did you mean nDCG@10 (ir_measures' name)"),
    ("nDGC@10", "did you mean nDCG@10 (ir_measures' name)"),
    ("Judgd@10", "did you mean Judged@10"),
    ("Bpreff", "did you mean Bpref"),
    ("P(rel=2) @5", "did you mean P(rel=2)@5"),
    ("RBP(q=0.8)", "one of gain, judged_only, p, rel"),
])
def test_bad_options_in_a_name_are_refused_by_name(name, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_metric(name)


def test_judged_measures_need_judgments():
    metric = rm.RetrievalMetrics(["judged@5"])
    labels = torch.arange(12) % 3
    metric.update(torch.randn(12, 4), labels)
    with pytest.raises(ValueError, match="relevance by judgments"):
        metric.compute()


def test_err_refuses_a_grade_above_its_maximum():
    table = rank_lists([["a", "b"]], [{"a": 5}])
    with pytest.raises(ValueError, match="max_grade"):
        rm.functional.retrieval_measures(table, ["err@2"])
    value = rm.functional.retrieval_measures(table, ["err(max_grade=5)@2"])["err(max_grade=5)@2"]
    assert float(value) == pytest.approx(31 / 32)


# ------------------------------------------------------------------------------ command line


def test_the_command_line_reads_ir_measures_names_and_gives_their_values(tmp_path, capsys):
    from retrieval_metrics import cli

    qrels, docs = random_collection(6, num_queries=10, num_docs=40)
    rng = random.Random(7)
    run = {q: {d: rng.random() for d in rng.sample(docs, 30)} for q in qrels}
    (tmp_path / "qrels.txt").write_text("".join(
        f"{q} 0 {d} {g}\n" for q, judged in qrels.items() for d, g in judged.items()))
    (tmp_path / "run.txt").write_text("".join(
        f"{q} Q0 {d} {i + 1} {s!r} sys\n" for q, scored in run.items()
        for i, (d, s) in enumerate(sorted(scored.items(), key=lambda x: -x[1]))))
    names = ["nDCG@10", "Judged@10", "P(rel=2)@5", "Bpref", "RBP(p=0.5,rel=2)",
             "nDCG(judged_only=True)@10", "R@20"]
    status = cli.main(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels",
                       str(tmp_path / "qrels.txt"), "--metrics", ",".join(names), "--json",
                       str(tmp_path / "out.json"), "--bootstrap", "20", "--progress-delay", "-1"])
    assert status == 0, capsys.readouterr().err
    import json

    got = json.loads((tmp_path / "out.json").read_text())["runs"][0]["metrics"]
    for name in names:
        ref = reference(name, qrels, run)
        assert got[name]["value"] == pytest.approx(sum(ref.values()) / len(ref), abs=1e-6), name


def test_a_repeated_judged_document_that_is_not_relevant_is_not_warned_as_relevant():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: b is judged, grade 0
        rank_lists([["a", "b", "b", "c"]], [{"b": 0, "c": 1}], duplicates="warn",
                   judged_documents=True)
    with pytest.warns(UserWarning, match="repeat a relevant id"):
        rank_lists([["a", "c", "c"]], [{"b": 0, "c": 1}], duplicates="warn",
                   judged_documents=True)


def test_the_metrics_options_do_not_reach_ir_measures_strings():
    """An ir_measures string reads its provider's conventions whatever the metric's options (the
    tie rule excepted): the condensed list, the relevance level, RBP's persistence and the
    micro average of the metric left nDCG, AP, RR, Rprec, RBP, P and Bpref at ir_measures' own
    values. (One query ranks u, a, b, c, u unjudged, a:1, b:0, c:2; by hand nDCG@2 = (1 /
    log2 3) / (2 + 1 / log2 3) and AP = (1/2 + 2/4) / 2 there.)"""
    qrels = {"1": {"a": 1, "b": 0, "c": 2}, "2": {"x": 1, "y": 1, "z": 1}}
    run = {"1": {"u": 4.0, "a": 3.0, "b": 2.0, "c": 1.0}, "2": {"x": 3.0, "q": 2.0, "r": 1.0}}
    names = ["nDCG@2", "AP", "RR", "Rprec", "RBP", "P@2", "Bpref", "ERR@4"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = {str(m): v for m, v in ir_measures.calc_aggregate(
            [ir_measures.parse_measure(n) for n in names if n != "RBP"], qrels, run).items()}
        want["RBP"] = next(iter(ir_measures.trectools.calc_aggregate(
            [ir_measures.parse_measure("RBP")], qrels, run).values()))
    ndcg_1 = (1 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert want["AP"] == pytest.approx(((1 / 2 + 2 / 4) / 2 + 1 / 3) / 2)
    for options in ({}, {"judged_only": True}, {"relevance_level": 2}, {"persistence": 0.5},
                    {"average": "micro"}, {"gain": "binary"}, {"ap": "trapezoid"}):
        m = rm.RetrievalMetrics(names, **options)
        m.set_dtype(torch.float64)
        m.update(ranked_ids=[["u", "a", "b", "c"], ["x", "q", "r"]],
                 relevant_ids=[qrels["1"], qrels["2"]])
        got = {k: float(v) for k, v in m.compute().items()}
        for name in names:
            places = 1e-5 if name.startswith("ERR") else 1e-9  # (gdeval prints 5 decimals)
            assert got[name] == pytest.approx(want[name], abs=places), (options, name)
        assert float(m.per_query()["nDCG@2"][0]) == pytest.approx(ndcg_1, abs=1e-12), options


def test_a_relevance_level_leaves_ndcg_dcg_and_err_alone():
    """NDCG, DCG and ERR read the grades as gains: the metric's relevance_level changes
    precision, not them (trec_eval's -l leaves its nDCG alone: pytrec_eval's ndcg_cut at
    level 2 equals level 1's)."""
    qrels = {"1": {"a": 1, "b": 0, "c": 2}}
    run = {"1": {"u": 4.0, "a": 3.0, "b": 2.0, "c": 1.0}}
    names = ["ndcg(gain=linear)@2", "dcg@2", "err@4", "precision@2"]
    values = {}
    for level in (None, 2):
        m = rm.RetrievalMetrics(names, relevance_level=level)
        m.set_dtype(torch.float64)
        m.update(ranked_ids=[["u", "a", "b", "c"]], relevant_ids=[qrels["1"]])
        values[level] = {k: float(v) for k, v in m.compute().items()}
    for name in names[:3]:
        assert values[2][name] == values[None][name], name
    assert values[None]["precision@2"] == 0.5 and values[2]["precision@2"] == 0.0
    at_level_2 = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_2"}, relevance_level=2)
    assert values[2]["ndcg(gain=linear)@2"] == pytest.approx(
        at_level_2.evaluate(run)["1"]["ndcg_cut_2"], abs=1e-12)


def test_judged_at_k_of_an_empty_list_is_zero_and_counts():
    """A judged query whose ranked list is empty judges nothing: Judged@5 reads 0 there, as for
    a judged query the run lacks, and the mean counts it (it read NaN and left the mean: 1.0
    over one query where nDCG@5 counted two)."""
    m = rm.RetrievalMetrics(["Judged@5", "nDCG@5"])
    m.set_dtype(torch.float64)
    m.update(ranked_ids=[["a"], []], relevant_ids=[{"a": 1, "z": 0}, {"b": 1, "z": 0}])
    assert {k: float(v) for k, v in m.compute().items()} == {"Judged@5": 0.5, "nDCG@5": 0.5}
    assert m.per_query()["Judged@5"].tolist() == [1.0, 0.0]
    qrels = {"1": {"a": 1}, "2": {"b": 1}}
    for run in ({"1": {"a": 1.0}}, {"1": {"a": 1.0}, "2": {}}):
        assert ir_measures_per_query(run, qrels, ["Judged@5"])[1]["Judged@5"].tolist() == [1, 0]


@pytest.mark.parametrize("name", ["RR(rel=0)@2", "RBP(p=0.5,rel=0)", "P(rel=0)@2", "P(rel=-1)@2",
                                  "P(rel=2.5)@2", "precision(rel=0)@2"])
def test_a_relevance_level_of_0_or_below_or_a_fraction_in_an_ir_measures_name_is_refused(name):
    """Grades of 0 and below are judged not relevant at every level: rel=0 read as the default
    (RR(rel=0)@2 0.5 where ir_measures' msmarco counts the grade-0 document, 1.0). ir_measures
    refuses rel=-1 and rel=2.5 (a whole grade); so does the library now."""
    with pytest.raises(ValueError, match="above 0"):
        parse_metric(name)
    with pytest.raises(ValueError, match="`relevance_level` must be a number above 0"):
        rm.RetrievalMetrics(["precision@2"], relevance_level=0)


def test_negative_grades_are_no_judgment_for_bpref_and_condensed_lists():
    """trec_eval reads a negative grade (the TREC Web track's -2, spam) as no judgment: bpref
    does not count the document among the judged non-relevant ones, and a condensed list
    (judged_only) drops it; ir_measures' Judged@K counts it as judged. By hand, judgments
    a: 1 and b: -1 and the run b, a: Bpref 1 (N = 0), the condensed list [a] scores 1 in
    nDCG@1, P@1, RR and AP; Judged@1 is 1 (b is judged). The library read b as judged not
    relevant: 0, 0, 0, 1/2, 1/2. Then random collections with grades -2..3, per query,
    against ir_measures."""
    names = ["Bpref", "nDCG(judged_only=True)@1", "P(judged_only=True)@1", "RR(judged_only=True)",
             "AP(judged_only=True)", "Judged@1", "bpref", "ndcg(judged_only=true)@1"]
    m = rm.RetrievalMetrics(names)
    m.set_dtype(torch.float64)
    m.update(ranked_ids=[["b", "a"]], relevant_ids=[{"a": 1, "b": -1}])
    assert {k: float(v) for k, v in m.compute().items()} == dict.fromkeys(names, 1.0)
    strings = ["Bpref", "nDCG(judged_only=True)@5", "P(judged_only=True)@3", "AP(judged_only=True)",
               "RR(judged_only=True)", "Rprec(judged_only=True)", "Judged@5", "nDCG@5", "P@3"]
    rng = random.Random(7)
    for _ in range(10):
        qrels, run = {}, {}
        for q in range(8):
            docs = [f"d{i}" for i in rng.sample(range(40), 20)]
            qrels[str(q)] = {d: rng.choice([-2, -1, 0, 1, 2, 3]) for d in rng.sample(docs, 12)}
            run[str(q)] = {d: float(rng.randrange(1000)) for d in docs}
        qids, got = ir_measures_per_query(run, qrels, strings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = {(str(r.measure), r.query_id): r.value for r in ir_measures.iter_calc(
                [ir_measures.parse_measure(s) for s in strings], qrels, run)}
        for name in strings:
            for i, q in enumerate(qids):
                assert float(got[name][i]) == pytest.approx(want[name, q], abs=1e-9), (name, q)
