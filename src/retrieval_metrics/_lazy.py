"""Package faces whose names are imported when first read (PEP 562).

``import retrieval_metrics`` used to import torchmetrics' whole tree (its text and audio
metrics, and transformers or scipy where installed: 3.6 to 7.7 s on a 2-core machine) before a
user asked for anything, and ``retrieval-metrics --help`` with it. A face made here imports a
name's module when the name is first read, then keeps it: the names, ``__all__`` and ``dir()``
are as before, and nothing is imported that a call does not need.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose ``names`` (name -> module it comes
    from; a module's own name for a submodule) are imported when first read."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        # the module's attribute of that name (``compare`` of ``retrieval_metrics.compare``,
        # whose import just set the package's ``compare`` to the module), else the module
        value = getattr(imported, name, imported)
        namespace[name] = value  # read once: the module attribute from then on
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
