"""An EPISODES message's chunks as columns: a scene's many short chunks decoded and checked at once.

A scene of 64 agents sends 64 chunks of 8 steps per message. One chunk at a time, each
costs tens of microseconds whatever its length (its arrays made, pickled back from a
decode worker, unpickled and validated one by one): 12x the cost per env step of one
500-step chunk (bench/multi_agent.py). Here each field of all its chunks becomes one
array (parsed from the bytes by app/sansio/_columns.c when the chunks have one shape; else
`pack`: from orjson's lists, or for long chunks from app.sansio.json_arrays' arrays), a
group of such columns per kind of chunk, which a decode worker sends back in one piece;
the event loop then checks each column once per module, and the columns go on as a
block per module (app.experience) to the learner: no Python object per chunk.

A fast path with a reference, as app.sansio.json_arrays: what it cannot show to be valid it
declines (None), and the message takes the per-chunk path (EpisodeChunk's validators),
whose results and error messages stay the reference. It takes the common shapes only:
vector observations, Discrete or vector Box actions, the canonical field names, no
action masks. tests/test_chunk_columns.py compares both paths.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import chain
from operator import itemgetter, methodcaller
from types import NoneType
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import orjson

from app.experience import ChunkBlock, ChunkBlocks
from app.numeric_checks import EXACT_LIMIT_SQUARED, as_array, fast_floats
from app.sansio.json_arrays import loads_with_arrays
from app.schemas import MAX_WEIGHTS_SEQ_NO, EpisodeChunk
from app.settings.policies import UnknownModule, indices_by_module
from app.spaces.models import BoxSpace, DiscreteSpace, num_dist_inputs

try:  # compiled at set-up (setup.py); without a C compiler, pack's own path does the same work slower
    from app.sansio import _columns as compiled
except ImportError:  # pragma: no cover - where the extension is not built
    compiled = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from app.settings.policies import Module, PolicySet

MIN_CHUNKS = 2  # one chunk gains nothing: app.sansio.json_arrays decodes it
LISTS_MAX_BYTES_PER_CHUNK = 8 * 1024  # see loads_episodes
_ARRAYS = ("obs", "actions", "rewards", "action_logp", "action_dist_inputs")
_ROW_FIELDS = frozenset({"obs", "action_dist_inputs"})  # a row of numbers per step (per observation)
_SCALARS = ("agent_id", "module_id", "episode_id", "weights_seq_no", "outcome", "is_terminated", "is_truncated", "evaluation")
_REQUIRED = frozenset({"obs", "actions", "rewards", "is_terminated", "is_truncated"})  # as EpisodeChunk's
_KNOWN = frozenset(_ARRAYS + _SCALARS)
_ARRAYS_SET = frozenset(_ARRAYS)
_MAX_ID_LENGTH = {"agent_id": 256, "module_id": 64, "episode_id": 256}  # as EpisodeChunk's fields
_OUTCOMES_OR_NONE = frozenset({"win", "loss", "draw", None})
_CHUNK_DEFAULTS = {name: field.default for name, field in EpisodeChunk.model_fields.items()}
_SCALAR_DEFAULTS = tuple(_CHUNK_DEFAULTS[name] for name in _SCALARS)
# What a number field holds per step (`_row_shape`): rows of this shape or width, or single numbers (None).
RowShape: TypeAlias = "tuple[int, ...] | int | None"


def loads_episodes(body: bytes, keys: frozenset[str]) -> dict[str, Any] | None:
    """A large JSON body decoded: several episode chunks as one `ChunkColumns`, else the
    number lists under `keys` as arrays (app.sansio.json_arrays); None: orjson's path decides.

    Several chunks of one shape are parsed from the bytes by app/sansio/_columns.c where it
    is built. Else short chunks are packed from orjson's lists, long ones from
    app.sansio.json_arrays' arrays: per chunk, its Python calls cost more than orjson's
    floats up to ~8 kB of JSON a chunk (a decode worker's time for 64 chunks of 50 CartPole
    steps, 6 kB each: 2.05 vs 2.35 ms; of 130 steps, 15 kB each: 3.3 vs 2.6 ms). Chunks the
    columns decline end up as app.sansio.json_arrays' arrays, which the event loop
    validates quicker than lists; bodies with action masks, which the columns never take,
    go there directly.
    """
    several = _has_chunks(body, MIN_CHUNKS)
    if several and compiled is not None and (decoded := _parsed(body)) is not None:  # it declines action masks
        return decoded
    if several and b'"action_mask"' not in body and len(body) <= body.count(b'"obs"') * LISTS_MAX_BYTES_PER_CHUNK:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if type(decoded) is dict and (columns := pack(decoded.get("episodes"))) is not None:
            decoded["episodes"] = columns
            return decoded
    data = loads_with_arrays(body, keys)
    if data is not None and several and (columns := pack(data.get("episodes"))) is not None:
        data["episodes"] = columns
    return data


def _has_chunks(body: bytes, count: int) -> bool:
    """At least `count` chunks (their "obs" keys): found without reading all of a large body."""
    at = -1
    for _ in range(count):
        if (at := body.find(b'"obs"', at + 1)) < 0:
            return False
    return True


def _parsed(body: bytes) -> dict[str, Any] | None:
    """The message parsed by app/sansio/_columns.c, its chunks as one group of columns,
    when they all have one shape and it takes them; else None (the Python path decides)."""
    if (parsed := compiled.parse(body, _SCALAR_DEFAULTS)) is None:
        return None
    spans, fields, scalars = parsed
    arrays, lengths = {}, {}
    for name, (buffer, code, width, steps) in fields.items():
        array: np.ndarray = np.frombuffer(buffer, np.int64 if code == "q" else np.float32)
        if code == "f" and not np.vdot(array, array) < EXACT_LIMIT_SQUARED:  # as fast_floats
            return None
        arrays[name], lengths[name] = (array.reshape(-1, width) if width else array), steps
    decoded = {}
    for name, (start, end) in spans.items():  # the message's other fields
        try:
            decoded[name] = orjson.loads(body[start:end])
        except orjson.JSONDecodeError:
            return None
    count = len(lengths["actions"])
    if not (group := _Columns(list(range(count)), arrays, lengths, scalars)).valid():
        return None
    decoded["episodes"] = ChunkColumns(count, [group])
    return decoded


@dataclass
class ChunkColumns:
    """A message's chunks as columns, a group of them per shape of chunk (width of the
    observations and actions, number fields given): one group for a scene of one kind of
    agent, one per kind for a scene of several."""

    count: int
    groups: list[_Columns]

    def blocks(self, policies: PolicySet) -> ChunkBlocks | None:
        """The chunks as blocks, a block per module and group, checked as EpisodeChunk would
        check each (ChunkBlocks reads as the chunks, in the message's order); None if one
        may be invalid or is of a shape this path does not take."""
        blocks: list[ChunkBlock] = []
        placed: list[list[int]] = []  # each block's chunks' positions in the message
        for group in self.groups:
            if (checked := group.blocks(policies)) is None:
                return None
            for block, positions in checked:
                blocks.append(block)
                placed.append(positions)
        if list(chain.from_iterable(placed)) == list(range(self.count)):
            return ChunkBlocks(blocks)  # block after block is the message's order (one kind of agent, say)
        order: list[tuple[int, int]] = [(0, 0)] * self.count
        for index_of_block, positions in enumerate(placed):
            for index, position in enumerate(positions):
                order[position] = (index_of_block, index)
        return ChunkBlocks(blocks, order)


@dataclass
class _Columns:
    """Chunks of one shape as columns: `arrays[name]` holds field `name` of every chunk, one
    after the other, `lengths[name]` each chunk's share; `scalars[name]` one value per chunk
    (None where absent); `positions` where the chunks are in the message.

    What can be checked without the gateway's modules is checked where the columns are
    made (`valid`: in a decode worker, for a large body); the event loop then maps the
    chunks to modules and checks them against the modules' spaces (`blocks`)."""

    positions: list[int]
    arrays: dict[str, np.ndarray]
    lengths: dict[str, list[int]]
    scalars: dict[str, list[Any]]

    def blocks(self, policies: PolicySet) -> list[tuple[ChunkBlock, list[int]]] | None:
        """A block per module, with its chunks' positions in the message; None as `ChunkColumns.blocks`."""
        modules = self._modules(policies)
        if modules is None:
            return None
        by_module = indices_by_module(modules)
        for chunks in by_module:
            if not self._fits(modules[chunks[0]], chunks):
                return None
        block = self._block(modules[0].module_id)
        if len(by_module) == 1:
            return [(block, self.positions)]
        split = []
        for chunks in by_module:
            keep = [False] * len(modules)
            for index in chunks:
                keep[index] = True
            split.append((replace(block.select(keep), module_id=modules[chunks[0]].module_id), [self.positions[i] for i in chunks]))
        return split

    def _block(self, module_id: str) -> ChunkBlock:
        arrays, scalars = self.arrays, self.scalars
        return ChunkBlock(
            module_id,
            lengths=tuple(self.lengths["actions"]),
            obs=arrays["obs"],
            actions=arrays["actions"],
            rewards=arrays["rewards"],
            is_terminated=tuple(scalars["is_terminated"]),
            is_truncated=tuple(scalars["is_truncated"]),
            weights_seq_no=tuple(scalars["weights_seq_no"]),
            episode_id=tuple(scalars["episode_id"]),
            agent_id=tuple(scalars["agent_id"]),
            outcome=tuple(scalars["outcome"]),
            evaluation=tuple(scalars["evaluation"]),
            state_in=(None,) * len(self.lengths["actions"]),  # the columns decline chunks that carry one
            action_logp=arrays.get("action_logp"),
            action_dist_inputs=arrays.get("action_dist_inputs"),
        )

    def valid(self) -> bool:
        """The ids short strings or None, the flags, versions and outcomes as EpisodeChunk
        takes them, the lengths consistent: all that does not depend on the modules.
        (Where valid, the per-step fields' lengths become one list.)"""
        ids_valid = all(_short_ids(self.scalars[name], name) for name in _MAX_ID_LENGTH)
        if not (ids_valid and self._scalars_valid() and self._lengths_valid()):
            return False
        for name in self.arrays.keys() - {"obs"}:  # equal to the actions' lengths: one list, pickled back once
            self.lengths[name] = self.lengths["actions"]
        return True

    def _lengths_valid(self) -> bool:
        """As EpisodeChunk's model validator: one observation more than actions, one entry per
        action in the other per-step fields, an outcome only on a chunk that ends its episode."""
        steps = self.lengths["actions"]
        if [rows - 1 for rows in self.lengths["obs"]] != steps:
            return False
        if any(self.lengths[name] != steps for name in self.arrays if name not in ("obs", "actions")):
            return False
        outcomes = self.scalars["outcome"]
        if outcomes.count(None) == len(outcomes):  # no game (or none ended): at C speed
            return True
        done = zip(self.scalars["is_terminated"], self.scalars["is_truncated"])
        return all(outcome is None or terminated or truncated for outcome, (terminated, truncated) in zip(outcomes, done))

    def _modules(self, policies: PolicySet) -> list[Module] | None:
        """Each chunk's module, as EpisodeChunk's module_id validator decides it (the ids are `valid`)."""
        try:
            return policies.modules_for(self.scalars["agent_id"], self.scalars["module_id"])
        except UnknownModule:
            return None

    def _scalars_valid(self) -> bool:
        """The flags (evaluation too: False when absent) strict booleans, versions ints in
        EpisodeChunk's range, outcomes known. (Over whole columns at C
        speed, set(map(type, ...)): a scene's 64 chunks, one at a time, cost 30 us.)"""
        flags = (self.scalars["is_terminated"], self.scalars["is_truncated"], self.scalars["evaluation"])
        if any(set(map(type, column)) != {bool} for column in flags):
            return False
        versions, outcomes = self.scalars["weights_seq_no"], self.scalars["outcome"]
        kinds = set(map(type, versions))
        if not kinds <= {int, NoneType}:
            return False
        numbers = [value for value in versions if value is not None] if NoneType in kinds else versions
        if numbers and not (0 <= min(numbers) and max(numbers) <= MAX_WEIGHTS_SEQ_NO):
            return False
        return set(map(type, outcomes)) <= {str, NoneType} and set(outcomes) <= _OUTCOMES_OR_NONE

    def _fits(self, module: Module, chunks: list[int]) -> bool:
        """The chunks' observations, actions and policy outputs fit the module's spaces."""
        obs_space, action_space = module.observation_space, module.action_space
        if type(obs_space) is not BoxSpace or obs_space.is_image or obs_space.shape != self.arrays["obs"].shape[1:]:
            return False
        actions = _rows_of(self.arrays["actions"], self.lengths["actions"], chunks)
        if type(action_space) is DiscreteSpace:
            if actions.dtype != np.int64 or actions.view(np.uint64).max() >= action_space.n:  # negatives wrap around
                return False
        elif type(action_space) is not BoxSpace or actions.dtype != np.float32 or actions.shape[1:] != action_space.shape:
            return False
        dist_inputs = self.arrays.get("action_dist_inputs")
        return dist_inputs is None or dist_inputs.shape[1] == num_dist_inputs(action_space)


def pack(episodes: Any) -> ChunkColumns | None:
    """Decoded chunks (orjson's dicts and lists, or app.sansio.json_arrays' arrays) as columns;
    None unless there are several, with known fields only, their number fields lists of
    the kind EpisodeChunk's fast paths take (app.schemas: finite, moderate, not starting
    with a boolean) or arrays."""
    if type(episodes) is not list or len(episodes) < MIN_CHUNKS or not set(map(type, episodes)) <= {dict}:
        return None
    key_sets = set(map(frozenset, episodes))  # a chunk that ends its episode may have more fields (its outcome)
    if any(not _REQUIRED <= keys <= _KNOWN for keys in key_sets):
        return None
    by_shape: dict[tuple[tuple[str, RowShape], ...], list[int]] = {}
    if (shape := _one_shape(episodes, key_sets)) is not None:
        by_shape[shape] = list(range(len(episodes)))
    else:
        for position, chunk in enumerate(episodes):
            by_shape.setdefault(tuple((name, _row_shape(chunk[name])) for name in _ARRAYS if name in chunk), []).append(position)
    given = frozenset().union(*key_sets)
    groups = []
    for positions in by_shape.values():
        if (group := _pack_group([episodes[i] for i in positions], positions, given)) is None or not group.valid():
            return None
        groups.append(group)
    return ChunkColumns(len(episodes), groups)


def _one_shape(episodes: list[dict[str, Any]], key_sets: set[frozenset[str]]) -> tuple[tuple[str, RowShape], ...] | None:
    """The shape every chunk has, if they all have one: the same number fields, lists of the
    same row width in each (a scene of one kind of agent); else None (each chunk's is
    looked at then). At C speed: the per-chunk loop costs about 2 us a chunk."""
    names = {keys & _ARRAYS_SET for keys in key_sets}
    if len(names) != 1:
        return None
    shape: list[tuple[str, RowShape]] = []
    for name in (name for name in _ARRAYS if name in next(iter(names))):
        values = list(map(itemgetter(name), episodes))
        if not set(map(type, values)) <= {list}:
            return None
        try:
            firsts = list(map(itemgetter(0), values))
        except IndexError:  # an empty list: the per-chunk loop takes it, to decline it
            return None
        kinds = set(map(type, firsts))
        if kinds <= {list}:
            widths = set(map(len, firsts))
            if len(widths) != 1:
                return None
            shape.append((name, widths.pop()))
        elif list in kinds:
            return None
        else:
            shape.append((name, None))
    return tuple(shape)


def _row_shape(value: Any) -> RowShape:
    """What a number field holds per step: rows of some width, or single numbers (None)."""
    if type(value) is np.ndarray:
        row_shape: tuple[int, ...] = value.shape[1:]
        return row_shape
    return len(value[0]) if type(value) is list and value and type(value[0]) is list else None


def _pack_group(chunks: list[dict[str, Any]], positions: list[int], given: frozenset[str]) -> _Columns | None:
    """Chunks with the same number fields, rows of the same widths, as columns (`given`:
    the fields any chunk of the message has; the others are their defaults)."""
    arrays, lengths = {}, {}
    for name in _ARRAYS:
        if name in chunks[0]:
            values = list(map(itemgetter(name), chunks))
            if (array := _column(name, values)) is None:
                return None
            arrays[name], lengths[name] = array, list(map(len, values))
    defaults = _CHUNK_DEFAULTS
    scalars = {
        name: list(map(methodcaller("get", name, defaults[name]), chunks)) if name in given else [defaults[name]] * len(chunks)
        for name in _SCALARS
    }
    return _Columns(positions, arrays, lengths, scalars)


def _column(name: str, values: list[Any]) -> np.ndarray | None:
    """The chunks' values of one field, one after the other, as EpisodeChunk's validators
    would convert each (actions: int64 for Discrete, else float32); or None."""
    kinds = set(map(type, values))
    if kinds == {np.ndarray}:
        return _array_column(name, values)
    if kinds != {list} or not all(values):  # an empty list: the per-chunk path words its error
        return None
    return _actions_column(values) if name == "actions" else _float_column(values, name in _ROW_FIELDS)


def _array_column(name: str, values: list[np.ndarray]) -> np.ndarray | None:
    """app.sansio.json_arrays' int64 or float64 arrays as one, converted as `as_array` converts each."""
    try:
        array = np.concatenate(values)
    except ValueError:  # rows of different widths, or lists of different depths
        return None
    if name == "actions" and array.ndim == 1:
        return array  # Discrete: its dtype (int64) and range are checked with the module's spaces
    if array.ndim != (2 if name in _ROW_FIELDS or name == "actions" else 1):
        return None
    if name == "actions" and array.dtype.kind == "i":
        return None  # rows of integers: MultiDiscrete's, which the columns do not take
    try:
        return as_array(array, np.float32, name)
    except ValueError:  # NaN or infinite once float32
        return None


def _float_column(values: list[list[Any]], rows: bool) -> np.ndarray | None:
    """float32 [sum of lengths] (or [rows, width]) from the chunks' lists, or None."""
    firsts = map(itemgetter(0), values)  # values are non-empty lists (`_column`)
    if bool in set(map(type, map(_first_number, firsts) if rows else firsts)):
        return None  # EpisodeChunk's fast path declines a chunk whose first number is a boolean: its general path decides
    items: list[Any] = []
    deque(map(items.extend, values), 0)
    width = len(items[0]) if rows and type(items[0]) is list else None
    if rows and width is None:
        return None
    return fast_floats(items, np.float32, width, from_json=True)


def _actions_column(values: list[list[Any]]) -> np.ndarray | None:
    """Discrete actions as int64, vector Box actions as float32 rows, or None (rows of
    integers too: MultiDiscrete's, which the columns do not take)."""
    first = values[0][0]
    if type(first) is list:
        return None if type(_first_number(first)) is int else _float_column(values, rows=True)
    if type(first) is not int or bool in set(map(type, map(itemgetter(0), values))):
        return None
    items: list[Any] = []
    deque(map(items.extend, values), 0)
    array = np.empty(len(items), np.int64)
    try:
        # Refuses floats, lists and ints beyond int64. (The ignore: numpy's stub gives ndarray
        # `__buffer__` from Python 3.12 on only, though it has the buffer protocol on every one.)
        struct.pack_into(f"{len(items)}q", array, 0, *items)  # type: ignore[arg-type]
    except (struct.error, TypeError, ValueError, OverflowError):
        return None
    return array


def _short_ids(values: list[Any], name: str) -> bool:
    """Each value None or a string within the field's length limit."""
    if not set(map(type, values)) <= {str, NoneType}:
        return False
    return max(map(len, filter(None, values)), default=0) <= _MAX_ID_LENGTH[name]


def _first_number(value: list[Any]) -> Any:
    """The first item of a (nested) list: what EpisodeChunk's fast paths look at first."""
    while type(value) is list and value:
        value = value[0]
    return value


def _split(array: np.ndarray, lengths: Sequence[int]) -> list[np.ndarray]:
    """Views of consecutive pieces of `array`, of these lengths."""
    pieces, start = [], 0
    for length in lengths:
        pieces.append(array[start : start + length])
        start += length
    return pieces


def _rows_of(array: np.ndarray, lengths: list[int], chunks: list[int]) -> np.ndarray:
    """The rows of some chunks (all of them: the array itself)."""
    if len(chunks) == len(lengths):
        return array
    pieces = _split(array, lengths)
    return np.concatenate([pieces[i] for i in chunks])
