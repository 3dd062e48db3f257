"""The `env_params` setting: parameters the gateway sends the games (RLLINK.md, "Environment
parameters"), each a constant or a curriculum of lessons, as ML-Agents' `environment_parameters`.

A lesson but the last has a completion criterion: the mean of a measure over the last
`min_episodes` training episodes of a module, counted from the lesson's start, reaching a
threshold moves the parameter to the next lesson (app/training/curriculum.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

EnvParamValue = bool | int | float | str  # what SET_CONFIG and SET_STATE carry (smart union: 3 stays int, true bool)
MEASURES = ("episode_return_mean", "episode_len_mean")
Measure = Literal["episode_return_mean", "episode_len_mean"]


class CompletionCriteria(BaseModel):
    """When a lesson is done: `measure` over its last `min_episodes` episodes of `module_id` reaches `threshold`."""

    model_config = ConfigDict(extra="forbid")

    module_id: str | None = Field(None, description="The module whose episodes count; unset: the default module.")
    measure: Measure = Field(
        "episode_return_mean",
        description="episode_return_mean (the mean return) or episode_len_mean (the mean length, in env steps), "
        "of the lesson's last min_episodes training episodes of the module.",
    )
    threshold: float = Field(description="The lesson is done once the measure is at least this.")
    min_episodes: int = Field(
        100,
        ge=1,
        le=100_000,
        description="The lesson lasts at least this many finished training episodes of the module; the measure is "
        "taken over its last this many (never over episodes from before the lesson).",
    )


class Lesson(BaseModel):
    """One lesson of a curriculum: the parameter's value while it lasts, and when it is done."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="The lesson's name (logs, /api/metrics, the dashboard).")
    value: EnvParamValue = Field(description="The parameter's value during the lesson.")
    completion_criteria: CompletionCriteria | None = Field(
        None, description="When the lesson is done; every lesson has one but the last, which lasts to the end."
    )


class CurriculumSetting(BaseModel):
    """A parameter that follows lessons, in order."""

    model_config = ConfigDict(extra="forbid")

    curriculum: list[Lesson] = Field(description="The lessons, first to last.")

    @model_validator(mode="after")
    def _lessons(self) -> CurriculumSetting:
        """At least one lesson; each but the last has a completion criterion, the last none; names unique."""
        lessons = self.curriculum
        if not lessons:
            raise ValueError("a curriculum needs at least one lesson")
        for lesson in lessons[:-1]:
            if lesson.completion_criteria is None:
                raise ValueError(f"lesson {lesson.name!r} has no completion_criteria: every lesson but the last needs one")
        if lessons[-1].completion_criteria is not None:
            raise ValueError(f"the last lesson, {lessons[-1].name!r}, has completion_criteria: it lasts to the end, drop them")
        names = [lesson.name for lesson in lessons]
        if duplicated := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"lesson names must be unique in a curriculum: {', '.join(duplicated)} repeated")
        return self


def _kind(value: Any) -> str:
    """A mapping is a curriculum, anything else a constant: the error then names only what was meant."""
    return "curriculum" if isinstance(value, (dict, CurriculumSetting)) else "constant"


EnvParam = Annotated[
    Annotated[CurriculumSetting, Tag("curriculum")] | Annotated[EnvParamValue, Tag("constant")],
    Discriminator(_kind),
]


def initial_values(env_params: dict[str, EnvParam] | None) -> dict[str, EnvParamValue]:
    """Each parameter's value at the start: a constant's, or its curriculum's first lesson's."""
    return {
        name: param.curriculum[0].value if isinstance(param, CurriculumSetting) else param for name, param in (env_params or {}).items()
    }


def curricula(env_params: dict[str, EnvParam] | None) -> dict[str, CurriculumSetting]:
    """The parameters that follow lessons (a curriculum of one lesson is a constant in all but name)."""
    return {name: param for name, param in (env_params or {}).items() if isinstance(param, CurriculumSetting)}
