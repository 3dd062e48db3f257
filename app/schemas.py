"""Pydantic models of every RLlink message, as one union discriminated on `type`.

Requests accept every spelling found in RLlib's docs and code (see RLLINK.md).
Episode chunks are checked against the spaces of their module; the caller passes the
gateway's modules as validation context: `context={"policies": PolicySet(...)}`.
Validated chunks hold numpy arrays, ready for the learner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

import numpy as np
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SkipValidation,
    StrictBool,
    TypeAdapter,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from app.numeric_checks import (
    action_mask_array,
    as_array,
    check_action_mask,
    check_image_values,
    fast_floats,
    fast_indices,
    first_row_size,
    mask_allows,
    multi_discrete_actions,
)
from app.settings.hyperparameters import DEFAULT_MODULE_ID
from app.settings.policies import UnknownModule
from app.spaces.models import (
    BoxSpace,
    DiscreteSpace,
    MultiDiscreteSpace,
    ObservationSpace,
    Space,
    dist_inputs_layout,
    num_dist_inputs,
)

if TYPE_CHECKING:
    from app.settings.policies import Module, PolicySet

PROTOCOL_VERSION = "rllink-gateway/1"
MAX_WEIGHTS_SEQ_NO = 2**63 - 1  # what an int64 holds (app.experience keeps versions in one)


def _policies(info: ValidationInfo) -> PolicySet | None:
    """The gateway's modules, given as validation context `policies` (None: no checks)."""
    context = info.context or {}
    return context.get("policies")


def _spaces(info: ValidationInfo) -> Module | None:
    """The module whose spaces the chunk is checked against; None without context, or
    when the chunk's module could not be decided (that error is reported already)."""
    policies = _policies(info)
    if policies is None:
        return None
    return policies.modules.get(info.data.get("module_id"))


def _of(module: Module) -> str:
    """Which module's space an error is about, unless it is the one default module."""
    return "" if module.module_id == DEFAULT_MODULE_ID else f" (module {module.module_id!r})"


def _from_json(info: ValidationInfo) -> bool:
    """The caller says (context `from_json=True`) the data come from a JSON decoder."""
    context = info.context or {}
    return context.get("from_json", False)


class _Message(BaseModel):
    # RLlib clients ignore fields they do not know and so do we.
    model_config = ConfigDict(extra="ignore")


