"""The training algorithms by the name settings give them (`algorithm: sac`): an entry each.

Each is a package here (its config model, learner, loss, ONNX head); this registry is what
the settings, the command line, REST, the module configs and the learners read: an algorithm
is its folder and its line here. Light: it imports the config models only; a learner (torch)
is imported by its import string ('module:Class') when a module trains with it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, create_model

from app.training.algorithms.ppo import config as ppo
from app.training.algorithms.sac import config as sac


@dataclass(frozen=True)
class AlgorithmSpec:
    """What the gateway knows of an algorithm before a module trains with it."""

    name: str  # the settings' `algorithm`, its section (`--ppo.*`), REST's and the config file's
    config: type[BaseModel]  # its hyperparameters: the settings' section `name`, a module's own in `policies`
    patch: type[BaseModel]  # what PATCH /api/config may change of them while training (a HyperparameterPatch)
    learner: str  # 'module:Class' of its learner (algorithms/*/learner.py), imported when a module trains with it
    summary: str  # what the settings' `algorithm` says of it
    off_policy: bool = False  # trains from a replay buffer: its steps are never stale, its clients never wait
    action_spaces: tuple[str, ...] = ("discrete", "multi_discrete", "box")  # or "bounded_box": finite low and high
    box_distribution: str = "gaussian"  # how clients act from a Box's action_dist_inputs (RLLINK.md)
    image_observations: bool = True  # trains on images (a CNN encoder)
    action_masking: bool = True  # trains with action masks
    symmetries: bool = True  # trains on the steps' images under the game's symmetries
    demos: bool = True  # behavioural cloning from demonstrations
    recurrent: bool = False  # trains with memory (model.use_lstm): sequences, a state in and out of its ONNX
    fixed_while_training: Mapping[str, str] = field(default_factory=dict)  # hyperparameter: why PATCH cannot change it
    self_play_defaults: Mapping[str, Any] = field(default_factory=dict)  # a self-play learner's values where not given

    def learner_class(self) -> Any:
        """Its learner class (imported now: torch)."""
        module, _, name = self.learner.partition(":")
        return getattr(importlib.import_module(module), name)


ALGORITHMS: dict[str, AlgorithmSpec] = {
    spec.name: spec
    for spec in (
        AlgorithmSpec(
            "ppo", ppo.PPOConfig, ppo.PPOConfigPatch, "app.training.algorithms.ppo.learner:PPOLearner",
            summary="on-policy; clients wait for each version", recurrent=True,
            fixed_while_training=ppo.FIXED_WHILE_TRAINING,
            self_play_defaults={
                "entropy_floor": ppo.SELF_PLAY_ENTROPY_FLOOR, "entropy_floor_per_state": True, "normalize_obs": False,
                "normalize_reward": False, "gamma": ppo.SELF_PLAY_GAMMA, "gae_lambda": ppo.SELF_PLAY_GAE_LAMBDA,
                "learning_rate": ppo.SELF_PLAY_LEARNING_RATE,
            },
        ),
        AlgorithmSpec(
            "sac", sac.SACConfig, sac.SACConfigPatch, "app.training.algorithms.sac.learner:SACLearner",
            summary="off-policy, Box actions with bounds or Discrete ones; clients never wait, every step received goes to a "
            "replay buffer",
            off_policy=True, action_spaces=("discrete", "bounded_box"), box_distribution="squashed_gaussian",
            image_observations=False, action_masking=False, symmetries=False, demos=False,
            fixed_while_training=sac.FIXED_WHILE_TRAINING,
        ),
    )
}
DEFAULT_ALGORITHM = "ppo"

if TYPE_CHECKING:
    Algorithm = str
else:
    Algorithm = Literal[tuple(ALGORITHMS)]  # the names as a type (settings, REST): "ppo" | "sac"


def supporting(feature: str) -> str:
    """The algorithms with `feature` (an AlgorithmSpec flag), as an error message names them: "ppo"."""
    return " or ".join(name for name, spec in ALGORITHMS.items() if getattr(spec, feature))


Model = TypeVar("Model", bound=type[BaseModel])


def algorithm_sections(section: Callable[[AlgorithmSpec], tuple[Any, Any]]) -> Callable[[Model], Model]:
    """A class decorator: the model with a field per algorithm named as it is (`ppo`, `sac`),
    `section(spec)` its (type, default or Field), after the model's own fields. The settings and
    REST list the algorithms so; a new one reaches them with no edit there."""

    def add_sections(model: Model) -> Model:
        sections = {name: section(spec) for name, spec in ALGORITHMS.items()}
        with_sections: Model = create_model(  # type: ignore[call-overload]
            model.__name__, __base__=model, __module__=model.__module__, __doc__=model.__doc__, **sections
        )
        return with_sections

    return add_sections
