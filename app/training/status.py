"""The training service's progress and hyperparameters at one moment, as one value.

REST and the dashboard read it (`TrainingService.status()`); a Ray front-end gets the
learner's whole in one call (app/cluster/learner_actor.py) rather than member by member.
No torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app.spaces.onnx_names import OUTPUT_NAME
from app.training.registry import ClientInfo

if TYPE_CHECKING:
    from app.training.best_models import BestModel
    from app.training.self_play import League


@dataclass(frozen=True)
class TrainingStatus:
    """What the service holds, trains and trains with, as REST shows it."""

    pending_env_steps: int  # in the modules' queues
    training_env_steps: int  # in the training step under way (neither trained nor dropped yet)
    training_in_progress: bool
    force_on_policy: bool  # clients wait for every version
    device: str  # where the learners train
    default_module_id: str
    configs: dict[str, tuple[str, BaseModel]]  # by trainable module: the algorithm it trains with, its hyperparameters now
    clients: list[ClientInfo]  # every connected client (on Ray: of every front-end)
    leagues: Mapping[str, League]  # by self-play module
    curriculum: dict[str, dict[str, Any]]  # each env_params curriculum's lesson now, by parameter
    best_models: dict[str, BestModel]  # by trainable module that has one: which version best.onnx is
    populations: dict[str, dict[str, Any]]  # by population's module: Populations.status()
    exploiters: dict[str, dict[str, Any]]  # by self-play module that has one: its exploiter, Leagues.exploiter_status()

    @property
    def onnx_output_names(self) -> list[str]:
        """The exported models' outputs (app/spaces/onnx_names.py)."""
        return [OUTPUT_NAME]

    @property
    def default_config(self) -> BaseModel:
        """The default module's hyperparameters now."""
        return self.module_config(self.default_module_id)

    def algorithm_of(self, module_id: str) -> str:
        """What a trainable module trains with: a name of app/training/algorithms/ ("ppo")."""
        return self.configs[module_id][0]

    def module_config(self, module_id: str) -> BaseModel:
        """A trainable module's hyperparameters now (its algorithm's config)."""
        return self.configs[module_id][1]
