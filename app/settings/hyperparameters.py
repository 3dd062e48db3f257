"""Hyperparameters (PPO, SAC, self-play) and one module's declaration in `policies`.

Below the settings and the modules built from them, so both can use these models
without importing each other.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.spaces.models import ObservationSpace, Space


class PPOConfig(BaseModel):
    """PPO hyperparameters, named as in the PPO paper and CleanRL's ppo.py."""

    learning_rate: float = Field(3e-3, gt=0, le=1, description="Adam step size (tuned on CartPole-v1).")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    clip_coef: float = Field(0.2, gt=0, le=1, description="Surrogate clipping epsilon.")
    ent_coef: float = Field(0.0, ge=0, le=1, description="Entropy bonus coefficient.")
    entropy_floor: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Discrete actions: keep the policy's entropy above this share of the largest entropy of the "
        "legal actions (log of their number), by an extra entropy bonus that rises while the entropy is below it and "
        "falls back to 0 above it (a Lagrange multiplier, as SAC tunes alpha); 0: off; unset: 0.1 for a self-play "
        "learner, off for others.",
    )
    entropy_floor_lr: float = Field(
        0.01, gt=0, le=1, description="Step of the entropy floor's bonus per minibatch, per unit of entropy share missing."
    )
    vf_coef: float = Field(0.5, ge=0, le=10, description="Value loss coefficient.")
    clip_vloss: bool = Field(False, description="Clip the value loss around the old values by clip_coef.")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient clipping norm.")
    update_epochs: int = Field(10, ge=1, le=100, description="Passes over each batch.")
    minibatch_size: int = Field(256, ge=1, description="Steps per gradient step.")
    norm_adv: bool = Field(True, description="Normalise advantages per minibatch.")
    target_kl: float | None = Field(None, gt=0, description="Stop the epochs early above this KL.")
    hidden_sizes: tuple[int, ...] = Field((64, 64), min_length=1, description="MLP layer widths.")
    normalize_obs: bool | None = Field(
        None,
        description="Normalise observations by running statistics (baked into the exported ONNX, so clients send raw "
        "observations); unset: on for Box action spaces (continuous control), off for Discrete.",
    )
    normalize_reward: bool | None = Field(
        None,
        description="Divide rewards by the running std of the discounted return; unset: on for Box action spaces, off for Discrete.",
    )


