"""Self-play, symmetries and one module's declaration in `policies` (each algorithm's
hyperparameters are its config model: app/training/algorithms/*/config.py).

Below the settings and the modules built from them, so both can use these models
without importing each other.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.spaces.models import ObservationSpace, Space
from app.training.algorithms import ALGORITHMS, Algorithm, AlgorithmSpec, algorithm_sections


def check_hyperparameter_names(values: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`values`, if every name is one of `model`'s (an algorithm's config: PPOConfig); else a ValueError naming the others."""
    unknown = set(values) - set(model.model_fields)
    if unknown:
        what = model.__name__.removesuffix("Config")
        raise ValueError(f"unknown {what} hyperparameters: {', '.join(sorted(unknown))}")
    return values


class ModelConfig(BaseModel):
    """The network's memory (RLLINK.md "Recurrent policies"; the names are RLlib's): an LSTM
    between the observation and the actor and critic heads, its state carried by the clients."""

    model_config = ConfigDict(extra="forbid")

    use_lstm: bool = Field(False, description="An LSTM after the observation (PPO): the policy remembers across steps.")
    lstm_cell_size: int = Field(64, ge=1, le=1024, description="Width of the LSTM's hidden and cell states.")
    max_seq_len: int = Field(
        20, ge=1, le=1000, description="Steps of truncated back-propagation through time: chunks are cut into sequences this long."
    )

    @property
    def state_size(self) -> int:
        """Floats of one agent's recurrent state: the LSTM's hidden and cell states, one after the other (0: none)."""
        return 2 * self.lstm_cell_size if self.use_lstm else 0


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


