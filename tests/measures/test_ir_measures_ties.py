"""ir_measures' strings on a run with many tied scores: each string equals, per query, the
provider ir_measures computes it with (pytrec_eval, judged, msmarco, gdeval, cwl_eval,
trectools), whose tie rules differ (document id descending or ascending, the run's order,
tied positions averaged); ties straddle every cut-off."""

from __future__ import annotations

import itertools
import random
import re
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from retrieval_metrics.formats.ir_measures import ir_measures_per_query
from retrieval_metrics.formats.runs import trec_eval_order
from retrieval_metrics.functional.measures import MeasureOptions, parse_metric, per_query_values
from retrieval_metrics.functional.measures.names import IR_MEASURES
from retrieval_metrics.functional.measures.providers import provider_of
from retrieval_metrics.functional.ranking import rank_lists

ir_measures = pytest.importorskip("ir_measures")

CUTOFFS = (1, 3, 5, 10, 20)
# nDCG(dcg='exp-log2') as ir_measures writes it (str() of the measure), and unquoted
CUT = ["nDCG@{k}", "nDCG(judged_only=True)@{k}", "nDCG(dcg='exp-log2')@{k}",
       "nDCG(dcg=exp-log2)@{k}", "P@{k}",
       "P(rel=2)@{k}", "P(judged_only=True)@{k}", "R@{k}", "R(rel=3)@{k}",
       "R(judged_only=True)@{k}", "RR@{k}", "RR(rel=2)@{k}", "AP@{k}", "AP(rel=2)@{k}",
       "AP(judged_only=True)@{k}", "Success@{k}", "Success(rel=2)@{k}",
       "Success(judged_only=True)@{k}", "Judged@{k}", "ERR@{k}", "RBP(p=0.8)@{k}", "RBP@{k}"]
WHOLE = ["nDCG", "nDCG(judged_only=True)", "AP", "AP(rel=3)", "AP(judged_only=True)", "RR",
         "RR(rel=2)", "RR(judged_only=True)", "Rprec", "Rprec(rel=2)", "Rprec(judged_only=True)",
         "Bpref", "BPref", "Bpref(rel=2)", "Judged", "RBP(p=0.8)", "RBP", "RBP(rel=2)",
         "RBP(p=0.5,rel=2)"]
# every string the library accepts that a provider computes (test_provider_of_names_... lists
# them), but nDCG(dcg=exp-log2) without a cut-off: ir_measures hands it to ranx, whose tie order
# is its unstable sort's (and whose provider refuses ir_measures' own run frame in 0.4.3)
STRINGS = [s.format(k=k) for s in CUT for k in CUTOFFS] + WHOLE


def tied_collection(seed: int = 3):
    """Graded qrels (0-3; queries judged grade 0 only; judged documents the run lacks) and a
    run whose scores take 4 values a query (a tie group of ~10 documents straddles every
    cut-off), some apart by 1e-9 (tied in float32 only), with its documents in random order;
    a judged query the run lacks and a run query without judgments. Numeric query ids (gdeval
    reads them as numbers), each query's scores apart from the next one's (trectools groups
    ties over the whole run, across a query boundary)."""
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(1, 25):
        qid = str(q)
        docs = [f"d{d}" for d in rng.sample(range(90), 45)]
        judged = {d: rng.choice([0, 0, 1, 2, 3]) for d in rng.sample(docs, 30)}
        if q % 6 == 0:
            judged = dict.fromkeys(judged, 0)
        judged[f"absent{q}"] = rng.choice([0, 1, 3])
        qrels[qid] = judged
        if q == 7:
            continue  # judged, not in the run: every provider reports 0
        run[qid] = {
            d: 10.0 * q + rng.choice([0, 1, 2, 3]) + rng.choice([0.0, 0.0, 1e-9]) for d in docs
        }
    run["99"] = {"d1": 1.0, "d2": 1.0}  # not judged: left out
    return qrels, run


