"""Action distributions in numpy: a policy's outputs (`action_dist_inputs`) to actions
and log-probs, as RLLINK.md's "Action distributions" describes them. The gateway
serving thin clients and the Python reference clients sample with these same functions.

- `categorical`: k logits; an action is an index 0..k-1.
- `multi_categorical` (MultiDiscrete `nvec`): the logits of each sub-action one after the
  other; an action is one index per sub-action, its log-prob the sum of theirs.
- `gaussian`: the mean then the log std of each of the d action values; a sample is
  mean + std * N(0, 1) (unbounded: clip it to the box before acting, and keep the
  sample itself for its log-prob).
- `squashed_gaussian` (SAC): the mean then the log std of each of the d pre-squash values
  u; an action is low + (tanh(u) + 1) / 2 * (high - low), always inside the box, and its
  log-prob includes the change of variables (the tanh and the scale).

An action mask (1 allowed, 0 not; one column per logit) is applied to the logits before
any of this, as the exported ONNX applies it: `logits + (mask - 1) * MASK_PENALTY`.

The N(0, 1) draws of a Box's sample are white (new each step) unless the caller passes its
own: `action_noise` "pink" (SET_CONFIG, a SAC module's default) asks for `PinkNoise`'s.
"""

from __future__ import annotations

import numpy as np

LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)
MASK_PENALTY = 1e8  # subtracted from a masked action's logit: its probability is exactly 0 in float32


