"""Behavioural cloning: pre-train a PPO policy on demonstrations before RL (as ML-Agents'
BC pre-training, Pomerleau 1991 / Bain & Sammut 1995).

The actor is trained by maximum likelihood on the demonstrated actions (the logits masked
where the chunks carry action masks, as PPO masks them), and the critic is fitted to the
demonstrations' discounted returns (Monte Carlo: an episode cut by a time limit or by the
end of its chunk counts its rewards only, nothing bootstrapped), so that PPO's first
advantages are not measured against an untrained critic. Minibatches of shuffled steps,
Adam of its own (the PPO optimiser starts untouched), global gradient clipping.
"""

from __future__ import annotations

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


def bc_pretrain(
    policy: ActorCritic,
    chunks: list[EpisodeChunk],
    epochs: int,
    gamma: float,
    generator: torch.Generator,
    fit_value: bool = True,
) -> dict[str, float]:
    """Train `policy` on the demonstrations for `epochs` passes; returns the last epoch's mean
    negative log-likelihood, the share of steps whose most likely action is the demonstrated
    one (discrete actions), the value loss (if fitted) and the number of steps."""
    device = policy.device
    obs = torch.from_numpy(np.concatenate([chunk.obs[:-1] for chunk in chunks])).to(device)
    actions = torch.from_numpy(np.concatenate([chunk.actions for chunk in chunks])).to(device)
    masks = _masks(chunks, policy.num_dist_inputs)
    masks = None if masks is None else masks.to(device)
    returns = torch.from_numpy(np.concatenate([discounted_returns(chunk.rewards, gamma) for chunk in chunks])).to(device)
    if policy.obs_norm is not None:  # the normaliser's statistics first, as a training step does
        policy.obs_norm.update(torch.from_numpy(np.concatenate([c.obs.reshape(len(c.obs), -1) for c in chunks])))
    optimizer = torch.optim.Adam(policy.parameters(), lr=BC_LEARNING_RATE, eps=1e-5)
    num_steps = len(actions)

    stats: dict[str, float] = {}
    for _ in range(epochs):
        sums = {"bc_nll": 0.0, "bc_value_loss": 0.0}
        minibatches = 0
        order = torch.randperm(num_steps, generator=generator).to(device)
        for start in range(0, num_steps, BC_MINIBATCH_SIZE):
            idx = order[start : start + BC_MINIBATCH_SIZE]
            dist_inputs = policy(obs[idx], None if masks is None else masks[idx])
            nll = -policy.log_prob(dist_inputs, actions[idx]).mean()
            loss = nll
            if fit_value:
                value_loss = 0.5 * ((policy.value(obs[idx]) - returns[idx]) ** 2).mean()
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
    if policy.is_discrete and actions.ndim == 1:
        with torch.no_grad():
            greedy = policy(obs, masks).argmax(-1)
        stats["bc_accuracy"] = float((greedy == actions).float().mean())
    return stats
