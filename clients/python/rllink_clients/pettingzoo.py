"""The PettingZoo reference client: plays any PettingZoo AEC environment (the classic board
games with their legal-move masks included) through the gateway, with the multi-agent
client's machinery (`rllink_clients.multi_agent.run_scene`).

`AECScene` shows an AEC env as the multi-agent dict API the client plays (the mover alone
in each observation dict). Turn-based rules:

- each agent's chunk is its own trajectory (its observations, actions and rewards);
- a reward an agent gets between its turns (what `env.last()` reports at its next turn,
  PettingZoo's cumulative reward since it last acted) goes to its last move;
- when the game ends, each agent's final observation is what `env.last()` gives it at its
  final (dead) turn, and its final reward goes to its last move;
- a two-player game whose final rewards sum to zero (the classic games) puts `outcome` on
  each agent's final chunk from the sign of its final reward: win (> 0), draw (0), loss (< 0).

Observations: a dict `{"observation", "action_mask"}` (PettingZoo's classic convention)
is sent as its `observation` in float32, in its own shape (Connect Four's board [6, 7, 2]:
a grid, which the gateway's PPO reads with a CNN) or, where the module declares the same
values flat (`[84]`: read by the MLPs alone), flat; the mask goes to the masked module's
model and into the chunk's `action_mask`; a mask in `info["action_mask"]` is used the same
way.

Seats: with a self-play module on the gateway (a `trainable: false` opponent module) the
learner plays the first seat in even games and the second in odd ones, its frozen opponent
the other; with `--opponent random` a uniformly random legal player takes the other seat
instead (never sent). Chunks name their `module_id`. When the league draws one of its
scripted references, the opponent's model names it and the player given as `--scripted
NAME=module:function` takes the opponent's seat.

Evaluation games: every Nth game of each board (SET_CONFIG's `evaluation_interval`, or
`--evaluation-interval`) the gateway's modules play the mode, its chunks say `evaluation`,
and the gateway neither trains on it nor rates it. Seats alternate among the evaluation
games, and among the training games, apart (a game's "even" or "odd" is in its kind).

    python -m rllink_clients.pettingzoo --env pettingzoo.classic.tictactoe_v3
    python -m rllink_clients.pettingzoo --env pettingzoo.classic.connect_four_v3 --opponent random --transport ws
    python -m rllink_clients.pettingzoo --env pettingzoo.classic.connect_four_v3 --num-envs 16   # 16 games side by side
    python -m rllink_clients.pettingzoo --env pettingzoo.classic.connect_four_v3 --num-envs 16 \
        --scripted lookahead=rllink_clients.connect_four:lookahead_player            # a league with a scripted player
    python -m rllink_clients.pettingzoo --env pettingzoo.classic.tictactoe_v3 --print-spaces
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rllink_clients.multi_agent import (
    DEFAULT_PORTS,
    Casting,
    GatewayConfig,
    ModulePolicies,
    Opponent,
    SceneCollector,
    Seating,
    choose_actions,
    parse_target,
    run_scene,
    swapped_seatings,
)
from rllink_clients.multi_agent_env import ALL, StepResult
from rllink_clients.rllink_client import GatewayUnreachable, RLlinkClient

log = logging.getLogger("rllink_clients")

OUTCOMES = ("win", "draw", "loss")


GAMES_PACKAGES = {"pettingzoo", "pygame"}  # what PettingZoo's classic games import (docs/pettingzoo.md: how to install them)


class EnvError(ValueError):
    """`--env` names no AEC env this client can play, or `--scripted` no player it can load
    (one line, for the command line)."""


def _games_hint(exc: ImportError) -> str:
    """How to install the games' packages, when `exc` is one of them missing."""
    if (exc.name or "").split(".")[0] not in GAMES_PACKAGES:
        return ""
    return "; install the games' packages: `bash scripts/setup.sh games` in the gateway's checkout, else `pip install pettingzoo pygame-ce`"


