"""mkdocs hook (mkdocs.yml ``hooks:``): the plots the documentation shows, drawn at build time by
the commands the pages show.

A page that shows ``![...](images/NAME.png)`` (or ``../images/NAME.png``) gets the image that a
```bash line ``retrieval-metrics evaluate ... --plot NAME.png`` of some page draws: the build
runs that page's ```python blocks before the line (they write the files, seeded) and then the line,
in a fresh directory, as tests/frontends/test_docs.py runs them, and adds the image to the site as
``images/NAME.png``. No image is committed and none is drawn by hand; a page that shows an image
no command draws fails the build. tests/frontends/test_docs.py draws every image once too.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
IMAGE = re.compile(r"\]\((?:\.\./)*images/([\w.-]+\.png)\)")
COMMAND = "retrieval-metrics evaluate"

_cache: dict[tuple[str, str], bytes] = {}


def pages(docs: Path) -> dict[str, str]:
    return {p.relative_to(docs).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(docs.rglob("*.md"))}


def referenced_images(docs: Path) -> dict[str, list[str]]:
    """Each image name the pages show, with the pages that show it."""
    out: dict[str, list[str]] = {}
    for page, text in pages(docs).items():
        for name in IMAGE.findall(text):
            out.setdefault(name, []).append(page)
    return out


def _plot_of(line: str) -> str | None:
    args = shlex.split(line)
    if "--plot" in args[:-1]:
        return args[args.index("--plot") + 1]
    return None


def plot_commands(docs: Path) -> dict[str, tuple[str, str]]:
    """Each image a page's bash line draws (``--plot NAME.png``): its page and the line."""
    out: dict[str, tuple[str, str]] = {}
    for page, text in pages(docs).items():
        for lang, code in FENCE.findall(text):
            if lang != "bash":
                continue
            for line in code.strip().splitlines():
                name = _plot_of(line) if line.startswith(COMMAND) else None
                if name is not None and "/" not in name:
                    out[name] = (page, line)
    return out


def draw(docs: Path, page: str, line: str) -> bytes:
    """Run ``page``'s python blocks up to the bash block holding ``line``, then ``line``, in a
    fresh directory; the image it plots."""
    text = (docs / page).read_text(encoding="utf-8")
    key = (text, line)
    if key in _cache:
        return _cache[key]
    src = str(ROOT / "src")  # this checkout's library, as mkdocstrings reads it
    if src not in sys.path:
        sys.path.insert(0, src)
    from retrieval_metrics.cli import main

    name = _plot_of(line)
    assert name is not None
    namespace: dict[str, Any] = {"__name__": "docs"}
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for i, (lang, code) in enumerate(FENCE.findall(text)):
                if lang == "python":
                    exec(compile(code, f"docs/{page} python block {i}", "exec"), namespace)
                elif lang == "bash" and line in code.splitlines():
                    out, err = io.StringIO(), io.StringIO()
                    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                        status = main([*shlex.split(line)[1:], "--progress-delay", "-1"])
                    if status != 0:
                        raise RuntimeError(f"docs/{page}: {line}\n{err.getvalue()}")
                    break
            png = Path(name).read_bytes()
        finally:
            os.chdir(here)
    _cache[key] = png
    return png


def images(docs: Path) -> dict[str, bytes]:
    """Every image the pages show, drawn by the command that draws it."""
    commands = plot_commands(docs)
    out = {}
    for name, shown_on in referenced_images(docs).items():
        if name not in commands:
            raise ValueError(
                f"{', '.join(f'docs/{p}' for p in shown_on)} show images/{name}, but no "
                f"```bash line of the docs draws it ({COMMAND} ... --plot {name})"
            )
        out[name] = draw(docs, *commands[name])
    return out


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, png in images(Path(config["docs_dir"])).items():
        files.append(File.generated(config, f"images/{name}", content=png))
    return files
