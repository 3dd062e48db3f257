"""Soft Actor-Critic (Haarnoja et al. 2018) for Box actions, written after CleanRL's
sac_continuous_action.py: twin Q networks with target copies, delayed actor updates and
automatic entropy tuning (networks.py: the actor and Q networks; discrete/loss.py: the
same for Discrete actions, on `SoftActorCritic`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from app.spaces.models import BoxSpace
from app.training.algorithms.sac.config import SACConfig
from app.training.algorithms.sac.networks import SoftQNetwork, SquashedGaussianActor


@contextlib.contextmanager
def _frozen(*networks: nn.Module) -> Iterator[None]:
    """Their weights take no gradients meanwhile (gradients still flow through them)."""
    for network in networks:
        network.requires_grad_(False)
    try:
        yield
    finally:
        for network in networks:
            network.requires_grad_(True)


class SoftActorCritic(nn.Module):
    """What SAC for Box and for Discrete actions share: the actor, twin Q networks with
    target copies, log alpha and their optimisers, and the steps whose equations do not
    depend on the action space. Subclasses write `update` with their own targets and losses."""

    def __init__(self, actor: nn.Module, q_network: Callable[[], nn.Module], cfg: SACConfig, adam_eps: float = 1e-8) -> None:
        super().__init__()
        self.actor = actor
        self.qf1, self.qf2 = q_network(), q_network()
        self.qf1_target, self.qf2_target = q_network(), q_network()
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.log_alpha = nn.Parameter(torch.tensor(cfg.initial_alpha).log())
        q_parameters = [*self.qf1.parameters(), *self.qf2.parameters()]
        self.q_optimizer = torch.optim.Adam(q_parameters, lr=cfg.q_lr, eps=adam_eps, fused=True)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.policy_lr, eps=adam_eps, fused=True)
        self.a_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.q_lr, eps=adam_eps, fused=True)
        self.updates = 0  # gradient steps of the Q networks so far

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q_optimizer": self.q_optimizer, "actor_optimizer": self.actor_optimizer, "a_optimizer": self.a_optimizer}

    def _q_step(self, qf1_a_values: torch.Tensor, qf2_a_values: torch.Tensor, next_q_value: torch.Tensor) -> dict[str, float]:
        """One gradient step of both Q networks towards the soft Bellman target; their stats."""
        qf_loss = F.mse_loss(qf1_a_values, next_q_value) + F.mse_loss(qf2_a_values, next_q_value)
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        self.updates += 1
        return {"qf_loss": qf_loss.item() / 2, "qf1_values": qf1_a_values.mean().item()}

    def _actor_step(self, actor_loss: torch.Tensor) -> None:
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

    def _alpha_step(self, entropy_excess: torch.Tensor) -> torch.Tensor:
        """One step of alpha, down where the policy's entropy exceeds the target
        (`entropy_excess`: entropy minus target, per sample, no gradient); the new alpha."""
        alpha_loss = (self.log_alpha.exp() * entropy_excess).mean()
        self.a_optimizer.zero_grad()
        alpha_loss.backward()
        self.a_optimizer.step()
        return self.log_alpha.exp().detach()

    @torch.no_grad()
    def _update_targets(self, cfg: SACConfig) -> None:
        """Every `target_network_frequency` Q steps, Polyak averaging: each target's weights
        move a share `tau` towards its network's."""
        if self.updates % cfg.target_network_frequency:
            return
        for net, target in ((self.qf1, self.qf1_target), (self.qf2, self.qf2_target)):
            for param, target_param in zip(net.parameters(), target.parameters()):
                target_param.lerp_(param, cfg.tau)  # tau * param + (1 - tau) * target_param


class SAC(SoftActorCritic):
    """SAC for a bounded Box: a squashed Gaussian actor, Q(s, a) networks."""

    def __init__(self, observation_space: BoxSpace, action_space: BoxSpace, cfg: SACConfig) -> None:
        obs_dim, action_dim = observation_space.flat_dim, action_space.flat_dim
        gsde_log_std_init = cfg.gsde_log_std_init if cfg.exploration == "gsde" else None
        actor = SquashedGaussianActor(observation_space, action_space, cfg.hidden_sizes, gsde_log_std_init)
        super().__init__(actor, lambda: SoftQNetwork(obs_dim, action_dim, cfg.hidden_sizes), cfg)
        self.target_entropy = -float(action_dim)

    def update(self, cfg: SACConfig, batch: tuple[torch.Tensor, ...]) -> dict[str, float]:
        """One gradient step of the Q networks, and of the actor and alpha every
        `policy_frequency` steps (as many as were delayed); returns the losses."""
        obs, actions, rewards, next_obs, dones = batch
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_actions, next_log_pi = self.actor.sample(next_obs)
            qf_next_target = torch.min(self.qf1_target(next_obs, next_actions), self.qf2_target(next_obs, next_actions))
            next_q_value = rewards + (1 - dones) * cfg.gamma * (qf_next_target - alpha * next_log_pi)

        stats = self._q_step(self.qf1(obs, actions), self.qf2(obs, actions), next_q_value)

        if self.updates % cfg.policy_frequency == 0:  # TD3's delayed update, compensated
            for _ in range(cfg.policy_frequency):
                pi, log_pi = self.actor.sample(obs)
                with _frozen(self.qf1, self.qf2):  # the actor's loss needs no gradients of Q's weights
                    min_qf_pi = torch.min(self.qf1(obs, pi), self.qf2(obs, pi))
                actor_loss = (alpha * log_pi - min_qf_pi).mean()
                self._actor_step(actor_loss)
                if cfg.autotune:
                    alpha = self._alpha_step(-log_pi.detach() - self.target_entropy)
            stats.update(actor_loss=actor_loss.item(), entropy=-log_pi.mean().item())

        self._update_targets(cfg)
        stats["alpha"] = float(alpha)
        return stats
