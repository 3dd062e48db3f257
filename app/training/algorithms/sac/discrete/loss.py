"""Soft Actor-Critic for Discrete actions (Christodoulou 2019), written after CleanRL's
sac_atari.py: twin Q networks that value every action at once (networks.py), with target
copies, delayed actor updates and automatic entropy tuning, on SAC's `SoftActorCritic`.

With the whole distribution known, every expectation over actions is an exact sum over
them, weighted by the actor's probabilities; nothing is sampled.
"""

from __future__ import annotations

import math

import torch

from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.sac.config import SACConfig
from app.training.algorithms.sac.discrete.networks import CategoricalActor, DiscreteSoftQNetwork
from app.training.algorithms.sac.loss import SoftActorCritic


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
