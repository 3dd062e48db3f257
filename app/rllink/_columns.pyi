"""Types of app/rllink/_columns.c (episode chunks as columns at C speed)."""

from typing import Any

FIELDS: tuple[str, ...]

def columns(
    episodes: list[Any], defaults: tuple[Any, ...], /
) -> tuple[dict[str, tuple[bytearray, str, int, list[int]]], dict[str, list[Any]]] | None: ...
