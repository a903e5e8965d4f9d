"""The public surface: what each package face exports (``__all__``) is what docs/api.md documents.

Read from the source, not imported (importing the faces would import torchmetrics and lightning:
seconds), the way mkdocstrings reads it:

* a face's names are its ``__all__``, each followed through the face's imports (the
  ``TYPE_CHECKING`` imports of a lazy face included) to the module that defines it;
* a ``:::`` line of docs/api.md documents one object, or a module's ``__all__`` (mkdocstrings
  renders the names a module exports, and its own public definitions, so that those must be
  exported too), or the ``members:`` listed under it;
* a face exported name is documented when the object it names is (wherever docs/api.md renders
  it); a subpackage exported by a face (``retrieval_metrics.functional``) is a face of its own.

A name that only the package's other modules need is imported from the module that defines it,
not exported by a face.
"""

from __future__ import annotations

import ast
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
API = ROOT / "docs" / "api.md"

FACES = [
    "retrieval_metrics",
    "retrieval_metrics.functional",
    "retrieval_metrics.functional.measures",
    "retrieval_metrics.functional.ranking",
    "retrieval_metrics.metrics",
    "retrieval_metrics.metrics.forms",
    "retrieval_metrics.formats",
    "retrieval_metrics.protocols",
    "retrieval_metrics.compat",
    *sorted(  # compat's subpackages and modules, one face each
        f"retrieval_metrics.compat.{p.stem if p.suffix else p.name}"
        for p in (SRC / "retrieval_metrics" / "compat").iterdir()
        if (p.suffix == ".py" and not p.stem.startswith("_"))
        or (p / "__init__.py").is_file()
    ),
    "retrieval_metrics.lightning",
]
#: faces without ``__all__``: their submodules are the faces (importing one never pulls in another)
NO_ALL = {"retrieval_metrics.compat"}
#: faces whose names are imported when first read (``functional/_lazy.py``)
LAZY = ["retrieval_metrics", "retrieval_metrics.functional", "retrieval_metrics.metrics",
        "retrieval_metrics.protocols"]


def module_file(module: str) -> Path | None:
    base = SRC.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


@cache
def tree(module: str) -> ast.Module:
    path = module_file(module)
    assert path is not None, f"no module {module}"
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def top_level(module: str) -> list[ast.stmt]:
    """The module's statements, those under ``if``/``try`` at the top level included (the
    ``TYPE_CHECKING`` imports of a lazy face)."""
    out, todo = [], list(tree(module).body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.If | ast.Try):
            todo[:0] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
        else:
            out.append(node)
    return out


@cache
def exports(module: str) -> tuple[str, ...] | None:
    for node in tree(module).body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return tuple(ast.literal_eval(node.value))
    return None


@cache
def bindings(module: str) -> dict[str, tuple[str, ...]]:
    """name -> ("local",) or ("import", module, name) for the module's top-level names."""
    found: dict[str, tuple[str, ...]] = {}
    package = module if module_file(module).name == "__init__.py" else module.rpartition(".")[0]
    for node in top_level(module):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{source}" if source else base
            for alias in node.names:
                found[alias.asname or alias.name] = ("import", source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name.partition(".")[0]] = (
                    "import", alias.name if alias.asname else alias.name.partition(".")[0], "")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = ("local",)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = ("local",)
    return found


def resolve(module: str, name: str, seen: frozenset = frozenset()) -> str | None:
    """Where ``from module import name`` leads: ``defining.module.name``, a module's dotted name
    (a submodule), ``external:...`` outside the package, or None when nothing defines it."""
    if (module, name) in seen:
        return None
    seen |= {(module, name)}
    if module_file(module) is None:
        return f"external:{module}.{name}" if not module.startswith("retrieval_metrics") else None
    binding = bindings(module).get(name)
    if binding == ("local",):
        return f"{module}.{name}"
    if binding is not None:
        _, source, attr = binding
        if not attr:  # ``import x``
            return source if module_file(source) else f"external:{source}"
        found = resolve(source, attr, seen)
        if found is not None:
            return found
        # ``from package import submodule`` (the package itself does not bind the name)
        return f"{source}.{attr}" if module_file(f"{source}.{attr}") is not None else None
    if module_file(f"{module}.{name}") is not None:
        return f"{module}.{name}"
    return None


def resolve_target(target: str) -> str | None:
    """A ``:::`` target as mkdocstrings finds it: a module, or a name of the longest module
    prefix."""
    if module_file(target) is not None:
        return target
    module, _, name = target.rpartition(".")
    if not module or module_file(module) is None:
        return None
    return resolve(module, name)


