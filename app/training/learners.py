"""Every trainable module's learner, and the few calls the TrainingService makes on them.

The TrainingService never touches a learner itself: it names a call (`train`, `export`,
...) and a learner host (learner_host.py) runs it, on a thread of the gateway's process
or in a process of its own. So everything that crosses here is plain data that pickles:
chunks, configs, `PolicyState`s, stats.
"""

from __future__ import annotations

from typing import Any

import torch

from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.hyperparameters import PPOConfig, SACConfig
from app.settings.policies import Module, PolicySet
from app.training.device import resolve_device
from app.training.learner import Learner
from app.training.onnx_export import PolicyState
from app.training.sac_learner import SACLearner


class Learners:
    """One learner per trainable module (SAC's for an off-policy one, else PPO's)."""

    def __init__(self, settings: Settings, policies: PolicySet) -> None:
        # Torch work on this thread (building the networks) stays on one intra-op thread: an
        # OpenMP team of its own would make libgomp count more threads than cores and stop
        # spinning, so the learner's `learner_threads` would wait on futexes at every operation.
        torch.set_num_threads(1)
        self.device = resolve_device(settings.device)
        self.by_module: dict[str, Learner | SACLearner] = {
            module.module_id: self._learner(settings, module, settings.seed + i)
            for i, module in enumerate(policies.trainable)
        }

    def _learner(self, settings: Settings, module: Module, seed: int) -> Learner | SACLearner:
        common = {
            "seed": seed,
            "checkpoint_dir": settings.checkpoint_dir / module.module_id,
            "onnx_input_name": settings.onnx_input_name,
            "device": self.device,
        }
        if module.off_policy:
            return SACLearner(module.sac, module.observation_space, module.action_space, **common)
        return Learner(module.ppo, module.observation_space, module.action_space, action_masking=module.action_masking, **common)

    def call(self, method: str, args: tuple) -> Any:
        """Run one of the calls below by name (what a learner host sends)."""
        if method not in CALLS:
            raise ValueError(f"no learner call {method!r}")
        return getattr(self, method)(*args)

    def set_num_threads(self, threads: int) -> None:
        """Torch's intra-op threads for training, on the thread that trains."""
        torch.set_num_threads(threads)

    def num_threads(self) -> int:
        return torch.get_num_threads()

    def restore(self, module_id: str) -> int | None:
        """Load the module's checkpoint: its weights_seq_no, or None if it has none."""
        learner = self.by_module[module_id]
        return learner.weights_seq_no if learner.restore() else None

    def export(self, module_id: str) -> PolicyState:
        return self.by_module[module_id].export()

    def save_all(self) -> None:
        for learner in self.by_module.values():
            learner.save()

    def set_config(self, module_id: str, cfg: PPOConfig | SACConfig) -> None:
        """Use `cfg` from the module's next training step on."""
        self.by_module[module_id].cfg = cfg

    def train(
        self, by_module: dict[str, list[EpisodeChunk]], version: int
    ) -> dict[str, tuple[PolicyState, dict[str, float]]]:
        """One training step of each module that has data (or owes SAC updates)."""
        return {module_id: self.by_module[module_id].train(chunks, version) for module_id, chunks in by_module.items()}


CALLS = frozenset(
    {"set_num_threads", "num_threads", "restore", "export", "save_all", "set_config", "train"}
)
