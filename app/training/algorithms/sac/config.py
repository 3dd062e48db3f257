"""SAC's hyperparameters (for Box and Discrete actions): the settings' `sac` section (`--sac.*`),
a module's `sac` in `policies`, and what PATCH /api/config may change of them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.training.algorithms.hyperparameter_patch import HyperparameterPatch

FIXED_WHILE_TRAINING = {  # hyperparameters PATCH /api/config cannot change, and why
    "hidden_sizes": "the weights have that shape",
    "buffer_size": "the replay buffer is allocated",
    "alpha": "with autotune it is learned; set it at start-up",
    "autotune": "set it at start-up",
}


class SACConfig(BaseModel):
    """SAC hyperparameters (Haarnoja et al. 2018), named as in CleanRL's sac_continuous_action.py."""

    q_lr: float = Field(1e-3, gt=0, le=1, description="Adam step size of the twin Q networks (and of alpha, as CleanRL).")
    policy_lr: float = Field(3e-4, gt=0, le=1, description="Adam step size of the actor.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    tau: float = Field(0.005, gt=0, le=1, description="Target networks' Polyak averaging coefficient.")
    buffer_size: int = Field(1_000_000, ge=1, description="Transitions the replay buffer keeps (the oldest go first).")
    batch_size: int = Field(256, ge=1, description="Transitions per gradient step.")
    learning_starts: int = Field(
        1000,
        ge=1,
        description="Transitions in the buffer before the first update (Pendulum-v1, seeds 0-2, 15,000 env steps: "
        "5,000 with alpha from 0.2 scored -374.5, 1,000 with alpha from 1.0 -150.9; SB3 -148.7).",
    )
    utd_ratio: float = Field(1.0, gt=0, le=64, description="Gradient steps per env step received (update-to-data ratio).")
    updates_per_version: int = Field(
        250, ge=1, description="Gradient steps at most between two published versions; the rest follow in the next steps."
    )
    policy_frequency: int = Field(2, ge=1, description="Q updates per (delayed) actor update, as TD3.")
    target_network_frequency: int = Field(1, ge=1, description="Q updates between two target network updates.")
    alpha: float | None = Field(
        None,
        gt=0,
        description="Entropy coefficient, or its start value with autotune; unset: 0.2 without autotune, 1.0 with it "
        "(log alpha 0: where CleanRL's and SB3's autotune start).",
    )
    autotune: bool = Field(
        True,
        description="Tune alpha towards the target entropy: -dim(A) for a Box, target_entropy_scale * log(n) for Discrete(n).",
    )
    target_entropy_scale: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Discrete actions: the target entropy's share of the largest, log(n) (CleanRL's sac_atari: "
        "0.89, which made alpha and Q diverge on CartPole).",
    )
    hidden_sizes: tuple[int, ...] = Field((256, 256), min_length=1, description="MLP layer widths (actor and Q).")
    exploration: Literal["pink", "gaussian", "gsde"] = Field(
        "pink",
        description="Box actions: how clients explore. pink: the actor's Gaussian sampled with pink noise (Eberhard "
        "et al. 2023; SET_CONFIG's action_noise): each step's draw N(0, 1), drifting over tens of steps, so a rare "
        "reward far away is found (MountainCarContinuous) where white noise finds none. "
        "gaussian: white noise each step from the actor's log std. "
        "gsde: generalized state-dependent exploration (Raffin et al. 2022), noise features(s) @ theta with theta "
        "drawn every `gsde_sample_every` versions and baked into the mean of the ONNX clients train with: smooth, "
        "consistent exploration for sparse rewards (MountainCarContinuous); fixed at start.",
    )
    gsde_log_std_init: float = Field(
        -0.5,
        ge=-20,
        le=2,
        description="gsde: the initial log std of each entry of theta, learnt after (MountainCarContinuous at 0.25 "
        "gradient steps per env step: -0.5 reached the flag within 3k env steps, -2.0 at 18k, -3.67, rl-zoo's, not in 11k).",
    )
    gsde_sample_every: int = Field(1, ge=1, description="gsde: published versions between two draws of theta.")

    @property
    def initial_alpha(self) -> float:
        """alpha as set; unset, 1.0 with autotune and 0.2 without."""
        if self.alpha is not None:
            return self.alpha
        return 1.0 if self.autotune else 0.2


class SACConfigPatch(HyperparameterPatch):
    """SAC hyperparameters that are safe to change while training; omit what stays (the
    network sizes, the buffer's size, alpha and autotune are set at start-up). Bounded so a
    typo cannot make one gradient step allocate gigabytes or one version take hours."""

    q_lr: float | None = Field(None, gt=0, le=1)
    policy_lr: float | None = Field(None, gt=0, le=1)
    gamma: float | None = Field(None, gt=0, le=1)
    tau: float | None = Field(None, gt=0, le=1)
    batch_size: int | None = Field(None, ge=1, le=65_536)
    learning_starts: int | None = Field(None, ge=1, le=100_000_000)
    utd_ratio: float | None = Field(None, gt=0, le=64)
    updates_per_version: int | None = Field(None, ge=1, le=100_000)
    policy_frequency: int | None = Field(None, ge=1, le=1_000)
    target_network_frequency: int | None = Field(None, ge=1, le=1_000_000)
    target_entropy_scale: float | None = Field(None, gt=0, lt=1)