class ExploiterConfig(BaseModel):
    """A main exploiter (AlphaStar's): a learner of its own, `<module_id>.exploiter`, that plays
    only against the main learner's latest weights and looks for the lines that beat it. When
    it wins often enough, a frozen copy of it joins the league, where the main learner meets
    it until it stops losing to it, and the exploiter starts again from the main learner's weights."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(
        2, ge=2, le=1000, description="Every every-th client (by connection slot) plays the exploiter's seat instead of the learner's."
    )
    win_rate: float = Field(
        0.6, gt=0, le=1, description="Score (a win 1, a draw 1/2) over its last `games` games against the learner that makes it join."
    )
    games: int = Field(100, ge=1, le=100_000, description="Games the win_rate rule needs (since the exploiter last started again).")
    max_env_steps: int = Field(
        200_000, ge=1, description="Env steps after which an exploiter that never met win_rate starts again from the learner's weights."
    )


class SelfPlayConfig(BaseModel):
    """A policy that plays a league: frozen snapshots of itself, its latest weights, the
    uniformly random reference and any scripted references, rated against those fixed
    references (docs/multi-agent.md)."""

    model_config = ConfigDict(extra="forbid")

    opponent_module_id: str | None = Field(None, description="Module id clients play the opponent with; default '<module_id>_opponent'.")
    snapshot_every: int = Field(
        5, ge=1, description="Versions between two snapshots of the learner (at most, with snapshot_score: sooner when it is met)."
    )
    snapshot_score: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Take a snapshot as soon as the learner's score (a win 1, a draw 1/2) in its rated games (against the "
        "references and older snapshots) since the last one reaches this, over at least snapshot_games games (AlphaStar's "
        "rule); None: every snapshot_every versions only.",
    )
    snapshot_games: int = Field(50, ge=1, le=100_000, description="Games the snapshot_score rule needs before it decides.")
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
    opponent_temperature: float | None = Field(
        None,
        gt=0,
        le=100,
        description="The snapshots and the latest weights play the learner's opponent with their logits divided by this: the "
        "same most likely move, the others more often, so the learner meets the positions a good player reaches after an "
        "unusual move and learns how play goes on from them (at 2 tic-tac-toe never lost; docs/multi-agent.md). Discrete "
        "action spaces only; 1: as trained; None: 2 for a discrete action space, 1 for a Box.",
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
    exploiter: ExploiterConfig | None = Field(
        None,
        description="A main exploiter that trains against the learner's latest weights only; its frozen copies that beat "
        "the learner join the league (docs/multi-agent.md); None: none.",
    )
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


class HyperparameterRange(BaseModel):
    """Where a population's members may take one hyperparameter: a member starts at a value drawn
    in it and its perturbations stay in it."""

    model_config = ConfigDict(extra="forbid")

    low: float = Field(description="The smallest value.")
    high: float = Field(description="The largest value.")
    log: bool = Field(
        False, description="Draw and perturb on a log scale (of the value; of 1 - value for gamma), for scale parameters."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> HyperparameterRange:
        if not self.low < self.high:
            raise ValueError(f"a hyperparameter range must have low < high, got low {self.low} and high {self.high}")
        return self


NEVER_VARIED = frozenset({"update_epochs", "minibatch_size", "target_kl"})  # patchable, but not a population's to vary


def varied_scale(name: str, value: float) -> float:
    """What a population multiplies and draws on a log scale for hyperparameter `name`: gamma's
    1 - gamma (the horizon's inverse), every other's value. Its own inverse."""
    return 1 - value if name == "gamma" else value


def _default_ranges() -> dict[str, HyperparameterRange]:
    return {
        "learning_rate": HyperparameterRange(low=1e-4, high=1e-2, log=True),
        "ent_coef": HyperparameterRange(low=0.0, high=0.02),
        "clip_coef": HyperparameterRange(low=0.1, high=0.3),
        "gamma": HyperparameterRange(low=0.95, high=0.999, log=True),
    }


class PopulationConfig(BaseModel):
    """Population-based training (Jaderberg et al. 2017): `size` members of one module, each
    with its own weights and hyperparameters, the clients spread over them; a member that is
    ready and among the worst copies one of the best and perturbs its hyperparameters
    (docs/training.md#populations)."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(4, ge=2, le=64, description="Members: copies of the module that train apart, each on its share of the clients.")
    ready_env_steps: int = Field(
        50_000, ge=1, description="Env steps a member trains on between two of its exploit decisions."
    )
    min_episodes: int = Field(
        10, ge=1, le=100_000, description="Episodes a member needs in its return window to be compared (else it waits)."
    )
    quantile: float = Field(
        0.25,
        gt=0,
        le=0.5,
        description="Share of the members at each end: a ready member in the worst this share copies one in the best.",
    )
    perturb_factors: tuple[float, float] = Field(
        (0.8, 1.2), description="After copying, each hyperparameter is multiplied by one of these, drawn at random."
    )
    resample_probability: float = Field(
        0.25, ge=0, le=1, description="Chance that a hyperparameter is drawn afresh in its range instead of perturbed."
    )
    hyperparameters: dict[str, HyperparameterRange] = Field(
        default_factory=_default_ranges,
        description="The hyperparameters the members vary, with their ranges (PPO: learning_rate, ent_coef, clip_coef, "
        "gamma by default). Member 0 starts on the module's own values; the others start drawn in the ranges.",
    )

    @field_validator("perturb_factors")
    @classmethod
    def _positive(cls, factors: tuple[float, float]) -> tuple[float, float]:
        if min(factors) <= 0:
            raise ValueError(f"perturb_factors must be positive, got {list(factors)}")
        return factors

    @field_validator("hyperparameters")
    @classmethod
    def _some(cls, ranges: dict[str, HyperparameterRange]) -> dict[str, HyperparameterRange]:
        if not ranges:
            raise ValueError("a population needs at least one hyperparameter to vary")
        return ranges


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


def _module_hyperparameters(spec: AlgorithmSpec) -> tuple[type[dict[str, Any]], Any]:
    """An algorithm's field of a module in `policies`: its hyperparameters that differ for the module."""
    return dict[str, Any], Field(
        default_factory=dict,
        description=f"{spec.name.upper()} hyperparameters that differ from the gateway's --{spec.name} for this module.",
    )


@algorithm_sections(_module_hyperparameters)  # `ppo`, `sac`: a field per algorithm of app/training/algorithms/
class PolicyConfig(BaseModel):
    """One module of `policies`: its spaces, its algorithm, hyperparameters that differ, self-play."""

    model_config = ConfigDict(extra="forbid")

    observation_space: ObservationSpace
    action_space: Space
    algorithm: Algorithm | None = Field(None, description=f"{' or '.join(ALGORITHMS)}; unset: the gateway's --algorithm.")
    self_play: SelfPlayConfig | None = Field(None, description="Train against frozen snapshots of itself.")
    model: ModelConfig | None = Field(None, description="Its network's memory (use_lstm, ...); unset: the gateway's --model.")
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
    population: PopulationConfig | None = Field(
        None,
        description="Train `size` members with their own weights and hyperparameters, the clients spread over them, "
        "the worst copying the best (population-based training; PPO; docs/training.md#populations).",
    )

    @field_validator(*ALGORITHMS, check_fields=False)  # the fields algorithm_sections adds
    @classmethod
    def _known_names(cls, values: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return check_hyperparameter_names(values, ALGORITHMS[str(info.field_name)].config)
