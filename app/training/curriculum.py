"""Environment parameters and their curriculum lessons (the `env_params` setting), as pure logic.

Every training episode that ends is offered to each curriculum (`record_episode`): the
lesson counts the episodes of its criterion's module since it began, keeps the measure
of the last `min_episodes` of them, and is done once it has that many and their mean
reaches the threshold; the parameter then takes the next lesson's value. The caller logs
the changes returned, sends the new values and saves `state()` beside the checkpoints.
A new lesson counts episodes only once its value is published (`published`): episodes
that end before, the clients played with the old value.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from app.settings.env_params import CurriculumSetting, EnvParam, EnvParamValue, Lesson, curricula, initial_values


@dataclass(frozen=True)
class LessonChange:
    """A parameter moved from one lesson to the next: what was measured to decide it."""

    param: str
    from_lesson: str
    to_lesson: str
    to_index: int
    measure: str
    measured: float
    threshold: float
    episodes: int

    def describe(self) -> str:
        """One line for the log."""
        return (
            f"env param {self.param}: lesson {self.from_lesson!r} -> {self.to_lesson!r} (lesson {self.to_index}): "
            f"{self.measure} {self.measured:.4g} >= threshold {self.threshold:.4g} over the last {self.episodes} episodes"
        )


class _Lessons:
    """One parameter's curriculum: the current lesson and the episodes measured in it."""

    def __init__(self, setting: CurriculumSetting, default_module_id: str) -> None:
        self.lessons = setting.curriculum
        self.default_module_id = default_module_id
        self.index = 0
        self.episodes = 0  # finished episodes of the criterion's module since the lesson began
        self.recent: deque[float] = deque()  # the measure of the last min_episodes of them
        self.counting = True  # False from a lesson change until its value is published
        self.enter(0)

    @property
    def lesson(self) -> Lesson:
        return self.lessons[self.index]

    def enter(self, index: int, episodes: int = 0, recent: list[float] | None = None) -> None:
        """Start lesson `index` (or resume it with what it had measured)."""
        self.index = index
        criteria = self.lesson.completion_criteria
        self.episodes = episodes
        self.recent = deque(recent or [], maxlen=criteria.min_episodes if criteria else None)

    def record(self, param: str, module_id: str, episode_return: float, length: int) -> LessonChange | None:
        """Count one episode; the change if it completes the lesson."""
        criteria = self.lesson.completion_criteria
        if criteria is None or not self.counting or module_id != (criteria.module_id or self.default_module_id):
            return None
        self.episodes += 1
        self.recent.append(episode_return if criteria.measure == "episode_return_mean" else float(length))
        measured = self.measured
        if self.episodes < criteria.min_episodes or measured is None or measured < criteria.threshold:
            return None
        done = self.lesson
        self.enter(self.index + 1)
        self.counting = False
        return LessonChange(
            param, done.name, self.lesson.name, self.index, criteria.measure, measured, criteria.threshold, criteria.min_episodes
        )

    @property
    def measured(self) -> float | None:
        """The measure's mean over the lesson's recent episodes (None before any)."""
        return sum(self.recent) / len(self.recent) if self.recent else None

    def status(self) -> dict[str, Any]:
        criteria = self.lesson.completion_criteria
        return {
            "lesson": self.index,
            "lesson_name": self.lesson.name,
            "lessons": len(self.lessons),
            "value": self.lesson.value,
            "episodes": self.episodes,
            "module_id": None if criteria is None else criteria.module_id or self.default_module_id,
            "measure": None if criteria is None else criteria.measure,
            "measured": self.measured,
            "threshold": None if criteria is None else criteria.threshold,
            "min_episodes": None if criteria is None else criteria.min_episodes,
        }


class Curriculum:
    """The current value of every environment parameter and the lesson of each curriculum."""

    def __init__(self, env_params: dict[str, EnvParam] | None, default_module_id: str) -> None:
        self._constants = initial_values(env_params)
        self._curricula = {name: _Lessons(setting, default_module_id) for name, setting in curricula(env_params).items()}
        self.changes = 0  # lessons changed since the gateway started

    @property
    def values(self) -> dict[str, EnvParamValue]:
        """Every parameter's current value (constants, and each curriculum's lesson's)."""
        return {**self._constants, **{name: lessons.lesson.value for name, lessons in self._curricula.items()}}

    @property
    def has_lessons(self) -> bool:
        return bool(self._curricula)

    def record_episode(self, module_id: str, episode_return: float, length: int) -> list[LessonChange]:
        """One training episode of `module_id` ended: the lessons it completes."""
        changes = [
            change
            for name, lessons in self._curricula.items()
            if (change := lessons.record(name, module_id, episode_return, length)) is not None
        ]
        self.changes += len(changes)
        return changes

    def published(self) -> None:
        """The current values went out (a new version): new lessons count episodes from now on."""
        for lessons in self._curricula.values():
            lessons.counting = True

    def status(self) -> dict[str, dict[str, Any]]:
        """Each curriculum's lesson (index, name, value, episodes in it, the measure now and its threshold)."""
        return {name: lessons.status() for name, lessons in self._curricula.items()}

    def state(self) -> dict[str, Any]:
        """What a restart needs, JSON-ready: each curriculum's lesson (by name too) and its episodes so far."""
        return {
            name: {
                "lesson": lessons.index,
                "lesson_name": lessons.lesson.name,
                "episodes": lessons.episodes,
                "recent": list(lessons.recent),
            }
            for name, lessons in self._curricula.items()
        }

    def restore(self, state: dict[str, Any]) -> list[str]:
        """Resume the lessons `state()` saved; returns a line for each curriculum restored or
        not (a lesson no longer at that place in the settings, or a curriculum now gone)."""
        report = []
        for name, saved in state.items():
            lessons = self._curricula.get(name)
            if lessons is None:
                report.append(f"{name}: no longer a curriculum, its saved lesson is ignored")
                continue
            index, lesson_name = saved.get("lesson"), saved.get("lesson_name")
            if not isinstance(index, int) or not 0 <= index < len(lessons.lessons) or lessons.lessons[index].name != lesson_name:
                report.append(f"{name}: saved lesson {lesson_name!r} is not lesson {index} of the settings: starts at the first")
                continue
            recent = [float(value) for value in saved.get("recent", [])]
            lessons.enter(index, int(saved.get("episodes", 0)), recent)
            report.append(f"{name}: lesson {index} ({lesson_name!r}) resumed after {lessons.episodes} episodes")
        return report
