"""Each trainable module's hyperparameters as they are now (PPO's or SAC's), and changes
to them, every one checked before any is made (PATCH /api/config)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from app.settings.hyperparameters import PPOConfig, SACConfig, check_hyperparameter_names
from app.settings.policies import PolicySet


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


FIXED_WHILE_TRAINING = {  # hyperparameters PATCH cannot change, and why
    "ppo": {
        "hidden_sizes": "the weights have that shape",
        "normalize_obs": "the checkpoint holds its statistics, or none",
        "normalize_reward": "the checkpoint holds its statistics, or none",
    },
    "sac": {
        "hidden_sizes": "the weights have that shape",
        "buffer_size": "the replay buffer is allocated",
        "alpha": "with autotune it is learned; set it at start-up",
        "autotune": "set it at start-up",
    },
}


class ModuleConfigs:
    """The current hyperparameters of every trainable module, by module id."""

    def __init__(self, policies: PolicySet) -> None:
        self._policies = policies
        self._configs: dict[str, PPOConfig | SACConfig] = {
            m.module_id: cast(SACConfig, m.sac) if m.off_policy else cast(PPOConfig, m.ppo) for m in policies.trainable
        }

    def __iter__(self) -> Iterator[str]:
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)

    def __contains__(self, module_id: object) -> bool:
        return module_id in self._configs

    def __getitem__(self, module_id: str) -> PPOConfig | SACConfig:
        return self._configs[module_id]

    def ppo_of(self, module_id: str) -> PPOConfig:
        """A module's PPO hyperparameters (a SAC module has them too: its settings' ones)."""
        cfg = self._configs[module_id]
        if isinstance(cfg, PPOConfig):
            return cfg
        return cast(PPOConfig, self._policies.modules[module_id].ppo)

    def sac_of(self, module_id: str) -> SACConfig | None:
        """A SAC module's hyperparameters; None for a PPO module."""
        cfg = self._configs[module_id]
        return cfg if isinstance(cfg, SACConfig) else None

    def algorithm_of(self, module_id: str) -> str:
        """What a trainable module trains with: "ppo" or "sac"."""
        return "sac" if isinstance(self._configs[module_id], SACConfig) else "ppo"

    def checked(
        self, module_id: str, algorithm: str, changes: dict[str, Any], base: PPOConfig | SACConfig | None = None
    ) -> PPOConfig | SACConfig:
        """A module's hyperparameters of `algorithm` (`base`, default its current ones) with
        `changes`. Raises ValueError for an unknown or frozen module, another algorithm than
        the module's, unknown or invalid values, and values fixed while training."""
        if module_id not in self._configs:
            raise ValueError(f"{module_id!r} is not a trainable module; trainable modules: {', '.join(self._configs)}")
        if (trains := self.algorithm_of(module_id)) != algorithm:
            raise WrongAlgorithm(f"{module_id!r} trains with {trains}, not {algorithm}: change its {trains} hyperparameters")
        model: type[PPOConfig] | type[SACConfig] = SACConfig if algorithm == "sac" else PPOConfig
        current = base or self._configs[module_id]
        check_hyperparameter_names(changes, model)
        updated = model.model_validate({**current.model_dump(), **changes})  # ValidationError is a ValueError
        for name, why in FIXED_WHILE_TRAINING[algorithm].items():
            if getattr(updated, name) != getattr(current, name):
                raise ValueError(f"{name} cannot change while training ({why})")
        return updated

    def checked_all(self, changes: list[tuple[str, str, dict[str, Any]]]) -> dict[str, PPOConfig | SACConfig]:
        """Every change (module_id, algorithm, values) checked, a module's later changes on
        its earlier ones: the new hyperparameters by module. Raises ConfigRefused for the
        first bad one."""
        updated: dict[str, PPOConfig | SACConfig] = {}
        for index, (module_id, algorithm, values) in enumerate(changes):
            try:
                updated[module_id] = self.checked(module_id, algorithm, values, updated.get(module_id))
            except WrongAlgorithm as exc:
                raise ConfigRefused(index, str(exc), wrong_algorithm=True) from None
            except ValueError as exc:
                raise ConfigRefused(index, str(exc), wrong_algorithm=False) from None
        return updated

    def replace(self, module_id: str, cfg: PPOConfig | SACConfig) -> bool:
        """Make `cfg` (from `checked`) the module's; False if it was already."""
        if cfg == self._configs[module_id]:
            return False
        self._configs[module_id] = cfg
        return True
