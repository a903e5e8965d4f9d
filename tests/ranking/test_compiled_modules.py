"""The optional compiled modules are built wherever a C compiler is.

setup.py marks them optional, so that an install without a compiler still works (each has a
Python path with the same values). The price is that a C file that stops compiling installs
silently too: the tests of the compiled paths would skip and every count run the slow way. Here
a machine with the compiler Python was built with must have every module.
"""

from __future__ import annotations

import importlib
import shutil
import sysconfig

import pytest

MODULES = [
    "retrieval_metrics.functional.ranking._str_lists",
    "retrieval_metrics.functional.ranking._labels",
    "retrieval_metrics.functional.ranking._group",
    "retrieval_metrics.functional.ranking._rows",
    "retrieval_metrics.functional.ranking.engine._count",
    "retrieval_metrics.functional.measures._ties",
]


def _compiler() -> str | None:
    command = (sysconfig.get_config_var("CC") or "").split()
    return shutil.which(command[0]) if command else None


@pytest.mark.skipif(_compiler() is None, reason="no C compiler: the Python paths run")
@pytest.mark.parametrize("name", MODULES)
def test_every_compiled_module_is_built_where_a_compiler_is(name):
    importlib.import_module(name)


def test_the_list_names_every_extension_of_setup_py():
    from pathlib import Path

    setup = (Path(__file__).parents[2] / "setup.py").read_text()
    assert sorted(MODULES) == sorted(
        line.strip().strip('",') for line in setup.splitlines()
        if line.strip().startswith('"retrieval_metrics.')
    )
