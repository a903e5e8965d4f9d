"""The cases of the device matrix (tests/metrics/test_device_matrix.py), for one process and for the
processes of device_worker.py.

Every metric class x every input form it takes x ids or none, plus the options that change the
path a value takes (``average="class"``, ``cameras=``, ``relevance="radius"`` with
``positions=``, ``ignore_label``, a small ``memory_budget`` that ranks in query chunks,
``nonpositive="miss"``, image-text ``folds``) and what is built beyond ``compute()``
(``per_query()`` everywhere, ``summary()`` and :func:`retrieval_metrics.compare` where a case
asks for them). The classes, the splits over processes and the score data come from matrix.py;
the embeddings here hold small integers and every metric ranks by ``similarity="dot"``, so every
score is exact and every value must equal the CPU's bit for bit, on any device and any number of
processes.

:func:`run_case` builds one case's metric on a device, feeds it this rank's share (every tensor,
inside lists too, moved to the device first), and returns its values, its per-query values and
where each of them lives, as plain JSON-able data.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

# matrix and scenarios: tests/distributed is on sys.path, as for the other multi-process helpers
import matrix
import torch
import torch.distributed as dist
from scenarios import summary_lists

import retrieval_metrics as rm
from retrieval_metrics.functional.primitives import holds_float64

# ---------------------------------------------------------------------------------------- data


def _integer_embeddings(n: int, seed: int, classes: int = 6, dim: int = 8):
    """Integer-valued float32 embeddings around integer class centres: dot products are exact."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    centres = torch.randint(-2, 3, (classes, dim), generator=gen)
    emb = (centres[labels] + torch.randint(-1, 2, (n, dim), generator=gen)).float()
    emb[5] = emb[3]  # exact duplicates: tied scores, also across processes
    return emb, labels


