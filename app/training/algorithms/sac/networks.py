"""SAC's networks for Box actions, after CleanRL's sac_continuous_action.py: a squashed Gaussian
actor and Q(s, a) networks (relu_mlp, their bodies, is discrete SAC's too).

The actor's output is the policy's `action_dist_inputs`, [mean, log_std] of the
pre-squash Gaussian; an action is tanh(u) scaled to the box ("squashed_gaussian").
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from app.spaces.models import BoxSpace

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the actor's log std lies in this range (tanh-rescaled)
GSDE_VARIANCE_EPS = 1e-6  # gsde: added to the variance of u before its log (a dead features vector has std 1e-3)


def relu_mlp(in_dim: int, hidden_sizes: tuple[int, ...]) -> nn.Sequential:
    """Linear-ReLU layers of the given widths (PyTorch's default initialisation, as CleanRL)."""
    layers: list[nn.Module] = []
    for width in hidden_sizes:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    return nn.Sequential(*layers)


class SoftQNetwork(nn.Module):
    """Q(s, a) for flat observations and actions."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.body = relu_mlp(obs_dim + action_dim, hidden_sizes)
        self.out = nn.Linear(hidden_sizes[-1], 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(torch.cat([obs, actions], dim=1))).squeeze(-1)


class SquashedGaussianActor(nn.Module):
    """pi(a | s): a Gaussian over u with a state-dependent log std, then a = tanh(u) in the box.

    With `gsde` (SACConfig.exploration), the log std is not a head but gSDE's (Raffin et al.
    2022): the variance of features(s) @ theta, theta [features, action_dim] with entries
    N(0, exp(gsde_log_std)^2), so the std of u is sqrt(features(s)^2 @ exp(2 gsde_log_std))
    (features detached, as gSDE without learnt features). Training samples that Gaussian;
    clients play one drawn theta per version (`exploration_noise`, onnx_head.py)."""

    def __init__(
        self,
        observation_space: BoxSpace,
        action_space: BoxSpace,
        hidden_sizes: tuple[int, ...],
        gsde_log_std_init: float | None = None,
    ) -> None:
        super().__init__()
        self.observation_space, self.action_space = observation_space, action_space
        self.hidden_sizes = tuple(hidden_sizes)
        action_dim = action_space.flat_dim
        self.body = relu_mlp(observation_space.flat_dim, self.hidden_sizes)
        self.fc_mean = nn.Linear(self.hidden_sizes[-1], action_dim)
        self.gsde = gsde_log_std_init is not None
        if gsde_log_std_init is None:
            self.fc_logstd = nn.Linear(self.hidden_sizes[-1], action_dim)
        else:
            self.gsde_log_std = nn.Parameter(torch.full((self.hidden_sizes[-1], action_dim), float(gsde_log_std_init)))
        self.register_buffer("action_scale", torch.tensor((action_space.high - action_space.low) / 2, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((action_space.high + action_space.low) / 2, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """`action_dist_inputs` [batch, 2 * action_dim]: the mean, then the log std."""
        x = self.body(obs.flatten(start_dim=1))
        if self.gsde:
            variance = x.detach().pow(2) @ (2 * self.gsde_log_std).exp()
            return torch.cat([self.fc_mean(x), 0.5 * (variance + GSDE_VARIANCE_EPS).log()], dim=1)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return torch.cat([self.fc_mean(x), log_std], dim=1)

    @torch.no_grad()
    def exploration_noise(self, rng: np.random.Generator) -> np.ndarray:
        """gsde: one draw of theta [features, action_dim], entries N(0, exp(gsde_log_std)^2)."""
        std: np.ndarray = self.gsde_log_std.exp().cpu().numpy()
        noise: np.ndarray = (rng.standard_normal(std.shape) * std).astype(np.float32)
        return noise

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action in the box and its log-prob (change of variables included)."""
        mean, log_std = self(obs).chunk(2, dim=1)
        normal = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t) - torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        return action, log_prob.sum(dim=1)
