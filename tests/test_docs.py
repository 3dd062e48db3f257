"""The README documents what the code does."""

from __future__ import annotations

from pathlib import Path

from app.config import Settings
from app.protocol import ErrorCode

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_in_the_readme():
    missing = [name for name in Settings.model_fields if f"`{name}`" not in README and f"`{name}.*`" not in README]
    assert not missing, f"settings missing from the README's table: {missing}"


def test_every_error_code_is_in_the_readme():
    missing = [code.value for code in ErrorCode if f"`{code.value}`" not in README]
    assert not missing, f"error codes missing from the README: {missing}"
