"""Every population of a gateway at work: their members' starting hyperparameters, the
exploit steps after each training step (weights copied by the learners, hyperparameters
set, the member's return window restarted), which member each module serves, and their
state beside the checkpoints (`<checkpoint_dir>/<module_id>/population.json`). The
decisions are population.py's.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.training.checkpoints import load_json, save_json
from app.training.learner_host import LearnerProcess, LearnerThread
from app.training.metrics import TrainingMetrics
from app.training.module_configs import ModuleConfigs
from app.training.policy_state import PolicyState
from app.training.population import Population

logger = logging.getLogger("app.training")

POPULATION_FILE = "population.json"
RECENT_EXPLOITS = 20  # copies /api/policies lists per population


class Populations:
    """The populations of one TrainingService; every method runs on its event loop."""

    def __init__(
        self,
        policies: PolicySet,
        settings: Settings,
        configs: ModuleConfigs,
        metrics: TrainingMetrics,
        learners: LearnerThread | LearnerProcess,
        set_config: Callable[[str, BaseModel], None],
    ) -> None:
        self.by_module = {
            module_id: Population(module_id, members, policies.modules[module_id].population, settings.seed)  # type: ignore[arg-type]
            for module_id, members in policies.populations.items()
        }
        self._recent: dict[str, deque[dict[str, Any]]] = {m: deque(maxlen=RECENT_EXPLOITS) for m in self.by_module}
        self._checkpoint_dir = settings.checkpoint_dir
        self._configs, self._metrics = configs, metrics
        self._call, self._run, self._set_config = learners.call, learners.run, set_config

    def __bool__(self) -> bool:
        return bool(self.by_module)

    def values(self, population: Population, member: str) -> dict[str, float]:
        """The member's current values of the hyperparameters its population varies."""
        cfg = self._configs[member]
        return {name: float(getattr(cfg, name)) for name in population.config.hyperparameters}

    async def start(self) -> None:
        """Each member's hyperparameters: as saved, else member 0 the module's and the others drawn."""
        for module_id, population in self.by_module.items():
            saved = await self._run(load_json, self._path(module_id))
            if saved is not None:
                population.load_state_dict(saved)
                values = {m: v for m, v in saved.get("values", {}).items() if m in population.members}
                logger.info("population %s restored: %d exploits so far, best %s", module_id, population.exploits, population.best)
            else:
                values = population.initial_values(self.values(population, population.members[0]))
            for member, member_values in values.items():
                self._set(member, member_values)

    def served_configs(self) -> dict[str, tuple[str, BaseModel]]:
        """Each population's module: the algorithm and hyperparameters of the member it serves."""
        configs = self._configs
        return {m: (configs.algorithm_of(p.best), configs[p.best]) for m, p in self.by_module.items()}

    def serves(self, module_id: str) -> str:
        """The member whose model the population's module serves (its best by return)."""
        return self.by_module[module_id].best

    async def after_training(
        self, version: int, trained: dict[str, tuple[int, dict[str, float]]], exports: dict[str, PolicyState]
    ) -> None:
        """Count what each member trained on (`trained`: env steps and learner stats by module); each
        ready member among the worst copies one of the best and perturbs its hyperparameters (its new
        export, published as `version`, replaces its entry in `exports`). A trained member's stats get
        its hyperparameters, so that the log and TensorBoard show them."""
        for module_id, population in self.by_module.items():
            for member in population.members:
                population.trained(member, trained[member][0] if member in trained else 0)
            returns = {m: self._metrics.modules[m].window_return(population.config.min_episodes) for m in population.members}
            values = {m: self.values(population, m) for m in population.members}
            exploits = population.exploits_due(returns, values)
            for exploit in exploits:
                await self._call("copy_weights", exploit.source, exploit.member)
                self._set(exploit.member, {name: new for name, (_, new) in exploit.changes.items()})
                exports[exploit.member] = await self._call("export", exploit.member)
                self._metrics.modules[exploit.member].restart_window()
                self._recent[module_id].append({"weights_seq_no": version, **asdict(exploit)})
                logger.info("%s", exploit.describe(module_id))
            for member in population.members:
                if member in trained:
                    trained[member][1].update(self.values(population, member))
            state = {**population.state_dict(), "values": {m: self.values(population, m) for m in population.members}}
            await self._run(save_json, self._path(module_id), state)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per population: the member served, exploits so far, and each member's return and hyperparameters."""
        return {
            module_id: {
                "serves": population.best,
                "exploits": population.exploits,
                "members": {
                    member: {
                        "episode_return_mean": self._metrics.modules[member].window_return(1),
                        "env_steps_since_decision": population.trained_since[member],
                        "hyperparameters": self.values(population, member),
                    }
                    for member in population.members
                },
                "recent_exploits": list(self._recent[module_id]),
            }
            for module_id, population in self.by_module.items()
        }

    def _set(self, member: str, values: dict[str, float]) -> None:
        self._set_config(member, self._configs.checked(member, self._configs.algorithm_of(member), values))

    def _path(self, module_id: str) -> Path:
        return self._checkpoint_dir / module_id / POPULATION_FILE
