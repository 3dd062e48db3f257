"""How a front-end names its calls to the learner, so that the learner runs them in order."""

from __future__ import annotations

from typing import NamedTuple


class Call(NamedTuple):
    """Which call of which front-end: its numbering (a new one per hello) and its number in it."""

    frontend: int
    epoch: int
    seq: int
