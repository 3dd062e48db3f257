"""The replay buffer of an off-policy learner: transitions from episode chunks, in a ring.

A chunk of T steps gives T transitions (obs[t], actions[t], rewards[t], obs[t+1]); only
the last one of a terminated chunk is terminal (a truncated or cut chunk bootstraps).
Stored as preallocated float32 numpy arrays; sampled uniformly.
"""

from __future__ import annotations

import numpy as np
import torch

from app.experience import ChunkBlock


class ReplayBuffer:
    """The last `capacity` transitions, for uniform minibatches."""

    def __init__(self, capacity: int, obs_dim: int, action_dim: int) -> None:
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.actions = np.zeros((capacity, action_dim), np.float32)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)  # 1: no bootstrap past this transition
        self.size = 0
        self._next = 0  # where the next transition goes

    def add(self, block: ChunkBlock) -> int:
        """Store the chunks' transitions (the newest `capacity` of them); returns how many they had."""
        steps = block.num_steps
        dones = np.zeros(steps, np.float32)
        dones[block.terminal_steps()] = 1.0
        obs, next_obs = block.step_obs().reshape(steps, -1), block.next_obs().reshape(steps, -1)
        columns = (obs, next_obs, block.actions.reshape(steps, -1), block.rewards, dones)
        keep = min(steps, self.capacity)
        index = (self._next + np.arange(keep)) % self.capacity
        for store, values in zip((self.obs, self.next_obs, self.actions, self.rewards, self.dones), columns):
            store[index] = values[steps - keep :]
        self._next = int((self._next + keep) % self.capacity)
        self.size = min(self.size + keep, self.capacity)
        return steps

    def sample(self, batch_size: int, rng: np.random.Generator, device: torch.device) -> tuple[torch.Tensor, ...]:
        """A uniform minibatch: obs, actions, rewards, next_obs, dones as tensors on `device`."""
        index = rng.integers(0, self.size, batch_size)
        return tuple(
            torch.from_numpy(store[index]).to(device, non_blocking=True)
            for store in (self.obs, self.actions, self.rewards, self.next_obs, self.dones)
        )
