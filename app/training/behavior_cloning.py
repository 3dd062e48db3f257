"""Behavioural cloning on demonstrations (Pomerleau 1991 / Bain & Sammut 1995): pre-training
a PPO policy before RL (as ML-Agents' BC pre-training), and a BC loss added to PPO's during
RL with a weight that decays to 0 (as ML-Agents' `behavioral_cloning`: strength, steps).

Both maximise the likelihood of the demonstrated actions (the logits masked where the
chunks carry action masks, as PPO masks them): `demo_nll`, the one place it is computed.
Pre-training also fits the critic to the demonstrations' discounted returns (Monte Carlo: an
episode cut by a time limit or by the end of its chunk counts its rewards only, nothing
bootstrapped), so that PPO's first advantages are not measured against an untrained critic;
it runs minibatches of shuffled steps with an Adam of its own (the PPO optimiser starts
untouched) and global gradient clipping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from app.schemas import EpisodeChunk
from app.training.batch import _masks
from app.training.policy import ActorCritic

BC_LEARNING_RATE = 1e-3
BC_MINIBATCH_SIZE = 64
BC_MAX_GRAD_NORM = 0.5


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1} over one chunk, nothing after its last step."""
    returns = np.zeros(len(rewards), np.float32)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


@dataclass(frozen=True)
class Demonstrations:
    """The demonstrations' steps as tensors on the policy's device, built once from the
    loaded chunks: what pre-training and the BC loss during RL draw their minibatches from."""

    obs: torch.Tensor  # [N, *obs_shape]
    actions: torch.Tensor  # [N] int64 (Discrete) or [N, *act_shape] float32 (Box)
    masks: torch.Tensor | None  # [N, k] 0/1 action masks (None: no chunk had one)
    returns: torch.Tensor  # [N] discounted returns (Monte Carlo): pre-training's value target

    @classmethod
    def from_chunks(cls, chunks: list[EpisodeChunk], policy: ActorCritic, gamma: float) -> Demonstrations:
        device = policy.device
        masks = _masks(chunks, policy.num_dist_inputs)
        return cls(
            obs=torch.from_numpy(np.concatenate([chunk.obs[:-1] for chunk in chunks])).to(device),
            actions=torch.from_numpy(np.concatenate([chunk.actions for chunk in chunks])).to(device),
            masks=None if masks is None else masks.to(device),
            returns=torch.from_numpy(np.concatenate([discounted_returns(c.rewards, gamma) for c in chunks])).to(device),
        )

    @property
    def num_steps(self) -> int:
        return len(self.actions)


def demo_nll(policy: ActorCritic, demos: Demonstrations, idx: torch.Tensor) -> torch.Tensor:
    """The mean negative log-likelihood of the demonstrated actions at `idx` under `policy`
    (its logits masked by the demonstrations' masks, where they carry them)."""
    dist_inputs = policy(demos.obs[idx], None if demos.masks is None else demos.masks[idx])
    return -policy.log_prob(dist_inputs, demos.actions[idx]).mean()


@dataclass(frozen=True)
class BCTerm:
    """The BC loss of one PPO update: `weight` times the negative log-likelihood of a minibatch
    of demonstration steps, drawn at random (with replacement) for each PPO minibatch."""

    demos: Demonstrations
    weight: float

    def loss(self, policy: ActorCritic, size: int, generator: torch.Generator) -> torch.Tensor:
        """The unweighted BC loss on `size` demonstration steps drawn with `generator`."""
        idx = torch.randint(self.demos.num_steps, (size,), generator=generator).to(self.demos.actions.device)
        return demo_nll(policy, self.demos, idx)


@dataclass(frozen=True)
class BCSchedule:
    """BC during RL: the demonstrations, and a weight that falls linearly from `strength` to 0
    at `decay_steps` env steps trained (settings `bc_strength`, `bc_steps`)."""

    demos: Demonstrations
    strength: float
    decay_steps: int

    def weight(self, env_steps_trained: int) -> float:
        return self.strength * max(0.0, 1.0 - env_steps_trained / self.decay_steps)

    def term(self, env_steps_trained: int) -> BCTerm | None:
        """The BC term of the next update; None once the weight has reached 0."""
        weight = self.weight(env_steps_trained)
        return BCTerm(self.demos, weight) if weight > 0 else None


def bc_pretrain(
    policy: ActorCritic,
    demos: Demonstrations,
    epochs: int,
    generator: torch.Generator,
    fit_value: bool = True,
) -> dict[str, float]:
    """Train `policy` on the demonstrations for `epochs` passes; returns the last epoch's mean
    negative log-likelihood, the share of steps whose most likely action is the demonstrated
    one (discrete actions), the value loss (if fitted) and the number of steps."""
    if policy.obs_norm is not None:  # the normaliser's statistics first, as a training step does
        policy.obs_norm.update(demos.obs.reshape(demos.num_steps, -1))
    optimizer = torch.optim.Adam(policy.parameters(), lr=BC_LEARNING_RATE, eps=1e-5)
    num_steps = demos.num_steps

    stats: dict[str, float] = {}
    for _ in range(epochs):
        sums = {"bc_nll": 0.0, "bc_value_loss": 0.0}
        minibatches = 0
        order = torch.randperm(num_steps, generator=generator).to(policy.device)
        for start in range(0, num_steps, BC_MINIBATCH_SIZE):
            idx = order[start : start + BC_MINIBATCH_SIZE]
            nll = demo_nll(policy, demos, idx)
            loss = nll
            if fit_value:
                value_loss = 0.5 * ((policy.value(demos.obs[idx]) - demos.returns[idx]) ** 2).mean()
                loss = loss + value_loss
                sums["bc_value_loss"] += value_loss.item()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), BC_MAX_GRAD_NORM)
            optimizer.step()
            sums["bc_nll"] += nll.item()
            minibatches += 1
        stats = {name: total / minibatches for name, total in sums.items() if fit_value or name != "bc_value_loss"}

    stats["bc_steps"] = float(num_steps)
    if policy.is_discrete and demos.actions.ndim == 1:
        with torch.no_grad():
            greedy = policy(demos.obs, demos.masks).argmax(-1)
        stats["bc_accuracy"] = float((greedy == demos.actions).float().mean())
    return stats