def _positions(n: int, seed: int) -> torch.Tensor:
    """Whole metres in float64 (the dtype positions are meant to come in), 0..59 per axis: the
    default radius of 25 m makes some items relevant and others not."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 60, (n, 2), generator=gen).to(torch.float64)


# The sizes are matrix.py's (41 same-source items, 17 queries and 37 gallery items, 17 ranked
# lists, 12 images with 3 captions each), so that matrix.share splits them.
SAME = _integer_embeddings(41, 0)
QUERY = _integer_embeddings(17, 1)
GALLERY = _integer_embeddings(37, 2)
# two classes: more relevant pairs than memory_budget=2**16 holds, so compute() ranks a chunk of
# queries at a time (and several processes exchange per-query parts, not rank tables)
MANY = _integer_embeddings(41, 5, classes=2)
MANY_QUERY = _integer_embeddings(17, 6, classes=2)
MANY_GALLERY = _integer_embeddings(37, 7, classes=2)
POSITIONS = {"same": _positions(41, 8), "query": _positions(17, 9), "gallery": _positions(37, 10)}
CAMERAS_Q = torch.arange(17) % 3
CAMERAS_G = torch.arange(37) % 4
LISTS = [[(q * 7 + i * 3) % 30 for i in range(8)] for q in range(17)]
RELEVANT = [sorted({(q * 5) % 30, (q * 11) % 30, 1}) for q in range(17)]
IMAGES = torch.randint(-2, 3, (12, 8), generator=torch.Generator().manual_seed(3)).float()
CAPTION_IMAGE = torch.arange(12).repeat_interleave(3)  # 3 captions per image
CAPTIONS = IMAGES[CAPTION_IMAGE] + torch.randint(
    -1, 2, (36, 8), generator=torch.Generator().manual_seed(4)
).float()
SMALLEST_BUDGET = 2**16

# ------------------------------------------------------------------------------------ the cases

CLASSES = matrix.CLASSES  # the one-direction classes, each taking the options as keywords
# ... and the judged measures' class, which takes the forms with judgments only
BUILDERS = {**CLASSES, **matrix.JUDGED_CLASSES}
CROSSMODAL = {
    "CrossModalRetrieval": lambda **kw: rm.CrossModalRetrieval(k=(1, 5), prefix="val/", **kw),
    "RSum": lambda **kw: rm.RSum(k=(1, 5, 10), **kw),
}
FORMS = ["same_source", "query_gallery", "fixed_gallery", "sharded_gallery", "qrels",
         "sharded_qrels", "ranked_lists", "relevant_ranks", "scores"]
IDS_ONLY = matrix.IDS_ONLY  # judgments name queries and documents by id
CROSS_FORMS = ["pairs", "separate_lists"]
EMBEDDING_FORMS = ("same_source", "query_gallery", "fixed_gallery", "sharded_gallery")
#: constructor options of each option name ("" is the plain case; "cameras" is an update input)
OPTIONS: dict[str, dict[str, Any]] = {
    "": {},
    "class_average": {"average": "class"},
    "cameras": {},
    "radius": {"relevance": "radius"},
    "ignore_label": {"ignore_label": 0},
    "chunked": {"memory_budget": SMALLEST_BUDGET},
    "miss": {"nonpositive": "miss"},
    "folds": {"folds": 2},
    # tied gallery items by ascending id: the id rows travel as a uint8 state
    "ties_id": {"ties": "id"},
    # the embeddings in half precision (an update input, not an option): on an accelerator
    # they are multiplied on the tensor cores (engine/tensor_cores.py), on the CPU upcast; the
    # small integers are exact in both dtypes, and so is every dot product
    "bfloat16": {},
    "float16": {},
}
#: the options that give the embeddings in half precision, and their dtypes
HALF_OPTIONS = {"bfloat16": torch.bfloat16, "float16": torch.float16}
#: the inputs that hold embeddings
EMBEDDING_KEYS = ("embeddings", "image_embeddings", "text_embeddings")


@dataclass(frozen=True)
class Case:
    """One metric class fed one input form, with or without sample ids, under one option;
    ``extras`` names what else is computed beside compute() and per_query()."""

    cls: str
    form: str
    ids: bool
    option: str = ""
    extras: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, bool, str]:
        return (self.cls, self.form, self.ids, self.option)

    @property
    def name(self) -> str:
        parts = [self.cls, self.form, "ids" if self.ids else "no_ids"]
        return "-".join(parts + ([self.option] if self.option else []))


# (class, form, ids, option) beyond the plain matrix: each option on the forms whose path it
# changes, on RetrievalMetrics (every measure) and on classes of their own
OPTION_CASES = [
    ("RetrievalMetrics", "same_source", True, "class_average"),
    ("RecallAtK", "query_gallery", False, "class_average"),
    # a fixed gallery ranks at update: the query classes travel in the stored table parts
    ("PrecisionAtK", "fixed_gallery", True, "class_average"),
    ("RetrievalMetrics", "query_gallery", True, "cameras"),
    ("CMC", "fixed_gallery", False, "cameras"),
    ("MeanAveragePrecision", "sharded_gallery", True, "cameras"),
    ("RetrievalMetrics", "same_source", True, "radius"),
    ("RecallAtK", "query_gallery", False, "radius"),
    ("MRR", "fixed_gallery", True, "radius"),
    ("NDCGAtK", "sharded_gallery", True, "radius"),
    ("RetrievalMetrics", "same_source", False, "ignore_label"),
    ("MAPAtR", "query_gallery", True, "ignore_label"),
    ("RetrievalMetrics", "same_source", True, "chunked"),
    ("RetrievalMetrics", "same_source", False, "chunked"),
    ("MedianRank", "query_gallery", True, "chunked"),
    ("RetrievalMetrics", "scores", False, "miss"),
    ("CrossModalRetrieval", "pairs", True, "folds"),
    ("CrossModalRetrieval", "separate_lists", False, "folds"),
    ("RSum", "pairs", False, "folds"),
    ("RetrievalMetrics", "qrels", True, "ties_id"),
    ("MRR", "fixed_gallery", True, "ties_id"),
    ("NDCGAtK", "query_gallery", True, "ties_id"),
    # half precision on every embedding form, the symmetric pass and chunks, image-text
    *[("RetrievalMetrics", f, True, "bfloat16") for f in
      (*EMBEDDING_FORMS, "qrels", "sharded_qrels")],
    ("MAPAtR", "same_source", False, "float16"),
    ("RecallAtK", "fixed_gallery", False, "float16"),
    ("CrossModalRetrieval", "pairs", True, "bfloat16"),
    ("RSum", "separate_lists", False, "float16"),
]
# summary() and compare() on a case of every form, of every option that changes the ranking's
# path, and of image-text ("miss" refuses both by design; compare() needs a second model's
# embeddings, so it runs on the embedding forms and image-text only)
EXTRA_CASES = {
    ("RetrievalMetrics", "same_source", True, ""),
    ("RetrievalMetrics", "same_source", False, ""),
    ("RetrievalMetrics", "query_gallery", True, ""),
    ("RetrievalMetrics", "fixed_gallery", True, ""),
    ("RetrievalMetrics", "sharded_gallery", True, ""),
    ("RetrievalMetrics", "qrels", True, ""),
    ("RetrievalMetrics", "sharded_qrels", True, ""),
    ("RetrievalMetrics", "ranked_lists", True, ""),
    ("RetrievalMetrics", "relevant_ranks", False, ""),
    ("RetrievalMetrics", "scores", False, ""),
    ("CMC", "scores", False, ""),
    ("RetrievalMetrics", "same_source", True, "class_average"),
    ("RetrievalMetrics", "query_gallery", True, "cameras"),
    ("RetrievalMetrics", "same_source", True, "radius"),
    ("RetrievalMetrics", "same_source", True, "chunked"),
    ("CrossModalRetrieval", "pairs", True, ""),
    ("CrossModalRetrieval", "separate_lists", False, "folds"),
}
_COMPARABLE = (*EMBEDDING_FORMS, *IDS_ONLY, *CROSS_FORMS)
#: DEVICE_MATRIX_FULL=1 in the environment (workers inherit it): the whole cartesian product of
#: classes, forms and ids instead of the representative selection
FULL = os.environ.get("DEVICE_MATRIX_FULL") == "1"


def _plain_cases(full: bool) -> list[tuple[str, str, bool, str]]:
    """(class, form, ids, "") without options.

    Representative: RetrievalMetrics (every measure at once) takes every form with ids and
    without; each other class takes one embedding form and one of the other forms, rotated so
    that every form meets several classes, both with ids and without; image-text takes both of
    its forms with ids and without. Full: every class x every form x ids or none.
    """
    if full:
        out = [(c, f, ids, "") for c in CLASSES for f in FORMS for ids in (True, False)
               if not (f == "scores" and ids) and not (f in IDS_ONLY and not ids)]
        out += [("IRMeasures", f, True, "") for f in matrix.JUDGED_FORMS]
        return out + [(c, f, ids, "") for c in CROSSMODAL for f in CROSS_FORMS
                      for ids in (True, False)]
    out = [("RetrievalMetrics", f, ids, "") for f in FORMS for ids in (True, False)
           if not (f == "scores" and ids) and not (f in IDS_ONLY and not ids)]
    out += [("NDCGAtK", "qrels", True, ""), ("RecallAtK", "sharded_qrels", True, "")]
    out += [("IRMeasures", f, True, "") for f in matrix.JUDGED_FORMS]
    others = [c for c in CLASSES if c != "RetrievalMetrics"]
    tables = ("ranked_lists", "relevant_ranks", "scores")
    for i, cls in enumerate(others):
        ids = (i // 4) % 2 == 0  # four classes with ids, four without, four with
        out.append((cls, EMBEDDING_FORMS[i % 4], ids, ""))
        form = tables[i % 3]
        out.append((cls, form, not ids and form != "scores", ""))
    # MRR alone ranks to depth 1; on the same-source pass a device whose table lists more
    # relevant items than the CPU's truncated one (every item counted on an accelerator) gave
    # per-query values that differ from the CPU's in the last bit
    out += [("MRR", "same_source", False, "")]
    out += [("CrossModalRetrieval", f, ids, "") for f in CROSS_FORMS for ids in (True, False)]
    return [*out, ("RSum", "pairs", True, ""), ("RSum", "separate_lists", False, "")]


def cases(full: bool = FULL) -> list[Case]:
    """The plain cases (:func:`_plain_cases`), then :data:`OPTION_CASES`; the cases of
    :data:`EXTRA_CASES` also compute summary() and (where they can) compare()."""
    keys = _plain_cases(full) + OPTION_CASES
    missing = EXTRA_CASES - set(keys)
    if missing:  # a typo would silently drop summary() and compare() from the matrix
        raise ValueError(f"EXTRA_CASES names cases that are not in the matrix: {missing}")
    out = []
    for key in keys:
        extras: tuple[str, ...] = ()
        if key in EXTRA_CASES:
            extras = ("summary", "compare") if key[1] in _COMPARABLE else ("summary",)
        out.append(Case(*key, extras=extras))
    return out


# The cases run on several processes, by split. Every process of a set runs every case of its
# splits, on the emulated device each ATen operator costs a Python dispatch, and the exchanges
# between processes are many small operators: the whole matrix takes minutes there. So each
# split takes a share: on 2 processes a case of every class and every form (the same-source
# pass, the dearest, once; its no-ids and chunked cases run on 3), on 3 (uneven shares and an
# empty rank; DistributedSampler's padding, ids only) the options and both id settings.
# What a class changes (the measures reduced at the end) is the same on any number of processes;
# test_distributed_matrix.py runs every class x form x split on the CPU.
MULTI_PROCESS_CASES: dict[str, list[tuple[str, str, bool, str]]] = {
    "even": [
        ("RetrievalMetrics", "same_source", True, ""),
        ("RetrievalMetrics", "fixed_gallery", False, ""),
        ("RetrievalMetrics", "sharded_gallery", True, ""),
        ("RetrievalMetrics", "qrels", True, ""),
        ("RetrievalMetrics", "relevant_ranks", True, ""),
        ("RetrievalMetrics", "scores", False, ""),
        ("IRMeasures", "qrels", True, ""),
        ("RecallAtK", "query_gallery", False, "class_average"),
        ("HitRateAtK", "ranked_lists", False, ""),
        ("PrecisionAtK", "scores", False, ""),
        ("RPrecision", "ranked_lists", False, ""),
        ("MAPAtR", "relevant_ranks", True, ""),
        ("MeanAveragePrecision", "query_gallery", False, ""),
        ("MRR", "ranked_lists", True, ""),
        ("NDCGAtK", "relevant_ranks", True, ""),
        ("CMC", "scores", False, ""),
        ("MedianRank", "ranked_lists", False, ""),
        ("MeanRank", "relevant_ranks", False, ""),
        ("MINP", "scores", False, ""),
        ("CrossModalRetrieval", "separate_lists", False, "folds"),
        ("RSum", "pairs", True, ""),
        # each rank's shard multiplied on the (emulated) tensor cores, counts summed
        ("RetrievalMetrics", "sharded_gallery", True, "bfloat16"),
    ],
    "uneven_empty": [
        ("RetrievalMetrics", "query_gallery", True, ""),
        ("RetrievalMetrics", "ranked_lists", False, ""),
        ("RetrievalMetrics", "scores", False, "miss"),
        ("RetrievalMetrics", "same_source", False, "ignore_label"),
        ("MeanAveragePrecision", "sharded_gallery", True, "cameras"),
        ("RetrievalMetrics", "sharded_qrels", True, ""),
        ("IRMeasures", "sharded_qrels", True, ""),
        ("NDCGAtK", "query_gallery", True, "ties_id"),
        ("CrossModalRetrieval", "pairs", False, ""),
        ("RetrievalMetrics", "sharded_qrels", True, "bfloat16"),
    ],
    "padded": [
        ("RetrievalMetrics", "same_source", True, "radius"),
        ("RetrievalMetrics", "fixed_gallery", True, ""),
        ("RetrievalMetrics", "ranked_lists", True, ""),
        ("IRMeasures", "ranked_lists", True, ""),
        ("RecallAtK", "sharded_qrels", True, ""),
        ("RetrievalMetrics", "qrels", True, "ties_id"),
        ("RetrievalMetrics", "same_source", True, "chunked"),
        ("RetrievalMetrics", "query_gallery", True, "cameras"),
        ("CrossModalRetrieval", "pairs", True, "folds"),
        ("CrossModalRetrieval", "separate_lists", True, ""),
    ],
}

# summary() and compare() on several processes: the chunked ranking (whose per-query parts are
# exchanged instead of tables), a whole table, and image-text; the other cases of EXTRA_CASES
# compute them on one process only (each costs as much as the rest of a case)
MULTI_PROCESS_EXTRAS = {
    ("RetrievalMetrics", "same_source", True, ""),
    ("RetrievalMetrics", "same_source", True, "chunked"),
    ("CrossModalRetrieval", "separate_lists", False, "folds"),
}


def runs_on(case: Case, split: str) -> bool:
    """Whether ``case`` runs under ``split``: DistributedSampler's padding can only be undone
    with ids, and the scores form carries none (matrix.py's rule)."""
    return split != "padded" or case.ids


def split_cases(split: str, full: bool = FULL) -> list[Case]:
    """The cases that run under ``split``: every case on one process ("single"), the split's
    share of :data:`MULTI_PROCESS_CASES` on several (every case that can, with ``full``)."""
    every = [c for c in cases(full) if runs_on(c, split)]
    if split == "single" or full:
        return every
    chosen = set(MULTI_PROCESS_CASES[split])
    out = [
        c if c.key in MULTI_PROCESS_EXTRAS else dataclasses.replace(c, extras=())
        for c in every
        if c.key in chosen
    ]
    if len(out) != len(chosen):  # a typo would silently shrink the matrix
        raise ValueError(
            f"MULTI_PROCESS_CASES[{split!r}] names unknown cases: {chosen - {c.key for c in out}}"
        )
    return out


# ------------------------------------------------------------------------------ build and feed


def _in_case_dtype(case: Case, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with its embeddings in the case's half dtype (:data:`HALF_OPTIONS`)."""
    dtype = HALF_OPTIONS.get(case.option)
    if dtype is None:
        return kwargs
    return {k: v.to(dtype) if k in EMBEDDING_KEYS else v for k, v in kwargs.items()}


def to_device(x: Any, device: Any) -> Any:
    """``x`` with every tensor in it (lists and dicts included) moved to ``device``; float64
    ones as float32 where the device has no float64 (Apple's MPS: what its users' tensors are;
    the cases' numbers are whole, so exact in float32 too)."""
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.float64 and not holds_float64(device):
            return x.to(device, torch.float32)
        return x.to(device)
    if isinstance(x, list):
        return [to_device(v, device) for v in x]
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def _embedding_data(case: Case, role: str):
    """(embeddings, labels, positions, cameras) of a side of an embedding form."""
    chunked = case.option == "chunked"
    if case.form == "same_source":
        emb, labels = MANY if chunked else SAME
        return emb, labels, POSITIONS["same"], None
    if role == "query":
        emb, labels = MANY_QUERY if chunked else QUERY
        return emb, labels, POSITIONS["query"], CAMERAS_Q
    emb, labels = MANY_GALLERY if chunked else GALLERY
    return emb, labels, POSITIONS["gallery"], CAMERAS_G


def _embedding_kwargs(case: Case, role: str, t: torch.Tensor, alt: bool) -> dict[str, Any]:
    """One update's keywords: labels, or positions with relevance="radius" (labels then stay
    out, as in place recognition); cameras with the "cameras" option; ids when the case has
    them (gallery ids are 1000 + index, apart from the query ids)."""
    emb, labels, positions, cameras = _embedding_data(case, role)
    if alt:  # a second model for compare(): other integer embeddings, the same samples
        emb = emb.roll(1, dims=1) - emb.roll(2, dims=1)
    kwargs: dict[str, Any] = {"embeddings": emb[t]}
    if case.option == "radius":
        kwargs["positions"] = positions[t]
    else:
        kwargs["labels"] = labels[t]
    if case.option == "cameras" and cameras is not None:
        kwargs["cameras"] = cameras[t]
    if case.ids:
        kwargs["ids"] = 1000 + t if role == "gallery" else t
    return kwargs


def build(case: Case, device: Any, alt: bool = False):
    """The case's metric on ``device`` (with its fixed gallery set, as device tensors)."""
    options = dict(OPTIONS[case.option])
    if case.cls in CROSSMODAL:
        metric = CROSSMODAL[case.cls](similarity="dot", **options)
    else:
        if case.form in IDS_ONLY:
            options["qrels"] = matrix.QRELS
        metric = BUILDERS[case.cls](
            similarity="dot", gallery_sharded=case.form in ("sharded_gallery", "sharded_qrels"),
            **options,
        )
    metric = metric.to(device)
    if case.form == "fixed_gallery":
        kwargs = _embedding_kwargs(case, "gallery", torch.arange(37), alt)
        metric.set_gallery(**to_device(_in_case_dtype(case, kwargs), device))
    return metric


def feed(metric, case: Case, item: tuple[str, list[int]], device: Any, alt: bool = False) -> None:
    """One update of the case's form with the samples ``item`` names, tensors on ``device``."""
    role, idx = item
    t = torch.tensor(idx, dtype=torch.int64)
    sid = t if case.ids else None
    form = case.form
    if form == "same_source":
        kwargs = _embedding_kwargs(case, "query", t, alt)
    elif form in ("query_gallery", "sharded_gallery"):
        kwargs = {**_embedding_kwargs(case, role, t, alt), "role": role}
    elif form in IDS_ONLY:
        # relevance by the judgments: embeddings and ids only
        embedding_kwargs = _embedding_kwargs(case, role, t, alt)
        kwargs = {"embeddings": embedding_kwargs["embeddings"], "ids": embedding_kwargs["ids"],
                  "role": role}
    elif form == "fixed_gallery":
        kwargs = {**_embedding_kwargs(case, "query", t, alt), "role": "query"}
    elif form == "ranked_lists":
        # ids as int64 tensors, one per query: what a retriever on the device returns
        kwargs = {
            "ranked_ids": [torch.tensor(LISTS[i]) for i in idx],
            "relevant_ids": [torch.tensor(RELEVANT[i]) for i in idx],
            "ids": sid,
        }
    elif form == "relevant_ranks":
        # each query's ranks as a tensor, as a model on the device would produce them
        kwargs = {
            "relevant_ranks": [torch.tensor(matrix.RANKS[i]) for i in idx],
            "num_relevant": torch.tensor([len(matrix.RANKS[i]) + i % 2 for i in idx]),
            "ids": sid,
        }
    elif form == "scores":
        preds, target, indexes = matrix._scores(idx)
        kwargs = {"preds": preds, "target": target, "indexes": indexes}
    elif form == "pairs":
        img = CAPTION_IMAGE[t]
        images, captions = (IMAGES.roll(1, dims=1), CAPTIONS) if alt else (IMAGES, CAPTIONS)
        kwargs = {
            "image_embeddings": images[img],
            "text_embeddings": captions[t],
            "image_ids": 100 + img,
            "text_ids": sid,
        }
    elif form == "separate_lists":
        # `idx` names images; each brings its captions (a caption list of its own)
        caps = torch.cat([torch.nonzero(CAPTION_IMAGE == i).flatten() for i in idx])
        images = IMAGES.roll(1, dims=1) if alt else IMAGES
        kwargs = {
            "image_embeddings": images[t],
            "text_embeddings": CAPTIONS[caps],
            "image_ids": 100 + t,
            "text_image_ids": 100 + CAPTION_IMAGE[caps],
            "text_ids": caps if case.ids else None,
        }
    else:
        raise KeyError(form)
    metric.update(**to_device(_in_case_dtype(case, kwargs), device))


def share(case: Case, split: str, rank: int, world: int) -> list[tuple[str, list[int]]]:
    """This rank's updates under ``split``; "single" feeds one process every sample once, in
    batches of 7 (several updates, so list states are concatenated on the device)."""
    if split != "single":
        return [item for item in matrix.share(split, case.form, rank, world) if item[1]]
    n_query, n_gallery = matrix._num_items(case.form)
    if case.form == "fixed_gallery":
        n_gallery = 0  # given once, to set_gallery
    out = [("query", list(range(i, min(i + 7, n_query)))) for i in range(0, n_query, 7)]
    return out + [("gallery", list(range(i, min(i + 7, n_gallery))))
                  for i in range(0, n_gallery, 7)]


# ----------------------------------------------------------------------------------- evaluate


def _plain(value: Any) -> Any:
    """Tensors, tuples and dataclasses as JSON-able lists, dicts and numbers."""
    if isinstance(value, torch.Tensor):
        return value.cpu().tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _states_on(metric, float64: bool | None = None) -> list[str]:
    """The device types the metric's states are on: of every state, or of the float64 ones
    (``float64=True``) or the others (``False``) only."""
    found = set()
    for value in metric.metric_state.values():
        for t in value if isinstance(value, list) else [value]:
            if isinstance(t, torch.Tensor) and float64 in (None, t.dtype == torch.float64):
                found.add(t.device.type)
    return sorted(found)


def fed(case: Case, split: str, rank: int, world: int, device: Any, alt: bool = False):
    """The case's metric on ``device``, fed this rank's share under ``split``.

    On several processes the ranks agree afterwards whether each of them could feed it: an
    update that raises on some ranks only (a rank with no data makes no update) would otherwise
    send the others into compute()'s collectives alone, and every later case of the run would
    exchange the wrong tensors. Every rank then raises (its own error, or that another failed).
    """
    error: Exception | None = None
    metric = None
    try:
        metric = build(case, device, alt)
        for item in share(case, split, rank, world):
            feed(metric, case, item, device, alt)
    except Exception as caught:
        error = caught
    if world > 1:
        failed = torch.tensor([error is not None], dtype=torch.int64, device=device)
        dist.all_reduce(failed, op=dist.ReduceOp.MAX)
        if error is None and int(failed):
            raise RuntimeError("another rank failed to feed this case (see its error)")
    if error is not None:
        raise error
    return metric


def run_case(case: Case, split: str, rank: int, world: int, device: Any) -> dict[str, Any]:
    """Feed ``case`` on ``device`` with this rank's share and evaluate it.

    Returns ``values`` and ``per_query`` (lists), the device of each compute() value
    (``value_devices``) and per-query value (``per_query_devices``), the metric's device and the
    devices its states are on (read after the updates, before compute), ``summary`` rows and
    ``compare`` results where the case asks, and the warnings raised.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metric = fed(case, split, rank, world, device)
        state_devices = _states_on(metric)
        float64_state_devices = _states_on(metric, float64=True)
        other_state_devices = _states_on(metric, float64=False)
        result = metric.compute()
        values = result if isinstance(result, dict) else {"value": result}
        per_query = metric.per_query()
        out = {
            "values": {k: v.cpu().tolist() for k, v in values.items()},
            "value_devices": {k: str(v.device) for k, v in values.items()},
            "per_query": {k: v.cpu().tolist() for k, v in per_query.items()},
            "per_query_devices": {k: str(v.device) for k, v in per_query.items()},
            "metric_device": str(metric.device),
            "state_devices": state_devices,
            "float64_state_devices": float64_state_devices,
            "other_state_devices": other_state_devices,
            "per_query_dtypes": {k: str(v.dtype) for k, v in per_query.items()},
            "value_dtypes": {k: str(v.dtype) for k, v in values.items()},
            # whether compute() ranked a chunk of queries at a time (the "chunked" option's
            # path); the metric keeps the chunks' per-query parts only then
            "ranked_in_chunks": getattr(metric, "_chunk_parts", None) is not None,
        }
        if "summary" in case.extras:
            out["summary"] = summary_lists(metric)
        if "compare" in case.extras:
            second = fed(case, split, rank, world, device, alt=True)
            comparison = rm.compare(metric, second, num_bootstrap=200, seed=3)
            out["compare"] = {k: _plain(v) for k, v in comparison.items()}
    out["warnings"] = [str(w.message) for w in caught]
    return out


def run_split(split: str, rank: int, world: int, device: Any) -> dict[str, dict[str, Any]]:
    """Every case of ``split`` (:func:`split_cases`), each on a fresh metric: ``{case name:
    result}``; a case that raises gives ``{"error": ...}``, so that one failure does not hide
    the others."""
    results = {}
    for case in split_cases(split):
        try:
            results[case.name] = run_case(case, split, rank, world, device)
        except Exception as error:  # reported per case by the test
            results[case.name] = {"error": f"{type(error).__name__}: {error}"}
            # also in the process's log: where ranks fail differently, their collectives no
            # longer match and the run stops before anything is written
            print(f"rank {rank}, {split}, {case.name}: {type(error).__name__}: {error}",
                  file=sys.stderr, flush=True)
    return results


# ---------------------------------------------------------------------- SelectOnValidation


def _select_trainer(world: int) -> SimpleNamespace:
    """What SelectOnValidation's id hooks read of a Trainer. ``sanity_checking=True`` keeps
    ModelCheckpoint from saving at the end of validation (there is no model to save); the ids
    are collected all the same."""
    from lightning.pytorch.trainer.states import TrainerFn

    return SimpleNamespace(
        world_size=world,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        sanity_checking=True,
        fast_dev_run=False,
        global_step=0,
    )


def select_on_validation(rank: int, world: int, device: Any) -> dict[str, Any]:
    """SelectOnValidation's sample-id check over metrics on ``device``, driven through its
    Lightning hooks, this rank fed its DistributedSampler share (ids repeat across ranks).

    Validation: MAPAtR with query ids 0..40, RSum with image ids 100..111 and caption ids
    0..35. Test "overlap": query ids 31..71 (10 shared), images 200..211, captions 36..71 (no
    caption id is a validation caption id; caption ids equal to query ids are of another kind);
    test "disjoint": every id new. Returns the number of validation ids kept and each test run's
    error message (None when accepted).
    """
    from retrieval_metrics.lightning import SelectOnValidation

    trainer = _select_trainer(world)
    select = SelectOnValidation(monitor="val/map_at_r")
    mine = torch.tensor(matrix._padded(41, rank, world), dtype=torch.int64)
    caps = torch.tensor(matrix._padded(36, rank, world), dtype=torch.int64)

    def loop(start, batch_end, end, offsets: tuple[int, int, int]) -> None:
        """One loop: fresh metrics on the device (Lightning resets logged metrics at the end of
        an epoch), one batch of ids, the hooks that collect and compare them."""
        query_offset, image_offset, caption_offset = offsets
        module = torch.nn.Module()
        module.map = rm.MAPAtR(similarity="dot").to(device)
        module.rsum = rm.RSum(similarity="dot").to(device)
        start(trainer, module)
        module.map.update(*to_device([SAME[0][mine], SAME[1][mine]], device),
                          ids=(query_offset + mine).to(device))
        img = CAPTION_IMAGE[caps]
        module.rsum.update(*to_device([IMAGES[img], CAPTIONS[caps], image_offset + img], device),
                           text_ids=(caption_offset + caps).to(device))
        batch_end(trainer, module, None, None, 0)
        end(trainer, module)

    validation = (
        select.on_validation_epoch_start, select.on_validation_batch_end, select.on_validation_end
    )
    test = select.on_test_epoch_start, select.on_test_batch_end, select.on_test_epoch_end
    loop(*validation, (0, 100, 0))
    out: dict[str, Any] = {"validation_ids": int(select.state_dict()["validation_ids"].numel())}
    for run, offsets in {"overlap": (31, 200, 36), "disjoint": (41, 200, 36)}.items():
        try:
            loop(*test, offsets)
            out[run] = None
        except ValueError as error:
            out[run] = str(error)
    return out
