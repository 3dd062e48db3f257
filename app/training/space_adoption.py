"""The spaces a game declares, taken by a module given none (RLLINK.md, "Spaces the game declares").

A gateway given no spaces (nor demonstrations) lets its default module take the first
game's: a fresh learner with those spaces, published as a new version, the spaces saved in
checkpoint_dir for restarts (`adopted_spaces.json`). A module keeps its spaces once it has
a checkpoint, some experience, or adopted a game's already.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.training.checkpoints import save_adopted_spaces
from app.training.metrics import TrainingMetrics
from app.training.policy_state import PolicyState
from app.training.policy_store import PolicyStore

if TYPE_CHECKING:
    from app.training.learner_host import LearnerProcess, LearnerThread

logger = logging.getLogger("app.training")


class SpaceAdoption:
    """Which modules would adopt a game's spaces, and their adopting them one at a time.
    `publish` makes a module's new export the next version."""

    def __init__(
        self,
        settings: Settings,
        policies: PolicySet,
        module_ids: Iterable[str],
        metrics: TrainingMetrics,
        learners: LearnerThread | LearnerProcess,
        store: PolicyStore,
        publish: Callable[[str, PolicyState], None],
    ) -> None:
        self._checkpoint_dir = settings.checkpoint_dir
        self._policies = policies
        self._module_ids = list(module_ids)
        self._metrics = metrics
        self._learners = learners
        self._store = store
        self._publish = publish
        # The modules whose spaces a game's GET_CONFIG may no longer set (see adoptable_modules).
        self._fixed = set() if not settings.spaces_given and settings.demos is None else set(self._module_ids)
        self._adopting = asyncio.Lock()

    def keep(self, module_id: str) -> None:
        """The module keeps its spaces (its checkpoint was made for them)."""
        self._fixed.add(module_id)

    @property
    def adoptable_modules(self) -> frozenset[str]:
        """The modules that would adopt the spaces a game declares: the default module of a
        gateway given no spaces (nor demonstrations), until it has a checkpoint, some
        experience, or adopted a game's spaces already."""
        return frozenset(
            module_id for module_id in self._module_ids
            if module_id not in self._fixed and not self._metrics.modules[module_id].received_any
        )  # fmt: skip

    async def settled(self) -> None:
        """Return once no adoption is under way: a module's new spaces are in the modules from the
        start of its adoption, its model only once the adoption publishes it."""
        if self._adopting.locked():
            async with self._adopting:
                pass

    async def adopt(self, module_id: str, observation_space: Any, action_space: Any) -> bool:
        """The module takes these spaces (None: keeps its own): a fresh learner, published as a
        new version and saved for restarts. False if it could no longer adopt (another game
        was first); ValueError, and nothing changes, if the module cannot have them."""
        async with self._adopting:
            if module_id not in self.adoptable_modules:
                return False
            old = self._policies.modules[module_id]
            module = replace(
                old,
                observation_space=observation_space or old.observation_space,
                action_space=action_space or old.action_space,
            )  # its checks raise ValueError
            self._policies.replace(module)  # from here on, every session checks chunks against these spaces
            try:
                await self._learners.call("adopt", module)
                state = await self._learners.call("export", module_id)
            except Exception:
                self._policies.replace(old)
                await self._learners.call("adopt", old)
                raise
            self._fixed.add(module_id)
            spaces = {
                "observation_space": module.observation_space.model_dump(mode="json", exclude_none=True),
                "action_space": module.action_space.model_dump(mode="json", exclude_none=True),
            }
            self._publish(module_id, state)
            try:
                await self._learners.run(save_adopted_spaces, self._checkpoint_dir, spaces)
            except OSError as exc:
                logger.warning("the adopted spaces of %s were not saved (a restart goes back to the defaults): %s", module_id, exc)
            logger.info(
                "%s adopts the spaces the first game declared (weights_seq_no %d): observation_space %s, action_space %s",
                module_id, self._store.current.weights_seq_no,
                json.dumps(spaces["observation_space"]), json.dumps(spaces["action_space"]),
            )  # fmt: skip
            return True
