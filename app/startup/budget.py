"""The budget that ends a run: `max_env_steps` trained (all modules together, or each its
own: a module whose own is spent trains no more while the others go on) and `max_seconds`
since the gateway began serving. When it is spent, the server stops as on a first Ctrl-C
and logs one summary line."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from app.settings.config import Settings
from app.training.interface import TrainingService

log = logging.getLogger("app")


class Budget:
    """The run's budget: `max_env_steps` trained (all modules together, or each its own),
    checked after every training step, and `max_seconds` since the gateway began serving.
    Spent, it calls `on_spent` once: the gateway then stops as on a first Ctrl-C."""

    def __init__(self, settings: Settings, service: TrainingService) -> None:
        self.settings = settings
        self.service = service
        self.reason: str | None = None  # why the run ended, once it did
        self._started = time.monotonic()
        self._on_spent: Callable[[], None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._modules_spent: set[str] = set()

    def watch(self, on_spent: Callable[[], None]) -> None:
        """Start counting now; `on_spent` once the budget is spent."""
        self._started, self._on_spent = time.monotonic(), on_spent
        if self.settings.max_seconds is not None:
            self._timer = asyncio.get_running_loop().call_later(
                self.settings.max_seconds, self._spend, f"max_seconds {self.settings.max_seconds:g} reached"
            )
        if self.settings.max_env_steps is not None:
            self.service.add_step_listener(self._check_env_steps)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _check_env_steps(self) -> None:
        budget, metrics = self.settings.max_env_steps, self.service.metrics
        if self.reason is not None:
            return
        if isinstance(budget, int):
            if metrics.num_env_steps_trained_lifetime >= budget:
                self._spend(f"max_env_steps {budget} reached")
            return
        assert budget is not None
        for module_id, steps in budget.items():
            trained = metrics.modules[module_id].num_env_steps_trained_lifetime
            if trained >= steps and module_id not in self._modules_spent:
                self._modules_spent.add(module_id)
                others = [m for m in budget if m not in self._modules_spent]
                log.info(
                    "budget: %s trained %d env steps of its %d%s",
                    module_id,
                    trained,
                    steps,
                    f"; waiting for {', '.join(others)}" if others else "",
                )
                if others:  # it trains no more; the clients keep playing its last version
                    self.service.stop_training(module_id, "budget")
        if len(self._modules_spent) == len(budget):
            self._spend("max_env_steps of every module reached")

    def _spend(self, reason: str) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        log.info("budget spent (%s): stopping", reason)
        if self._on_spent is not None:
            self._on_spent()

    def summary(self) -> str:
        """One line: why the run ended, each module's env steps trained and version, the seconds, where the models are."""
        metrics = self.service.metrics
        modules = ", ".join(
            f"{module_id} {module.num_env_steps_trained_lifetime} (weights_seq_no {module.weights_seq_no})"
            for module_id, module in metrics.modules.items()
        )
        models = self.settings.models_dir.resolve() if self.settings.models_dir is not None else None
        return (
            f"run ended ({self.reason or 'stopped'}): env steps trained {modules} in {time.monotonic() - self._started:.1f} s;"
            f" models in {models}/<module>/latest.onnx"
        )
