"""Each trainable module's hyperparameters as they are now (its algorithm's config), and
changes to them, every one checked before any is made (PATCH /api/config)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from app.settings.hyperparameters import check_hyperparameter_names
from app.settings.policies import PolicySet
from app.training.algorithms import ALGORITHMS


class WrongAlgorithm(ValueError):
    """Hyperparameters of another algorithm than the module trains with."""


class ConfigRefused(ValueError):
    """One change of `change_config` refused (nothing changed): the `index` of the change,
    and whether it names the wrong algorithm (else a value is invalid or fixed)."""

    def __init__(self, index: int, message: str, wrong_algorithm: bool) -> None:
        super().__init__(message)
        self.index, self.message, self.wrong_algorithm = index, message, wrong_algorithm

    def __reduce__(self) -> tuple[type[ConfigRefused], tuple[int, str, bool]]:
        """Pickled whole (a Ray learner returns it to the front-end)."""
        return ConfigRefused, (self.index, self.message, self.wrong_algorithm)


class ModuleConfigs:
    """The current hyperparameters of every trainable module, by module id."""

    def __init__(self, policies: PolicySet) -> None:
        self._algorithms: dict[str, str] = {}
        self._configs: dict[str, BaseModel] = {}
        for module in policies.trainable:
            assert module.config is not None  # a trainable module has its hyperparameters
            self._algorithms[module.module_id], self._configs[module.module_id] = module.algorithm, module.config

    def __iter__(self) -> Iterator[str]:
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)

    def __contains__(self, module_id: object) -> bool:
        return module_id in self._configs

    def __getitem__(self, module_id: str) -> BaseModel:
        return self._configs[module_id]

    def algorithm_of(self, module_id: str) -> str:
        """What a trainable module trains with: a name of app/training/algorithms/ ("ppo")."""
        return self._algorithms[module_id]

    def checked(self, module_id: str, algorithm: str, changes: dict[str, Any], base: BaseModel | None = None) -> BaseModel:
        """A module's hyperparameters of `algorithm` (`base`, default its current ones) with
        `changes`. Raises ValueError for an unknown or frozen module, another algorithm than
        the module's, unknown or invalid values, and values fixed while training."""
        if module_id not in self._configs:
            raise ValueError(f"{module_id!r} is not a trainable module; trainable modules: {', '.join(self._configs)}")
        if (trains := self.algorithm_of(module_id)) != algorithm:
            raise WrongAlgorithm(f"{module_id!r} trains with {trains}, not {algorithm}: change its {trains} hyperparameters")
        spec = ALGORITHMS[algorithm]
        current = base or self._configs[module_id]
        check_hyperparameter_names(changes, spec.config)
        updated = spec.config.model_validate({**current.model_dump(), **changes})  # ValidationError is a ValueError
        for name, why in spec.fixed_while_training.items():
            if getattr(updated, name) != getattr(current, name):
                raise ValueError(f"{name} cannot change while training ({why})")
        return updated

    def checked_all(self, changes: list[tuple[str, str, dict[str, Any]]]) -> dict[str, BaseModel]:
        """Every change (module_id, algorithm, values) checked, a module's later changes on
        its earlier ones: the new hyperparameters by module. Raises ConfigRefused for the
        first bad one."""
        updated: dict[str, BaseModel] = {}
        for index, (module_id, algorithm, values) in enumerate(changes):
            try:
                updated[module_id] = self.checked(module_id, algorithm, values, updated.get(module_id))
            except WrongAlgorithm as exc:
                raise ConfigRefused(index, str(exc), wrong_algorithm=True) from None
            except ValueError as exc:
                raise ConfigRefused(index, str(exc), wrong_algorithm=False) from None
        return updated

    def replace(self, module_id: str, cfg: BaseModel) -> bool:
        """Make `cfg` (from `checked`) the module's; False if it was already."""
        if cfg == self._configs[module_id]:
            return False
        self._configs[module_id] = cfg
        return True
