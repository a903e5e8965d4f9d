"""Package faces whose names are imported when first read (PEP 562).

``import retrieval_metrics`` used to import torchmetrics' whole tree (its text and audio
metrics, and transformers or scipy where installed: 3.6 to 7.7 s on a 2-core machine) before a
user asked for anything, and ``retrieval-metrics --help`` with it. A face made here imports a
name's module when the name is first read, then keeps it: the names, ``__all__`` and ``dir()``
are as before, and nothing is imported that a call does not need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_names(
    package: str, modules: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose names, listed under the module each
    comes from (``modules``: module -> names; a submodule is its own module's name), are
    imported when first read."""
    namespace = importlib.import_module(package).__dict__
    origin = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = origin.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        # the module's attribute of that name (``compare`` of ``retrieval_metrics.comparison``),
        # else the module itself (a submodule)
        value = getattr(imported, name, imported)
        namespace[name] = value  # read once: the module attribute from then on
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(origin))

    return __getattr__, __dir__
