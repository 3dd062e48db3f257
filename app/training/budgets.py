"""How much experience each module takes and owes: its queue's limits, the gradient steps
an off-policy module (SAC) still owes (as env steps, which hold its clients back as pending
ones do), and whether clients wait for training at all (force_on_policy, max_training_backlog)."""

from __future__ import annotations

from typing import Protocol, cast

from app.settings.config import Settings
from app.settings.policies import Module, PolicySet
from app.training.module_configs import ModuleConfigs
from app.training.module_queue import QueueLimits
from app.training.scheduler import BatchScheduler


class OffPolicyConfig(Protocol):
    """What an off-policy algorithm's config has (SACConfig's utd_ratio)."""

    utd_ratio: float  # gradient steps per env step received


class StepBudgets:
    """The env-step limits of every trainable module, from the settings and its hyperparameters."""

    def __init__(self, settings: Settings, policies: PolicySet, configs: ModuleConfigs) -> None:
        self.settings = settings
        self._configs = configs
        off_policy = {m.module_id for m in policies.trainable if m.off_policy}
        self._owed_updates = dict.fromkeys(off_policy, 0.0)  # gradient steps owed, as the module's last step left them
        # Clients wait for each version only while some module learns on-policy.
        self.force_on_policy = settings.force_on_policy and len(off_policy) < len(configs)

    def limits(self, module: Module) -> QueueLimits:
        """When the module's steps train, and how many may wait (settings, else the gateway's)."""
        settings = self.settings
        batch = module.train_batch_size or settings.train_batch_size
        return QueueLimits(
            train_batch_size=batch,
            min_barrier_batch=min(batch, settings.env_steps_per_sample),
            max_backlog=max(settings.max_backlog_env_steps or 2 * batch, batch),  # else a batch could never fill
            off_policy=module.off_policy,
            whole_chunks=module.state_size > 0,
        )

    def owed_env_steps(self, module_id: str) -> float:
        """The env steps whose gradient steps an off-policy module still owes (0 for an on-policy one)."""
        if (owed := self._owed_updates.get(module_id)) is None:
            return 0.0
        return owed / cast(OffPolicyConfig, self._configs[module_id]).utd_ratio

    def owes_updates(self, module_id: str) -> bool:
        """Whether an off-policy module owes a gradient step (it trains without fresh steps)."""
        return self._owed_updates.get(module_id, 0.0) >= 1

    def trained(self, module_id: str, stats: dict[str, float]) -> None:
        """A training step of the module ended: what it still owes, as its stats say."""
        if module_id in self._owed_updates:
            self._owed_updates[module_id] = stats["owed_updates"]

    def must_wait(self, scheduler: BatchScheduler) -> bool:
        """Whether EPISODES_AND_GET_STATE waits for training: always while learning on-policy,
        else only while the learner is more than max_training_backlog env steps behind."""
        backlog = sum(scheduler.backlog(m) for m in self._configs) + scheduler.training_env_steps
        return self.force_on_policy or backlog > self.settings.max_training_backlog
