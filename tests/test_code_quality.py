"""The code's own checks, as CI runs them: one import direction, lint, types.

Each tool reads its settings from pyproject.toml: import-linter's layers and acyclic
contracts, ruff's rule set, mypy's strict modules (the sans-I/O core, the application,
the training service).
"""

from __future__ import annotations

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