class EpisodeChunk(_Message):
    """A piece of one episode collected with one policy version (T steps)."""

    model_config = ConfigDict(extra="ignore", arbitrary_types_allowed=True, populate_by_name=True)

    # agent_id and module_id come first: the module they decide gives the spaces checked below.
    agent_id: str | None = Field(
        None, max_length=256, description="The agent whose trajectory this is (several agents share an episode_id)."
    )
    module_id: str | None = Field(
        None,
        max_length=64,
        validate_default=True,
        description="The module to train on it; default: the first policy_mapping glob matching agent_id.",
    )
    obs: np.ndarray = Field(description="T+1 observations: the first is the reset (or carried-over) one.")
    actions: np.ndarray = Field(description="T actions: ints (Discrete) or lists of floats (Box).")
    rewards: np.ndarray = Field(description="T rewards.")
    # Both done flags are mandatory (RLlink's docs list them as fields of every chunk; a
    # chunk without them would silently pass for one cut mid-episode), and strict: JSON
    # true/false (msgpack booleans), never 1, 0 or "yes".
    is_terminated: StrictBool = Field(
        validation_alias=AliasChoices("is_terminated", "terminated", "terminateds"),
        description="The episode ended in a terminal state (required; true or false).",
    )
    is_truncated: StrictBool = Field(
        validation_alias=AliasChoices("is_truncated", "truncated", "truncateds"),
        description="The episode was cut by a time limit (required; true or false).",
    )
    action_logp: np.ndarray | None = Field(None, description="T log-probs of the actions under the collecting policy.")
    action_dist_inputs: np.ndarray | None = Field(
        None,
        description="T policy outputs per step: n logits for Discrete(n), mean and log_std per dimension for a Box.",
    )
    action_mask: np.ndarray | None = Field(
        None,
        description="T masks, one 0/1 (or false/true) per logit: the actions allowed at each step "
        "(modules with action_masking; absent: all allowed).",
    )
    episode_id: str | None = Field(
        None,
        max_length=256,
        validation_alias=AliasChoices("episode_id", "id_"),
        description="Joins the chunks of one episode (gateway extension; RLlib's `id_`).",
    )
    weights_seq_no: int | None = Field(None, ge=0, le=MAX_WEIGHTS_SEQ_NO, description="Policy version that collected the chunk.")
    outcome: Literal["win", "loss", "draw"] | None = Field(
        None, description="How the agent's game ended, on the chunk that ends it (competitive games; feeds the rating)."
    )
    evaluation: StrictBool = Field(
        False, description="An evaluation episode (actions from the distribution's mode): never trained on, its return reported apart."
    )
    state_in: np.ndarray | None = Field(
        None,
        description="A recurrent module's state fed with the chunk's first observation (state_size floats; absent: "
        "zeros, for a chunk that starts its episode).",
    )

    @field_validator("state_in", mode="before")
    @classmethod
    def _state_in(cls, value: Any, info: ValidationInfo) -> np.ndarray | None:
        if value is None:
            return None
        array = as_array(value, np.float32, "state_in")
        if array.ndim != 1:
            raise ValueError("state_in must be a flat list of numbers")
        module = _spaces(info)
        if module is not None and len(array) != module.state_size:
            if not module.state_size:
                raise ValueError(f"state_in is for recurrent modules; this one{_of(module)} has no state (state_size 0)")
            raise ValueError(f"state_in must hold state_size = {module.state_size} numbers{_of(module)}, got {len(array)}")
        return array

    @field_validator("module_id")
    @classmethod
    def _module(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The module the chunk trains: named, or mapped from its agent; refused if none or frozen."""
        policies = _policies(info)
        if policies is None or "agent_id" not in info.data:  # no checks, or agent_id is invalid itself
            return value
        try:
            return policies.module_for(info.data["agent_id"], value).module_id
        except UnknownModule as exc:
            raise ValueError(str(exc)) from None

    @field_validator("obs", mode="before")
    @classmethod
    def _obs(cls, value: Any, info: ValidationInfo) -> np.ndarray:
        spaces = _spaces(info)
        shape = spaces.observation_space.shape if spaces is not None else ()
        array = as_array(value, np.float32, "obs", shape[0] if len(shape) == 1 else None, _from_json(info))
        if spaces is not None and array.shape[1:] != spaces.observation_space.shape:
            raise ValueError(
                f"each observation must have shape {list(spaces.observation_space.shape)}{_of(spaces)}, "
                f"got {list(array.shape[1:])}"
            )
        if array.ndim < 2 or len(array) < 2:
            raise ValueError("obs must hold at least 2 observations (T+1 with T >= 1)")
        if spaces is not None:
            check_image_values(array, spaces.observation_space, "obs", _of(spaces))
        return array

    @field_validator("actions", mode="before")
    @classmethod
    def _actions(cls, value: Any, info: ValidationInfo) -> np.ndarray:
        spaces = _spaces(info)
        space = spaces.action_space if spaces else None
        if isinstance(space, DiscreteSpace):
            if type(value) in (list, np.ndarray) and (ints := fast_indices(value, space.n)) is not None:
                return ints
            array = as_array(value, np.float64, "actions")
            if array.ndim != 1 or not np.all(array == np.floor(array)):
                raise ValueError(f"actions must be a list of integers for a Discrete action space{_of(spaces)}")
            if array.size and (array.min() < 0 or array.max() >= space.n):
                raise ValueError(f"actions must lie in 0..{space.n - 1}{_of(spaces)}")
            return array.astype(np.int64)
        if isinstance(space, MultiDiscreteSpace):
            return multi_discrete_actions(value, space, _of(spaces))
        array = as_array(value, np.float32, "actions", first_row_size(value), _from_json(info))
        if isinstance(space, BoxSpace) and array.shape[1:] != space.shape:
            raise ValueError(f"each action must have shape {list(space.shape)}{_of(spaces)}, got {list(array.shape[1:])}")
        return array

    @field_validator("action_mask", mode="before")
    @classmethod
    def _action_mask(cls, value: Any, info: ValidationInfo) -> np.ndarray | None:
        if value is None:
            return None
        mask = action_mask_array(value, "action_mask")
        spaces = _spaces(info)
        if spaces is None:
            return mask
        check_action_mask(mask, spaces, "action_mask")
        actions = info.data.get("actions")
        if actions is not None and len(actions) == len(mask):  # else the lengths' error says it
            allowed = mask_allows(mask, actions, spaces.action_space)
            if not allowed.all():
                step = int(np.argmin(allowed))
                raise ValueError(f"actions[{step}] is an action that action_mask[{step}] forbids")
        return mask

    @field_validator("rewards", "action_logp", mode="before")
    @classmethod
    def _per_step_floats(cls, value: Any, info: ValidationInfo) -> np.ndarray | None:
        if value is None:
            return None
        array = as_array(value, np.float32, info.field_name)
        if array.ndim != 1:
            raise ValueError(f"{info.field_name} must be a flat list of numbers")
        return array

    @field_validator("action_dist_inputs", mode="before")
    @classmethod
    def _dist_inputs(cls, value: Any, info: ValidationInfo) -> np.ndarray | None:
        if value is None:
            return None
        array = as_array(value, np.float32, "action_dist_inputs", first_row_size(value), _from_json(info))
        if array.ndim != 2:
            raise ValueError("action_dist_inputs must be a list of T vectors")
        spaces = _spaces(info)
        if spaces is not None and array.shape[1] != (width := num_dist_inputs(spaces.action_space)):
            raise ValueError(
                f"each action_dist_inputs vector must hold {width} values for the action space "
                f"({dist_inputs_layout(spaces.action_space)}){_of(spaces)}, got {array.shape[1]}"
            )
        return array

    @model_validator(mode="after")
    def _lengths(self) -> EpisodeChunk:
        steps = len(self.actions)
        if len(self.obs) != steps + 1:
            raise ValueError(f"obs must hold len(actions) + 1 = {steps + 1} observations, got {len(self.obs)}")
        for name in ("rewards", "action_logp", "action_dist_inputs", "action_mask"):
            array = getattr(self, name)
            if array is not None and len(array) != steps:
                raise ValueError(f"{name} must hold len(actions) = {steps} entries, got {len(array)}")
        if self.outcome is not None and not (self.is_terminated or self.is_truncated):
            raise ValueError("outcome belongs on the chunk that ends the agent's episode (is_terminated or is_truncated true)")
        return self

    @property
    def num_steps(self) -> int:
        return len(self.actions)


CHUNK_FIELDS = tuple(EpisodeChunk.model_fields)
# The fields of a chunk that hold numbers per step: JSON decoders may give them as arrays.
ARRAY_FIELDS = frozenset({"obs", "actions", "rewards", "action_logp", "action_dist_inputs", "action_mask", "state_in"})

_new_chunk = EpisodeChunk.__new__
_set = object.__setattr__


def checked_chunk(values: dict[str, Any], fields_set: set[str]) -> EpisodeChunk:
    """`EpisodeChunk.model_construct` for values already checked, every field given (`fields_set`:
    those the client sent), without its per-field alias lookups: 5.4 vs 0.9 us (a test holds
    the two equal)."""
    chunk = _new_chunk(EpisodeChunk)
    _set(chunk, "__pydantic_fields_set__", fields_set)
    _set(chunk, "__dict__", values)
    _set(chunk, "__pydantic_extra__", None)
    _set(chunk, "__pydantic_private__", None)
    return chunk


class PrecheckedChunks(Sequence[EpisodeChunk]):
    """A message's chunks checked before the message is (app.experience.ChunkBlocks, from
    the columns path): `Episodes` takes them as they are."""

    num_steps: int


def _prechecked_as_they_are(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    return value if isinstance(value, PrecheckedChunks) else handler(value)


# -- Requests (client -> server) ---------------------------------------------------


class Ping(_Message):
    type: Literal["PING"] = "PING"
    token: SecretStr | None = Field(
        None, description="Gateway extension: the shared secret, in a client's first PING when auth is on."
    )


class DeclaredSpaces(BaseModel):
    """One module's spaces as the game declares them in `GET_CONFIG`."""

    model_config = ConfigDict(extra="forbid")

    observation_space: ObservationSpace | None = None
    action_space: Space | None = None


