"""Small single-agent envs for the richer action spaces, quick to learn: for the
reference client, the tests and the README's examples. Registered with gymnasium.

- `rllink/TwoTargets-v0`: a MultiDiscrete([3, 3]) action, one sub-action per target.
- `rllink/MaskedPick-v0`: a Discrete(6) action of which half is forbidden at each step,
  with the mask in `info["action_mask"]` (gymnasium's convention); a forbidden action
  raises, so a run that finishes never took one.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class TwoTargetsEnv(gym.Env):
    """Two targets, each one of 3, shown one-hot; the action names both at once.

    Reward per step: 1 for each sub-action on its target (0, 1 or 2); new targets each
    step; truncated after 8 steps. Random play returns 5.33 on average, perfect play 16.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    LENGTH = 8
    NVEC = (3, 3)

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (sum(self.NVEC),), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(self.NVEC)
        self._targets = np.zeros(len(self.NVEC), np.int64)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.asarray(action, np.int64).reshape(len(self.NVEC))
        if not self.action_space.contains(action):
            raise ValueError(f"action {action.tolist()} is outside MultiDiscrete({list(self.NVEC)})")
        reward = float(np.sum(action == self._targets))
        self._steps += 1
        return self._draw(), reward, False, self._steps >= self.LENGTH, {}

    def _draw(self) -> np.ndarray:
        self._targets = np.array([self.np_random.integers(n) for n in self.NVEC])
        obs = np.zeros(sum(self.NVEC), np.float32)
        obs[np.cumsum((0, *self.NVEC[:-1])) + self._targets] = 1.0
        return obs


class MaskedPickEnv(gym.Env):
    """Six items with values drawn uniformly in [0, 1], three of them forbidden at random.

    Observation: the six values, then the mask (1 allowed). The action picks an item; its
    value is the reward; a forbidden pick raises ValueError. Truncated after 10 steps.
    Picking among the allowed at random returns 5.0 on average, the best allowed 7.5;
    always picking the best item regardless of the mask would often be forbidden.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    LENGTH = 10
    ITEMS = 6
    FORBIDDEN = 3

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * self.ITEMS,), np.float32)
        self.action_space = gym.spaces.Discrete(self.ITEMS)
        self._values = np.zeros(self.ITEMS, np.float32)
        self._mask = np.ones(self.ITEMS, np.int8)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {"action_mask": self._mask.copy()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        if not self._mask[action]:
            raise ValueError(f"action {action} is forbidden by the mask {self._mask.tolist()}")
        reward = float(self._values[action])
        self._steps += 1
        return self._draw(), reward, False, self._steps >= self.LENGTH, {"action_mask": self._mask.copy()}

    def _draw(self) -> np.ndarray:
        self._values = self.np_random.uniform(0.0, 1.0, self.ITEMS).astype(np.float32)
        self._mask = np.ones(self.ITEMS, np.int8)
        self._mask[self.np_random.choice(self.ITEMS, self.FORBIDDEN, replace=False)] = 0
        return np.concatenate([self._values, self._mask.astype(np.float32)])


TWO_TARGETS_ENV_ID = "rllink/TwoTargets-v0"
MASKED_PICK_ENV_ID = "rllink/MaskedPick-v0"
for _env_id, _entry_point in ((TWO_TARGETS_ENV_ID, TwoTargetsEnv), (MASKED_PICK_ENV_ID, MaskedPickEnv)):
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point)
