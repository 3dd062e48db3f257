"""The docs (README.md and the MkDocs site in docs/) document what the code does."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings.config import Settings
from rllink.errors import ErrorCode

from .helpers import load_script

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
SITE_TEXT = "\n".join(page.read_text() for page in PAGES)


def load_settings_hook():
    """docs/hooks/settings_table.py, the MkDocs hook that writes the settings tables."""
    return load_script(DOCS / "hooks" / "settings_table.py", "settings_table_hook")


def test_every_setting_is_in_the_generated_table():
    hook = load_settings_hook()
    placeholders = hook.PLACEHOLDER.findall((DOCS / "configuration.md").read_text())
    assert "" in placeholders, "docs/configuration.md lost its <!-- settings-table --> placeholder"
    table = hook.settings_table()
    missing = [name for name in Settings.model_fields if f"| `{name}` |" not in table]
    assert not missing, f"settings missing from the generated table: {missing}"
    for nested in ("ppo", "sac"):
        assert nested in placeholders, f"docs/configuration.md has no <!-- settings-table: {nested} -->"
        model = Settings.model_fields[nested].annotation
        table = hook.settings_table(nested)
        missing = [name for name in model.model_fields if f"| `{nested}.{name}` |" not in table]
        assert not missing, f"{nested} hyperparameters missing from the generated table: {missing}"


def test_every_error_code_is_in_the_docs():
    missing = [code.value for code in ErrorCode if f"`{code.value}`" not in SITE_TEXT]
    assert not missing, f"error codes missing from README.md and docs/: {missing}"


# A command that runs Python: `python ...`, `python3 ...` or `pytest ...` as the first word
# of a command (after any VAR=value), in a fenced block or an inline code span.
PYTHON_COMMAND = re.compile(r"^(?:\w+=\S*\s+)*(?P<word>python3?|pytest)\s+\S")
ACTIVATES_VENV = "source .venv/bin/activate"


def shell_commands(markdown: str):
    """(line number, command) of every line of a fenced code block and every inline code span."""
    in_fence = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            yield number, line.strip()
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span.strip()


def test_python_examples_use_the_project_venv():
    offenders = []
    for page in PAGES:
        text = page.read_text()
        if ACTIVATES_VENV in text:
            continue  # the page tells the reader to activate .venv first
        for number, line in shell_commands(text):
            for command in re.split(r"&&|\|\||;|\|", line):
                if PYTHON_COMMAND.match(command.strip()):
                    offenders.append(f"{page.relative_to(ROOT)}:{number}: {line}")
    assert not offenders, "use .venv/bin/python (or say to activate the venv):\n" + "\n".join(offenders)


def test_the_checker_sees_bare_python():
    commands = [c for _, c in shell_commands("run `python -m app`\n```bash\nRLLINK_X=1 python -m app\n```\n")]
    assert all(PYTHON_COMMAND.match(c) for c in commands) and len(commands) == 2
    assert not PYTHON_COMMAND.match(".venv/bin/python -m app")
    assert not PYTHON_COMMAND.match("python3")  # a name in prose, not a command


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed in this environment")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    configuration = (tmp_path / "site" / "configuration" / "index.html").read_text()
    assert "settings-table" not in configuration, "a settings-table placeholder was left in the built page"
    assert "<code>max_frame_bytes</code>" in configuration
    assert (tmp_path / "site" / "dashboard.png").exists()
