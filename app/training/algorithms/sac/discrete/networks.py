"""Discrete SAC's networks, after CleanRL's sac_atari.py: a categorical actor, whose output is the
policy's `action_dist_inputs` (the logits of a Categorical, "categorical", as PPO's), and Q(s, .)
networks that value every action at once."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.sac.networks import relu_mlp


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
