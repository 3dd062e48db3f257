"""The arguments a gateway gives the simulators it launches (`--env-path`): where to connect,
the token, the time scale and this process's index (RLLINK.md "Launching games").

Every other argument is the simulator's own and is left alone: `parse_launch_args(argv)`
returns the launch arguments and the rest.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchArgs:
    """The `--rllink-*` arguments given (None: not given)."""

    host: str | None = None
    port: int | None = None
    token: str | None = None
    time_scale: float | None = None
    env_index: int | None = None

    @property
    def launched(self) -> bool:
        """Whether a gateway launched this process (it gave any `--rllink-*` argument)."""
        return any(value is not None for value in (self.host, self.port, self.token, self.time_scale, self.env_index))


def _bounded(kind: type[int] | type[float], name: str, low: float, high: float = float("inf")) -> Callable[[str], float]:
    """An argparse type: a number of `kind` in [low, high] (a float: above `low`), else an error naming `name`."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not (low < value <= high if kind is float else low <= value <= high):
            raise argparse.ArgumentTypeError(f"{name} out of range: {text!r}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="--rllink-* arguments", add_help=False, allow_abbrev=False)
    parser.add_argument("--rllink-host", dest="host")
    parser.add_argument("--rllink-port", dest="port", type=_bounded(int, "--rllink-port", 1, 65535))
    parser.add_argument("--rllink-token", dest="token")
    parser.add_argument("--rllink-time-scale", dest="time_scale", type=_bounded(float, "--rllink-time-scale", 0))
    parser.add_argument("--rllink-env-index", dest="env_index", type=_bounded(int, "--rllink-env-index", 0))
    return parser


def parse_launch_args(argv: Sequence[str]) -> tuple[LaunchArgs, list[str]]:
    """The launch arguments among `argv` (`--name value` or `--name=value`), and the other
    arguments in their order; a malformed value exits as argparse does, naming it."""
    known, rest = _parser().parse_known_args(list(argv))
    return LaunchArgs(**vars(known)), rest