class SACConfig(BaseModel):
    """SAC hyperparameters (Haarnoja et al. 2018), named as in CleanRL's sac_continuous_action.py."""

    q_lr: float = Field(1e-3, gt=0, le=1, description="Adam step size of the twin Q networks (and of alpha, as CleanRL).")
    policy_lr: float = Field(3e-4, gt=0, le=1, description="Adam step size of the actor.")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    tau: float = Field(0.005, gt=0, le=1, description="Target networks' Polyak averaging coefficient.")
    buffer_size: int = Field(1_000_000, ge=1, description="Transitions the replay buffer keeps (the oldest go first).")
    batch_size: int = Field(256, ge=1, description="Transitions per gradient step.")
    learning_starts: int = Field(5000, ge=1, description="Transitions in the buffer before the first update.")
    utd_ratio: float = Field(1.0, gt=0, le=64, description="Gradient steps per env step received (update-to-data ratio).")
    updates_per_version: int = Field(
        250, ge=1, description="Gradient steps at most between two published versions; the rest follow in the next steps."
    )
    policy_frequency: int = Field(2, ge=1, description="Q updates per (delayed) actor update, as TD3.")
    target_network_frequency: int = Field(1, ge=1, description="Q updates between two target network updates.")
    alpha: float = Field(0.2, gt=0, description="Entropy coefficient, or its start value with autotune.")
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
    exploration: Literal["gaussian", "gsde"] = Field(
        "gaussian",
        description="Box actions: how clients explore. gaussian: white noise each step from the actor's log std. "
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


Algorithm = Literal["ppo", "sac"]


def check_hyperparameter_names(values: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`values`, if every name is one of `model`'s (PPOConfig, SACConfig); else a ValueError naming the others."""
    unknown = set(values) - set(model.model_fields)
    if unknown:
        what = model.__name__.removesuffix("Config")
        raise ValueError(f"unknown {what} hyperparameters: {', '.join(sorted(unknown))}")
    return values


DEFAULT_MODULE_ID = "default_policy"
MODULE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")  # also a directory name under checkpoint_dir


class ScriptedReference(BaseModel):
    """A fixed reference player that clients script (one that wins when it can and blocks
    when it must, say): the league draws it as an opponent, and its rating never moves."""

    model_config = ConfigDict(extra="forbid")

    elo: float = Field(
        description="Its fixed rating on the random reference's scale: random_elo + 400 log10(p / (1 - p)), p its "
        "score (a draw counting one half) against the uniformly random legal player."
    )
    play_ratio: float = Field(0.3, ge=0, le=1, description="Share of versions whose opponent it is.")


REFERENCE_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class SelfPlayConfig(BaseModel):
    """A policy that plays a league: frozen snapshots of itself, its latest weights, the
    uniformly random reference and any scripted references, rated against those fixed
    references (docs/multi-agent.md)."""

    model_config = ConfigDict(extra="forbid")

    opponent_module_id: str | None = Field(None, description="Module id clients play the opponent with; default '<module_id>_opponent'.")
    snapshot_every: int = Field(5, ge=1, description="Versions between two snapshots of the learner.")
    window: int = Field(10, ge=1, le=1000, description="Snapshots kept to play against (the most recent).")
    play_against_latest_ratio: float = Field(
        0.3, ge=0, le=1, description="Share of versions whose opponent is the learner's latest weights (games not rated)."
    )
    play_against_random_ratio: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Share of versions whose opponent is the uniformly random reference: positions a weak player "
        "makes, and the games that anchor the ratings. The rest play a snapshot older than the learner's newest.",
    )
    snapshot_sampling: Literal["pfsp", "uniform"] = Field(
        "pfsp",
        description="How a snapshot opponent is chosen: pfsp (AlphaStar's prioritised fictitious self-play, weight "
        "(1 - p)^2 with p the learner's expected score against it, from the ratings) or uniform.",
    )
    random_elo: float = Field(1000.0, description="The uniformly random reference's rating: fixed, the anchor of every other rating.")
    scripted_references: dict[str, ScriptedReference] = Field(
        default_factory=dict,
        description="Fixed players the clients script, by name (every client that plays this module must have them: "
        "the opponent's model then names the one to play, in its `scripted_reference` metadata). Each is drawn with "
        "its play_ratio and rated at its fixed elo.",
    )
    prior_games: float = Field(
        2.0,
        gt=0,
        le=1000,
        description="Virtual draws of each snapshot against the random reference: the prior that keeps ratings "
        "finite (n straight wins against random rate about 400 log10(n) above it); more pulls ratings towards it.",
    )
    record_window: int = Field(200, ge=1, le=100_000, description="Recent games per opponent and seat counted in /api/policies' records.")
    # Settings of earlier releases, accepted and unused: ratings are now fitted, not stepped by a K-factor.
    elo_k: float | None = Field(None, description="Unused (ratings are fitted from the games); accepted for old settings.")
    initial_elo: float | None = Field(None, description="Unused (see random_elo); accepted for old settings.")

    @field_validator("scripted_references")
    @classmethod
    def _reference_names(cls, references: dict[str, ScriptedReference]) -> dict[str, ScriptedReference]:
        for name in references:
            if name == "random" or not re.match(REFERENCE_NAME, name):
                raise ValueError(f"scripted reference name {name!r}: 1-64 of A-Z a-z 0-9 _ . -, and not 'random'")
        return references

    @model_validator(mode="after")
    def _shares(self) -> SelfPlayConfig:
        scripted = sum(reference.play_ratio for reference in self.scripted_references.values())
        if self.play_against_latest_ratio + self.play_against_random_ratio + scripted > 1:
            raise ValueError(
                "play_against_latest_ratio + play_against_random_ratio + the scripted references' play_ratio must not exceed 1"
            )
        return self


class Symmetry(BaseModel):
    """A transformation that leaves the game as it is (a board mirrored left to right): the
    learner trains on each step and on its image (docs/training.md#symmetries). Both are gather
    indices: the image's observation element i is the observation's element `observation[i]`
    (of the flat observation), and the image's action j is the action `action[j]`."""

    model_config = ConfigDict(extra="forbid")

    observation: list[int] = Field(description="A permutation of the flat observation's indices.")
    action: list[int] = Field(description="A permutation of the discrete actions 0..n-1.")

    @field_validator("observation", "action")
    @classmethod
    def _permutation(cls, indices: list[int], info: ValidationInfo) -> list[int]:
        if sorted(indices) != list(range(len(indices))):
            raise ValueError(f"{info.field_name} must hold each of 0..{len(indices) - 1} once (a permutation)")
        return indices


class PolicyConfig(BaseModel):
    """One module of `policies`: its spaces, PPO hyperparameters that differ, self-play."""

    model_config = ConfigDict(extra="forbid")

    observation_space: ObservationSpace
    action_space: Space
    algorithm: Algorithm | None = Field(None, description="ppo or sac; unset: the gateway's --algorithm.")
    ppo: dict[str, Any] = Field(
        default_factory=dict, description="PPO hyperparameters that differ from the gateway's --ppo for this module."
    )
    sac: dict[str, Any] = Field(
        default_factory=dict, description="SAC hyperparameters that differ from the gateway's --sac for this module."
    )
    self_play: SelfPlayConfig | None = Field(None, description="Train against frozen snapshots of itself.")
    train_batch_size: int | None = Field(
        None, ge=1, description="Env steps of this module per training batch; unset: the gateway's train_batch_size."
    )
    action_masking: bool | None = Field(
        None, description="Its actions may be masked (action_mask); unset: --action-masking, for a discrete action space."
    )
    symmetries: list[Symmetry] = Field(
        default_factory=list,
        description="Transformations the game is unchanged by (PPO, discrete actions): each trained step is also "
        "trained on as each one's image (docs/training.md#symmetries).",
    )

    @field_validator("ppo", "sac")
    @classmethod
    def _known_names(cls, values: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return check_hyperparameter_names(values, {"ppo": PPOConfig, "sac": SACConfig}[info.field_name])
