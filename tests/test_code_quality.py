"""The code's own checks, as CI runs them: one import direction, lint, types, class sizes.

Each tool reads its settings from pyproject.toml: import-linter's layers and acyclic
contracts, ruff's rule set, mypy's strict modules (the sans-I/O core, the application,
the training service). The services' classes stay short enough to read (`MAX_CLASS_LINES`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    executable = BIN / tool
    if not executable.exists():
        pytest.fail(f"{tool} is not installed in {BIN}: bash scripts/setup.sh test")
    return subprocess.run([str(executable), *args], cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_imports_go_one_way_and_never_in_a_cycle():
    result = run("lint-imports", "--no-cache")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_ruff_finds_nothing():
    result = run("ruff", "check", "--no-cache", "--output-format", "concise")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.slow
def test_mypy_finds_nothing_in_the_strict_modules():
    result = run("mypy", "--no-incremental")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


# A class of the services' packages holds one concern: past this many lines, split it.
MAX_CLASS_LINES = 300
BOUNDED_PACKAGES = ("app/training", "app/serving", "app/transport", "app/application")


def long_classes(paths: list[Path]) -> list[str]:
    """Each class in `paths` longer than MAX_CLASS_LINES, from its `class` line to its last."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and (lines := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:
                found.append(f"{path}: {node.name} has {lines} lines")
    return found


def test_no_class_of_the_services_is_longer_than_the_bound():
    paths = [path for package in BOUNDED_PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert paths
    long = long_classes(paths)
    assert not long, f"classes over {MAX_CLASS_LINES} lines (split them by concern):\n" + "\n".join(long)


def test_the_bound_sees_a_long_class(tmp_path):
    source = tmp_path / "long.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES - 1))
    source.write_text(f"class Short:\n{body}\n\nclass Long:\n{body}    y = 0\n")
    assert long_classes([source]) == [f"{source}: Long has {MAX_CLASS_LINES + 1} lines"]
