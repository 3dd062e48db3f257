"""Action distributions in numpy: a policy's outputs (`action_dist_inputs`) to actions
and log-probs, as RLLINK.md's "Action distributions" describes them. The gateway
serving thin clients and the Python reference clients sample with these same functions.

- `categorical`: k logits; an action is an index 0..k-1.
- `gaussian`: the mean then the log std of each of the d action values; a sample is
  mean + std * N(0, 1) (unbounded: clip it to the box before acting, and keep the
  sample itself for its log-prob).
"""

from __future__ import annotations

import numpy as np

LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def categorical_logp_all(logits: np.ndarray) -> np.ndarray:
    """log softmax of each row [N, k]."""
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def sample_categorical(logits: np.ndarray, rng: np.random.Generator, explore: np.ndarray | bool = True) -> tuple[np.ndarray, np.ndarray]:
    """An action per row of logits [N, k] and its log-prob: sampled from the softmax (one
    uniform draw per row), or the most likely one where `explore` is False."""
    logp_all = categorical_logp_all(logits)
    cdf = np.cumsum(np.exp(logp_all), axis=1)
    cdf /= cdf[:, -1:]
    actions = np.minimum((cdf <= rng.random(len(cdf))[:, None]).sum(axis=1), cdf.shape[1] - 1)
    actions = np.where(explore, actions, np.argmax(logits, axis=1))
    return actions, logp_all[np.arange(len(actions)), actions]


def gaussian_logp(dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Log-prob of actions [N, d] under the diagonal Gaussians of dist_inputs [N, 2d]."""
    mean, log_std = np.split(dist_inputs, 2, axis=1)
    return np.sum(-0.5 * ((actions - mean) / np.exp(log_std)) ** 2 - log_std - LOG_SQRT_2PI, axis=1)


def sample_gaussian(dist_inputs: np.ndarray, rng: np.random.Generator, explore: np.ndarray | bool = True) -> tuple[np.ndarray, np.ndarray]:
    """An action [N, d] per row of dist_inputs [N, 2d] and its log-prob: mean + std * N(0, 1),
    or the mean where `explore` is False."""
    mean, log_std = np.split(dist_inputs, 2, axis=1)
    noise = rng.standard_normal(mean.shape) * np.reshape(explore, (-1, 1))
    actions = mean + np.exp(log_std) * noise
    return actions, gaussian_logp(dist_inputs, actions)
