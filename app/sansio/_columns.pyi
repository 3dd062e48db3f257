"""Types of app/sansio/_columns.c (EPISODES bodies parsed into columns at C speed)."""

from typing import Any

FIELDS: tuple[str, ...]

def parse(
    body: bytes, defaults: tuple[Any, ...], /
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[bytearray, str, int, list[int]]], dict[str, list[Any]]] | None: ...
def number(text: bytes, /) -> int | float | None: ...
