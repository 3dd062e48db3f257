"""The policy network: separate actor and critic MLPs over flattened observations.

The actor's output is RLlib's `action_dist_inputs`: the logits for a Discrete action
space, `[mean, log_std]` for a Box (log_std is a learned, state-independent vector).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal

from app.schemas import num_dist_inputs
from app.spaces import BoxSpace, DiscreteSpace


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias, as in CleanRL's ppo.py."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, hidden_sizes: tuple[int, ...], out_dim: int, out_std: float) -> nn.Sequential:
    """Linear-Tanh layers of the given widths, then a linear output layer."""
    layers: list[nn.Module] = []
    for width in hidden_sizes:
        layers += [layer_init(nn.Linear(in_dim, width)), nn.Tanh()]
        in_dim = width
    layers.append(layer_init(nn.Linear(in_dim, out_dim), std=out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Actor (action distribution inputs) and critic (state value) for one pair of spaces."""

    def __init__(
        self,
        observation_space: BoxSpace,
        action_space: BoxSpace | DiscreteSpace,
        hidden_sizes: tuple[int, ...],
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.hidden_sizes = tuple(hidden_sizes)
        obs_dim = observation_space.flat_dim
        self.critic = mlp(obs_dim, self.hidden_sizes, 1, out_std=1.0)
        if isinstance(action_space, DiscreteSpace):
            self.actor = mlp(obs_dim, self.hidden_sizes, action_space.n, out_std=0.01)
            self.log_std = None
        else:
            self.actor = mlp(obs_dim, self.hidden_sizes, action_space.flat_dim, out_std=0.01)
            self.log_std = nn.Parameter(torch.zeros(action_space.flat_dim))

    @property
    def is_discrete(self) -> bool:
        return isinstance(self.action_space, DiscreteSpace)

    @property
    def num_dist_inputs(self) -> int:
        """Width of `action_dist_inputs`: n logits, or mean and log_std per action dimension."""
        return num_dist_inputs(self.action_space)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """`action_dist_inputs` [batch, k] for observations [batch, *obs_shape]."""
        actor_out = self.actor(obs.flatten(start_dim=1))
        if self.log_std is None:
            return actor_out
        return torch.cat([actor_out, self.log_std.expand_as(actor_out)], dim=-1)

    def distribution(self, dist_inputs: torch.Tensor) -> Distribution:
        """The action distribution those inputs describe (one event per row)."""
        # validate_args=False: the inputs come from the network, and checking them costs
        # as much as the small network itself.
        if self.log_std is None:
            return Categorical(logits=dist_inputs, validate_args=False)
        mean, log_std = dist_inputs.chunk(2, dim=-1)
        return Independent(Normal(mean, log_std.exp(), validate_args=False), 1, validate_args=False)

    def log_prob(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of each action under the distribution of its row of inputs."""
        return self.distribution(dist_inputs).log_prob(self._flat(actions))

    def log_prob_and_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of `actions` and the entropy of the policy, per observation."""
        dist = self.distribution(self(obs))
        return dist.log_prob(self._flat(actions)), dist.entropy()

    def _flat(self, actions: torch.Tensor) -> torch.Tensor:
        """Box actions [batch, *shape] as the [batch, flat_dim] events of the Gaussian."""
        return actions if self.log_std is None else actions.flatten(start_dim=1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs), shape [batch]."""
        return self.critic(obs.flatten(start_dim=1)).squeeze(-1)
