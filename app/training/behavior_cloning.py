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

A recurrent policy (model.use_lstm) clones whole episodes: the chunks of one episode id,
in the file's order, are one sequence, run through the LSTM from a zero state (the state
a demonstrator's own model had, its chunks' `state_in`, is not this network's), by
truncated back-propagation through time: `max_seq_len` steps at a time, the state carried
on without its gradient. Its minibatches and BC draws are episodes, not steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    loaded chunks: what pre-training and the BC loss during RL draw their minibatches from.
    The units drawn are steps, or for a recurrent policy episodes (`episodes`)."""

    obs: torch.Tensor  # [N, *obs_shape]
    actions: torch.Tensor  # [N] int64 (Discrete) or [N, *act_shape] float32 (Box)
    masks: torch.Tensor | None  # [N, k] 0/1 action masks (None: no chunk had one)
    returns: torch.Tensor  # [N] discounted returns (Monte Carlo): pre-training's value target
    episodes: torch.Tensor | None = None  # [E, longest] each episode's steps, padding repeating its last (recurrent)
    valid: torch.Tensor | None = None  # [E, longest] a real step, not padding
    max_seq_len: int = 0  # steps back-propagated through at a time (recurrent)

    @classmethod
    def from_chunks(cls, chunks: list[EpisodeChunk], policy: ActorCritic, gamma: float, max_seq_len: int = 0) -> Demonstrations:
        """The chunks' steps; for a recurrent policy ordered episode by episode (the chunks of
        one episode id joined in the file's order; a chunk without one is an episode of its own)."""
        episodes: dict[object, list[EpisodeChunk]] = {}
        for k, chunk in enumerate(chunks):
            episodes.setdefault(chunk.episode_id if chunk.episode_id is not None and policy.lstm is not None else k, []).append(chunk)
        ordered = [chunk for parts in episodes.values() for chunk in parts]
        masks = _masks(ordered, policy.num_dist_inputs)
        rewards = [np.concatenate([chunk.rewards for chunk in parts]) for parts in episodes.values()]
        device = policy.device
        demos = cls(
            obs=torch.from_numpy(np.concatenate([chunk.obs[:-1] for chunk in ordered])).to(device),
            actions=torch.from_numpy(np.concatenate([chunk.actions for chunk in ordered])).to(device),
            masks=None if masks is None else masks.to(device),
            returns=torch.from_numpy(np.concatenate([discounted_returns(r, gamma) for r in rewards])).to(device),
        )
        if policy.lstm is None:
            return demos
        lengths = np.array([len(r) for r in rewards])
        firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        offsets = np.arange(int(lengths.max()))
        steps = firsts[:, None] + np.minimum(offsets[None, :], lengths[:, None] - 1)
        return replace(
            demos,
            episodes=torch.from_numpy(steps).to(device),
            valid=torch.from_numpy(offsets[None, :] < lengths[:, None]).to(device),
            max_seq_len=max_seq_len,
        )

    @property
    def num_steps(self) -> int:
        return len(self.actions)

    @property
    def num_units(self) -> int:
        """What minibatches are drawn from: steps, or a recurrent policy's episodes."""
        return self.num_steps if self.episodes is None else len(self.episodes)

    def units_for(self, steps: int) -> int:
        """About `steps` steps' worth of units (at least one)."""
        return max(1, round(steps * self.num_units / self.num_steps))

    def features(self, policy: ActorCritic, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The heads' inputs at the steps of units `idx`, and those steps' indices: a recurrent
        policy's LSTM over each episode from a zero state, `max_seq_len` steps between two cuts
        of the gradient."""
        if self.episodes is None:
            return policy.features(self.obs[idx]), idx
        steps, valid = self.episodes[idx], self.valid[idx]  # type: ignore[index]
        obs = self.obs[steps]
        state = torch.zeros(len(idx), policy.state_size, device=obs.device)
        outputs = []
        for start in range(0, steps.shape[1], self.max_seq_len):
            out, state = policy.recurrent(obs[:, start : start + self.max_seq_len], state)
            outputs.append(out)
            state = state.detach()
        return torch.cat(outputs, dim=1)[valid], steps[valid]


def demo_nll(policy: ActorCritic, demos: Demonstrations, idx: torch.Tensor) -> torch.Tensor:
    """The mean negative log-likelihood of the demonstrated actions of units `idx` under `policy`
    (its logits masked by the demonstrations' masks, where they carry them)."""
    return demo_nll_and_features(policy, demos, idx)[0]


def demo_nll_and_features(
    policy: ActorCritic, demos: Demonstrations, idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """demo_nll, and the heads' inputs and step indices it came from (for the value fit)."""
    dist_inputs, features, steps = demo_heads(policy, demos, idx)
    return -policy.log_prob(dist_inputs, demos.actions[steps]).mean(), features, steps


def demo_heads(policy: ActorCritic, demos: Demonstrations, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The policy's `action_dist_inputs` at the steps of units `idx` (masked where the
    demonstrations carry masks), the heads' inputs there, and those steps' indices."""
    features, steps = demos.features(policy, idx)
    return policy.dist_inputs(features, None if demos.masks is None else demos.masks[steps]), features, steps


@dataclass(frozen=True)
class BCTerm:
    """The BC loss of one PPO update: `weight` times the negative log-likelihood of a minibatch
    of demonstration steps, drawn at random (with replacement) for each PPO minibatch."""

    demos: Demonstrations
    weight: float

    def loss(self, policy: ActorCritic, size: int, generator: torch.Generator) -> torch.Tensor:
        """The unweighted BC loss on about `size` demonstration steps (units) drawn with `generator`."""
        units = self.demos.units_for(size)
        idx = torch.randint(self.demos.num_units, (units,), generator=generator).to(self.demos.actions.device)
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
    num_units, per_minibatch = demos.num_units, demos.units_for(BC_MINIBATCH_SIZE)

    stats: dict[str, float] = {}
    for _ in range(epochs):
        sums = {"bc_nll": 0.0, "bc_value_loss": 0.0}
        minibatches = 0
        order = torch.randperm(num_units, generator=generator).to(policy.device)
        for start in range(0, num_units, per_minibatch):
            nll, features, steps = demo_nll_and_features(policy, demos, order[start : start + per_minibatch])
            loss = nll
            if fit_value:
                value_loss = 0.5 * ((policy.critic(features).squeeze(-1) - demos.returns[steps]) ** 2).mean()
                loss = loss + value_loss
                sums["bc_value_loss"] += value_loss.item()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), BC_MAX_GRAD_NORM)
            optimizer.step()
            sums["bc_nll"] += nll.item()
            minibatches += 1
        stats = {name: total / minibatches for name, total in sums.items() if fit_value or name != "bc_value_loss"}

    stats["bc_steps"] = float(demos.num_steps)
    if policy.is_discrete and demos.actions.ndim == 1:
        with torch.no_grad():
            dist_inputs, _, steps = demo_heads(policy, demos, torch.arange(num_units, device=policy.device))
        stats["bc_accuracy"] = float((dist_inputs.argmax(-1) == demos.actions[steps]).float().mean())
    return stats
