"""``RetrievalMetric.update``'s input forms, one small object each.

Each form says which ``update()`` call is its own, how it appends a batch, how the synced
states become a rank table and why a query can have nothing relevant
(:class:`~retrieval_metrics.metrics.forms.base.InputForm`), seeing its metric only through the
public :class:`~retrieval_metrics.metrics.forms.base.FormContext` of each call. A new form is
one new file here and one entry in :data:`FORMS`; docs/contributing.md shows one worked through.
"""

from __future__ import annotations

from retrieval_metrics.metrics.forms.base import Batch, FormContext, InputForm
from retrieval_metrics.metrics.forms.embeddings import QueryGallery, SameSource
from retrieval_metrics.metrics.forms.fixed_gallery import FixedGallery
from retrieval_metrics.metrics.forms.qrels import Qrels
from retrieval_metrics.metrics.forms.scores import Scores
from retrieval_metrics.metrics.forms.tables import PrecomputedRanks, RankedLists

__all__ = [
    "FORMS",
    "Batch",
    "FixedGallery",
    "FormContext",
    "InputForm",
    "PrecomputedRanks",
    "Qrels",
    "QueryGallery",
    "RankedLists",
    "SameSource",
    "Scores",
    "kinds",
    "register_form",
    "unregister_form",
]

FORMS: list[InputForm] = [
    FixedGallery(),
    Qrels(),
    SameSource(),
    QueryGallery(),
    RankedLists(),
    PrecomputedRanks(),
    Scores(),
]
"""Every input form, in the order ``update()`` offers them (a call is the first form's that
``accepts`` it among those whose ``arguments`` it passed)."""


def kinds() -> tuple[str, ...]:
    """The kinds of state of the registered forms, one bit each in a metric's ``form`` state,
    by name: processes that register the same forms in another order agree on every bit (the
    order ``update()`` offers the forms in is each process's own)."""
    return tuple(sorted({form.kind for form in FORMS}))


def register_form(form: InputForm, *, before: type[InputForm] | None = None) -> None:
    """Offer ``form`` to ``update()`` (before the forms of class ``before``, else last). Register
    a form before making the metrics that take it: a metric sizes its form state when made, one
    bit per kind (:func:`kinds`), so that every process must register the same kinds, in any
    order."""
    if any(type(f) is type(form) for f in FORMS):
        raise ValueError(f"{type(form).__name__} is registered already")
    at = len(FORMS) if before is None else next(
        i for i, f in enumerate(FORMS) if isinstance(f, before)
    )
    FORMS.insert(at, form)


def unregister_form(form_class: type[InputForm]) -> None:
    """Withdraw the form of class ``form_class`` (the built-in forms stay)."""
    FORMS[:] = [f for f in FORMS if type(f) is not form_class]

def form_of_call(batch: Batch, context: FormContext) -> tuple[InputForm, Batch]:
    """The form of one ``update()`` call, and the batch as it reads it; a ValueError naming the
    arguments when the call is no form's, or several forms'."""
    for form in FORMS:
        batch = form.recognise(batch)
    groups = {form.arguments[0]: form for form in FORMS}
    given = [name for name, form in groups.items() if batch.given(*form.arguments)]
    if len(given) != 1:
        calls = [form.call for form in groups.values()]
        raise ValueError(
            f"`update` takes exactly one input form: {', '.join(calls[:-1])}, or {calls[-1]}; "
            f"got {given or 'none'}"
        )
    if batch.role not in (None, "query", "gallery"):
        raise ValueError(f'`role` must be None, "query" or "gallery", got {batch.role!r}')
    candidates = [form for form in FORMS if form.arguments[0] == given[0]]
    extra = sorted(
        set(batch.passed()) - set(candidates[0].arguments) - set(candidates[0].keywords)
    )
    if extra:
        raise ValueError(
            f"{', '.join(f'`{name}`' for name in extra)} do not apply to "
            f"{candidates[0].call}"
        )
    form = next(form for form in candidates if form.accepts(batch, context))
    return form, batch


def form_of_kind(kind: str) -> InputForm:
    """The form that reads the states of ``kind`` (the first registered of that kind)."""
    return next(form for form in FORMS if form.kind == kind)
