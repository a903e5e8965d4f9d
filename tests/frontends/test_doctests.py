"""Every docstring example of the package runs."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import retrieval_metrics

MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(retrieval_metrics.__path__, "retrieval_metrics.")
    if not name.endswith(("__main__", ".lightning", ".cli", ".cli.main", ".demo", ".plot"))
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
