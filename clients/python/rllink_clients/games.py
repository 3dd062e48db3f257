"""Small multi-agent games for the reference client and the tests: fast, pure numpy,
each a `MultiAgentEnv`. Their spaces, as the gateway's `policies` setting wants them,
are the `observation_space` / `action_space` attributes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rllink_clients.multi_agent_env import ALL, StepResult, one_hot


class CoordinationGame:
    """Two agents choose one of 4 actions at once, 10 times; each gets 1.0 when both chose
    the same action, else 0. A cooperative test of two modules (or one shared) learning
    a convention.

    Observation (12 floats): a one-hot of the step index (all zeros in the final
    observation) then a one-hot of the agent's own id. The episode terminates after the
    10th step. Random play scores 2.5 per agent per episode (10 x 1/4); agreeing on any
    action for each step scores 10.
    """

    def __init__(self, length: int = 10, num_actions: int = 4) -> None:
        self.length, self.num_actions = length, num_actions
        self.possible_agents = ["agent_0", "agent_1"]
        self.observation_space = {"type": "box", "shape": [length + 2], "low": 0.0, "high": 1.0}
        self.action_space = {"type": "discrete", "n": num_actions}
        self._step = 0

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
        self._step = 0
        return self._observations(), {agent: {} for agent in self.possible_agents}

    def step(self, action_dict: dict[str, Any]) -> StepResult:
        if set(action_dict) != set(self.possible_agents):
            raise ValueError(f"both agents act on every step, got actions for {sorted(action_dict)}")
        first, second = (int(action_dict[agent]) for agent in self.possible_agents)
        if not (0 <= first < self.num_actions and 0 <= second < self.num_actions):
            raise ValueError(f"actions must lie in 0..{self.num_actions - 1}, got {action_dict}")
        self._step += 1
        reward = 1.0 if first == second else 0.0
        done = self._step >= self.length
        rewards = {agent: reward for agent in self.possible_agents}
        terminateds = {agent: done for agent in self.possible_agents} | {ALL: done}
        truncateds = {agent: False for agent in self.possible_agents} | {ALL: False}
        return self._observations(), rewards, terminateds, truncateds, {agent: {} for agent in self.possible_agents}

    def _observations(self) -> dict[str, np.ndarray]:
        step = one_hot(self._step, self.length)
        return {agent: np.concatenate([step, one_hot(i, 2)]) for i, agent in enumerate(self.possible_agents)}


DEFAULT_TARGET = 21
DEFAULT_MAX_MOVE = 3


class CountdownGame:
    """Two players take turns adding 1, 2 or 3 (actions 0, 1, 2) to a counter that starts
    at 0; whoever brings it to 21 (or past) wins: +1 to the winner, -1 to the loser,
    outcome "win"/"loss" in their infos. A random player starts. No draws.

    The mover wins with perfect play unless (21 - counter) is a multiple of 4, so the
    first mover always can. Against a uniformly random opponent, `optimal_action` wins
    every game it starts and 99.86% of those the random player starts (exact). Two random
    players each win half the games (the first mover 50.01%).

    Observation (22 floats, the same layout for both players, seen by the mover): a
    one-hot of the counter, index 21 meaning the game is over (the final observation).
    """

    def __init__(self, target: int = DEFAULT_TARGET, max_move: int = DEFAULT_MAX_MOVE) -> None:
        self.target, self.max_move = target, max_move
        self.possible_agents = ["player_0", "player_1"]
        self.observation_space = {"type": "box", "shape": [target + 1], "low": 0.0, "high": 1.0}
        self.action_space = {"type": "discrete", "n": max_move}
        self.counter, self.mover = 0, self.possible_agents[0]
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.counter = 0
        self.mover = self.possible_agents[int(self._rng.integers(2))]
        return {self.mover: self.observe()}, {self.mover: {}}

    def step(self, action_dict: dict[str, Any]) -> StepResult:
        if set(action_dict) != {self.mover}:
            raise ValueError(f"it is {self.mover}'s turn alone, got actions for {sorted(action_dict)}")
        action = int(action_dict[self.mover])
        if not 0 <= action < self.max_move:
            raise ValueError(f"actions must lie in 0..{self.max_move - 1}, got {action}")
        self.counter += action + 1
        mover, other = self.mover, self._other(self.mover)
        if self.counter >= self.target:
            both = self.possible_agents
            obs = {agent: self.observe() for agent in both}
            rewards = {mover: 1.0, other: -1.0}
            terminateds = {agent: True for agent in both} | {ALL: True}
            truncateds = {agent: False for agent in both} | {ALL: False}
            return obs, rewards, terminateds, truncateds, {mover: {"outcome": "win"}, other: {"outcome": "loss"}}
        self.mover = other
        return {other: self.observe()}, {mover: 0.0}, {ALL: False}, {ALL: False}, {other: {}}

    def observe(self) -> np.ndarray:
        """The board as any player sees it: a one-hot of the counter (capped at the target)."""
        return one_hot(min(self.counter, self.target), self.target + 1)

    def _other(self, agent: str) -> str:
        return self.possible_agents[1 - self.possible_agents.index(agent)]


def optimal_action(counter: int, target: int = DEFAULT_TARGET, max_move: int = DEFAULT_MAX_MOVE) -> int:
    """The move that leaves the opponent a multiple of (max_move + 1) short of the target,
    or reaches it; from a lost position, +1 (the longest game, the most chances for the
    opponent to go wrong)."""
    step = (target - counter) % (max_move + 1)
    return step - 1 if step else 0


def counter_of(obs: Any) -> int:
    """The counter shown in a CountdownGame observation."""
    return int(np.argmax(obs))


def scripted_opponent(obs: Any, max_move: int = DEFAULT_MAX_MOVE) -> int:
    """Plays CountdownGame perfectly from its observation (the target is its length - 1)."""
    return optimal_action(counter_of(obs), len(obs) - 1, max_move)


_random = np.random.default_rng()


def random_opponent(obs: Any, rng: np.random.Generator | None = None, num_actions: int = DEFAULT_MAX_MOVE) -> int:
    """A uniformly random move; pass `rng` (e.g. with functools.partial) to make it repeatable."""
    return int((rng or _random).integers(num_actions))


class ReachEnv(gym.Env):
    """A one-dimensional reaching task with a continuous action: a small, quick-to-learn
    companion for CartPole in a mixed scene (other spaces, a Box action).

    Observation [position, target], both in [-1, 1]; action Box(1) in [-1, 1] moves the
    position by 0.2 x action (clipped to [-1, 1]); reward -|position - target| per step;
    truncated after 20 steps. Uniformly random play returns -12.7 on average, heading
    straight for the target and staying there -1.2 (300 episodes each).
    """

    metadata: dict[str, Any] = {"render_modes": []}
    LENGTH = 20
    SPEED = 0.2

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._position = self._target = 0.0
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._position, self._target = (float(x) for x in self.np_random.uniform(-1.0, 1.0, 2))
        self._steps = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = float(np.clip(np.asarray(action, dtype=np.float32).reshape(-1)[0], -1.0, 1.0))
        self._position = float(np.clip(self._position + self.SPEED * move, -1.0, 1.0))
        self._steps += 1
        reward = -abs(self._position - self._target)
        return self._observation(), reward, False, self._steps >= self.LENGTH, {}

    def _observation(self) -> np.ndarray:
        return np.array([self._position, self._target], dtype=np.float32)


REACH_ENV_ID = "rllink/Reach-v0"
if REACH_ENV_ID not in gym.registry:
    gym.register(REACH_ENV_ID, entry_point=ReachEnv)
