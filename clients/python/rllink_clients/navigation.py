"""`rllink/Navigation-v0`: a sparse-reward walk to a goal whose distance is a gateway
environment parameter (`goal_distance`), for curricula; and `python -m rllink_clients.navigation`,
which plays it against a gateway with the downloaded ONNX policy (or the gateway's, thin).

    python -m rllink_clients.navigation --port 5555 --max-env-steps 200000
    python -m rllink_clients.demos record --env rllink/Navigation-v0 \\
        --policy rllink_clients.navigation:scripted --episodes 20 --out navigation.jsonl

The gateway's spaces: observation box [2], action discrete 2 (docs/training.md, "Environment
parameters and curriculum"). Launched by a gateway (`--env-path`), it reads the --rllink-*
arguments as the CartPole client does and trains until stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from rllink_clients.gym_client import GetConfigRefused, RunResult, run
from rllink_clients.launch_args import parse_launch_args
from rllink_clients.rllink_client import GatewayUnreachable, RLlinkClient
from rllink_clients.thin_client import run_thin, run_thin_envs

NAVIGATION_ENV_ID = "rllink/Navigation-v0"
GOAL_DISTANCE = "goal_distance"  # the env parameter it reads at every reset
DEFAULT_TARGET_SUCCESS = 0.9  # the CLI stops once the last 50 episodes at full difficulty reach the goal this often
SUCCESS_WINDOW = 50

EnvParam = Callable[[str, Any], Any]  # RLlinkClient.get_env_param
EpisodeEnd = Callable[[int, bool], None]  # (the goal's distance, reached) of each episode that ends


class NavigationEnv(gym.Env):
    """A point on a line starts at 0; the goal is `goal_distance` steps away, to the left
    or to the right (drawn each episode, shown in the observation).

    Actions: 0 steps left, 1 right (the position stays within +-MAX_DISTANCE). Reward 1 on
    reaching the goal (terminated), else 0; truncated after MAX_STEPS steps. Observation:
    the position and the goal's, divided by MAX_DISTANCE. At full difficulty (the goal
    MAX_DISTANCE away, 35 steps of 40 towards it needed) random play essentially never
    reaches it (about 1 episode in 10^5), nor does a policy leaning 60/40 to one side (one in
    10^4); walking towards the goal does in MAX_DISTANCE steps. `env_param(name, default)`
    gives the goal's distance at each reset (default: full difficulty), clipped to
    1..MAX_DISTANCE; `on_episode_end(goal_distance, reached)` hears of every episode that ends.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    MAX_DISTANCE = 30
    MAX_STEPS = 40

    def __init__(self, env_param: EnvParam | None = None, on_episode_end: EpisodeEnd | None = None) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._env_param = env_param or (lambda _name, default: default)
        self._on_episode_end = on_episode_end
        self.goal = self.MAX_DISTANCE  # signed: its side too
        self._position = 0
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        distance = int(np.clip(round(float(self._env_param(GOAL_DISTANCE, self.MAX_DISTANCE))), 1, self.MAX_DISTANCE))
        self.goal = distance if self.np_random.integers(2) else -distance
        self._position, self._steps = 0, 0
        return self._observation(), {"goal_distance": distance}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = 1 if int(action) == 1 else -1
        self._position = int(np.clip(self._position + move, -self.MAX_DISTANCE, self.MAX_DISTANCE))
        self._steps += 1
        reached = self._position == self.goal
        truncated = not reached and self._steps >= self.MAX_STEPS
        if (reached or truncated) and self._on_episode_end is not None:
            self._on_episode_end(abs(self.goal), reached)
        return self._observation(), float(reached), reached, truncated, {"goal_distance": abs(self.goal)}

    def _observation(self) -> np.ndarray:
        return np.array([self._position, self.goal], np.float32) / self.MAX_DISTANCE


def scripted(obs: np.ndarray) -> int:
    """The demonstrator: always step towards the goal (for `rllink_clients.demos record`)."""
    position, goal = obs
    return 1 if position < goal else 0