def api_entries() -> list[tuple[str, list[str] | None]]:
    """Each ``:::`` target of docs/api.md with the ``members:`` listed under it (None: not
    given)."""
    lines = API.read_text(encoding="utf-8").splitlines()
    entries = []
    for i, line in enumerate(lines):
        if not line.startswith(":::"):
            continue
        target, members = line[3:].strip(), None
        block = []
        for follow in lines[i + 1:]:
            if follow.strip() and not follow.startswith((" ", "\t")):
                break
            block.append(follow)
        for j, opt in enumerate(block):
            found = re.match(r"\s*members:\s*(.*)$", opt)
            if not found:
                continue
            inline = found.group(1).strip()
            if inline.startswith("["):
                members = [m.strip().strip("'\"") for m in inline[1:-1].split(",") if m.strip()]
            else:
                members = []
                for item in block[j + 1:]:
                    listed = re.match(r"\s*-\s*(\S+)\s*$", item)
                    if not listed:
                        break
                    members.append(listed.group(1).strip("'\""))
        entries.append((target, members))
    return entries


def documented() -> set[str]:
    """The definitions docs/api.md renders, by defining module and name."""
    done: set[str] = set()
    for target, members in api_entries():
        where = resolve_target(target)
        if where is None:
            continue  # reported by test_every_api_target_resolves
        done.add(where)
        if where == target and module_file(target) is not None:  # a module
            names = members if members is not None else exports(target) or ()
            done |= {r for r in (resolve(target, n) for n in names) if r is not None}
    return done


def test_every_api_target_resolves():
    entries = api_entries()
    assert entries, "docs/api.md has no ::: line"
    unresolved = [target for target, _ in entries if resolve_target(target) is None]
    assert not unresolved, f"docs/api.md targets that import nothing: {unresolved}"
    module_targets = [t for t, members in entries if module_file(t) and members is None]
    without_all = [t for t in module_targets if exports(t) is None]
    assert not without_all, (
        f"docs/api.md renders modules without __all__ (what they render is then not their "
        f"exports): {without_all}"
    )


def test_module_targets_render_only_their_exports():
    """mkdocstrings renders a module's own public classes and functions whether or not
    ``__all__`` lists them: each must be exported (or made private)."""
    extra = []
    for target, members in api_entries():
        if module_file(target) is None or members is not None or exports(target) is None:
            continue
        for node in tree(target).body:
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    and not node.name.startswith("_") and ast.get_docstring(node)
                    and node.name not in exports(target)):
                extra.append(f"{target}.{node.name}")
    assert not extra, f"rendered by docs/api.md but not in their module's __all__: {extra}"


def test_faces_export_resolves_and_is_documented():
    docs, faces = documented(), set(FACES)
    unresolved, missing = [], []
    for face in FACES:
        names = exports(face)
        if names is None:
            assert face in NO_ALL, f"{face} has no __all__"
            continue
        for name in names:
            if name.startswith("__") and name.endswith("__"):  # __version__
                continue
            where = resolve(face, name)
            if where is None:
                unresolved.append(f"{face}.{name}")
            elif where not in docs and where not in faces:
                missing.append(f"{face}.{name}")
    assert not unresolved, f"exported names that nothing defines: {unresolved}"
    assert not missing, (
        f"exported but not documented in docs/api.md ({len(missing)}): {missing}; add a ::: "
        f"entry, or import the name from its defining module where the package needs it"
    )


@pytest.mark.parametrize("face", LAZY)
def test_lazy_face_lists_agree(face):
    """A lazy face names each export three times: ``__all__``, its ``TYPE_CHECKING`` imports
    (what static tools and mkdocstrings see) and the table its ``__getattr__`` imports from."""
    import importlib

    module = importlib.import_module(face)  # lazy: imports nothing heavy
    table = inspect.getclosurevars(module.__getattr__).nonlocals["origin"]
    static = {
        alias.asname or alias.name
        for node in tree(face).body if isinstance(node, ast.If)
        for sub in node.body if isinstance(sub, ast.ImportFrom)
        for alias in sub.names
    }
    public = {n for n in exports(face) if not n.startswith("__")}
    assert set(table) == public, (
        f"{face}: __getattr__ table vs __all__: only in the table {sorted(set(table) - public)}, "
        f"only in __all__ {sorted(public - set(table))}"
    )
    assert static == public, (
        f"{face}: TYPE_CHECKING imports vs __all__: only imported {sorted(static - public)}, "
        f"only in __all__ {sorted(public - static)}"
    )
    # a name the table maps to a module of that name is the module itself (a submodule)
    wrong = [n for n, source in table.items()
             if resolve(source, n) is None and not source.endswith(f".{n}")]
    assert not wrong, f"{face}: names its table imports from modules without them: {wrong}"
