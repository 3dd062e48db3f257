"""Tasks that need memory: what a policy sees in one step is not enough to act on.

`StatelessCartPole-v1`: CartPole-v1 observing only the cart's position and the pole's
angle; the velocities must be remembered from the steps before (as RLlib's
StatelessCartPole). Importing this module registers it: `--env
rllink_clients.memory_envs:StatelessCartPole-v1` on the reference clients' command line.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

POSITION_AND_ANGLE = [0, 2]  # of CartPole's [x, x_dot, theta, theta_dot]


class StatelessCartPole(gym.ObservationWrapper):
    """CartPole-v1 without its velocities."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[POSITION_AND_ANGLE], box.high[POSITION_AND_ANGLE], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, np.float32)[POSITION_AND_ANGLE]


def make_stateless_cartpole(**kwargs: object) -> gym.Env:
    return StatelessCartPole(gym.make("CartPole-v1", **kwargs))


if "StatelessCartPole-v1" not in gym.registry:
    gym.register("StatelessCartPole-v1", entry_point=make_stateless_cartpole, reward_threshold=475.0)
