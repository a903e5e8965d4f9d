#!/usr/bin/env python
"""Side by side: the RAG presets against the installed evaluators, question by question.

Not part of the project's tests: it needs llama-index-core, haystack-ai and ragas, which are heavy.
It draws random questions (seeded: 1-6 relevant ids, runs of 1-20 retrieved ids, with empty runs,
empty judgments, repeated retrieved ids, repeated judged ids, int ids and graded judgments mixed
in; with --mixed-types a few rank int ids against the same ids judged as text), scores each
one with each evaluator's own classes, with no LLM:

- LlamaIndex: ``HitRate``, ``HitRate(use_granular_hit_rate=True)``, ``MRR``,
  ``MRR(use_granular_mrr=True)``, ``Precision``, ``Recall``, ``AveragePrecision``, ``NDCG``
  (``llama_index.core.evaluation.retrieval.metrics``), ``.compute(expected_ids=, retrieved_ids=)``;
- Haystack: ``DocumentRecallEvaluator`` (single_hit, multi_hit), ``DocumentMRREvaluator``,
  ``DocumentMAPEvaluator``, ``DocumentNDCGEvaluator``, ``.run()`` on one question, documents
  compared by content (our id as the content; the grade as the ground truth's ``Document.score``);
  the preset is "haystack" when the installed haystack-ai is >= 3.1, else "haystack<3.1";
- ragas: ``IDBasedContextRecall`` / ``IDBasedContextPrecision``
  (``ragas.metrics._context_recall`` / ``_context_precision``), ``single_turn_ascore`` on a
  ``SingleTurnSample(retrieved_context_ids=, reference_context_ids=)``,

and compares every per-question value with ours (``RetrievalMetrics(names, protocol=P)``,
``per_query()``), and the means where the evaluator has one (Haystack's ``score``, ragas'
``safe_nanmean``): equal to 1e-9 (the float64 mean of ``per_query()``; ``compute()``, float32,
must agree with it to 1e-6), NaN where the evaluator gives NaN. Where the evaluator raises,
ours must raise ValueError on that question alone. Where a relevant id repeats and the evaluator
credits it each time (LlamaIndex granular hit rate / granular MRR / AP / NDCG, Haystack < 3.1
MAP / NDCG), ours must warn (UserWarning) and equal the evaluator's value on the same question
with the later copies made non-relevant (the counted-once value); the table counts these cases.
Prints a table; exits 1 on any mismatch or error on our side, 2 when no evaluator is installed.

Setup (about 5 minutes; one `pip install` of all three did not finish resolving in 19 minutes,
so install them in two steps):

    python3 -m venv .rag-venv
    .rag-venv/bin/pip install torch==2.13.0
    .rag-venv/bin/pip install -e . llama-index-core haystack-ai
    .rag-venv/bin/pip install ragas "langchain-community<0.4"
    # ragas 0.4.3 imports langchain_community.chat_models.vertexai, gone in langchain-community
    # 0.4; it also pins openai 1.x below haystack-ai's openai>=2.6 (pip warns; the evaluators
    # used here import and run). Tried with llama-index-core 0.14.25, haystack-ai 3.4.1,
    # ragas 0.4.3, langchain-community 0.3.31, torch 2.13.0+cpu.
    # the pre-3.1 Haystack behaviour, in a second environment (the last release before 3.1):
    python3 -m venv .rag-venv-hs30
    .rag-venv-hs30/bin/pip install torch==2.13.0
    .rag-venv-hs30/bin/pip install -e . haystack-ai==3.0.0

Usage (from the repository root):

    .rag-venv/bin/python tools/rag_side_by_side.py [--questions 1000] [--seed 0] [--show 5]
    .rag-venv-hs30/bin/python tools/rag_side_by_side.py
    ... --evaluators-only      # only the evaluators' side: prints --show questions' values
    ... --vectors              # tests/frontends/rag_vectors.py through the installed evaluators
    ... --mixed-types          # int ids ranked, the same ids judged as str (LlamaIndex: 1 != "1")
    ... --zero-grades          # some judgments with grade 0 (Haystack's Document.score=0)

An evaluator that is not importable in the environment is skipped and reported.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import logging
import math
import random
import sys
import warnings

TOL = 1e-9  # per question, and the float64 mean of per_query()
MEAN_TOL = 1e-6  # compute() is float32, like every compute() of the library
PLACEHOLDER = "__later_copy_{}__"


# ---------------------------------------------------------------------------------------------
# questions
# ---------------------------------------------------------------------------------------------
def make_questions(
    n: int, seed: int, mixed_types: bool = False, zero_grades: bool = False
) -> list[dict]:
    """Random questions: ``ranked`` (list), ``relevant`` (list, or {id: grade}), and tags."""
    rng = random.Random(seed)
    out = []
    for q in range(n):
        use_int = rng.random() < 0.1
        pool = (
            [rng.randrange(40) for _ in range(40)]
            if use_int
            else [f"d{rng.randrange(40)}" for _ in range(40)]
        )
        pool = list(dict.fromkeys(pool))
        if rng.random() < 0.06:
            relevant_ids = []  # empty judgments
        else:
            relevant_ids = rng.sample(pool, rng.randint(1, min(6, len(pool))))
        if rng.random() < 0.06:
            ranked = []  # empty run
        else:
            k = rng.randint(1, 20)
            ranked = []
            for _ in range(k):
                if relevant_ids and rng.random() < 0.35:
                    ranked.append(rng.choice(relevant_ids))
                else:
                    ranked.append(rng.choice(pool))
            if rng.random() < 0.85:  # most runs have no repeat: keep the first copy of each id
                ranked = list(dict.fromkeys(ranked))
        relevant: list | dict = list(relevant_ids)
        if relevant_ids and rng.random() < 0.4:
            relevant = {
                d: float(rng.choice([0, 0.5, 1, 2, 3] if zero_grades else [0.5, 1, 2, 3]))
                for d in relevant_ids
            }
        elif relevant_ids and rng.random() < 0.05:
            relevant = [*relevant_ids, relevant_ids[0]]  # a judged id listed twice
        question = {"q": q, "ranked": ranked, "relevant": relevant}
        if (
            mixed_types
            and use_int
            and relevant_ids
            and not isinstance(relevant, dict)
            and rng.random() < 0.3
        ):
            # the judgments as text, the run as ints: ragas compares str(id), LlamaIndex compares
            # the values (1 != "1"). Haystack's contents are text: not given to Haystack.
            question.update(relevant=[str(d) for d in relevant], mixed=True)
        out.append(question)
    return out


def relevant_list(question: dict) -> list:
    rel = question["relevant"]
    return list(rel)  # a dict's keys, or the list


def repeats_relevant(question: dict) -> bool:
    rel = relevant_list(question)
    rel_set = set(rel)
    hits = [d for d in question["ranked"] if d in rel_set]
    return len(hits) != len(set(hits)) or len(rel) != len(rel_set)


def counted_once(question: dict) -> dict:
    """The same question with every later copy of a relevant id made a never-relevant id (it keeps
    its rank) and the judgments without repeats: "counted once, at its first position"."""
    rel = relevant_list(question)
    rel_set = set(rel)
    seen: set = set()
    ranked = []
    for i, d in enumerate(question["ranked"]):
        if d in rel_set and d in seen:
            ranked.append(PLACEHOLDER.format(i))
        else:
            ranked.append(d)
        seen.add(d)
    relevant = question["relevant"]
    if not isinstance(relevant, dict):
        relevant = list(dict.fromkeys(relevant))
    return {**question, "ranked": ranked, "relevant": relevant}


# ---------------------------------------------------------------------------------------------
# evaluators: each returns {preset: {our name: (callable(question) -> float, credits_repeats)}}
# ---------------------------------------------------------------------------------------------
def llama_index_side() -> tuple[str, dict] | None:
    try:
        from llama_index.core.evaluation.retrieval import metrics as li
    except ImportError:
        return None
    version = importlib.metadata.version("llama-index-core")

    def scorer(cls, **attrs):
        def score(question):
            metric = cls()
            for key, value in attrs.items():
                setattr(metric, key, value)
            return float(
                metric.compute(
                    expected_ids=relevant_list(question), retrieved_ids=list(question["ranked"])
                ).score
            )

        return score

    metrics = {
        "hit_rate": (scorer(li.HitRate), False),
        "recall[HitRate(use_granular_hit_rate=True)]": (
            scorer(li.HitRate, use_granular_hit_rate=True),
            True,
        ),
        "mrr": (scorer(li.MRR), False),
        "granular_mrr": (scorer(li.MRR, use_granular_mrr=True), True),
        "precision": (scorer(li.Precision), False),
        "recall": (scorer(li.Recall), False),
        "map": (scorer(li.AveragePrecision), True),
        "ndcg": (scorer(li.NDCG), True),
    }
    return f"llama-index-core {version}", {"llama_index": metrics}


def haystack_side() -> tuple[str, dict, dict] | None:
    try:
        from haystack import Document
        from haystack.components.evaluators import (
            DocumentMAPEvaluator,
            DocumentMRREvaluator,
            DocumentNDCGEvaluator,
            DocumentRecallEvaluator,
        )
    except ImportError:
        return None
    logging.getLogger("haystack").setLevel(logging.ERROR)
    version = importlib.metadata.version("haystack-ai")
    major, minor = (int(x) for x in version.split(".")[:2])
    preset = "haystack" if (major, minor) >= (3, 1) else "haystack<3.1"

    def docs(question):
        rel = question["relevant"]
        if isinstance(rel, dict):
            truth = [Document(content=str(d), score=g) for d, g in rel.items()]
        else:
            truth = [Document(content=str(d)) for d in rel]
        return truth, [Document(content=str(d)) for d in question["ranked"]]

    def scorer(make):
        def score(question):
            truth, retrieved = docs(question)
            return float(
                make().run(ground_truth_documents=[truth], retrieved_documents=[retrieved])[
                    "individual_scores"
                ][0]
            )

        return score

    def mean_of(make):
        def mean(questions):
            pairs = [docs(q) for q in questions]
            return float(
                make().run(
                    ground_truth_documents=[t for t, _ in pairs],
                    retrieved_documents=[r for _, r in pairs],
                )["score"]
            )

        return mean

    old = preset == "haystack<3.1"
    makers = {
        "hit_rate": lambda: DocumentRecallEvaluator(mode="single_hit"),
        "recall": lambda: DocumentRecallEvaluator(mode="multi_hit"),
        "mrr": DocumentMRREvaluator,
        "map": DocumentMAPEvaluator,
        "ndcg": DocumentNDCGEvaluator,
    }
    credits = {"hit_rate": False, "recall": False, "mrr": False, "map": old, "ndcg": old}
    metrics = {name: (scorer(make), credits[name]) for name, make in makers.items()}
    means = {name: mean_of(make) for name, make in makers.items()}
    return f"haystack-ai {version}", {preset: metrics}, {preset: means}


def ragas_side() -> tuple[str, dict, dict] | None:
    try:
        from ragas.dataset_schema import SingleTurnSample
        from ragas.metrics._context_precision import IDBasedContextPrecision
        from ragas.metrics._context_recall import IDBasedContextRecall
        from ragas.utils import safe_nanmean
    except ImportError:
        return None
    logging.getLogger("ragas").setLevel(logging.ERROR)
    version = importlib.metadata.version("ragas")
    loop = asyncio.new_event_loop()

    def scorer(cls):
        metric = cls()

        def score(question):
            sample = SingleTurnSample(
                retrieved_context_ids=list(question["ranked"]),
                reference_context_ids=relevant_list(question),
            )
            return float(loop.run_until_complete(metric.single_turn_ascore(sample)))

        return score

    metrics = {
        "recall": (scorer(IDBasedContextRecall), False),
        "precision": (scorer(IDBasedContextPrecision), False),
    }

    def mean_of(name):
        return lambda questions: float(safe_nanmean([metrics[name][0](q) for q in questions]))

    return f"ragas {version}", {"ragas": metrics}, {"ragas": {n: mean_of(n) for n in metrics}}


# ---------------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------------
def evaluate(score, question):
    try:
        return "value", score(question)
    except Exception as exc:  # the evaluator's own refusal
        return "raises", f"{type(exc).__name__}: {exc}"


def same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= TOL


def ours(preset: str, name: str, questions: list[dict]):
    """(per-query list, float64 mean of the non-NaN ones, UserWarning messages, compute()) from
    our preset on these questions."""
    import retrieval_metrics as rm

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = rm.RetrievalMetrics([name], protocol=preset)
        m.update(
            ranked_ids=[q["ranked"] for q in questions],
            relevant_ids=[q["relevant"] for q in questions],
        )
        per_query = m.per_query()[name]
        computed = float(m.compute()[name])
    kept = per_query[~per_query.isnan()]
    mean = float(kept.mean()) if kept.numel() else float("nan")  # float64: NaN = left out
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return per_query.tolist(), mean, messages, computed


def ours_raises(preset: str, name: str, question: dict) -> str | None:
    """None if ours raised ValueError on this question alone, else what happened."""
    import retrieval_metrics as rm

    m = rm.RetrievalMetrics([name], protocol=preset)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.update(ranked_ids=[question["ranked"]], relevant_ids=[question["relevant"]])
            value = m.compute()[name]
    except ValueError:
        return None
    except Exception as exc:
        return f"raised {type(exc).__name__} ({exc}), not ValueError"
    return f"returned {float(value)!r} where the evaluator raises"


def compare(preset, label, score, credits, questions, mean_fn, rows, problems, show):
    name = label.split("[")[0]
    evaluator = [evaluate(score, q) for q in questions]
    reference = []  # what ours must give, per question (None: ours must raise)
    n_warn = 0
    for q, (kind, value) in zip(questions, evaluator, strict=True):
        if kind == "raises":
            reference.append(None)
        elif credits and repeats_relevant(q):
            n_warn += 1
            k2, v2 = evaluate(score, counted_once(q))
            reference.append(("warns", v2 if k2 == "value" else float("nan"), value))
        else:
            reference.append(("value", value, value))
    for q, (kind, value) in list(zip(questions, evaluator, strict=True))[:show]:
        print(
            f"  {preset:13s} {label:44s} q{q['q']:<4d} "
            f"ranked={q['ranked']} relevant={q['relevant']} -> "
            f"{value if kind == 'value' else 'raises ' + value}"
        )
    row = {
        "preset": preset,
        "metric": label,
        "n": len(questions),
        "equal": 0,
        "raises": 0,
        "warns": n_warn,
        "mismatch": 0,
        "ours_error": "",
    }
    rows.append(row)
    kept = [(q, r) for q, r in zip(questions, reference, strict=True) if r is not None]
    try:
        for q, r in zip(questions, reference, strict=True):
            if r is None:
                why = ours_raises(preset, name, q)
                if why is None:
                    row["raises"] += 1
                else:
                    row["mismatch"] += 1
                    problems.append(f"{preset} {label} q{q['q']}: ours {why}")
        per_query, mean, _, computed = ours(preset, name, [q for q, _ in kept])
        if not (same(computed, mean) or abs(computed - mean) <= MEAN_TOL):
            row["mismatch"] += 1
            problems.append(
                f"{preset} {label}: compute() {computed!r} is not the mean of per_query() {mean!r}"
            )
        for (q, (kind, want, theirs)), got in zip(kept, per_query, strict=True):
            if same(got, want):
                row["equal"] += 1
            else:
                row["mismatch"] += 1
                problems.append(
                    f"{preset} {label} q{q['q']}: ours {got!r}, evaluator {theirs!r}"
                    + (f" (counted once {want!r})" if kind == "warns" else "")
                    + f"; ranked={q['ranked']} relevant={q['relevant']}"
                )
        for q, (kind, _, _) in kept:
            if kind == "warns":  # alone, so that the warning has to name this question's id
                _, _, alone, _ = ours(preset, name, [q])
                if not any(str(d) in " ".join(alone) for d in relevant_list(q)):
                    row["mismatch"] += 1
                    problems.append(
                        f"{preset} {label} q{q['q']}: no UserWarning names its repeated id"
                    )
        if mean_fn is not None and kept:
            if all(kind == "value" for _, (kind, _, _) in kept):
                want_mean = mean_fn([q for q, _ in kept])
                if not same(mean, want_mean):
                    row["mismatch"] += 1
                    problems.append(
                        f"{preset} {label}: mean ours {mean!r}, evaluator {want_mean!r}"
                    )
    except Exception as exc:  # our side not there yet, or broken
        row["ours_error"] = f"{type(exc).__name__}: {exc}"[:90]
        problems.append(f"{preset} {label}: ours failed: {row['ours_error']}")


def check_vectors(sides) -> int:
    """Each vector of tests/frontends/rag_vectors.py, question by question, through the installed
    evaluator its protocol names: it must give the number its own test asserts (for "warns", the
    evaluator's value; for "raises", per question only where one question raises alone)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tests" / "frontends" / "rag_vectors.py"
    spec = importlib.util.spec_from_file_location("rag_vectors", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scorers = {}
    for _, presets, _ in sides:
        for preset, metrics in presets.items():
            for label, (score, _) in metrics.items():
                scorers[(preset, label)] = score
    checked, failed, skipped = 0, [], 0
    for v in module.VECTORS:
        label = v["name"]
        if v["evaluator_metric"] == "HitRate(use_granular_hit_rate=True)":
            label = "recall[HitRate(use_granular_hit_rate=True)]"
        score = scorers.get((v["protocol"], label))
        if (
            score is None
            or v["outcome"] == "not_expressible"
            or (
                v["outcome"] == "raises" and not len(v["ranked_ids"]) == len(v["relevant_ids"]) == 1
            )
        ):
            skipped += 1
            continue
        want = v.get("evaluator_expected", v.get("expected"))
        for i, (ranked, relevant) in enumerate(
            zip(v["ranked_ids"], v["relevant_ids"], strict=True)
        ):
            kind, got = evaluate(score, {"ranked": ranked, "relevant": relevant})
            ok = (
                kind == "raises"
                if v["outcome"] == "raises"
                else (kind == "value" and same(got, want[i]))
            )
            checked += 1
            if not ok:
                failed.append(
                    f"{v['source']} [{v['protocol']} {label}] question {i}: evaluator {got!r}, "
                    f"vector {'raises' if v['outcome'] == 'raises' else want[i]!r}"
                )
    print(
        f"vectors: {checked} questions checked against the installed evaluators, "
        f"{len(failed)} differ, "
        f"{skipped} records skipped (not_expressible, multi-question raises, or evaluator not here)"
    )
    for line in failed:
        print("  " + line)
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--show", type=int, default=0, help="print the evaluators' values of the first N questions"
    )
    parser.add_argument("--problems", type=int, default=20, help="how many problems to print")
    parser.add_argument(
        "--mixed-types",
        action="store_true",
        help="also rank int ids against the same ids judged as str "
        "(LlamaIndex: 1 != '1'; ragas: equal)",
    )
    parser.add_argument(
        "--zero-grades",
        action="store_true",
        help="also judge some ids with grade 0 (Haystack: Document.score=0 is still relevant "
        "to recall/MRR/MAP, gain 0 to NDCG)",
    )
    parser.add_argument(
        "--vectors",
        action="store_true",
        help="run tests/frontends/rag_vectors.py through the installed evaluators "
        "(checks the translation)",
    )
    parser.add_argument(
        "--evaluators-only", action="store_true", help="run the evaluators only (with --show)"
    )
    args = parser.parse_args(argv)

    questions = make_questions(args.questions, args.seed, args.mixed_types, args.zero_grades)
    sides, skipped = [], []
    for label, load in (
        ("llama-index-core", llama_index_side),
        ("haystack-ai", haystack_side),
        ("ragas", ragas_side),
    ):
        try:
            loaded = load()
        except Exception as exc:  # installed but broken
            skipped.append(f"{label} ({type(exc).__name__}: {exc})")
            continue
        if loaded is None:
            skipped.append(f"{label} (not installed)")
        else:
            sides.append(loaded if len(loaded) == 3 else (*loaded, {}))
    n_rep = sum(repeats_relevant(q) for q in questions)
    print(
        f"{len(questions)} questions (seed {args.seed}): "
        f"{sum(not q['ranked'] for q in questions)} empty runs, "
        f"{sum(not q['relevant'] for q in questions)} empty judgments, "
        f"{n_rep} with a repeated relevant id, "
        f"{sum(isinstance(q['relevant'], dict) for q in questions)} graded, "
        f"{sum(bool(q.get('mixed')) for q in questions)} with int ids ranked and str ids "
        "judged (not for Haystack)"
    )
    print(
        "evaluators:",
        ", ".join(s[0] for s in sides) or "none",
        "| skipped:",
        ", ".join(skipped) or "none",
    )
    if not sides:
        return 2

    if args.vectors:
        return check_vectors(sides)

    if args.evaluators_only:
        for _, presets, _ in sides:
            for preset, metrics in presets.items():
                for label, (score, _) in metrics.items():
                    results = [evaluate(score, q) for q in questions]
                    n_raise = sum(kind == "raises" for kind, _ in results)
                    above = sum(kind == "value" and value > 1 + TOL for kind, value in results)
                    nan = sum(kind == "value" and math.isnan(value) for kind, value in results)
                    print(
                        f"{preset:13s} {label:44s} raises {n_raise:4d}  NaN {nan:4d}  "
                        f"above 1: {above:4d}"
                    )
                    for q, (kind, value) in list(zip(questions, results, strict=True))[: args.show]:
                        print(
                            f"    q{q['q']:<4d} ranked={q['ranked']} relevant={q['relevant']} -> "
                            f"{value if kind == 'value' else 'raises ' + value}"
                        )
        return 0

    rows, problems = [], []
    for _, presets, means in sides:
        for preset, metrics in presets.items():
            mine = [q for q in questions if not (preset.startswith("haystack") and q.get("mixed"))]
            for label, (score, credits) in metrics.items():
                mean_fn = means.get(preset, {}).get(label)
                compare(preset, label, score, credits, mine, mean_fn, rows, problems, args.show)

    header = (
        f"{'preset':13s} {'metric':44s} {'n':>5s} {'equal':>6s} {'raises':>6s} {'warns':>6s} "
        f"{'mismatch':>8s}  ours"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['preset']:13s} {r['metric']:44s} {r['n']:5d} {r['equal']:6d} {r['raises']:6d} "
            f"{r['warns']:6d} "
            f"{r['mismatch']:8d}  {r['ours_error'] or 'ok'}"
        )
    print(
        "(warns: questions with a repeated relevant id where the evaluator credits it each time, "
        "compared with the counted-once value and checked for a UserWarning)"
    )
    if problems:
        print(f"\n{len(problems)} problems; the first {args.problems}:")
        for p in problems[: args.problems]:
            print("  " + p)
        return 1
    print("\nall equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
