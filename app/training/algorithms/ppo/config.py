"""PPO's hyperparameters: the settings' `ppo` section (`--ppo.*`),
a module's `ppo` in `policies`, and what PATCH /api/config may change of them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from app.training.algorithms.hyperparameter_patch import HyperparameterPatch

SELF_PLAY_ENTROPY_FLOOR = 0.1  # a self-play learner's entropy_floor unless set (docs/multi-agent.md)
# A self-play learner's gamma, gae_lambda and learning_rate unless set. Gamma 0.5 (a step is a move): a win now is
# worth clearly more than one later, so a missed win or block costs (Connect Four's plain league: 27.6% / 16.4% against
# the one-step-lookahead player with 0.99 and 3e-3, 61.2% / 28.4% with 0.9 and 1e-3; with 0.5 it takes 73% of the
# wins on the board where 0.9 took 56-57%; docs/multi-agent.md). A real-time game, many steps a decision, sets its own.
SELF_PLAY_GAMMA = 0.5
SELF_PLAY_GAE_LAMBDA = 0.95
SELF_PLAY_LEARNING_RATE = 1e-3

FIXED_WHILE_TRAINING = {  # hyperparameters PATCH /api/config cannot change, and why
    "hidden_sizes": "the weights have that shape",
    "normalize_obs": "the checkpoint holds its statistics, or none",
    "normalize_reward": "the checkpoint holds its statistics, or none",
}


class PPOConfig(BaseModel):
    """PPO hyperparameters, named as in the PPO paper and CleanRL's ppo.py."""

    learning_rate: float = Field(
        3e-3, gt=0, le=1, description="Adam step size (tuned on CartPole-v1); a self-play learner's is 1e-3 unless set to another value."
    )
    gamma: float = Field(
        0.995,
        ge=0,
        le=1,
        description="Discount factor (LunarLander-v3 reached 200 in 148,000-156,000 env steps with 0.995 on 3 seeds, with "
        "0.99 on 1 of them in 500,000: docs/training.md); a self-play learner's is 0.5 unless set to another value (a "
        "turn-based game, a move a step; a real-time game sets its own); 0 or near it where each step's reward answers "
        "that step's action and no action changes what comes next (a quiz: docs/training.md, Memory).",
    )
    gae_lambda: float = Field(0.98, ge=0, le=1, description="GAE lambda (a self-play learner's: 0.95 unless set to another value).")
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
    entropy_floor_per_state: bool | None = Field(
        None,
        description="Hold the entropy floor in every state rather than on average: the bonus pulls only the states "
        "below their floor, so no state's choice collapses (a board game's opening, which the average hides); unset: on "
        "for a self-play learner, off for others.",
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
        "observations); unset: on, except for image observations (scaled to 0..1 instead) and self-play learners (their "
        "league was measured without it; tic-tac-toe, seed 0, moving second: 71.0% not lost against minimax with it, 77.0% "
        "without; CartPole-v1 reached 450 in a median of 21,000 env steps with it, 25,500 without, 5 seeds; an LSTM on "
        "StatelessCartPole learnt nothing without it).",
    )
    normalize_reward: bool | None = Field(
        None,
        description="Divide rewards by the running std of the discounted return; unset: on, except for image observations "
        "and self-play learners (LunarLander-v3 needs it: with gamma 0.995 and gae_lambda 0.98 it reached 200 in "
        "148,000-156,000 env steps on 3 seeds, without it on none in 500,000; the pixel gridworld with a position vector "
        "reached 0.7 in 15,500 env steps without it, not in 90,000 with it).",
    )


class PPOConfigPatch(HyperparameterPatch):
    """PPO hyperparameters that are safe to change while training; omit what stays.
    `null` leaves a value as it is too, except for `target_kl`, where it turns the early
    stop off."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"target_kl"})

    learning_rate: float | None = Field(None, gt=0, le=1)
    ent_coef: float | None = Field(None, ge=0, le=1)
    clip_coef: float | None = Field(None, gt=0, le=1)
    vf_coef: float | None = Field(None, ge=0, le=10)
    max_grad_norm: float | None = Field(None, gt=0)
    update_epochs: int | None = Field(None, ge=1, le=100)
    minibatch_size: int | None = Field(None, ge=1, le=1_000_000)
    gamma: float | None = Field(None, ge=0, le=1)
    gae_lambda: float | None = Field(None, ge=0, le=1)
    target_kl: float | None = Field(None, gt=0)
