"""Soft Actor-Critic for Discrete actions (Christodoulou 2019), written after CleanRL's
sac_atari.py: a categorical actor, twin Q networks that value every action at once, with
target copies, delayed actor updates and automatic entropy tuning.

With the whole distribution known, every expectation over actions is an exact sum over
them, weighted by the actor's probabilities; nothing is sampled. The actor's output is
the policy's `action_dist_inputs`: the logits of a Categorical ("categorical"), as PPO's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from app.settings.hyperparameters import SACConfig
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.sac import SoftActorCritic, relu_mlp


class DiscreteSoftQNetwork(nn.Module):
    """Q(s, .): one value per action, [batch, n], for flat observations."""

    def __init__(self, obs_dim: int, n: int, hidden_sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.body = relu_mlp(obs_dim, hidden_sizes)
        self.out = nn.Linear(hidden_sizes[-1], n)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(obs.flatten(start_dim=1)))


class CategoricalActor(nn.Module):
    """pi(. | s): the logits of a Categorical over the n actions."""

    def __init__(self, observation_space: BoxSpace, action_space: DiscreteSpace, hidden_sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.observation_space, self.action_space = observation_space, action_space
        self.hidden_sizes = tuple(hidden_sizes)
        self.body = relu_mlp(observation_space.flat_dim, self.hidden_sizes)
        self.fc_logits = nn.Linear(self.hidden_sizes[-1], action_space.n)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """`action_dist_inputs` [batch, n]: the logits."""
        return self.fc_logits(self.body(obs.flatten(start_dim=1)))

    def probs_and_log_probs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """pi(a | s) and log pi(a | s) of every action, [batch, n] each."""
        log_probs = F.log_softmax(self(obs), dim=1)
        return log_probs.exp(), log_probs


class DiscreteSAC(SoftActorCritic):
    """SAC for Discrete(n): a categorical actor, Q(s, .) networks."""

    def __init__(self, observation_space: BoxSpace, action_space: DiscreteSpace, cfg: SACConfig) -> None:
        obs_dim, n = observation_space.flat_dim, action_space.n
        actor = CategoricalActor(observation_space, action_space, cfg.hidden_sizes)
        # Adam's eps as CleanRL's sac_atari.py.
        super().__init__(actor, lambda: DiscreteSoftQNetwork(obs_dim, n, cfg.hidden_sizes), cfg, adam_eps=1e-4)
        self.max_entropy = math.log(n)  # a uniform policy's; the target is cfg.target_entropy_scale of it

    def update(self, cfg: SACConfig, batch: tuple[torch.Tensor, ...]) -> dict[str, float]:
        """One gradient step of the Q networks, and of the actor and alpha every
        `policy_frequency` steps (as many as were delayed); returns the losses."""
        obs, actions, rewards, next_obs, dones = batch
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_probs, next_log_probs = self.actor.probs_and_log_probs(next_obs)
            qf_next_target = torch.min(self.qf1_target(next_obs), self.qf2_target(next_obs))
            next_v = (next_probs * (qf_next_target - alpha * next_log_probs)).sum(dim=1)  # soft V(s')
            next_q_value = rewards + (1 - dones) * cfg.gamma * next_v

        taken = actions.long().view(-1, 1)  # the buffer keeps each action index as a float
        qf1_a_values, qf2_a_values = self.qf1(obs).gather(1, taken).squeeze(1), self.qf2(obs).gather(1, taken).squeeze(1)
        stats = self._q_step(qf1_a_values, qf2_a_values, next_q_value)

        if self.updates % cfg.policy_frequency == 0:  # TD3's delayed update, compensated
            with torch.no_grad():
                min_qf = torch.min(self.qf1(obs), self.qf2(obs))
            for _ in range(cfg.policy_frequency):
                probs, log_probs = self.actor.probs_and_log_probs(obs)
                actor_loss = (probs * (alpha * log_probs - min_qf)).sum(dim=1).mean()
                self._actor_step(actor_loss)
                entropy = -(probs.detach() * log_probs.detach()).sum(dim=1)
                if cfg.autotune:
                    alpha = self._alpha_step(entropy - cfg.target_entropy_scale * self.max_entropy)
            stats.update(actor_loss=actor_loss.item(), entropy=entropy.mean().item())

        self._update_targets(cfg)
        stats["alpha"] = float(alpha)
        return stats
