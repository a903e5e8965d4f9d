"""The documentation under docs/ runs and builds.

* On every page, the ```python blocks run in order in one namespace, in a fresh directory, and a
  ```bash line that starts with ``retrieval-metrics evaluate`` or ``retrieval-metrics compare``
  runs on the files they wrote. Blocks in ```py are shown only (they need hardware the tests do
  not have, e.g. several GPUs).
* ``mkdocs build --strict`` is part of the test command (README and .ci/run); here a test only
  checks that every page is in the navigation, so a new page is not silently left out.
* The images the pages show are drawn by the build (tools/docs_images.py, a mkdocs hook) with a
  page's own ``--plot`` line; here every image shown has such a line, and the line writes a PNG
  when its page runs.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[tuple[str, str]]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


RUNNABLE = [p for p in PAGES if any(lang == "python" for lang, _ in blocks(p))]


def docs_images():
    """tools/docs_images.py, the mkdocs hook that draws the pages' images."""
    spec = importlib.util.spec_from_file_location("docs_images", ROOT / "tools" / "docs_images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_image_shown_is_drawn_by_a_page_command():
    hook = docs_images()
    assert "tools/docs_images.py" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    shown = hook.referenced_images(DOCS)
    assert "cli-qrels-compare.png" in shown
    assert set(shown) <= set(hook.plot_commands(DOCS))
    assert not (DOCS / "images").exists(), "docs images are drawn by the build, not committed"


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert f" {page}\n" in nav, f"docs/{page} is not in mkdocs.yml's nav"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", RUNNABLE)
def test_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from retrieval_metrics.cli import main

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs"}
    for i, (lang, code) in enumerate(blocks(page)):
        if lang == "python":
            try:
                exec(compile(code, f"docs/{page} python block {i}", "exec"), namespace)
            except Exception as err:  # pragma: no cover - the failure message
                pytest.fail(f"docs/{page} block {i} failed: {err!r}\n{code}")
        elif lang == "bash":
            for line in code.strip().splitlines():
                if not line.startswith(("retrieval-metrics evaluate", "retrieval-metrics compare")):
                    continue
                capsys.readouterr()
                status = main(shlex.split(line)[1:])
                captured = capsys.readouterr()
                assert status == 0, f"docs/{page}: {line}\n{captured.err}"
    # the images the build draws with this page's lines (tools/docs_images.py)
    hook = docs_images()
    for name, (where, _line) in hook.plot_commands(DOCS).items():
        if where == page and name in hook.referenced_images(DOCS):
            assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_the_option_table_is_the_declared_one():
    """docs/definitions.md lists every option as functional/options.py declares it."""
    from retrieval_metrics.functional.options import option_table_markdown

    text = (DOCS / "definitions.md").read_text(encoding="utf-8")
    assert option_table_markdown() in text, (
        "docs/definitions.md's option table differs from functional/options.py; paste "
        "retrieval_metrics.functional.options.option_table_markdown() into its Options section"
    )
