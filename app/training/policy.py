"""The policy network: separate actor and critic MLPs over flattened observations,
optionally normalised by running statistics; observations with camera images go first
through a CNN encoder the actor and the critic share (app/training/encoders.py). With
memory (`lstm_cell_size`), an LSTM the actor and the critic share sits between the
observation and their MLPs, its state ([h, c]: `state_size` floats) carried step to step.

The actor's output is RLlib's `action_dist_inputs`: the logits for a Discrete action
space (every sub-action's, one after the other, for a MultiDiscrete), `[mean, log_std]`
for a Box (log_std is a learned, state-independent vector). An action mask pushes the
logits of forbidden actions to about -1e8, as the exported ONNX does.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal

from app.spaces.models import ActionSpace, BoxSpace, DictSpace, MultiDiscreteSpace, has_cnn_parts, is_discrete, num_dist_inputs, num_logits
from app.training.encoders import ObservationEncoder
from rllink.action_dists import MASK_PENALTY


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


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The logits with the forbidden ones (mask 0) pushed to about -MASK_PENALTY, as the ONNX
    does (applied twice, it changes nothing more: those probabilities are 0 already)."""
    return logits if mask is None else logits + (mask - 1) * MASK_PENALTY


OBS_MIN_STD = 0.1  # an observation feature is never divided by less: a change of 1 maps to at most 10


class RunningNormalizer(nn.Module):
    """(x - mean) / std with a running mean and variance of every x seen (Welford's
    parallel update, as SB3's RunningMeanStd). No clipping, so that the ONNX export can
    fold it into the first layer exactly; instead std is at least `min_std`, so a feature
    that stayed constant in training (a flag never set, a board cell never filled) does
    not blow up to saturation when it first changes (SB3 clips at 10 for that). Its
    statistics are buffers: checkpointed."""

    def __init__(self, dim: int, epsilon: float = 1e-8, min_std: float = 0.0) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.min_var = min_std**2
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Fold a batch of flat values [N, dim] into the running statistics."""
        batch = obs.to(self.mean)
        batch_mean, batch_var, batch_count = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        delta, total = batch_mean - self.mean, self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean += delta * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def scale_and_shift(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(1 / std, mean) as float32: normalised = (x - mean) * (1 / std)."""
        return (1 / torch.sqrt(self.var.clamp(min=self.min_var) + self.epsilon)).float(), self.mean.float()

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        inverse_std, mean = self.scale_and_shift()
        return (flat - mean) * inverse_std


class RewardScaler:
    """Divides rewards by the running standard deviation of the discounted return, as
    SB3's VecNormalize and CleanRL's NormalizeReward do: value targets of a similar size
    whatever the task's reward scale. The return restarts with each chunk (the gateway
    does not keep one per episode); its statistics are checkpointed with the policy."""

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma
        self.returns = RunningNormalizer(1)

    def update(self, chunk_rewards: list[np.ndarray]) -> float:
        """Fold the chunks' discounted returns into the statistics; the scale to apply now."""
        returns = []
        for rewards in chunk_rewards:
            running = 0.0
            for reward in rewards:
                running = running * self.gamma + float(reward)
                returns.append(running)
        self.returns.update(torch.tensor(returns, dtype=torch.float64)[:, None])
        return self.scale

    @property
    def scale(self) -> float:
        return float(1 / torch.sqrt(self.returns.var[0] + self.returns.epsilon))


class MultiCategorical:
    """Independent Categoricals over consecutive groups of logits (MultiDiscrete's
    sub-actions): log-probs and entropies add up."""

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]) -> None:
        self.parts = [Categorical(logits=part, validate_args=False) for part in logits.split(list(nvec), dim=-1)]

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """actions [batch, len(nvec)] -> [batch]."""
        return torch.stack([part.log_prob(actions[:, i]) for i, part in enumerate(self.parts)]).sum(0)

    def entropy(self) -> torch.Tensor:
        return torch.stack([part.entropy() for part in self.parts]).sum(0)