class GetConfig(_Message):
    """May carry the game's own spaces (RLLINK.md, "Spaces the game declares"): the default
    module's, or `policies` by module id; the gateway checks them against its modules."""

    type: Literal["GET_CONFIG"] = "GET_CONFIG"
    observation_space: ObservationSpace | None = None
    action_space: Space | None = None
    policies: dict[str, DeclaredSpaces] | None = None


class GetState(_Message):
    type: Literal["GET_STATE"] = "GET_STATE"


class Episodes(_Message):
    """Finished experience; `EPISODES` gets no reply."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["EPISODES"] = "EPISODES"
    episodes: Annotated[list[EpisodeChunk], WrapValidator(_prechecked_as_they_are)] = Field(min_length=1)
    env_steps: int | None = Field(
        None, ge=0, validation_alias=AliasChoices("env_steps", "timesteps"), description="Steps in this message."
    )

    @property
    def num_steps(self) -> int:
        if isinstance(self.episodes, PrecheckedChunks):
            return self.episodes.num_steps
        return sum(chunk.num_steps for chunk in self.episodes)


class EpisodesAndGetState(Episodes):
    """Experience, answered with `SET_STATE` once the policy has trained on it."""

    type: Literal["EPISODES_AND_GET_STATE"] = "EPISODES_AND_GET_STATE"  # type: ignore[assignment]


# -- Thin clients: the gateway runs the policy and builds the episodes --------------


def _observation(value: Any) -> np.ndarray:
    """One observation as float32 (its shape is checked against the episode's module later)."""
    array = as_array(value, np.float32, "obs")
    if array.ndim == 0:
        raise ValueError("obs must be a list of numbers (one observation)")
    return array


class _EpisodeRequest(_Message):
    model_config = ConfigDict(extra="ignore", arbitrary_types_allowed=True)

    episode_id: str = Field(min_length=1, max_length=256, description="An episode opened with START_EPISODE.")


class StartEpisode(_Message):
    """Open an episode the gateway builds from this client's GET_ACTION / LOG_* requests."""

    type: Literal["START_EPISODE"] = "START_EPISODE"
    episode_id: str | None = Field(None, min_length=1, max_length=256, description="Default: a new unique id.")
    agent_id: str | None = Field(None, max_length=256, description="Its module is the policy_mapping's for it.")
    module_id: str | None = Field(None, max_length=64, description="The module that acts (wins over agent_id).")
    training_enabled: StrictBool = Field(True, description="False: served but never trained on.")
    evaluation: StrictBool = Field(
        False, description="An evaluation episode: actions from the distribution's mode, never trained on, its return reported apart."
    )


@dataclass(slots=True)
class ActionRequests:
    """GET_ACTION's observations to act on, as columns: one entry per request (a single
    request is one), in order. Columns, not an object per item, so that a batch is
    checked, stacked and answered with a few array operations."""

    episode_ids: list[str]
    obs: np.ndarray | list[np.ndarray]  # float32 [n, *shape] when all rows have one length, else a row each (shapes checked later)
    explore: list[bool]  # False: the deterministic action (argmax, or the mean)
    action_masks: list[np.ndarray | None]  # float32 0/1 [k] per request, None: all allowed (checked later)

    def __len__(self) -> int:
        return len(self.episode_ids)


def _one_mask(value: Any, what: str = "action_mask") -> np.ndarray | None:
    """One step's action mask [k] (None: all actions allowed)."""
    return None if value is None else action_mask_array([value], what)[0]


def _batch_item(i: int, convert: Callable[[Any], Any], value: Any) -> Any:
    """`convert(value)` for batch item i; its error names the item."""
    try:
        return convert(value)
    except ValueError as exc:
        raise ValueError(f"batch item {i}: {exc}") from None


class GetAction(_Message):
    """One observation (`episode_id`, `obs`) or many (`batch`) to act on; answered by ACTION."""

    model_config = ConfigDict(extra="ignore", arbitrary_types_allowed=True)

    type: Literal["GET_ACTION"] = "GET_ACTION"
    episode_id: str | None = Field(None, min_length=1, max_length=256)
    obs: np.ndarray | None = None
    explore: StrictBool = True
    action_mask: np.ndarray | None = Field(
        None, description="The actions allowed now, one 0/1 per logit (modules with action_masking)."
    )
    batch: Annotated[ActionRequests | None, SkipValidation] = Field(
        None, description="Many at once, [{episode_id, obs, explore?, action_mask?}, ...], answered in order."
    )

    _obs = field_validator("obs", mode="before")(classmethod(lambda cls, value: None if value is None else _observation(value)))
    _mask = field_validator("action_mask", mode="before")(classmethod(lambda cls, value: _one_mask(value)))

    @field_validator("batch", mode="before")
    @classmethod
    def _batch(cls, value: Any, info: ValidationInfo) -> ActionRequests | None:
        """The batch's items, each field checked for all items at once; observations of
        one length become one array. An error names the first bad item."""
        if value is None:
            return None
        if type(value) is not list or not value:
            raise ValueError("batch must be a non-empty list of {episode_id, obs, explore?}")
        if list(map(type, value)) != [dict] * len(value):
            i = next(i for i, item in enumerate(value) if type(item) is not dict)
            raise ValueError(f"batch item {i} must be an object {{episode_id, obs, explore?}}")
        ids = [item.get("episode_id") for item in value]
        if set(map(type, ids)) != {str} or min(map(len, ids)) < 1 or max(map(len, ids)) > 256:
            i = next(i for i, episode_id in enumerate(ids) if type(episode_id) is not str or not 1 <= len(episode_id) <= 256)
            raise ValueError(f"batch item {i}: episode_id must be a string of 1 to 256 characters")
        explore = [item.get("explore", True) for item in value]
        if set(map(type, explore)) != {bool}:
            i = next(i for i, flag in enumerate(explore) if type(flag) is not bool)
            raise ValueError(f"batch item {i}: explore must be true or false")
        masks = [item.get("action_mask") for item in value]
        if any(mask is not None for mask in masks):
            masks = [_batch_item(i, _one_mask, mask) for i, mask in enumerate(masks)]
        observations = [item.get("obs") for item in value]
        obs = fast_floats(observations, np.float32, first_row_size(observations), _from_json(info))
        if obs is None:
            obs = [_batch_item(i, _observation, row) for i, row in enumerate(observations)]
        return ActionRequests(ids, obs, explore, masks)

    @model_validator(mode="after")
    def _one_or_a_batch(self) -> GetAction:
        single = self.episode_id is not None or self.obs is not None or self.action_mask is not None
        if self.batch is not None and single:
            raise ValueError("give either episode_id and obs, or batch, not both")
        if self.batch is None and (self.episode_id is None or self.obs is None):
            raise ValueError("give episode_id and obs (or a batch of them)")
        return self

    @property
    def requests(self) -> ActionRequests:
        if self.batch is not None:
            return self.batch
        return ActionRequests([self.episode_id], self.obs[None], [self.explore], [self.action_mask])


class LogAction(_EpisodeRequest):
    """An action the client chose itself (a human, a script): recorded, not answered."""

    type: Literal["LOG_ACTION"] = "LOG_ACTION"
    obs: np.ndarray = Field(description="The observation the action was chosen on.")
    action: int | list[int] | list[float] | list[list[float]] = Field(description="As in a chunk's actions.")
    action_mask: np.ndarray | None = Field(None, description="The actions that were allowed (modules with action_masking).")

    _obs = field_validator("obs", mode="before")(classmethod(lambda cls, value: _observation(value)))
    _mask = field_validator("action_mask", mode="before")(classmethod(lambda cls, value: _one_mask(value)))


class LogReturns(_EpisodeRequest):
    """Reward for the episode's last action (added up if sent more than once); not answered."""

    type: Literal["LOG_RETURNS"] = "LOG_RETURNS"
    reward: float = Field(allow_inf_nan=False)

    @field_validator("reward", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, (bool, str)):
            raise ValueError("reward must be a number")
        return value


class EndEpisode(_EpisodeRequest):
    """The episode's final observation and how it ended; not answered."""

    type: Literal["END_EPISODE"] = "END_EPISODE"
    obs: np.ndarray
    is_terminated: StrictBool = True
    is_truncated: StrictBool = False

    _obs = field_validator("obs", mode="before")(classmethod(lambda cls, value: _observation(value)))


# -- Responses (server -> client) --------------------------------------------------


class Pong(_Message):
    type: Literal["PONG"] = "PONG"


ActionDistribution = Literal["categorical", "multi_categorical", "gaussian", "squashed_gaussian"]
ActionNoise = Literal["white", "pink"]


class PolicyDescription(BaseModel):
    """What a client needs to play one module: one entry of `SET_CONFIG.policies`."""

    observation_space: ObservationSpace
    action_space: Space
    onnx_input_name: str
    onnx_output_names: list[str]
    onnx_action_mask_input_name: str | None = Field(
        None, description="The model's second input, the action mask [batch, k] (1 allowed, 0 not); None: no masking."
    )
    action_distribution: ActionDistribution = Field(description="How to turn the model's output into an action.")
    action_noise: ActionNoise = Field(
        "white", description="A Box action's N(0, 1) draws: white (new each step) or pink (each episode's drift; the "
        "gateway's docs, \"Exploration noise\", give the process every kit computes)."
    )
    state_size: int = Field(
        0, description="Floats of one agent's recurrent state: the model's state_in and state_out [batch, state_size] "
        "(RLLINK.md, Recurrent policies); 0: a feed-forward model."
    )
    trainable: bool = Field(description="False for a frozen self-play opponent: play it, send none of its experience.")


class SetConfig(_Message):
    """RLlink's config reply; fields after the first two are gateway extensions. The
    unprefixed spaces and names (and state_size) are the default module's."""

    type: Literal["SET_CONFIG"] = "SET_CONFIG"
    env_steps_per_sample: int
    force_on_policy: bool
    observation_space: ObservationSpace
    action_space: Space
    onnx_input_name: str
    onnx_output_names: list[str]
    onnx_action_mask_input_name: str | None = None
    action_distribution: ActionDistribution
    action_noise: ActionNoise = "white"
    state_size: int = 0
    policies: dict[str, PolicyDescription] = Field(description="Every module, by module_id.")
    policy_mapping: dict[str, str] = Field(description="agent_id glob -> module_id; the first glob that matches wins.")
    default_module_id: str = Field(description="The module of chunks with neither agent_id nor module_id.")
    env_params: dict[str, float | int | str | bool] = Field(
        default_factory=dict, description="The environment parameters' current values (curriculum lessons included)."
    )
    evaluation_interval: int = Field(
        0, ge=0, description="Play every Nth episode of each env as an evaluation episode (`evaluation: true`); 0: none."
    )
    protocol_version: str = PROTOCOL_VERSION


class SetState(_Message):
    type: Literal["SET_STATE"] = "SET_STATE"
    onnx_file: str = Field(description="base64 of the gzip-compressed ONNX policy of the default module.")
    weights_seq_no: int = Field(ge=0, description="Version of those weights, strictly increasing.")
    onnx_files: dict[str, str] = Field(
        default_factory=dict, description="Every module's ONNX policy, by module_id (gateway extension)."
    )
    env_params: dict[str, float | int | str | bool] | None = Field(
        None, description="The environment parameters' new values, after a curriculum lesson changed them (gateway extension)."
    )


class EpisodeStarted(_Message):
    type: Literal["EPISODE_STARTED"] = "EPISODE_STARTED"
    episode_id: str
    evaluation: Literal[True] | None = Field(
        None, description="Present where the episode is an evaluation one (asked, or the gateway's evaluation_interval): "
        "played with the mode, never trained on (gateway extension)."
    )


class Action(_Message):
    """The answer to GET_ACTION: `episode_id` and `action`, or `actions` for a batch, in its order."""

    type: Literal["ACTION"] = "ACTION"
    episode_id: str | None = None
    action: Any | None = None
    actions: list[Any] | None = None
    weights_seq_no: int = Field(ge=0, description="The policy version that chose the action(s).")


class Error(_Message):
    """The gateway's answer to a request it refuses (gateway extension)."""

    type: Literal["ERROR"] = "ERROR"
    code: str
    message: str
    details: Any | None = None


# The unions spelled out once: pydantic picks the class by `type`, mypy reads the members.
Request = Annotated[
    Ping | GetConfig | GetState | Episodes | EpisodesAndGetState | StartEpisode | GetAction | LogAction | LogReturns | EndEpisode,
    Field(discriminator="type"),
]
Response = Annotated[Pong | SetConfig | SetState | EpisodeStarted | Action | Error, Field(discriminator="type")]
_REQUESTS: tuple[type[BaseModel], ...] = get_args(get_args(Request)[0])
_RESPONSES: tuple[type[BaseModel], ...] = get_args(get_args(Response)[0])
RLlinkMessage = Annotated[Union[_REQUESTS + _RESPONSES], Field(discriminator="type")]  # noqa: UP007 - of a tuple

REQUEST_TYPES = frozenset(cls.model_fields["type"].default for cls in _REQUESTS)
RESPONSE_TYPES = frozenset(cls.model_fields["type"].default for cls in _RESPONSES)
# Requests answered with nothing (unless refused: then an ERROR, in their turn).
NO_REPLY_TYPES = frozenset({"EPISODES", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE"})

request_adapter: TypeAdapter[Request] = TypeAdapter(Request)
message_adapter: TypeAdapter[RLlinkMessage] = TypeAdapter(RLlinkMessage)