def gdeval(qrels: dict, run: dict, name: str) -> dict[str, float]:
    """ERR@k or nDCG(dcg=exp-log2)@k per query from ir_measures' gdeval.pl with every digit
    printed (its output rounds to 5 places), the run written as ir_measures writes it."""
    perl = shutil.which("perl")
    if perl is None:
        pytest.skip("gdeval needs perl")
    script = (Path(ir_measures.__file__).parent / "bin" / "gdeval.pl").read_text()
    k = name.split("@")[1]
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / n for n in ("gdeval.pl", "qrels", "run")]
        paths[0].write_text(script.replace("%.5f", "%.17g"))
        paths[1].write_text("".join(
            f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
        paths[2].write_text("".join(
            f"{q} Q0 {d} {i} {s} run\n" for q, docs in run.items()
            for i, (d, s) in enumerate(docs.items())))
        out = subprocess.run([perl, *map(str, paths), k], capture_output=True, text=True,
                             check=True, timeout=60).stdout
    values = dict.fromkeys(qrels, 0.0)  # gdeval leaves out a query with nothing relevant
    column = 3 if name.startswith("ERR") else 2
    for line in out.splitlines()[1:]:
        parts = line.split(",")
        if parts[1] != "amean":
            values[parts[1]] = float(parts[column])
    return values


def ir_measure(name: str):
    # ir_measures writes the dcg option's value quoted
    return ir_measures.parse_measure(name.replace("dcg=exp-log2", "dcg='exp-log2'"))


def reference(name: str, qrels: dict, run: dict) -> dict[str, float]:
    """The value of ``name`` per query from the provider ir_measures computes it with."""
    provider = provider_of(name)
    if provider.name == "gdeval":
        return gdeval(qrels, run, name)
    source = ir_measures.providers.registry[provider.name]
    if not source.is_available():
        pytest.skip(f"ir_measures' {provider.name} provider is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {m.query_id: m.value for m in source.iter_calc([ir_measure(name)], qrels, run)}


def test_the_run_ties_across_every_cut_off():
    _, run = tied_collection()
    straddles = {"float32": 0, "float64": 0}
    for qid, scores in run.items():
        if qid == "99":
            continue
        for kind, cast in (("float32", np.float32), ("float64", float)):
            ranked = sorted((cast(s) for s in scores.values()), reverse=True)
            for k in CUTOFFS:
                # a tie group straddles K: the documents at K and K + 1 tie
                straddles[kind] += ranked[k - 1] == ranked[k]
    pairs = (len(run) - 1) * len(CUTOFFS)
    assert straddles["float32"] > 0.8 * pairs
    assert straddles["float64"] > 0.5 * pairs


def test_every_accepted_string_equals_its_provider_on_a_tied_run():
    qrels, run = tied_collection()
    qids, values = ir_measures_per_query(run, qrels, STRINGS)
    assert qids == sorted(qrels)
    failures, checked = [], 0
    for name in STRINGS:
        ref = reference(name, qrels, run)
        assert set(ref) == set(qids), name
        for i, qid in enumerate(qids):
            checked += 1
            if abs(float(values[name][i]) - ref[qid]) > 1e-9:
                failures.append((name, qid, float(values[name][i]), ref[qid]))
    assert not failures, (len(failures), failures[:10])
    assert checked == len(STRINGS) * 24


def test_the_tie_order_matters_on_this_run():
    """On the same run ranked by score in float64, ties by document id descending (gdeval's
    rule), the strings of the providers with another tie rule differ from them, pytrec_eval's
    too (its float32 ties), gdeval's ERR does not (its very rule): the test above has teeth."""
    qrels, run = tied_collection()
    qids = sorted(qrels)
    ranked = [trec_eval_order(run.get(q, {}), as_float32=False) for q in qids]
    table = rank_lists(ranked, [qrels[q] for q in qids], judged_documents=True)
    options = MeasureOptions(empty_queries="zero")
    for name in ("Judged@10", "RR@5", "RBP(p=0.8)", "RBP(p=0.5,rel=2)", "nDCG@10", "ERR@10"):
        ref = reference(name, qrels, run)
        got = per_query_values(table, parse_metric(name), options=options)
        differ = sum(abs(float(got[i]) - ref[q]) > 1e-9 for i, q in enumerate(qids) if q != "7")
        assert (differ == 0) == (name == "ERR@10"), (name, differ)


def _accepted(name: str) -> bool:
    try:
        parse_metric(name)
    except ValueError:
        return False
    return True


def _computes(source, measure) -> bool:
    try:
        return source.is_available() and source.supports(measure)
    except AssertionError:  # ir_measures' runtime provider asserts on its own parameters
        return False


def test_provider_of_names_the_provider_ir_measures_runs():
    """For every string the library accepts as ir_measures' (each name with each option, with
    and without a cut-off): the first provider of ir_measures' pipeline that supports it, or
    trectools where none does; or no provider at all, and provider_of says so."""
    seen = 0
    for base, params, cut in itertools.product(
        sorted(IR_MEASURES), ["", "(rel=2)", "(judged_only=True)", "(p=0.5)", "(p=0.5,rel=2)",
         "(dcg=exp-log2)", "(dcg='exp-log2')", '(dcg="exp-log2")'],
        ["", "@5"],
    ):
        name = base + params + cut
        if not _accepted(name):
            continue
        seen += 1
        measure = ir_measure(name)
        firsts = [p.NAME for p in ir_measures.DefaultPipeline.providers if _computes(p, measure)]
        trectools = ir_measures.trectools
        # trectools lists RBP(rel=N) and raises when asked for it
        if not firsts and _computes(trectools, measure) and "rel" not in params:
            firsts = ["trectools"]
        if firsts:
            assert provider_of(name).name == firsts[0], name
        else:
            with pytest.raises(ValueError, match=re.escape("has no provider")):
                provider_of(name)
    assert seen > 50


def test_a_quoted_value_is_the_measure_ir_measures_writes():
    """ir_measures writes a string parameter quoted: its own str() of the gdeval nDCG is read
    as the same measure as the unquoted spelling, under the name as given."""
    written = str(ir_measures.nDCG(dcg="exp-log2") @ 5)
    assert written == "nDCG(dcg='exp-log2')@5"
    quoted, plain = parse_metric(written), parse_metric("nDCG(dcg=exp-log2)@5")
    assert quoted.name == written
    assert (quoted.base, quoted.k, quoted.options) == (plain.base, plain.k, plain.options)
    assert provider_of(written).name == provider_of("nDCG(dcg=exp-log2)@5").name == "gdeval"


def test_integer_ids_tie_in_the_order_of_their_text():
    """A run of integer ids (what a faiss search returns; MS MARCO's passage ids): the integer 7
    is the id "7", and trec_eval orders tied documents by the ids' text, descending ("9", "2",
    "10"), where the integers' own order put 10 first (RR 1.0 instead of 1/3). The run with str
    ids is pytrec_eval's input; both forms give its numbers."""
    from retrieval_metrics.formats.converters import trec_run_to_lists

    qrels_text = {"7": {"10": 1, "9": 0}}
    run_text = {"7": {"10": 1.0, "9": 1.0, "2": 1.0}}
    qrels_int = {7: {10: 1, 9: 0}}
    run_int = {7: {10: 1.0, 9: 1.0, 2: 1.0}}
    ranked, relevant, qids = trec_run_to_lists(run_int, qrels_int)
    assert (ranked, relevant, qids) == ([["9", "2", "10"]], [{"10": 1, "9": 0}], ["7"])
    names = ["RR", "P@1", "Judged@1"]
    as_int = ir_measures_per_query(run_int, qrels_text, names)[1]
    as_text = ir_measures_per_query(run_text, qrels_text, names)[1]
    assert {n: v.tolist() for n, v in as_int.items()} == {n: v.tolist() for n, v in as_text.items()}
    rr, p1, judged1 = (ir_measures_per_query(run_int, qrels_int, names)[1][n].item() for n in names)
    assert (rr, p1, judged1) == (pytest.approx(1 / 3), 0.0, 1.0)  # by hand: 9, 2, 10
    expected = ir_measures.calc_aggregate(
        [ir_measures.RR, ir_measures.P @ 1], qrels_text, run_text)
    assert rr == pytest.approx(expected[ir_measures.RR])
    with pytest.raises(ValueError, match=r"`run`, query '7': the ids 10 and '10' are one id"):
        trec_run_to_lists({7: {10: 1.0, "10": 0.5}}, qrels_text)
    # whole floats (a pandas column of ids) are their integers, as labels and ids are read
    # everywhere (a review found them refused here); another float is refused by name
    run_float = {7.0: {10.0: 1.0, np.float64(9): 1.0, 2: 1.0}}
    assert trec_run_to_lists(run_float, qrels_int)[0] == [["9", "2", "10"]]
    with pytest.raises(ValueError, match=r"the id 1\.5 is a float that holds no whole number"):
        trec_run_to_lists({7: {1.5: 1.0}}, qrels_text)