class ActorCritic(nn.Module):
    """Actor (action distribution inputs) and critic (state value) for one pair of spaces."""

    def __init__(
        self,
        observation_space: BoxSpace | DictSpace,
        action_space: ActionSpace,
        hidden_sizes: tuple[int, ...],
        normalize_obs: bool = False,
        lstm_cell_size: int = 0,
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.hidden_sizes = tuple(hidden_sizes)
        self.encoder = ObservationEncoder(observation_space) if has_cnn_parts(observation_space) else None
        if self.encoder is not None and normalize_obs:
            raise ValueError("normalize_obs is for vector observations; images are scaled to 0..1, grids read as they are: turn it off")
        obs_dim = observation_space.flat_dim if self.encoder is None else self.encoder.features_dim
        self.obs_norm = RunningNormalizer(obs_dim, min_std=OBS_MIN_STD) if normalize_obs else None
        self.lstm = nn.LSTM(obs_dim, lstm_cell_size, batch_first=True) if lstm_cell_size else None
        head_dim = lstm_cell_size or obs_dim
        self.critic = mlp(head_dim, self.hidden_sizes, 1, out_std=1.0)
        if is_discrete(action_space):
            self.actor = mlp(head_dim, self.hidden_sizes, num_logits(action_space), out_std=0.01)
            self.log_std = None
        else:
            self.actor = mlp(head_dim, self.hidden_sizes, action_space.flat_dim, out_std=0.01)
            self.log_std = nn.Parameter(torch.zeros(action_space.flat_dim))
        # The entropy floor's bonus (ppo.py), a Lagrange multiplier: not a weight, not checkpointed
        # (after a restart it starts at 0 again and adapts within a few steps).
        self.entropy_bonus = 0.0

    @property
    def device(self) -> torch.device:
        return self.critic[0].weight.device

    @property
    def is_discrete(self) -> bool:
        """Acts from logits (Discrete or MultiDiscrete)."""
        return self.log_std is None

    @property
    def num_dist_inputs(self) -> int:
        """Width of `action_dist_inputs`: n logits, or mean and log_std per action dimension."""
        return num_dist_inputs(self.action_space)

    @property
    def state_size(self) -> int:
        """Floats of one agent's recurrent state: [h, c] of the LSTM (0: none, feed-forward)."""
        return 0 if self.lstm is None else 2 * self.lstm.hidden_size

    def forward(self, obs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """`action_dist_inputs` [batch, k] for observations [batch, *obs_shape] (feed-forward);
        `mask` [batch, k] (1 allowed, 0 not) masks the logits of a discrete action space."""
        return self.dist_inputs(self.features(obs), mask)

    def recurrent(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM over sequences: observations [batch, steps, *obs_shape] from states
        [batch, state_size] -> the heads' inputs [batch, steps, lstm_cell_size] and the states after."""
        assert self.lstm is not None, "a feed-forward policy has no state"
        batch, steps = obs.shape[:2]
        flat = self.features(obs.reshape(batch * steps, *obs.shape[2:])).reshape(batch, steps, -1)
        h, c = state.split(self.lstm.hidden_size, dim=-1)
        out, (h_after, c_after) = self.lstm(flat, (h[None].contiguous(), c[None].contiguous()))
        return out, torch.cat([h_after[0], c_after[0]], dim=-1)

    def dist_inputs(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """`action_dist_inputs` from the actor's input (the observation's features, or the LSTM's output)."""
        actor_out = self.actor(features)
        if self.log_std is None:
            return masked_logits(actor_out, mask)
        return torch.cat([actor_out, self.log_std.expand_as(actor_out)], dim=-1)

    def distribution(self, dist_inputs: torch.Tensor) -> Distribution | MultiCategorical:
        """The action distribution those inputs describe (one event per row)."""
        # validate_args=False: the inputs come from the network, and checking them costs
        # as much as the small network itself.
        if isinstance(self.action_space, MultiDiscreteSpace):
            return MultiCategorical(dist_inputs, self.action_space.nvec)
        if self.log_std is None:
            return Categorical(logits=dist_inputs, validate_args=False)
        mean, log_std = dist_inputs.chunk(2, dim=-1)
        return Independent(Normal(mean, log_std.exp(), validate_args=False), 1, validate_args=False)

    def log_prob(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of each action under the distribution of its row of inputs."""
        return self.distribution(dist_inputs).log_prob(self._flat(actions))

    def log_prob_and_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of `actions` and the entropy of the (masked) policy, per observation."""
        return self.dist_log_prob_and_entropy(self(obs, mask), actions)

    def dist_log_prob_and_entropy(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of `actions` and the entropy, per row of `action_dist_inputs`."""
        dist = self.distribution(dist_inputs)
        return dist.log_prob(self._flat(actions)), dist.entropy()

    def max_entropy(self, batch_size: int, mask: torch.Tensor | None = None) -> torch.Tensor | None:
        """The largest entropy of each row's legal actions (the log of their number, summed over
        a MultiDiscrete's sub-actions) [batch]; None for a Box (a Gaussian's has no bound)."""
        if not self.is_discrete:
            return None
        nvec = list(self.action_space.nvec) if isinstance(self.action_space, MultiDiscreteSpace) else [num_logits(self.action_space)]
        if mask is None:
            return torch.full((batch_size,), float(sum(np.log(nvec))), device=self.device)
        legal = torch.stack([part.sum(-1) for part in mask.split(nvec, dim=-1)], dim=-1)
        return legal.clamp(min=1).log().sum(-1)

    def _flat(self, actions: torch.Tensor) -> torch.Tensor:
        """Box actions [batch, *shape] as the [batch, flat_dim] events of the Gaussian."""
        return actions if self.log_std is None else actions.flatten(start_dim=1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs), shape [batch]."""
        return self.critic(self.features(obs)).squeeze(-1)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the MLPs take: the flat observations, normalised (if normalising) or encoded (images, grids)."""
        flat = obs.flatten(start_dim=1)
        if self.encoder is not None:
            return self.encoder(flat)
        return flat if self.obs_norm is None else self.obs_norm(flat)
