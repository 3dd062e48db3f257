"""Turn episode chunks into one flat training batch with GAE advantages and returns.

Each chunk is bootstrapped from V(its last observation) unless it ended in a
terminal state; a chunk cut by the client or by a time limit goes on past its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from app.experience import ChunkBlock
from app.training.policy import ActorCritic, masked_logits


class Minibatch(NamedTuple):
    """One minibatch's steps as PPO's loss takes them: what the policy says now (with
    gradients) beside what the batch recorded, one row per step."""

    newlogprob: torch.Tensor  # [M] log-prob of each action under the policy now
    entropy: torch.Tensor  # [M]
    newvalue: torch.Tensor  # [M]
    logp: torch.Tensor  # [M] under the policy that chose it
    advantages: torch.Tensor  # [M]
    returns: torch.Tensor  # [M]
    values: torch.Tensor  # [M] when the batch was built
    masks: torch.Tensor | None  # [M, k] action masks


@dataclass(frozen=True)
class Batch:
    """Flat per-step tensors of N steps, in chunk order."""

    obs: torch.Tensor  # [N, *obs_shape]
    actions: torch.Tensor  # [N] int64 (Discrete) or [N, *act_shape] float32 (Box)
    logp: torch.Tensor  # [N] log-prob of each action under the policy that chose it
    values: torch.Tensor  # [N] V(s_t) under the current policy
    advantages: torch.Tensor  # [N] GAE(gamma, lambda)
    returns: torch.Tensor  # [N] advantages + values: the value target
    masks: torch.Tensor | None = None  # [N, k] float 0/1 action masks (None: no chunk had one)

    @property
    def num_steps(self) -> int:
        return len(self.logp)

    def minibatches(self, policy: ActorCritic, minibatch_size: int, generator: torch.Generator) -> Iterator[Minibatch]:
        """One epoch: the steps shuffled, `minibatch_size` at a time, through the policy now."""
        b_inds = torch.randperm(self.num_steps, generator=generator).to(self.obs.device)
        for start in range(0, self.num_steps, minibatch_size):
            mb = b_inds[start : start + minibatch_size]
            masks = None if self.masks is None else self.masks[mb]
            features = policy.features(self.obs[mb])  # once for both heads: an encoder (images, grids) is the costly part
            newlogprob, entropy = policy.dist_log_prob_and_entropy(policy.dist_inputs(features, masks), self.actions[mb])
            newvalue = policy.critic(features).squeeze(-1)
            yield Minibatch(newlogprob, entropy, newvalue, self.logp[mb], self.advantages[mb], self.returns[mb], self.values[mb], masks)


def behaviour_logp(block: ChunkBlock, policy: ActorCritic) -> torch.Tensor:
    """Log-probs of the chunks' actions under the policy that chose them: the clients'
    `action_logp`, else from their `action_dist_inputs`, else from the current policy
    (under the chunks' action masks, if any)."""
    if block.action_logp is not None:
        return torch.from_numpy(block.action_logp)
    device = policy.device
    actions = torch.from_numpy(block.actions).to(device)
    mask = None if block.action_mask is None else torch.from_numpy(block.action_mask).to(device)
    dist_inputs = block.action_dist_inputs
    if dist_inputs is None or dist_inputs.shape[1] != policy.num_dist_inputs:
        return policy.log_prob(policy(torch.from_numpy(block.step_obs()).to(device), mask), actions).cpu()
    return policy.log_prob(masked_logits(torch.from_numpy(dist_inputs).to(device), mask), actions).cpu()


def gae_advantages(deltas: np.ndarray, last_steps: np.ndarray, gamma_lambda: float) -> np.ndarray:
    """A_t = delta_t + gamma * lambda * A_{t+1} within each chunk (nothing after a chunk's
    last step), for all steps at once.

    Each A_t is an affine function of a later one, A_t = b_t + a_t * A_{t+span}; substituting
    that later one doubles the span (a Hillis-Steele scan), so log2(longest chunk) rounds
    of whole-array operations replace a Python iteration per step, which held the GIL and
    with it the event loop (160,000 steps: 3.5 ms instead of 53). The last `span` steps
    need no update: their span reaches past the last step, where every chunk ends.
    """
    advantages = deltas.astype(np.float64)  # b
    decay = np.full(len(deltas), gamma_lambda)  # a
    decay[last_steps] = 0.0
    span = 1
    while decay.any():
        advantages[:-span] += decay[:-span] * advantages[span:]
        decay[:-span] = decay[:-span] * decay[span:]
        span *= 2
    return advantages.astype(deltas.dtype)


def _masks(blocks: list[ChunkBlock], width: int) -> torch.Tensor | None:
    """The chunks' action masks [N, width], all-allowed for chunks without; None if none has one."""
    if all(block.action_mask is None for block in blocks):
        return None
    return torch.from_numpy(
        np.concatenate([
            block.action_mask if block.action_mask is not None else np.ones((block.num_steps, width), np.float32)
            for block in blocks
        ])
    )


@torch.no_grad()
def build_batch(
    blocks: list[ChunkBlock], policy: ActorCritic, gamma: float, gae_lambda: float, reward_scale: float = 1.0
) -> Batch:
    """Concatenate the chunks' steps and compute their advantages with GAE; the batch's
    tensors are on the policy's device (GAE itself runs in numpy)."""
    device = policy.device
    lengths = np.array([length for block in blocks for length in block.lengths])
    last_steps = np.cumsum(lengths) - 1
    # V(s) of every observation, the last one of each chunk included, in one pass.
    all_obs = torch.from_numpy(np.concatenate([block.obs for block in blocks])).to(device)
    all_values = policy.value(all_obs).cpu().numpy()
    last_obs = last_steps + np.arange(1, len(lengths) + 1)  # a chunk has one observation more than steps
    values = np.delete(all_values, last_obs)  # V(s_t)
    next_values = np.delete(all_values, last_obs - lengths)  # V(s_{t+1})
    rewards = np.concatenate([block.rewards for block in blocks]) * reward_scale
    next_nonterminal = np.ones(len(rewards), np.float32)
    terminated = np.array([terminated for block in blocks for terminated in block.is_terminated], bool)
    next_nonterminal[last_steps[terminated]] = 0.0

    # delta_t = r_t + gamma * V(s_{t+1}) - V(s_t); A_t = delta_t + gamma * lambda * A_{t+1}
    deltas = rewards + gamma * next_nonterminal * next_values - values
    advantages = gae_advantages(deltas, last_steps, gamma * gae_lambda)

    tensors = {
        "obs": torch.from_numpy(np.concatenate([block.step_obs() for block in blocks])),
        "actions": torch.from_numpy(np.concatenate([block.actions for block in blocks])),
        "logp": torch.cat([behaviour_logp(block, policy) for block in blocks]).float(),
        "values": torch.from_numpy(values),
        "advantages": torch.from_numpy(advantages),
        "returns": torch.from_numpy(advantages + values),
        "masks": _masks(blocks, policy.num_dist_inputs),
    }
    return Batch(**{name: None if tensor is None else tensor.to(device) for name, tensor in tensors.items()})
