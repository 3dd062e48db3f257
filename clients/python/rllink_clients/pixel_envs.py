"""Small envs that see through a camera, for image and dict observations: for the
reference client, the tests and the README's examples. Registered with gymnasium.

- `rllink/PixelGrid-v0`: a 5x5 gridworld rendered to a 3x10x10 uint8 image; the agent
  (red) walks to the goal (green).
- `rllink/PixelGridDict-v0`: the same task seen through a dict observation: the image
  shows the goal only, a vector `pos` says where the agent is; neither alone suffices.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIDE = 5  # cells per side
SCALE = 2  # pixels per cell side
MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])  # up, down, left, right
AGENT, GOAL = 0, 1  # colour channels


class PixelGridEnv(gym.Env):
    """Walk from a random cell to a random goal cell on a 5x5 grid.

    Observation: an RGB image [3, 10, 10] of uint8 (each cell 2x2 pixels): the agent red,
    the goal green. Reward -0.05 per move, +1 on reaching the goal (terminated);
    truncated after 20 moves. Walking straight to the goal returns 0.84 on average,
    random moves -0.43 (1,000 episodes each).
    """

    metadata: dict[str, Any] = {"render_modes": []}
    LENGTH = 20
    STEP_COST = 0.05

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (3, SIDE * SCALE, SIDE * SCALE), np.uint8)
        self.action_space = gym.spaces.Discrete(len(MOVES))
        self.agent = np.zeros(2, np.int64)
        self.goal = np.zeros(2, np.int64)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        cells = self.np_random.choice(SIDE * SIDE, 2, replace=False)
        self.agent, self.goal = (np.array(divmod(int(cell), SIDE)) for cell in cells)
        self._steps = 0
        return self._observation(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.agent = np.clip(self.agent + MOVES[int(action)], 0, SIDE - 1)
        self._steps += 1
        reached = bool((self.agent == self.goal).all())
        reward = (1.0 if reached else 0.0) - self.STEP_COST
        return self._observation(), reward, reached, self._steps >= self.LENGTH, {}

    def _image(self, show_agent: bool = True) -> np.ndarray:
        image = np.zeros((3, SIDE * SCALE, SIDE * SCALE), np.uint8)
        for channel, (row, column) in ((GOAL, self.goal), *([(AGENT, self.agent)] if show_agent else [])):
            image[channel, row * SCALE : (row + 1) * SCALE, column * SCALE : (column + 1) * SCALE] = 255
        return image

    def _observation(self) -> Any:
        return self._image()


class PixelGridDictEnv(PixelGridEnv):
    """PixelGrid seen as {"cam": the image with the goal only, "pos": the agent's row and
    column scaled to [0, 1]}: a policy must read both to walk to the goal."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Dict(
            {
                "cam": gym.spaces.Box(0, 255, (3, SIDE * SCALE, SIDE * SCALE), np.uint8),
                "pos": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
            }
        )

    def _observation(self) -> Any:
        return {"cam": self._image(show_agent=False), "pos": (self.agent / (SIDE - 1)).astype(np.float32)}


PIXEL_GRID_ENV_ID = "rllink/PixelGrid-v0"
PIXEL_GRID_DICT_ENV_ID = "rllink/PixelGridDict-v0"
for _env_id, _entry_point in ((PIXEL_GRID_ENV_ID, PixelGridEnv), (PIXEL_GRID_DICT_ENV_ID, PixelGridDictEnv)):
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry_point)