def load_env(spec: str, kwargs: dict[str, Any] | None = None) -> Any:
    """The AEC env of `module` (its `env()` factory) or `module:factory`, built with `kwargs`."""
    module_name, _, factory_name = spec.partition(":")
    factory_name = factory_name or "env"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvError(f"--env {spec}: cannot import {module_name!r} ({exc}){_games_hint(exc)}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise EnvError(f"--env {spec}: module {module_name!r} has no {factory_name}() factory")
    try:
        env = factory(**(kwargs or {}))
    except TypeError as exc:
        raise EnvError(f"--env {spec}: {factory_name}(**{kwargs or {}}) failed: {exc}") from None
    try:
        from pettingzoo import AECEnv, ParallelEnv
    except ImportError as exc:
        raise EnvError(f"--env {spec}: this client needs pettingzoo ({exc}){_games_hint(exc)}") from None

    if isinstance(env, ParallelEnv):
        raise EnvError(
            f"--env {spec}: {factory_name}() gives a parallel env; this client plays AEC envs "
            f"(use the module's env(), or wrap it in pettingzoo.utils.parallel_to_aec)"
        )
    if not isinstance(env, AECEnv):
        raise EnvError(f"--env {spec}: {factory_name}() gives a {type(env).__name__}, not a PettingZoo AEC env")
    return env


def split_observation(obs: Any, info: dict | None = None) -> tuple[np.ndarray, Any]:
    """The observation as the gateway takes it (float32, in its own shape: a board stays a
    grid [H, W, C]) and its action mask: a dict's `action_mask`, else `info["action_mask"]`, else None."""
    mask = (info or {}).get("action_mask")
    if isinstance(obs, dict):
        if "observation" not in obs:
            raise EnvError(
                f"a dict observation ({', '.join(obs)}) without 'observation': this client takes an "
                f"array, or {{'observation', 'action_mask'}}"
            )
        mask = obs.get("action_mask", mask)
        obs = obs["observation"]
    return np.atleast_1d(np.asarray(obs, np.float32)), mask


def gateway_spaces(env: Any) -> dict[str, dict[str, Any]]:
    """The env's spaces as the gateway's `policies` entry wants them (the first agent's:
    the classic games' agents share theirs), and whether its actions are masked."""
    from gymnasium import spaces

    agent = env.possible_agents[0]
    observation, action = env.observation_space(agent), env.action_space(agent)
    masked = isinstance(observation, spaces.Dict) and "action_mask" in observation.spaces
    if isinstance(observation, spaces.Dict):
        observation = observation["observation"]
    if not isinstance(action, spaces.Discrete):
        raise EnvError(f"{agent}'s action space is {action}: this client plays Discrete actions")
    entry = {
        "observation_space": {"type": "box", "shape": [int(d) for d in observation.shape] or [1]},
        "action_space": {"type": "discrete", "n": int(action.n)},
    }
    return entry | ({"action_masking": True} if masked else {})


class AECScene:
    """A PettingZoo AEC env as the multi-agent dict API (`MultiAgentEnv`): each step's
    observation dict holds the agent to move; rewards, final observations and outcomes
    follow the turn-based rules of this module's docstring."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
        self.env.reset(seed=seed)
        obs, _, _, _, infos = self._advance()
        return obs, infos

    def step(self, action_dict: dict[str, Any]) -> StepResult:
        mover = self.env.agent_selection
        if list(action_dict) != [mover]:
            raise ValueError(f"{mover} moves now, got actions for {sorted(action_dict)}")
        self.env.step(action_dict[mover])
        return self._advance()

    def _advance(self) -> StepResult:
        """Up to the next agent to move: the agents whose game ended on the way get their
        final observation and reward (and are stepped out, as AEC wants)."""
        obs, rewards, infos = {}, {}, {}
        terminateds, truncateds, final_rewards = {}, {}, {}
        while self.env.agents:
            agent = self.env.agent_selection
            ob, reward, terminated, truncated, info = self.env.last()
            rewards[agent] = rewards.get(agent, 0.0) + float(reward)
            obs[agent], mask = split_observation(ob, info)
            infos[agent] = {**info, "action_mask": mask} if mask is not None else dict(info)
            if not (terminated or truncated):
                return obs, rewards, terminateds | {ALL: False}, truncateds | {ALL: False}, infos
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            final_rewards[agent] = float(reward)
            self.env.step(None)
        for agent, outcome in zero_sum_outcomes(final_rewards, self.possible_agents).items():
            infos[agent]["outcome"] = outcome
        ended = any(terminateds.values())
        return obs, rewards, terminateds | {ALL: ended}, truncateds | {ALL: not ended}, infos


def zero_sum_outcomes(final_rewards: dict[str, float], agents: Sequence[str]) -> dict[str, str]:
    """Win/draw/loss from the sign of each final reward, for a two-player game whose final
    rewards sum to zero; nothing for any other game."""
    if len(agents) != 2 or set(final_rewards) != set(agents) or abs(sum(final_rewards.values())) > 1e-9:
        return {}
    return {agent: "win" if r > 0 else "loss" if r < 0 else "draw" for agent, r in final_rewards.items()}


def random_legal(obs: Any, mask: Any = None, *, rng: np.random.Generator, n: int) -> int:
    """A uniformly random legal action (any of `n` without a mask)."""
    legal = np.arange(n) if mask is None else np.flatnonzero(np.asarray(mask))
    return int(rng.choice(legal))


def seatings_for(rival: Opponent | None, seats: Sequence[str]) -> Callable[[GatewayConfig], list[Seating] | None]:
    """`run_scene`'s seatings: seats swapped game by game when a local `rival` or a frozen
    self-play module plays one seat; otherwise none (the gateway's policy_mapping decides)."""

    def seatings(config: GatewayConfig) -> list[Seating] | None:
        if rival is None and all(spec.trainable for spec in config.modules.values()):
            return None
        if len(seats) != 2:
            raise ValueError(f"seats swap in two-player games; this env has {len(seats)} players")
        return swapped_seatings(config, seats, rival)

    return seatings


def evaluate(
    scene: AECScene,
    policies: ModulePolicies,
    opponent: Opponent,
    games: int,
    *,
    explore: bool,
    seed: int | None = None,
    returns: dict[str, list[float]] | None = None,
) -> dict[str, dict[str, int]]:
    """Play `games` games of the gateway's learner module (the one trainable module) against
    a local `opponent`, seats alternating, sending nothing: its win/draw/loss per seat.
    `explore` False plays the distribution's mode (greedy), True samples. `returns`, if given,
    gets each game's return of the learner, by seat (a card game's chips)."""
    casting = Casting(policies.config, seatings=swapped_seatings(policies.config, scene.possible_agents, opponent))
    collector = SceneCollector(
        scene, lambda agent: False, seed, module_of=casting.module_id, on_game=casting.start_game, observed=casting.observed
    )
    counts = {seat: dict.fromkeys(OUTCOMES, 0) for seat in scene.possible_agents}
    while collector.scene_episodes < games:
        actions = choose_actions(collector.acting, collector.masks, casting, policies, explore=explore, states=collector.states)
        for trajectory in collector.step(actions):
            if trajectory.module_id is not None:
                if trajectory.outcome is None:
                    raise ValueError("evaluation counts outcomes: it needs a two-player zero-sum game")
                counts[trajectory.agent_id][trajectory.outcome] += 1
                if returns is not None:
                    returns.setdefault(trajectory.agent_id, []).append(trajectory.episode_return)
        collector.take_chunks()  # nothing is sent: this drops the played steps
    return counts


# --- `python -m rllink_clients.pettingzoo` -------------------------------------------------


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def load_scripted(spec: str, seed: int) -> tuple[str, Opponent]:
    """`NAME=module:function` as (name, player): the function, given `rng` (a generator
    seeded from `seed` and the name) if it takes that keyword."""
    name, _, target = spec.partition("=")
    module_name, _, function_name = target.partition(":")
    if not name or not module_name or not function_name:
        raise EnvError(f"--scripted {spec}: use NAME=module:function")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise EnvError(f"--scripted {spec}: cannot load {target!r} ({exc})") from None
    if "rng" in inspect.signature(function).parameters:
        salt = int.from_bytes(name.encode()[:8], "little")
        function = functools.partial(function, rng=np.random.default_rng([seed, salt]))
    return name, function


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rllink_clients.pettingzoo", description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="an importable module with an env() factory (AEC), or module:factory")
    parser.add_argument("--env-kwargs", type=_json_object, default={}, help="JSON object of the factory's keyword arguments")
    parser.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="default: 5555 for tcp, 8000 for ws")
    parser.add_argument(
        "--opponent", choices=["random"], help="play one seat (swapped each game) with a uniformly random legal player, unsent"
    )
    parser.add_argument(
        "--scripted", action="append", default=[], metavar="NAME=MODULE:FUNCTION",
        help="a scripted reference of the gateway's self-play league (self_play.scripted_references NAME): "
        "FUNCTION(obs, mask) -> action plays it (given rng=, a seeded generator, if it takes one); repeatable. "
        "E.g. lookahead=rllink_clients.connect_four:lookahead_player",
    )
    parser.add_argument("--target-return", help="stop when each trained module's mean of 20 returns reaches this")
    parser.add_argument("--max-env-steps", type=int, help="stop after this many moves (all players)")
    parser.add_argument("--max-seconds", type=float, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--num-envs", type=int, default=1,
        help="play this many games side by side, each module's moves of all of them in one model call (default 1)",
    )
    parser.add_argument(
        "--evaluation-interval", type=int, metavar="N",
        help="play every Nth game of each board greedily as an evaluation game (reported apart, never trained on nor "
        "rated; 0: none); default: the gateway's SET_CONFIG evaluation_interval",
    )
    parser.add_argument("--print-spaces", action="store_true", help="print the env's spaces as a gateway `policies` entry, and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        env = load_env(args.env, args.env_kwargs)
        if args.print_spaces:
            print(json.dumps(gateway_spaces(env)))
            return 0
        scene = AECScene(env)
        scenes = [scene] + [AECScene(load_env(args.env, args.env_kwargs)) for _ in range(args.num_envs - 1)]
        rival = None
        if args.opponent == "random":
            n = int(env.action_space(scene.possible_agents[0]).n)
            rival = functools.partial(random_legal, rng=np.random.default_rng(args.seed + 1), n=n)
        scripted = dict(load_scripted(spec, args.seed) for spec in args.scripted)
        target = parse_target(args.target_return)
        port = args.port or DEFAULT_PORTS[args.transport]
        with RLlinkClient.open(args.transport, args.host, port) as client:
            result = run_scene(
                client,
                scenes,
                target_return=target,
                max_env_steps=args.max_env_steps,
                max_seconds=args.max_seconds,
                seed=args.seed,
                seatings=seatings_for(rival, scene.possible_agents),
                scripted=scripted,
                evaluation_interval=args.evaluation_interval,
            )
    except (EnvError, ValueError, GatewayUnreachable) as exc:  # a problem a person can fix: the env, the gateway's settings, its address
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.summary()))
    return 0 if result.reached_target or target is None else 1


if __name__ == "__main__":
    sys.exit(main())
