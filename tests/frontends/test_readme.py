"""Every code block of README.md runs.

* ```python blocks run in order in one namespace (a block may use names an earlier one defined),
  in a fresh directory (the first is the Lightning snippet of the first screen);
* ```bash blocks are either the two setup commands (not run here: the test command must be the
  one .ci/run runs, the main job must end in ``retrieval-metrics demo``, which test_cli runs) or
  ``retrieval-metrics ...`` lines, run on the files the python blocks wrote;
* any other block fails the test: nothing would run it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def readme_blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(README.read_text(encoding="utf-8"))]


def is_setup(code: str) -> bool:
    return code.strip().startswith("python3 -m venv")


def ci_command() -> str:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.startswith("python3 -m venv")][-1].strip()


def test_every_block_has_a_runner():
    blocks = readme_blocks()
    assert blocks, "README.md has no code blocks"
    for lang, code in blocks:
        assert lang in ("python", "bash"), f"a ```{lang} block nothing runs:\n{code}"
        if lang == "bash" and not is_setup(code):
            for line in code.strip().splitlines():
                assert line.startswith("retrieval-metrics "), f"bash line nothing runs: {line}"


def test_setup_commands():
    setup = [code.strip() for lang, code in readme_blocks() if lang == "bash" and is_setup(code)]
    assert len(setup) == 2, setup
    main_job, tests = setup
    assert tests == ci_command(), "README's test command must be exactly what .ci/run runs"
    assert main_job.endswith("&& retrieval-metrics demo"), main_job
    assert 'pip install -e ".[demo]"' in main_job
    assert main_job.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install torch")


def test_code_blocks_run(tmp_path, monkeypatch, capsys):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from retrieval_metrics.cli import main

    try:
        import retrieval_metrics.protocols  # noqa: F401

        has_protocols = True
    except ImportError:  # pragma: no cover - protocols arrive with another change
        has_protocols = False

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    commands = 0
    for i, (lang, code) in enumerate(readme_blocks()):
        if lang == "python":
            try:
                exec(compile(code, f"README.md python block {i}", "exec"), namespace)
            except Exception as err:  # pragma: no cover - the failure message
                pytest.fail(f"README.md block {i} failed: {err!r}\n{code}")
        elif lang == "bash" and not is_setup(code):
            for line in code.strip().splitlines():
                argv = shlex.split(line)
                if "--protocol" in argv and not has_protocols:
                    continue
                capsys.readouterr()
                status = main(argv[1:])
                captured = capsys.readouterr()
                assert status == 0, f"{line}\n{captured.err}"
                assert "gallery" in captured.out, captured.out
                commands += 1
    plt.close("all")
    assert commands >= 2
    report = json.loads((tmp_path / "a.json").read_text())
    assert set(report["runs"][0]["metrics"]) == {
        "hit_rate@1",
        "hit_rate@10",
        "map@r",
        "r_precision",
    }


def test_first_screen_shows_the_lightning_snippet():
    """The first code block is the Lightning snippet, after at most three lines of prose."""
    text = README.read_text(encoding="utf-8")
    before = text[: text.index("```")].strip().splitlines()
    prose = [line for line in before[1:] if line.strip()]  # after the title
    assert len(prose) <= 3, prose
    lang, code = readme_blocks()[0]
    assert lang == "python" and "LightningModule" in code and "self.log(" in code


def test_links_to_docs_exist():
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text(encoding="utf-8")):
        assert (ROOT / target).is_file(), target
