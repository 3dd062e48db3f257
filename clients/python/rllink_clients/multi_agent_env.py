"""The multi-agent env interface the reference client plays (RLlib's dict style), and a
scene of independent gymnasium envs that speaks it.

`reset(seed=None) -> (obs, infos)` and `step(actions) -> (obs, rewards, terminateds,
truncateds, infos)`, each a dict keyed by agent id:

- the agents in `obs` are the ones that act next (a turn-based game shows only the mover);
- a reward may go to any agent that has acted: it adds to the reward of its last action;
- `terminateds["__all__"]` / `truncateds["__all__"]` end the episode; every agent that
  acted then gets its final observation in `obs`;
- an agent done early appears once more, with its final observation and its own flag set,
  and then not again (except in a `GymnasiumScene`, see there);
- `infos[agent_id]["outcome"]` ("win", "loss" or "draw") may come with an agent's last step;
- `infos[agent_id]["action_mask"]` (one 0/1 per action, gymnasium's convention) may come
  with an agent's observation: the actions it may take on it (absent: all).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

ALL = "__all__"
StepResult = tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]


@runtime_checkable
class MultiAgentEnv(Protocol):
    """What the client needs of a multi-agent env; `possible_agents` lists every agent id."""

    possible_agents: list[str]

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]: ...

    def step(self, action_dict: dict[str, Any]) -> StepResult: ...


class GymnasiumScene:
    """Independent gymnasium envs stepping together, one agent each (e.g. eight CartPoles
    and a Pendulum in one game world); the scene as a whole never ends.

    RLlib's dict API ends episodes only as a whole, but here each agent's env restarts on
    its own. So when an agent's env ends, `step` shows the agent with its final
    observation and its flag set; the scene resets that env at once, and the agent comes
    back with the reset observation on the next step, sitting that one step out (as
    gymnasium's own next-step autoreset does). A client starts a new trajectory, with an
    episode id of its own, whenever an agent that was done appears again
    (`rllink_clients.multi_agent.SceneCollector`), so each sub-episode is its own episode.
    """

    def __init__(self, env_ids_by_agent: dict[str, str], seed: int | None = None) -> None:
        if not env_ids_by_agent:
            raise ValueError("a scene needs at least one agent")
        self.possible_agents = list(env_ids_by_agent)
        self.envs = {agent: gym.make(env_id) for agent, env_id in env_ids_by_agent.items()}
        self.seed = seed  # for the first reset that names none
        self._restart: list[str] = []  # agents whose env ended on the last step

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
        """Reset every env; with a seed, agent i's env gets seed + i."""
        if seed is None:
            seed = self.seed
        self.seed = None
        obs, infos = {}, {}
        for i, (agent, env) in enumerate(self.envs.items()):
            obs[agent], infos[agent] = env.reset(seed=None if seed is None else seed + i)
        self._restart = []
        return obs, infos

    def step(self, action_dict: dict[str, Any]) -> StepResult:
        expected = set(self.envs) - set(self._restart)
        if set(action_dict) != expected:
            raise ValueError(f"expected actions for {sorted(expected)}, got {sorted(action_dict)}")
        obs, rewards, terminateds, truncateds, infos = {}, {}, {ALL: False}, {ALL: False}, {}
        for agent in self._restart:  # back from the end of their last sub-episode
            obs[agent], infos[agent] = self.envs[agent].reset()
        self._restart = []
        for agent, action in action_dict.items():
            ob, reward, terminated, truncated, info = self.envs[agent].step(action)
            obs[agent], rewards[agent], infos[agent] = ob, float(reward), info
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            if terminated or truncated:
                self._restart.append(agent)
        return obs, rewards, terminateds, truncateds, infos

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


def gymnasium_scene(env_ids_by_agent: dict[str, str], seed: int | None = None) -> GymnasiumScene:
    """A scene of independent gymnasium envs, e.g. `{"cart_0": "CartPole-v1", "pend_0": "Pendulum-v1"}`."""
    return GymnasiumScene(env_ids_by_agent, seed)


def one_hot(index: int, size: int) -> np.ndarray:
    """A float32 vector of `size` zeros with a one at `index` (all zeros if out of range)."""
    vector = np.zeros(size, dtype=np.float32)
    if 0 <= index < size:
        vector[index] = 1.0
    return vector
