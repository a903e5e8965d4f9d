"""The form registry: the bits of a metric's synced ``form`` state are the registered kinds by
name, so processes that register the same forms in another order agree on every bit."""

from __future__ import annotations

import torch

import retrieval_metrics as rm
from retrieval_metrics.metrics import forms
from retrieval_metrics.metrics.forms import Scores, register_form, unregister_form
from retrieval_metrics.metrics.forms.base import Batch
from retrieval_metrics.metrics.forms.tables import TableStates


class _Kind(TableStates):
    """A form of its own kind that accepts nothing (only its registration is tested)."""

    arguments = ("preds", "target")
    call = "nothing"

    def accepts(self, batch: Batch, metric) -> bool:
        return False


class _Alpha(_Kind):
    kind = "aaa"


class _Omega(_Kind):
    kind = "zzz"


def test_kinds_do_not_depend_on_the_order_of_registration():
    before = forms.kinds()
    try:
        register_form(_Omega())
        register_form(_Alpha(), before=Scores)
        one_order = forms.kinds()
    finally:
        unregister_form(_Omega)
        unregister_form(_Alpha)
    try:
        register_form(_Alpha())
        register_form(_Omega(), before=Scores)
        other_order = forms.kinds()
    finally:
        unregister_form(_Alpha)
        unregister_form(_Omega)
    assert one_order == other_order == tuple(sorted({*before, "aaa", "zzz"}))
    assert forms.kinds() == before


def test_a_metric_marks_the_bit_of_its_forms_kind():
    metric = rm.RetrievalMetrics(["mrr"])
    metric.update(ranked_ids=[["a", "b"]], relevant_ids=[{"b"}])
    marked = [kind for kind, bit in zip(forms.kinds(), metric.form.tolist(), strict=True) if bit]
    assert marked == [forms.form_of_call(Batch(ranked_ids=[["a"]], relevant_ids=[{"a"}]),
                                         metric)[0].kind]
    assert float(metric.compute()["mrr"]) == torch.tensor(0.5).item()
