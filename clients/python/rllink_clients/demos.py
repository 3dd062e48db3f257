"""Demonstrations: episodes played by a scripted (or any given) policy, recorded for
behavioural cloning as RLlink episode chunks, one JSON object a line (docs/training.md,
"Demonstrations"). No gateway is needed to record.

    python -m rllink_clients.demos record --env MountainCar-v0 --policy scripted --episodes 20 --out demos.jsonl
    python -m rllink_clients.demos record --env CartPole-v1 --policy mypackage.heuristics:act --episodes 10 --out d.jsonl

A policy is a function of one observation (as the gateway takes it: flat) to an action.
The reference clients record what they play with `--record-demos FILE` too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import gymnasium as gym
import numpy as np

HEADER = "# rllink demonstrations: RLlink episode chunks, one JSON object a line (docs/training.md)"
# What a demonstration keeps of a chunk: RLLINK.md's chunk fields and the gateway's extensions;
# the collecting policy's outputs (action_logp, action_dist_inputs, weights_seq_no) are left out.
DEMO_FIELDS = ("agent_id", "module_id", "episode_id", "obs", "actions", "rewards", "is_terminated", "is_truncated", "action_mask")

Policy = Callable[[np.ndarray], Any]


def cartpole(obs: np.ndarray) -> int:
    """CartPole-v1: push the cart under the pole (angle and angular velocity, a little of the
    cart's velocity); balances for the full 500 steps."""
    _x, x_dot, theta, theta_dot = obs
    return int(theta + 0.5 * theta_dot + 0.05 * x_dot > 0)


def mountain_car(obs: np.ndarray) -> int:
    """MountainCar-v0: push the way the car already moves (energy pumping); reaches the
    flag in about 100-120 steps from any start, where random play never does in 200."""
    _position, velocity = obs
    return 2 if velocity >= 0 else 0


def acrobot(obs: np.ndarray) -> int:
    """Acrobot-v1: torque the way the second link swings (energy pumping)."""
    return 2 if obs[5] >= 0 else 0


class StatelessCartPoleDemonstrator:
    """StatelessCartPole-v1 (memory_envs: position and angle only): `cartpole`'s rule on the
    velocities it remembers, the change of the position and the angle since the step before
    divided by CartPole's time step (zero at an episode's first step). A policy with memory:
    `reset` at each episode's start."""

    TAU = 0.02  # CartPole-v1's seconds between two steps

    def __init__(self) -> None:
        self.last: np.ndarray | None = None

    def reset(self) -> None:
        self.last = None

    def __call__(self, obs: np.ndarray) -> int:
        x_dot, theta_dot = (0.0, 0.0) if self.last is None else (obs - self.last) / self.TAU
        self.last = np.array(obs, np.float32)
        return cartpole(np.array([obs[0], x_dot, obs[1], theta_dot]))


SCRIPTED: dict[str, Policy | type[StatelessCartPoleDemonstrator]] = {
    "CartPole-v1": cartpole, "MountainCar-v0": mountain_car, "Acrobot-v1": acrobot,
    "rllink_clients.memory_envs:StatelessCartPole-v1": StatelessCartPoleDemonstrator,
}  # fmt: skip


def policy_named(name: str, env_id: str) -> Policy:
    """`scripted` (this module's heuristic for the env) or `package.module:function`."""
    if name == "scripted":
        if env_id not in SCRIPTED:
            raise ValueError(f"no scripted policy for {env_id}; scripted ones: {', '.join(SCRIPTED)}")
        scripted = SCRIPTED[env_id]
        return scripted() if isinstance(scripted, type) else scripted  # a policy with memory: its own instance
    module_name, _, function = name.partition(":")
    if not module_name or not function:
        raise ValueError(f"--policy {name!r}: give 'scripted' or 'package.module:function'")
    policy = getattr(importlib.import_module(module_name), function, None)
    if not callable(policy):
        raise ValueError(f"--policy {name!r}: {module_name} has no function {function}")
    return policy  # type: ignore[no-any-return]


class DemoWriter:
    """Writes episode chunks to a demonstration file, one JSON line each (a header line first)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._file: IO[str] = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._file.write(HEADER + "\n")
        self.chunks = 0
        self.steps = 0

    def write(self, chunk: dict[str, Any]) -> None:
        """One chunk (a dict as a client sends it), only the fields a demonstration keeps."""
        kept = {name: chunk[name] for name in DEMO_FIELDS if chunk.get(name) is not None}
        self._file.write(json.dumps(kept, separators=(",", ":")) + "\n")
        self.chunks += 1
        self.steps += len(chunk["actions"])

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> DemoWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def play_episode(env: gym.Env, policy: Policy, seed: int | None = None) -> dict[str, Any]:
    """One whole episode played by `policy`, as one episode chunk (a policy with a `reset`
    method, one with memory, is reset first)."""
    if callable(reset := getattr(policy, "reset", None)):
        reset()
    obs, info = env.reset(seed=seed)
    chunk: dict[str, Any] = {"episode_id": uuid.uuid4().hex, "obs": [np.asarray(obs, np.float32).tolist()], "actions": [], "rewards": []}
    while True:
        action = policy(np.asarray(obs, np.float32))
        if "action_mask" in info:
            chunk.setdefault("action_mask", []).append(np.asarray(info["action_mask"]).astype(int).tolist())
        obs, reward, terminated, truncated, info = env.step(action)
        chunk["actions"].append(action.tolist() if isinstance(action, np.ndarray) else action)
        chunk["rewards"].append(float(reward))
        chunk["obs"].append(np.asarray(obs, np.float32).tolist())
        if terminated or truncated:
            chunk.update(is_terminated=bool(terminated), is_truncated=bool(truncated))
            return chunk


def record(env_id: str, policy: Policy, episodes: int, out: Path | str, seed: int = 0) -> list[float]:
    """Play `episodes` episodes with `policy` and write them to `out`; returns their returns."""
    env = gym.make(env_id)
    returns = []
    with DemoWriter(out) as writer:
        for episode in range(episodes):
            chunk = play_episode(env, policy, seed=seed + episode)
            writer.write(chunk)
            returns.append(sum(chunk["rewards"]))
    env.close()
    return returns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rllink_clients.demos", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="play episodes with a policy and write them as a demonstration file")
    rec.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    rec.add_argument("--policy", default="scripted", help=f"'scripted' (for: {', '.join(SCRIPTED)}) or package.module:function")
    rec.add_argument("--episodes", type=int, default=20)
    rec.add_argument("--out", type=Path, required=True, help="the demonstration file (JSONL) to write")
    rec.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    args = parser.parse_args(argv)
    try:
        policy = policy_named(args.policy, args.env)
    except (ValueError, ImportError) as exc:
        print(f"cannot record: {exc}", file=sys.stderr)
        return 2
    returns = record(args.env, policy, args.episodes, args.out, args.seed)
    print(
        json.dumps(
            {
                "out": str(args.out),
                "episodes": len(returns),
                "mean_return": round(float(np.mean(returns)), 2),
                "min_return": min(returns),
                "max_return": max(returns),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
