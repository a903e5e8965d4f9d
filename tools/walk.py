"""The walk of a metric's update() and compute(): every function of the package they call.

Run from the repository root (``python tools/walk.py [label|qrels]``): it traces one
``RetrievalMetrics`` update and compute (same source with labels; or queries and a corpus
with qrels) with ``sys.setprofile`` and prints, in first-call order, each package file with
the functions called in it; the number of files, of distinct functions and of calls from one
file to another; and the chain of calls on the stack when compute() first multiplies two
matrices. Run it on two trees to compare what a change adds to or takes from the path
(docs/contributing.md).
"""

from __future__ import annotations

import sys
import warnings
from collections import OrderedDict

import torch

import retrieval_metrics as rm

PACKAGE = "retrieval_metrics"


def _step(frame) -> tuple[str, str] | None:
    """(file in the package, function) of a frame; None outside the package, or for an
    expression or an import rather than a step of the walk."""
    path = frame.f_code.co_filename
    if f"/{PACKAGE}/" not in path:
        return None
    name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    if any(f"<{kind}>" in name for kind in ("genexpr", "listcomp", "dictcomp", "lambda", "module")):
        return None
    return path.split(f"/{PACKAGE}/", 1)[1], name


def traced(step) -> tuple[OrderedDict[str, list[str]], set[tuple[str, str]]]:
    """The functions ``step()`` calls, by file, and the calls that cross from one file of the
    package to another (caller function -> callee function), each counted once."""
    seen: OrderedDict[str, list[str]] = OrderedDict()
    crossing: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event != "call":
            return
        here = _step(frame)
        if here is None:
            return
        file, name = here
        names = seen.setdefault(file, [])
        if name not in names:
            names.append(name)
        caller = frame.f_back
        while (
            caller is not None
            and _step(caller) is None
            and f"/{PACKAGE}/" in caller.f_code.co_filename
        ):
            caller = caller.f_back  # through the expressions of the same function
        there = None if caller is None else _step(caller)
        if there is not None and there[0] != file:
            crossing.add((f"{there[0]}:{there[1]}", f"{file}:{name}"))

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return seen, crossing


def label_walk():
    torch.manual_seed(0)
    emb, labels = torch.randn(64, 16), torch.randint(0, 8, (64,))
    metric = rm.RetrievalMetrics(["hit_rate@1", "map@r"])
    return metric, lambda: metric.update(emb, labels, ids=torch.arange(64)), metric.compute


def qrels_walk():
    torch.manual_seed(0)
    qrels = {f"q{i}": {f"d{j}": 1 for j in range(i % 5, 40, 7)} for i in range(16)}
    metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels)

    def update():
        metric.update(torch.randn(16, 16), ids=[f"q{i}" for i in range(16)], role="query")
        metric.update(torch.randn(40, 16), ids=[f"d{j}" for j in range(40)], role="gallery")

    return metric, update, metric.compute


def stack_at_product(step) -> list[str]:
    """The package's functions on the call stack when ``step()`` first multiplies two
    matrices (``torch.mm``, ``torch.matmul`` or ``@``): the chain from the metric to the
    product."""
    found: list[str] = []
    names = {"mm", "matmul", "addmm", "__matmul__"}

    def profile(frame, event, arg):
        if found or event != "c_call" or getattr(arg, "__name__", "") not in names:
            return
        chain, f = [], frame
        while f is not None:
            here = _step(f)
            if here is not None:
                chain.append(f"{here[0]}:{here[1]}")
            f = f.f_back
        found.extend(reversed(chain))

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return found


def main() -> None:
    warnings.simplefilter("ignore")
    kind = sys.argv[1] if len(sys.argv) > 1 else "label"
    walk = {"label": label_walk, "qrels": qrels_walk}[kind]
    _, update, compute = walk()
    update(), compute()  # imports and first-call caches out of the way
    _, update, compute = walk()
    total_files: set[str] = set()
    total_calls = total_crossing = 0
    back: set[tuple[str, str]] = set()
    for step, fn in (("update", update), ("compute", compute)):
        seen, crossing = traced(fn)
        calls = sum(len(v) for v in seen.values())
        print(f"## {step}(): {len(seen)} files, {calls} functions, {len(crossing)} calls "
              "from one file to another")
        for file, names in seen.items():
            print(f"  {file}: {', '.join(names)}")
        total_files |= set(seen)
        total_calls += calls
        total_crossing += len(crossing)
        back |= {
            (a, b) for a, b in crossing
            if a.startswith("metrics/forms/")
            and b.split(":")[0] in ("metrics/retrieval.py", "metrics/base.py")
        }
    print(f"{kind}: {len(total_files)} files, {total_calls} functions, {total_crossing} calls "
          "between files in update() + compute()")
    print(f"## calls from an input form back into the metric: {len(back)}")
    for caller, callee in sorted(back):
        print(f"  {caller} -> {callee}")
    _, update, compute = walk()
    update()
    chain = stack_at_product(compute)
    print(f"## from compute() to the product: {len({c.split(':')[0] for c in chain})} files, "
          f"{len(chain)} calls deep")
    for call in chain:
        print(f"  {call}")


if __name__ == "__main__":
    main()