class FullDifficultyTarget:
    """Whether the last SUCCESS_WINDOW episodes at full difficulty reached the goal at least
    `target` of the time: then `stop` is set (the clients' runs check it) and the success
    rate stays as it was then."""

    def __init__(self, target: float | None) -> None:
        self.target = target
        self.stop = threading.Event()
        self.recent: deque[bool] = deque(maxlen=SUCCESS_WINDOW)

    def episode_end(self, goal_distance: int, reached: bool) -> None:
        if goal_distance < NavigationEnv.MAX_DISTANCE or self.stop.is_set():
            return
        self.recent.append(reached)
        if self.target is not None and len(self.recent) == SUCCESS_WINDOW and self.success_rate >= self.target:
            self.stop.set()

    @property
    def success_rate(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None


class _Shared:
    """A callable that gym.make passes to the env as it is (it deep-copies a spec's kwargs,
    which would copy a client and its socket)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __deepcopy__(self, memo: dict) -> _Shared:
        return self


def navigation_spec(env_param: EnvParam | None, on_episode_end: EpisodeEnd | None = None) -> gym.envs.registration.EnvSpec:
    """The registered env, made with `env_param` (a client's `get_env_param`) and `on_episode_end`:
    what `run` takes for an env id."""
    kwargs = {"env_param": env_param and _Shared(env_param), "on_episode_end": on_episode_end and _Shared(on_episode_end)}
    return dataclasses.replace(gym.spec(NAVIGATION_ENV_ID), kwargs=kwargs)


if NAVIGATION_ENV_ID not in gym.registry:
    gym.register(NAVIGATION_ENV_ID, entry_point=NavigationEnv)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rllink_clients.navigation", description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="default: 5555 for tcp, 8000 for ws")
    parser.add_argument(
        "--target-success",
        type=float,
        help=f"stop once the last {SUCCESS_WINDOW} episodes at full difficulty reached the goal this often "
        f"(default {DEFAULT_TARGET_SUCCESS:g}; "
        "the goal's distance is the gateway's; none when launched by a gateway)",
    )
    parser.add_argument("--max-env-steps", type=int, help="stop after this many env steps")
    parser.add_argument("--max-seconds", type=float, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--inference",
        choices=["local", "server"],
        default="local",
        help="local: act with the downloaded ONNX policy; server: a thin client, the gateway acts (GET_ACTION)",
    )
    launch, rest = parse_launch_args(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(rest)
    args.token = launch.token
    if launch.launched:
        args.transport, args.host, args.port = "tcp", launch.host or args.host, launch.port or args.port
        args.seed += launch.env_index or 0
    elif args.target_success is None:
        args.target_success = DEFAULT_TARGET_SUCCESS
    return args


def play(
    client: RLlinkClient,
    target: FullDifficultyTarget,
    inference: str = "local",
    seed: int = 0,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    num_envs: int = 1,
) -> RunResult:
    """Train through the gateway, the goal's distance following its `goal_distance`, until
    `target` is met at full difficulty or a limit is spent; a thin client may step `num_envs` at once."""
    spec: Any = navigation_spec(client.get_env_param, target.episode_end)  # gym.make takes a spec for an id
    limits = {"target_return": None, "max_env_steps": max_env_steps, "max_seconds": max_seconds, "stop": target.stop}
    if inference == "server" and num_envs > 1:
        return run_thin_envs(client, spec, num_envs, seed=seed, **limits)
    if inference == "server":
        return run_thin(client, spec, seed=seed, **limits)
    return run(client, spec, seed=seed, **limits)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        client = RLlinkClient.open(args.transport, args.host, args.port, token=args.token)
    except GatewayUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with client:
        target = FullDifficultyTarget(args.target_success)
        try:
            result = play(client, target, args.inference, args.seed, args.max_env_steps, args.max_seconds)
        except GetConfigRefused as exc:
            print(f"cannot play {NAVIGATION_ENV_ID} through this gateway: {exc}", file=sys.stderr)
            return 2
        reached = target.stop.is_set()
        summary = {
            "reached_target": reached,
            "env_steps": result.env_steps,
            "episodes": result.episodes,
            "full_difficulty_success_rate": target.success_rate,
            "weights_seq_no": result.weights_seq_no,
            "env_params": client.env_params,
        }
    print(json.dumps(summary))
    return 0 if reached or args.target_success is None else 1


if __name__ == "__main__":
    sys.exit(main())
