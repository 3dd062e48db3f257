"""Observation and action spaces, as the gateway configures and announces them.

Matching gymnasium's `Box`, `Discrete`, `MultiDiscrete` and (for observations) `Dict`;
serialisable as JSON so they can ride in `SET_CONFIG`, the REST config and the ONNX
metadata. A `uint8` box is a camera image [C, H, W] of values 0..255 (the policy scales
them); a float box of three dimensions, 4 or more a side, is a grid [H, W, C], channels
last (a board, a grid sensor: PettingZoo's, RLlib's and ML-Agents' layout). A dict observation travels flat: its
keys' values, each flattened, one after the other in the order the space declares them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

IMAGE_MAX = 255  # a uint8 box's values lie in 0..255
# A float box [H, W, C] with both sides this long or longer is a grid; a smaller one a 3x3
# convolution sees whole at once, with no pattern to share between places (tic-tac-toe's
# board learnt less in 10 minutes as a grid, bench/RESULTS.md): it goes flat into the MLPs.
GRID_MIN_SIDE = 4


class BoxSpace(BaseModel):
    """A box of float32 values, `low`/`high` scalars (`None` means unbounded), of three
    dimensions (4 or more a side) a grid [H, W, C]; or, with dtype `uint8`, an image [C, H, W] of integers 0..255."""

    model_config = ConfigDict(frozen=True)

    type: Literal["box"] = "box"
    shape: tuple[int, ...] = Field(min_length=1)
    low: float | None = None
    high: float | None = None
    dtype: Literal["float32", "uint8"] = Field("float32", description="uint8: an image [C, H, W] of values 0..255.")

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if any(d <= 0 for d in shape):
            raise ValueError(f"every dimension must be positive, got {shape}")
        return shape

    @model_validator(mode="after")
    def _image(self) -> BoxSpace:
        if self.dtype == "uint8":
            if len(self.shape) != 3:
                raise ValueError(f"a uint8 box is an image of shape [C, H, W], got shape {list(self.shape)}")
            if self.low not in (None, 0) or self.high not in (None, IMAGE_MAX):
                raise ValueError(f"a uint8 box holds 0..{IMAGE_MAX}: low and high, if given, must be 0 and {IMAGE_MAX}")
        return self

    @property
    def flat_dim(self) -> int:
        """Number of scalars in one element of the space."""
        return math.prod(self.shape)

    @property
    def is_image(self) -> bool:
        return self.dtype == "uint8"

    @property
    def is_grid(self) -> bool:
        """A float box [H, W, C] of sides GRID_MIN_SIDE or more: a board or a grid sensor, which the policy reads with a CNN."""
        return self.dtype == "float32" and len(self.shape) == 3 and min(self.shape[:2]) >= GRID_MIN_SIDE


class ObservationPart(NamedTuple):
    """One key of a dict observation (or a whole box): where its values lie in the flat observation."""

    key: str | None
    space: BoxSpace
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.space.flat_dim


class DictSpace(BaseModel):
    """Several observations by name (a camera image and a vector, say), sent flat: each
    key's values flattened, one key after the other in declaration order."""

    model_config = ConfigDict(frozen=True)

    type: Literal["dict"] = "dict"
    spaces: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")], BoxSpace] = Field(min_length=1, max_length=64)

    @property
    def flat_dim(self) -> int:
        return sum(space.flat_dim for space in self.spaces.values())

    @property
    def shape(self) -> tuple[int, ...]:
        """One observation on the wire: the flat vector."""
        return (self.flat_dim,)

    @property
    def is_image(self) -> bool:
        return False

    @property
    def is_grid(self) -> bool:
        return False


def _observation_kind(value: Any) -> str:
    """A box unless it says otherwise: observation spaces had no other kind before dicts."""
    if isinstance(value, dict):
        return value.get("type", "box")
    return getattr(value, "type", "box")


ObservationSpace = Annotated[
    Annotated[BoxSpace, Tag("box")] | Annotated[DictSpace, Tag("dict")], Discriminator(_observation_kind)
]


def architecture_json(space: BoxSpace | DictSpace | DiscreteSpace | MultiDiscreteSpace) -> dict[str, Any]:
    """The space as a checkpoint records it; a float32 box without its dtype, as before dtype existed."""
    data = space.model_dump(mode="json")
    if data.get("dtype") == "float32":
        del data["dtype"]
    return data


def observation_parts(space: BoxSpace | DictSpace) -> list[ObservationPart]:
    """The parts of a flat observation: a box is one, a dict one per key in order."""
    if isinstance(space, BoxSpace):
        return [ObservationPart(None, space, 0)]
    parts, offset = [], 0
    for key, box in space.spaces.items():
        parts.append(ObservationPart(key, box, offset))
        offset += box.flat_dim
    return parts


def has_images(space: BoxSpace | DictSpace) -> bool:
    """Some part is a uint8 image: the policy encodes it with a CNN."""
    return any(part.space.is_image for part in observation_parts(space))


def has_cnn_parts(space: BoxSpace | DictSpace) -> bool:
    """Some part is an image or a float grid [H, W, C]: PPO's policy encodes it with a CNN."""
    return any(part.space.is_image or part.space.is_grid for part in observation_parts(space))


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


Space = Annotated[BoxSpace | DiscreteSpace | MultiDiscreteSpace, Field(discriminator="type")]
ActionSpace = BoxSpace | DiscreteSpace | MultiDiscreteSpace


def sub_action_sizes(space: DiscreteSpace | MultiDiscreteSpace) -> tuple[int, ...]:
    """The choices of each sub-action of a discrete space: (n,), or nvec."""
    return (space.n,) if isinstance(space, DiscreteSpace) else tuple(space.nvec)


def num_logits(space: DiscreteSpace | MultiDiscreteSpace) -> int:
    """Logits of a discrete space: every sub-action's one after the other."""
    return sum(sub_action_sizes(space))


def is_discrete(space: ActionSpace) -> bool:
    """Chosen from logits (Discrete, MultiDiscrete), not from a Gaussian."""
    return isinstance(space, (DiscreteSpace, MultiDiscreteSpace))


def num_dist_inputs(action_space: ActionSpace) -> int:
    """Width of one step's `action_dist_inputs`: n logits for Discrete(n), sum(nvec) for a
    MultiDiscrete, a mean and a log_std per dimension for a Box (as
    app.training.policy.ActorCritic outputs them)."""
    if is_discrete(action_space):
        return num_logits(action_space)
    return 2 * action_space.flat_dim


def dist_inputs_layout(action_space: ActionSpace) -> str:
    """What one step's `action_dist_inputs` hold, in words (for error messages)."""
    if isinstance(action_space, DiscreteSpace):
        return f"{action_space.n} logits for Discrete({action_space.n})"
    if isinstance(action_space, MultiDiscreteSpace):
        return f"{num_logits(action_space)} logits, each sub-action's in turn, for MultiDiscrete({list(action_space.nvec)})"
    return f"a mean and a log_std for each of the Box's {action_space.flat_dim} dimensions"


CARTPOLE_OBSERVATION_SPACE = BoxSpace(shape=(4,))
CARTPOLE_ACTION_SPACE = DiscreteSpace(n=2)
