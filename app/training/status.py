"""The training service's progress and hyperparameters at one moment, as one value.

REST and the dashboard read it (`TrainingService.status()`); a Ray front-end gets the
learner's whole in one call (app/cluster/learner_actor.py) rather than member by member.
No torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.settings.hyperparameters import PPOConfig, SACConfig
from app.spaces.onnx_names import OUTPUT_NAME
from app.training.registry import ClientInfo

if TYPE_CHECKING:
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
    ppo_configs: dict[str, PPOConfig]  # by trainable module (a SAC module's: its settings' ones)
    sac_configs: dict[str, SACConfig | None]  # by trainable module; None: it trains with PPO
    clients: list[ClientInfo]  # every connected client (on Ray: of every front-end)
    leagues: Mapping[str, League]  # by self-play module
    curriculum: dict[str, dict[str, Any]]  # each env_params curriculum's lesson now, by parameter

    @property
    def onnx_output_names(self) -> list[str]:
        """The exported models' outputs (app/spaces/onnx_names.py)."""
        return [OUTPUT_NAME]

    @property
    def ppo_config(self) -> PPOConfig:
        """The default module's PPO hyperparameters."""
        return self.ppo_configs[self.default_module_id]

    def module_ppo_config(self, module_id: str) -> PPOConfig:
        return self.ppo_configs[module_id]

    def module_sac_config(self, module_id: str) -> SACConfig | None:
        return self.sac_configs.get(module_id)

    def algorithm_of(self, module_id: str) -> str:
        """What a trainable module trains with: "ppo" or "sac"."""
        return "sac" if self.sac_configs.get(module_id) is not None else "ppo"
