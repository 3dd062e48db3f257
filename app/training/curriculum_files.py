"""The curriculum's lessons on disk: `curriculum.json` in checkpoint_dir, beside the modules'
folders (Curriculum.state). A resumed run restores it; each training step that moved a
lesson on writes it again, on the learner thread."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from app.training.checkpoints import load_json, save_json
from app.training.curriculum import Curriculum

CURRICULUM_FILE = "curriculum.json"

logger = logging.getLogger("app.training")


def save_curriculum(directory: Path, state: dict[str, Any]) -> None:
    """The curriculum's lessons (Curriculum.state), atomically, in `directory` (the checkpoint_dir)."""
    save_json(directory / CURRICULUM_FILE, state)


def load_curriculum(directory: Path) -> dict[str, Any] | None:
    """The lessons save_curriculum wrote, or None if none were saved. Raises ValueError
    if the file is damaged."""
    return load_json(directory / CURRICULUM_FILE)


class CurriculumFiles:
    """The curriculum's file in `directory`; `run` runs file work on the learner thread."""

    def __init__(self, directory: Path, curriculum: Curriculum, run: Callable[..., Awaitable[Any]]) -> None:
        self._directory = directory
        self._curriculum = curriculum
        self._run = run
        self._saved: dict[str, Any] | None = None  # the curriculum's state as last written

    async def restore(self) -> None:
        """A resumed run's lessons, as saved; a damaged file is logged, lessons start again."""
        try:
            saved = await self._run(load_curriculum, self._directory)
        except (OSError, ValueError) as exc:
            logger.warning("curriculum lessons not restored, they start at the first: %s", exc)
            return
        if saved is not None:
            for line in self._curriculum.restore(saved):
                logger.info("curriculum: %s", line)

    async def save(self) -> None:
        """The lessons and their episodes so far, if they changed; a failure is logged, and
        the next training step tries again."""
        if not self._curriculum.has_lessons or (state := self._curriculum.state()) == self._saved:
            return
        try:
            await self._run(save_curriculum, self._directory, state)
        except OSError as exc:
            logger.warning("curriculum lessons not saved: %s", exc)
        else:
            self._saved = state
