"""Observation and action spaces, as the gateway configures and announces them.

Matching gymnasium's `Box`, `Discrete` and `MultiDiscrete`; serialisable as JSON so
they can ride in `SET_CONFIG`, the REST config and the ONNX metadata.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator


class BoxSpace(BaseModel):
    """A box of float32 values; `low`/`high` are scalars (`None` means unbounded)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["box"] = "box"
    shape: tuple[int, ...] = Field(min_length=1)
    low: float | None = None
    high: float | None = None

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if any(d <= 0 for d in shape):
            raise ValueError(f"every dimension must be positive, got {shape}")
        return shape

    @property
    def flat_dim(self) -> int:
        """Number of scalars in one element of the space."""
        return math.prod(self.shape)


class DiscreteSpace(BaseModel):
    """`n` choices, numbered 0..n-1."""

    model_config = ConfigDict(frozen=True)

    type: Literal["discrete"] = "discrete"
    n: int = Field(ge=2)


class MultiDiscreteSpace(BaseModel):
    """Several choices made at once (move and jump and aim): sub-action i is one of 0..nvec[i]-1."""

    model_config = ConfigDict(frozen=True)

    type: Literal["multi_discrete"] = "multi_discrete"
    nvec: tuple[Annotated[int, Field(ge=2)], ...] = Field(min_length=1, max_length=1024)


Space = Annotated[Union[BoxSpace, DiscreteSpace, MultiDiscreteSpace], Field(discriminator="type")]
ActionSpace = BoxSpace | DiscreteSpace | MultiDiscreteSpace


def num_logits(space: DiscreteSpace | MultiDiscreteSpace) -> int:
    """Logits of a discrete space: n, or every sub-action's one after the other (sum of nvec)."""
    return space.n if isinstance(space, DiscreteSpace) else sum(space.nvec)


def is_discrete(space: ActionSpace) -> bool:
    """Chosen from logits (Discrete, MultiDiscrete), not from a Gaussian."""
    return isinstance(space, (DiscreteSpace, MultiDiscreteSpace))

CARTPOLE_OBSERVATION_SPACE = BoxSpace(shape=(4,))
CARTPOLE_ACTION_SPACE = DiscreteSpace(n=2)