class PinkNoise:
    """N(0, 1) draws correlated in time, their power falling as 1/frequency (pink noise:
    Eberhard et al. 2023, "Pink Noise Is All You Need"): a sample's noise drifts for tens of
    steps, so a car rocks far enough to find a flag white noise never finds, and each step's
    draw is still N(0, 1), so nothing downstream changes.

    One episode's noise [d] is the sum of six AR(1) processes x <- a x + sqrt(1 - a^2) e
    (e white N(0, 1), a = exp(-1 / tau)) with time constants tau = 1, 4, 16, 64, 256, 1,024
    steps, divided by sqrt(6); each starts from a draw of N(0, 1) at the episode's start.
    Rows [n] are n episodes side by side; every kit computes the same."""

    TIME_CONSTANTS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
    DECAYS = np.exp(-1.0 / np.array(TIME_CONSTANTS))[:, None]  # [6, 1]
    INNOVATION = np.sqrt(1.0 - DECAYS**2)

    @classmethod
    def start(cls, rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
        """The processes of `rows` new episodes, [rows, 6, dim]."""
        return rng.standard_normal((rows, len(cls.TIME_CONSTANTS), dim))

    @classmethod
    def step(cls, processes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Advance `processes` [rows, 6, dim] one step in place; the draws [rows, dim]."""
        processes *= cls.DECAYS
        processes += cls.INNOVATION * rng.standard_normal(processes.shape)
        return processes.sum(axis=1) / np.sqrt(len(cls.TIME_CONSTANTS))


def unit_noise(rng: np.random.Generator, shape: tuple[int, ...], explore: np.ndarray | bool, noise: np.ndarray | None) -> np.ndarray:
    """The N(0, 1) draws of a Box sample [N, d]: the caller's (pink) or white ones, zero
    in the rows that do not explore."""
    drawn = rng.standard_normal(shape) if noise is None else np.asarray(noise, np.float64).reshape(shape)
    return drawn * np.reshape(explore, (-1, 1))


def mask_logits(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The logits [N, k] with the masked ones (mask 0) pushed to about -1e8."""
    return logits if mask is None else logits + (np.asarray(mask, logits.dtype) - 1) * MASK_PENALTY


def categorical_logp_all(logits: np.ndarray) -> np.ndarray:
    """log softmax of each row [N, k]."""
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def sample_categorical(logits: np.ndarray, rng: np.random.Generator, explore: np.ndarray | bool = True) -> tuple[np.ndarray, np.ndarray]:
    """An action per row of logits [N, k] and its log-prob: sampled from the softmax, as
    the largest logit once each has Gumbel noise added (the Gumbel-max trick: half the
    array operations of the inverse cdf, which the serving pays per forward pass), or the
    most likely one where `explore` is False."""
    noise = rng.gumbel(size=logits.shape) * np.reshape(explore, (-1, 1))
    actions = np.argmax(logits + noise, axis=1)
    return actions, categorical_logp_all(logits)[np.arange(len(actions)), actions]


def sample_multi_categorical(
    logits: np.ndarray, nvec: tuple[int, ...], rng: np.random.Generator, explore: np.ndarray | bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Actions [N, len(nvec)], one index per sub-action, and their summed log-probs."""
    parts = [sample_categorical(part, rng, explore) for part in np.split(logits, np.cumsum(nvec)[:-1], axis=1)]
    return np.stack([actions for actions, _ in parts], axis=1), np.sum([logp for _, logp in parts], axis=0)


def multi_categorical_logp(logits: np.ndarray, nvec: tuple[int, ...], actions: np.ndarray) -> np.ndarray:
    """Summed log-probs of actions [N, len(nvec)] under logits [N, sum(nvec)]."""
    rows = np.arange(len(actions))
    parts = np.split(logits, np.cumsum(nvec)[:-1], axis=1)
    return np.sum([categorical_logp_all(part)[rows, actions[:, i]] for i, part in enumerate(parts)], axis=0)


def gaussian_logp(dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Log-prob of actions [N, d] under the diagonal Gaussians of dist_inputs [N, 2d]."""
    mean, log_std = np.split(dist_inputs, 2, axis=1)
    return np.sum(-0.5 * ((actions - mean) / np.exp(log_std)) ** 2 - log_std - LOG_SQRT_2PI, axis=1)


def sample_gaussian(
    dist_inputs: np.ndarray, rng: np.random.Generator, explore: np.ndarray | bool = True, noise: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """An action [N, d] per row of dist_inputs [N, 2d] and its log-prob: mean + std * N(0, 1)
    (`noise`'s draws where given), or the mean where `explore` is False."""
    mean, log_std = np.split(dist_inputs, 2, axis=1)
    noise = unit_noise(rng, mean.shape, explore, noise)
    actions = mean + np.exp(log_std) * noise
    return actions, gaussian_logp(dist_inputs, actions)


def squashed_gaussian_logp(dist_inputs: np.ndarray, actions: np.ndarray, low: float, high: float) -> np.ndarray:
    """Log-prob of in-bounds actions [N, d] under the squashed Gaussians of dist_inputs [N, 2d]."""
    scale = (high - low) / 2
    squashed = np.clip((actions - (high + low) / 2) / scale, -1 + 1e-6, 1 - 1e-6)
    pre_squash = np.arctanh(squashed)
    return gaussian_logp(dist_inputs, pre_squash) - np.sum(np.log(scale * (1 - squashed**2) + 1e-6), axis=1)


def sample_squashed_gaussian(
    dist_inputs: np.ndarray,
    low: float,
    high: float,
    rng: np.random.Generator,
    explore: np.ndarray | bool = True,
    noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """An action [N, d] in [low, high] per row of dist_inputs [N, 2d] and its log-prob: the
    tanh of mean + std * N(0, 1) (`noise`'s draws where given) scaled to the box, or of the
    mean where `explore` is False."""
    mean, log_std = np.split(dist_inputs, 2, axis=1)
    noise = unit_noise(rng, mean.shape, explore, noise)
    squashed = np.tanh(mean + np.exp(log_std) * noise)
    scale = (high - low) / 2
    actions = squashed * scale + (high + low) / 2
    logp = gaussian_logp(dist_inputs, mean + np.exp(log_std) * noise) - np.sum(np.log(scale * (1 - squashed**2) + 1e-6), axis=1)
    return actions, logp


def sample_actions(
    distribution: str,
    dist_inputs: np.ndarray,
    rng: np.random.Generator,
    explore: np.ndarray | bool = True,
    low: float | None = None,
    high: float | None = None,
    nvec: tuple[int, ...] | None = None,
    mask: np.ndarray | None = None,
    noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Actions ([N] ints, [N, len(nvec)] ints, or [N, d] floats) and their log-probs under
    the named distribution (`low`/`high`: the box's bounds, for `squashed_gaussian`;
    `nvec` for `multi_categorical`; `mask`: the action mask [N, k] of a discrete one;
    `noise`: a Box's N(0, 1) draws [N, d], pink ones, instead of white)."""
    if distribution == "categorical":
        return sample_categorical(mask_logits(dist_inputs, mask), rng, explore)
    if distribution == "multi_categorical":
        return sample_multi_categorical(mask_logits(dist_inputs, mask), nvec, rng, explore)
    if distribution == "gaussian":
        return sample_gaussian(dist_inputs, rng, explore, noise)
    if distribution == "squashed_gaussian":
        return sample_squashed_gaussian(dist_inputs, low, high, rng, explore, noise)
    raise ValueError(f"unknown action distribution {distribution!r}")


def actions_logp(
    distribution: str,
    dist_inputs: np.ndarray,
    actions: np.ndarray,
    low: float | None = None,
    high: float | None = None,
    nvec: tuple[int, ...] | None = None,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Log-probs of given actions (as `sample_actions` returns them) under the named distribution."""
    if distribution == "categorical":
        return categorical_logp_all(mask_logits(dist_inputs, mask))[np.arange(len(actions)), actions]
    if distribution == "multi_categorical":
        return multi_categorical_logp(mask_logits(dist_inputs, mask), nvec, actions)
    if distribution == "gaussian":
        return gaussian_logp(dist_inputs, actions)
    if distribution == "squashed_gaussian":
        return squashed_gaussian_logp(dist_inputs, actions, low, high)
    raise ValueError(f"unknown action distribution {distribution!r}")
