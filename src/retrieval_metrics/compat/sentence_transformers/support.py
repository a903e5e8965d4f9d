"""What the sentence-transformers evaluator (:mod:`retrieval_metrics.compat.sentence_transformers`)
needs around it: the package itself (imported when first used, or an error that says how to
install it), the evaluator's class bound to sentence-transformers' ``BaseEvaluator``, and the
checks of its arguments (cut-offs, similarities, embeddings)."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor

INSTALL = 'pip install "retrieval-metrics[sentence-transformers]"'
#: sentence-transformers' similarity names -> the library's ``similarity``
SIMILARITIES = {"cosine": "cosine", "dot": "dot", "euclidean": "euclidean"}

__all__ = [
    "BOUND_CLASSES",
    "INSTALL",
    "SIMILARITIES",
    "bound_class",
    "check_ks",
    "check_positive_int",
    "dense_rows",
    "engine_similarity",
    "rebuild",
    "resolved_similarity",
    "score_function_similarity",
    "sentence_transformers_package",
]


def sentence_transformers_package() -> Any:
    """The sentence_transformers package, or an ImportError that says how to install it."""
    try:
        import sentence_transformers
        from sentence_transformers.base.evaluation import evaluator  # noqa: F401  (6.x layout)
        from sentence_transformers.util import similarity  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "retrieval_metrics.compat.sentence_transformers needs sentence-transformers >= 6 "
            f"({err}); install it with {INSTALL} (or pip install sentence-transformers)"
        ) from err
    return sentence_transformers


BOUND_CLASSES: dict[type, type] = {}


def bound_class(cls: type) -> type:
    """``cls`` with sentence-transformers' ``BaseEvaluator`` as a base, made once per class, so
    that its trainer (``isinstance(evaluator, BaseEvaluator)``) and model card take it."""
    st = sentence_transformers_package()
    base = st.base.evaluation.evaluator.BaseEvaluator
    if issubclass(cls, base):
        return cls
    if cls not in BOUND_CLASSES:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                     "__doc__": cls.__doc__, "_unbound_class": cls}
        BOUND_CLASSES[cls] = type(cls.__name__, (cls, base), namespace)
    return BOUND_CLASSES[cls]


def rebuild(cls: type, state: dict[str, Any]) -> Any:
    """Unpickle an evaluator: the bound class is made again from the importable one."""
    evaluator = cls.__new__(cls)
    evaluator.__dict__.update(state)
    return evaluator


def check_ks(name: str, value: Any) -> list[int]:
    """A cut-off list as sentence-transformers takes it: any non-empty iterable (list, tuple,
    set, numpy array) of positive integers, numpy's included; bools and non-integers refused by
    name (sentence-transformers would take ``True`` as 1 and fail later on a float)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(
            f"`{name}` must be a non-empty list (or other iterable) of positive ints, got "
            f"{value!r}"
        )
    items = list(value)
    if not items:
        raise ValueError(f"`{name}` must be a non-empty list of positive ints, got {value!r}")
    ks = []
    for k in items:
        if isinstance(k, (bool, np.bool_)) or (isinstance(k, Tensor) and k.dtype == torch.bool):
            raise ValueError(f"`{name}` must hold positive ints, got the bool {k!r} in {value!r}")
        try:
            # ints of any kind (numpy's, a 0-d integer tensor), never a float's value
            number = operator.index(k)
        except TypeError:
            raise ValueError(
                f"`{name}` must hold positive ints, got {k!r} ({type(k).__name__}) in {value!r}"
            ) from None
        if number < 1:
            raise ValueError(f"`{name}` must hold positive ints, got {k!r} in {value!r}")
        ks.append(number)
    return ks


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}")
    return value


def engine_similarity(value: Any, where: str) -> str:
    """A sentence-transformers similarity name (or ``SimilarityFunction``) as the library's."""
    st = sentence_transformers_package()
    try:
        name = st.util.similarity.SimilarityFunction(value).value
    except ValueError:
        name = value
    if name not in SIMILARITIES:
        raise ValueError(
            f"{where} is {value!r}, which the ranking cannot express: it scores by "
            f"{', '.join(repr(s) for s in SIMILARITIES)} only. Use sentence_transformers' own "
            "InformationRetrievalEvaluator for other similarities"
        )
    return SIMILARITIES[name]


def score_function_similarity(key: str, function: Any) -> Any:
    """What a ``score_functions`` entry ranks by: the library's similarity name, or the model
    whose ``similarity`` method it is (read at each call: that model's ``similarity_fn_name``);
    a ValueError naming the entry for a function the ranking cannot express."""
    where = f"`score_functions[{key!r}]`"
    util = sentence_transformers_package().util
    known = {
        util.cos_sim: "cosine", util.pytorch_cos_sim: "cosine", util.dot_score: "dot",
        util.euclidean_sim: "euclidean",
    }
    try:
        similarity = known.get(function)
    except TypeError:  # unhashable
        similarity = None
    if similarity is not None:
        return similarity
    owner = getattr(function, "__self__", None)
    if getattr(function, "__name__", None) == "similarity" and hasattr(
        owner, "similarity_fn_name"
    ):
        return owner
    if function is util.manhattan_sim:
        raise ValueError(
            f"{where} is sentence_transformers.util.manhattan_sim: the ranking scores by cosine, "
            "dot or euclidean only; use sentence_transformers' own InformationRetrievalEvaluator "
            "for the Manhattan distance"
        )
    raise ValueError(
        f"{where} is {function!r}, a score function this evaluator cannot express: it ranks "
        "with its own engine, which scores by cosine, dot or euclidean. Pass "
        "sentence_transformers.util.cos_sim, dot_score or euclidean_sim, or a model's "
        "`similarity` method, or leave `score_functions` out (the model's own similarity); for "
        "any other function use sentence_transformers' own InformationRetrievalEvaluator"
    )


def resolved_similarity(key: str, spec: Any) -> str:
    """A :func:`score_function_similarity` result as the library's similarity name."""
    if isinstance(spec, str):
        return spec
    return engine_similarity(
        spec.similarity_fn_name,
        f"`score_functions[{key!r}]` (a model's similarity) has similarity_fn_name, which",
    )


def dense_rows(embeddings: Any, rows: int, what: str) -> Tensor:
    """``embeddings`` as a dense 2-D tensor of ``rows`` rows, or a ValueError naming ``what``."""
    if isinstance(embeddings, (list, tuple)) and embeddings and isinstance(embeddings[0], Tensor):
        embeddings = torch.stack(list(embeddings))
    emb = torch.as_tensor(embeddings)
    if emb.is_sparse:
        emb = emb.to_dense()
    if emb.dim() != 2 or emb.shape[0] != rows:
        raise ValueError(
            f"{what} must be {rows} rows of embeddings (a 2-D tensor), got shape "
            f"{tuple(emb.shape)}"
        )
    return emb
