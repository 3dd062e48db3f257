"""What many test modules need, once: episode chunks, frames, and waiting for a condition.

No test module imports another; what two of them share lives here (or in conftest.py
for fixtures).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from app.protocol import encode_frame

OBS_DIM = 4  # CartPole, the gateway's default spaces


def chunk(
    steps: int = 3,
    *,
    reward: float = 1.0,
    terminated: bool = True,
    truncated: bool = False,
    seed: int | None = None,
    obs_dim: int = OBS_DIM,
    **fields: Any,
) -> dict[str, Any]:
    """One JSON-ready episode chunk for the default (CartPole) spaces: `steps` actions,
    `steps + 1` observations, both done flags. With `seed`, random observations and
    actions; without, fixed ones. Extra `fields` are added or replace the defaults."""
    if seed is None:
        obs = [[0.0, 0.1, 0.2, 0.3][:obs_dim] + [0.0] * max(0, obs_dim - 4) for _ in range(steps + 1)]
        actions = [step % 2 for step in range(steps)]
    else:
        rng = np.random.default_rng(seed)
        obs = rng.uniform(-0.05, 0.05, (steps + 1, obs_dim)).tolist()
        actions = rng.integers(0, 2, steps).tolist()
    data: dict[str, Any] = {
        "obs": obs,
        "actions": actions,
        "rewards": [reward] * steps,
        "is_terminated": terminated,
        "is_truncated": truncated,
    }
    data.update(fields)
    return data


def frame(message: dict[str, Any]) -> bytes:
    """A JSON message as one RLlink frame."""
    return encode_frame(json.dumps(message).encode())


def wait_until(
    condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "the condition", interval_s: float = 0.01
) -> Any:
    """Poll `condition` until it returns something truthy (returned); fail after `timeout_s`.

    The timeout is a bound for a hung gateway, never a measure of speed: tests wait for
    what they need, however fast or slow the machine is.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
