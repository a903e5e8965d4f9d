#!/usr/bin/env python
"""Run BEIR's, MTEB's and sentence-transformers' own evaluation code against protocol="beir",
"mteb" and "sentence_transformers". Not part of this project's test suite (which holds plain
references written from their source, tests/frontends/test_dense_presets.py).

Usage: PYTHONPATH=src python tools/check_dense_presets.py [--beir DIR] [--mteb DIR]
       [--sentence-transformers DIR] [--seeds N]

Each DIR is a copy of the repository (a git work tree, or a git directory such as the one
`git clone --bare` makes; its HEAD is read). Only the evaluation files are taken from it, into a
scratch directory, so none of the three needs to be installed:

* BEIR: beir/retrieval/evaluation.py (EvaluateRetrieval.evaluate) and custom_metrics.py (mrr,
  top_k_accuracy), with beir.retrieval.search.base stubbed (BaseSearch is only a type there);
* MTEB: mteb/_evaluators/retrieval_metrics.py (calculate_retrieval_scores, make_score_dict), with
  mteb.types stubbed (needs pandas, scikit-learn, packaging);
* sentence-transformers: InformationRetrievalEvaluator.compute_metrics and compute_dcg_at_k
  (sentence_transformers/sentence_transformer/evaluation/information_retrieval.py, 6.x; the
  5.x path is tried too), run on an object holding only the attributes they read.

pytrec_eval must be installed (it is BEIR's and MTEB's engine). The data: every query scores
every document, random float64 scores without ties (also as float32), grades 0-2 with queries
judged with grade 0 only. BEIR's and MTEB's printed numbers (5 places) must equal the float64
means rounded to 5 places; MTEB's MRR and sentence-transformers' values (not rounded) to 1e-9.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

import retrieval_metrics as rm
from retrieval_metrics.protocols import library_names


def read(repo: str, path: str) -> str:
    root = Path(repo)
    if (root / path).is_file():
        return (root / path).read_text(encoding="utf-8")
    return subprocess.run(["git", "--git-dir", repo, "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout


def data(seed: int, queries: int = 15, docs: int = 60):
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((queries, docs))
    for row in scores:
        assert len(set(row.astype(np.float32).tolist())) == docs
    grades = rng.choice([0, 1, 2], size=(queries, docs), p=[0.8, 0.12, 0.08])
    grades[2] = 0
    qids, dids = [f"q{i:02d}" for i in range(queries)], [f"d{j:02d}" for j in range(docs)]
    qrels = {q: {d: int(grades[i, j]) for j, d in enumerate(dids)} for i, q in enumerate(qids)}
    results = {q: {d: float(scores[i, j]) for j, d in enumerate(dids)}
               for i, q in enumerate(qids)}
    form = {"preds": torch.tensor(scores.ravel()), "target": torch.tensor(grades.ravel()),
            "indexes": torch.arange(queries).repeat_interleave(docs)}
    return qids, dids, grades, qrels, results, form


def ours(names: list[str], protocol: str, form: dict) -> dict[str, float]:
    metric = rm.RetrievalMetrics(names, protocol=protocol)
    metric.update(**form)
    got = {row["name"]: float(row["value"]) for row in metric.summary(num_bootstrap=10).rows}
    return {name: got[lib.lower()]
            for name, lib in zip(names, library_names(protocol, names), strict=True)}


def check(label: str, theirs: dict, mine: dict, rounded: set[str]) -> int:
    bad = []
    for name, value in theirs.items():
        got = round(mine[name], 5) if name in rounded else mine[name]
        if (got != value) if name in rounded else abs(got - value) > 1e-9:
            bad.append(f"{name}: theirs {value!r}, ours {mine[name]!r}")
    print(f"{label}: {len(theirs)} values, {len(bad)} differ" + "".join(f"\n  {b}" for b in bad))
    return len(bad)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beir")
    parser.add_argument("--mteb")
    parser.add_argument("--sentence-transformers", dest="st")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dense_presets_"))
    sys.path.insert(0, str(scratch))
    import warnings

    warnings.simplefilter("ignore")  # the cut-offs to 1000 reach these small corpora
    failures = 0
    try:
        if args.beir:
            pkg = scratch / "beir" / "retrieval"
            (pkg / "search").mkdir(parents=True)
            for name in ("evaluation.py", "custom_metrics.py"):
                (pkg / name).write_text(read(args.beir, f"beir/retrieval/{name}"))
            for init in (scratch / "beir", pkg, pkg / "search"):
                (init / "__init__.py").write_text("")
            (pkg / "search" / "base.py").write_text("class BaseSearch:\n    pass\n")
            from beir.retrieval.custom_metrics import mrr, top_k_accuracy
            from beir.retrieval.evaluation import EvaluateRetrieval

            ks = [1, 3, 5, 10, 100, 1000]
            for seed in range(args.seeds):
                _, _, _, qrels, results, form = data(seed)
                theirs = {}
                for part in EvaluateRetrieval.evaluate(qrels, results, ks):
                    theirs.update(part)
                theirs.update(mrr(qrels, results, ks))
                theirs.update(top_k_accuracy(qrels, results, ks))
                failures += check(f"BEIR seed {seed}", theirs,
                                  ours(list(theirs), "beir", form), set(theirs))
        if args.mteb:
            (scratch / "mteb").mkdir()
            (scratch / "mteb" / "__init__.py").write_text("")
            (scratch / "mteb" / "types.py").write_text(
                "class RetrievalEvaluationResult(dict):\n"
                "    def __init__(self, **kw):\n        super().__init__(**kw)\n")
            (scratch / "mteb_retrieval_metrics.py").write_text(
                read(args.mteb, "mteb/_evaluators/retrieval_metrics.py"))
            import mteb_retrieval_metrics as mteb

            ks = [1, 3, 5, 10, 20, 100, 1000]
            for seed in range(args.seeds):
                _, _, _, qrels, results, form = data(seed)
                res = mteb.calculate_retrieval_scores(results, qrels, ks)
                full = mteb.make_score_dict(
                    ndcg=res["ndcg"], _map=res["map"], recall=res["recall"],
                    precision=res["precision"], mrr=res["mrr"], naucs={}, naucs_mrr={},
                    hit_rate=res["hit_rate"], task_scores={})
                mine = ours([k for k in full if k != "accuracy"], "mteb", form)
                mine["accuracy"] = mine["recall_at_1"]  # one measure, two keys in MTEB's dict
                failures += check(f"MTEB seed {seed}", full, mine,
                                  {k for k in full if not k.startswith("mrr")})
        if args.st:
            try:
                source = read(args.st, "sentence_transformers/sentence_transformer/evaluation/"
                                       "information_retrieval.py")
            except subprocess.CalledProcessError:
                source = read(args.st, "sentence_transformers/evaluation/"
                                       "InformationRetrievalEvaluator.py")
            cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)
                       and n.name == "InformationRetrievalEvaluator")
            namespace: dict = {"np": np}
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and node.name in (
                        "compute_metrics", "compute_dcg_at_k"):
                    node.decorator_list = []
                    exec(compile(ast.Module([node], []), "information_retrieval", "exec"),
                         namespace)
            for seed in range(args.seeds):
                qids, dids, grades, _, results, form = data(seed)
                relevant = {q: {d for j, d in enumerate(dids) if grades[i, j] > 0}
                            for i, q in enumerate(qids)}
                kept = [q for q in qids if relevant[q]]  # its __init__
                evaluator = types.SimpleNamespace(
                    accuracy_at_k=[1, 3, 5, 10], precision_recall_at_k=[1, 3, 5, 10],
                    mrr_at_k=[10], ndcg_at_k=[10], map_at_k=[100], queries_ids=kept,
                    relevant_docs=relevant, queries=kept,
                    compute_dcg_at_k=namespace["compute_dcg_at_k"])
                hits = [[{"corpus_id": d, "score": s} for d, s in results[q].items()]
                        for q in kept]
                out = namespace["compute_metrics"](evaluator, hits)
                theirs = {f"{key[:-2]}@{k}": float(v) for key, per_k in out.items()
                          for k, v in per_k.items()}
                failures += check(f"sentence-transformers seed {seed}", theirs,
                                  ours(list(theirs), "sentence_transformers", form), set())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
