"""Population-based training of one module (Jaderberg et al. 2017, "exploit and explore"):
which member copies which, and the hyperparameters it takes. Plain numbers in and out;
the TrainingService copies the weights and sets the configs (service.py).

Each member counts the env steps it trained on; once it has `ready_env_steps` it is ready,
and is compared with the members that have `min_episodes` in their return window. If it
is among the worst `quantile` of them, it copies one of the best `quantile` (weights,
optimizer, statistics) and perturbs each varied hyperparameter: multiplied by one of
`perturb_factors`, or with `resample_probability` drawn afresh in its range (gamma: its
1 - gamma). Member 0 starts on the module's own hyperparameters, the others drawn.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from app.settings.hyperparameters import HyperparameterRange, PopulationConfig, varied_scale


@dataclass(frozen=True)
class Exploit:
    """One member copying another: both returns, and each varied hyperparameter's old and new value."""

    member: str
    source: str
    member_return: float
    source_return: float
    changes: dict[str, tuple[float, float]]

    def describe(self, module_id: str) -> str:
        changed = ", ".join(f"{name} {old:.4g} -> {new:.4g}" for name, (old, new) in self.changes.items())
        return (
            f"population {module_id}: {self.member} (return {self.member_return:.1f}) copies {self.source} "
            f"(return {self.source_return:.1f}); {changed}"
        )


class Population:
    """The exploit-and-explore decisions of one module's members."""

    def __init__(self, module_id: str, members: list[str], config: PopulationConfig, seed: int) -> None:
        self.module_id = module_id
        self.members = list(members)
        self.config = config
        self._rng = random.Random(f"{seed}:{module_id}")
        self.trained_since = dict.fromkeys(self.members, 0)  # env steps since each member's last decision
        self.exploits = 0
        self.best = self.members[0]  # the member whose model the module serves

    def initial_values(self, base: dict[str, float]) -> dict[str, dict[str, float]]:
        """Each member's starting values of the varied hyperparameters: member 0 the module's
        own (`base`), the others drawn in the ranges."""
        values = {self.members[0]: {name: base[name] for name in self.config.hyperparameters}}
        for member in self.members[1:]:
            values[member] = {name: self._draw(name, bounds) for name, bounds in self.config.hyperparameters.items()}
        return values

    def trained(self, member: str, env_steps: int) -> None:
        self.trained_since[member] += env_steps

    def rank(self, returns: dict[str, float | None]) -> list[str]:
        """The members that can be compared (a return over at least min_episodes), best first;
        the best of them becomes the one the module serves."""
        ranked = sorted((m for m in self.members if returns.get(m) is not None), key=lambda m: -returns[m])  # type: ignore[operator]
        if ranked:
            self.best = ranked[0]
        return ranked

    def exploits_due(self, returns: dict[str, float | None], values: dict[str, dict[str, float]]) -> list[Exploit]:
        """The ready members' decisions: an Exploit for each one among the worst, with its new
        values (`values`: each member's current ones). A ready member that cannot be compared
        yet waits; the others start counting again."""
        ranked = self.rank(returns)
        if len(ranked) < 2:
            return []
        share = max(1, math.floor(len(ranked) * self.config.quantile))
        best, worst = ranked[:share], ranked[-share:]
        exploits = []
        for member in self.members:
            if self.trained_since[member] < self.config.ready_env_steps or member not in ranked:
                continue
            self.trained_since[member] = 0
            if member not in worst:
                continue
            source = self._rng.choice(best)
            new = self.explore(values[source])
            changes = {name: (values[member][name], new[name]) for name in new}
            exploits.append(Exploit(member, source, returns[member], returns[source], changes))  # type: ignore[arg-type]
            self.exploits += 1
        return exploits

    def explore(self, values: dict[str, float]) -> dict[str, float]:
        """`values` perturbed: each multiplied by one of perturb_factors (gamma: 1 - gamma), or
        drawn afresh with resample_probability; kept in its range."""
        new = {}
        for name, bounds in self.config.hyperparameters.items():
            if self._rng.random() < self.config.resample_probability:
                new[name] = self._draw(name, bounds)
                continue
            factor = self._rng.choice(self.config.perturb_factors)
            value = values[name]
            moved = varied_scale(name, varied_scale(name, value) * factor)
            new[name] = min(max(moved, bounds.low), bounds.high)
        return new

    def _draw(self, name: str, bounds: HyperparameterRange) -> float:
        """A value in the range: uniform, or log-uniform (of 1 - gamma for gamma)."""
        if not bounds.log:
            return self._rng.uniform(bounds.low, bounds.high)
        low, high = sorted(math.log(varied_scale(name, bound)) for bound in (bounds.low, bounds.high))
        return varied_scale(name, math.exp(self._rng.uniform(low, high)))

    def state_dict(self) -> dict[str, Any]:
        return {"trained_since": dict(self.trained_since), "exploits": self.exploits, "best": self.best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A saved population of the same members (others' entries are ignored)."""
        for member, steps in state.get("trained_since", {}).items():
            if member in self.trained_since:
                self.trained_since[member] = int(steps)
        self.exploits = int(state.get("exploits", 0))
        if state.get("best") in self.trained_since:
            self.best = state["best"]
