"""Experience as columns: a module's episode chunks as one array per field, from the parsed message to the learner's batch.

A scene of 64 agents sends 64 chunks of 8 steps per message. As one EpisodeChunk each,
every stage (validation, metrics, the module's queue, the batch) pays per chunk,
whatever its length. A `ChunkBlock` holds consecutive chunks of one module as columns:
each per-step field of every chunk in one array, one after the other, and each per-chunk
field in one list. The stages work on whole blocks (the chunks' returns are one
`np.add.reduceat`, a batch cut is a few slices), so a message costs one object per
module, not one per chunk.

`ChunkBlocks` is how blocks travel where chunks do (`Episodes.episodes`, the training
service's `ingest`): a sequence of EpisodeChunk, each built only when someone reads it.
`blocks_of` gives the blocks of any such sequence, grouping a plain list of chunks (thin
clients', tests'). A message's chunks of several shapes for one module (some with
`action_logp`, some without) become a block per shape, each in its chunks' order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from operator import itemgetter
from typing import Any, overload

import numpy as np

from app.schemas import CHUNK_FIELDS, EpisodeChunk, PrecheckedChunks, checked_chunk

_STEP_ARRAYS = ("actions", "rewards", "action_logp", "action_dist_inputs", "action_mask")  # one entry per step
_ARRAYS = ("obs", *_STEP_ARRAYS)
_CHUNK_FIELDS = (  # EpisodeChunk's
    "is_terminated", "is_truncated", "weights_seq_no", "episode_id", "agent_id", "outcome", "evaluation", "state_in"
)
_PER_CHUNK = ("lengths", *_CHUNK_FIELDS)
_array_fields, _chunk_fields = itemgetter(*_ARRAYS), itemgetter(*_CHUNK_FIELDS)  # a chunk's, from its __dict__


@dataclass(eq=False)
class ChunkBlock:
    """K consecutive chunks of one module as columns (N steps in all).

    The arrays hold each chunk's entries one after the other: `obs` [N + K, ...] (a chunk
    has one observation more than steps), the per-step fields [N, ...]. The per-chunk
    fields are tuples of K (`lengths`: each chunk's steps, at least 1): a message holds
    tens of chunks, for which a tuple is quicker to build and read than an array, and
    blocks waiting to train cost the garbage collector nothing (a tuple of numbers and
    strings drops out of its sight; lists made a full collection pass over every waiting
    block, which doubled the cost of ingesting a 500-step chunk).
    """

    module_id: str
    lengths: tuple[int, ...]
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    is_terminated: tuple[bool, ...]
    is_truncated: tuple[bool, ...]
    weights_seq_no: tuple[int | None, ...]  # the version that collected each chunk, where known
    episode_id: tuple[str | None, ...]
    agent_id: tuple[str | None, ...]
    outcome: tuple[str | None, ...]
    evaluation: tuple[bool, ...]
    state_in: tuple[np.ndarray | None, ...]  # a recurrent module's state at each chunk's first observation (None: zeros)
    action_logp: np.ndarray | None = None
    action_dist_inputs: np.ndarray | None = None
    action_mask: np.ndarray | None = None
    ends: tuple[int, ...] = field(init=False, repr=False)  # where each chunk's steps end (exclusive), in the step arrays
    num_steps: int = field(init=False)

    def __post_init__(self) -> None:
        self.ends = tuple(accumulate(self.lengths))
        self.num_steps = self.ends[-1] if self.ends else 0

    @property
    def num_chunks(self) -> int:
        return len(self.lengths)

    def as_module(self, module_id: str) -> ChunkBlock:
        """The block, as chunks of `module_id` (a population's member, for its module's)."""
        return self if module_id == self.module_id else replace(self, module_id=module_id)

    @property
    def evaluation_steps(self) -> int:
        """The steps of its evaluation chunks (never trained on)."""
        return sum(steps for steps, evaluation in zip(self.lengths, self.evaluation) if evaluation) if any(self.evaluation) else 0

    @property
    def starts(self) -> tuple[int, ...]:
        """Where each chunk's steps start, in the step arrays."""
        return (0, *self.ends[:-1]) if self.ends else ()

    def terminal_steps(self) -> list[int]:
        """The index of the last step of each terminated chunk (no bootstrap past it)."""
        return [end - 1 for end, terminated in zip(self.ends, self.is_terminated) if terminated]

    def step_obs(self) -> np.ndarray:
        """The observation each step acted on: `obs` without each chunk's last one [N, ...]."""
        return np.delete(self.obs, [end + i for i, end in enumerate(self.ends)], axis=0)

    def next_obs(self) -> np.ndarray:
        """The observation each step led to: `obs` without each chunk's first one [N, ...]."""
        return np.delete(self.obs, [start + i for i, start in enumerate(self.starts)], axis=0)

    def chunk_rewards(self) -> list[np.ndarray]:
        """Each chunk's rewards (views)."""
        return np.split(self.rewards, self.ends[:-1])

    def chunk_returns(self) -> list[float]:
        """Each chunk's summed rewards."""
        if len(self.lengths) == 1:  # a client's one chunk of many steps: half the time of reduceat
            return [float(self.rewards.sum(dtype=np.float64))]
        return np.add.reduceat(self.rewards.astype(np.float64), self.starts).tolist()  # half the time of reduceat's own cast

    # -- Cutting and joining ------------------------------------------------------------

    def split(self, steps: int) -> tuple[ChunkBlock, ChunkBlock]:
        """The first `steps` steps (0 < steps < num_steps) and the rest. A chunk cut in two
        goes on in the tail: its head is neither terminated nor truncated and has no
        outcome; the observation at the cut is both the head's last and the tail's first."""
        cut = bisect_left(self.ends, steps)  # the chunk the cut falls in (or ends at)
        if self.ends[cut] == steps:  # between chunks
            return self._chunks(0, cut + 1), self._chunks(cut + 1, self.num_chunks)
        obs_cut = steps + cut  # the observation at the cut (chunk `cut` starts `cut` rows later in obs than in the steps)
        head = self._slice(slice(0, cut + 1), self.obs[: obs_cut + 1], slice(0, steps))
        tail = self._slice(slice(cut, None), self.obs[obs_cut:], slice(steps, None))
        return (
            replace(
                head,
                lengths=(*head.lengths[:-1], steps - self.starts[cut]),
                is_terminated=(*head.is_terminated[:-1], False),
                is_truncated=(*head.is_truncated[:-1], False),
                outcome=(*head.outcome[:-1], None),
            ),
            replace(tail, lengths=(self.ends[cut] - steps, *tail.lengths[1:])),
        )

    def split_after_chunk(self, steps: int) -> tuple[ChunkBlock, ChunkBlock | None]:
        """The first whole chunks that hold at least `steps` steps, and the rest (None: none left):
        a recurrent module's cut, whose chunks cannot begin mid-way (the state there is unknown)."""
        last = bisect_left(self.ends, steps)
        if last + 1 >= self.num_chunks:
            return self, None
        return self._chunks(0, last + 1), self._chunks(last + 1, self.num_chunks)

    def select(self, keep: Sequence[bool]) -> ChunkBlock:
        """The chunks where `keep` is true, in order."""
        if all(keep):
            return self
        steps = np.repeat(keep, self.lengths)
        return replace(
            self,
            obs=self.obs[np.repeat(keep, [length + 1 for length in self.lengths])],
            **{name: array[steps] for name in _STEP_ARRAYS if (array := getattr(self, name)) is not None},
            **{name: tuple(value for value, kept in zip(getattr(self, name), keep) if kept) for name in _PER_CHUNK},
        )

    def with_versions(self, fallback: int | None) -> ChunkBlock:
        """Chunks that gave no weights_seq_no collected by `fallback` (None: still unknown)."""
        if fallback is None or None not in self.weights_seq_no:
            return self
        return replace(self, weights_seq_no=tuple(fallback if version is None else version for version in self.weights_seq_no))

    def copy(self) -> ChunkBlock:
        """The block with arrays of its own (Ray's deserialised ones are the object store's, read-only)."""
        return replace(self, **{name: np.array(value) for name, value in vars(self).items() if type(value) is np.ndarray})

    @classmethod
    def concat(cls, blocks: Sequence[ChunkBlock]) -> ChunkBlock:
        """Blocks of one module with the same fields and row shapes as one."""
        if len(blocks) == 1:
            return blocks[0]
        first = blocks[0]
        arrays = {name: np.concatenate([getattr(b, name) for b in blocks]) for name in _ARRAYS if getattr(first, name) is not None}
        per_chunk = {name: tuple(value for block in blocks for value in getattr(block, name)) for name in _PER_CHUNK}
        return cls(first.module_id, **arrays, **per_chunk)

    @classmethod
    def of(cls, chunks: Sequence[EpisodeChunk], module_id: str) -> ChunkBlock:
        """Chunks of one module with the same array fields and row shapes as one block."""
        fields = [chunk.__dict__ for chunk in chunks]  # quicker than pydantic's attribute lookups
        join = _first if len(chunks) == 1 else np.concatenate  # one chunk's arrays are the block's
        obs, actions, rewards, *optional = (None if v[0] is None else join(v) for v in zip(*map(_array_fields, fields)))
        lengths = tuple(len(f["actions"]) for f in fields)
        return cls(module_id, lengths, obs, actions, rewards, *zip(*map(_chunk_fields, fields)), *optional)  # the fields' order

    def chunks(self) -> list[EpisodeChunk]:
        """The chunks as EpisodeChunk, their arrays views of the block's (every field counted as given)."""
        ends, starts = self.ends, self.starts
        columns: dict[str, Sequence[Any]] = {
            "obs": [self.obs[start + i : end + i + 1] for i, (start, end) in enumerate(zip(starts, ends))],
            **{name: _pieces(getattr(self, name), starts, ends) for name in _STEP_ARRAYS},
            **{name: getattr(self, name) for name in _CHUNK_FIELDS},
            "module_id": (self.module_id,) * len(ends),
        }
        rows = zip(*(columns[name] for name in CHUNK_FIELDS))
        return [checked_chunk(dict(zip(CHUNK_FIELDS, values)), set(CHUNK_FIELDS)) for values in rows]

    # -- Helpers ------------------------------------------------------------------------

    def _chunks(self, first: int, stop: int) -> ChunkBlock:
        """Whole chunks, by index."""
        steps = slice(self.starts[first], self.ends[stop - 1])
        return self._slice(slice(first, stop), self.obs[steps.start + first : steps.stop + stop], steps)

    def _slice(self, chunks: slice, obs: np.ndarray, steps: slice) -> ChunkBlock:
        """Some chunks, given their observations and steps."""
        return replace(
            self,
            obs=obs,
            **{name: array[steps] for name in _STEP_ARRAYS if (array := getattr(self, name)) is not None},
            **{name: getattr(self, name)[chunks] for name in _PER_CHUNK},
        )


class ChunkBlocks(PrecheckedChunks):
    """A message's chunks held as blocks (a block per module and shape): a sequence of
    EpisodeChunk, each built when first read, in `order` (each chunk's block and index
    there, in message order; default: block after block)."""

    def __init__(self, blocks: list[ChunkBlock], order: list[tuple[int, int]] | None = None) -> None:
        self.blocks = blocks
        self.num_steps = sum(block.num_steps for block in blocks)
        self._order = order
        self._built: list[EpisodeChunk] | None = None

    def __len__(self) -> int:
        return sum(block.num_chunks for block in self.blocks)

    @overload
    def __getitem__(self, index: int) -> EpisodeChunk: ...
    @overload
    def __getitem__(self, index: slice) -> list[EpisodeChunk]: ...
    def __getitem__(self, index: int | slice) -> EpisodeChunk | list[EpisodeChunk]:
        return self._chunks()[index]

    def __iter__(self) -> Iterator[EpisodeChunk]:
        return iter(self._chunks())

    def _chunks(self) -> list[EpisodeChunk]:
        if self._built is None:
            built = [block.chunks() for block in self.blocks]
            order = self._order or [(b, i) for b, block in enumerate(self.blocks) for i in range(block.num_chunks)]
            self._built = [built[b][i] for b, i in order]
        return self._built


def _first(arrays: Sequence[np.ndarray]) -> np.ndarray:
    return arrays[0]


def _pieces(array: np.ndarray | None, starts: Sequence[int], ends: Sequence[int]) -> list[Any]:
    """Each chunk's entries of a per-step array (views; None for each if absent)."""
    return [None] * len(ends) if array is None else [array[start:end] for start, end in zip(starts, ends)]


def blocks_of(chunks: Sequence[EpisodeChunk], default_module_id: str) -> list[ChunkBlock]:
    """The chunks as blocks: a ChunkBlocks' own, else a block per module and shape (in the
    order each first appears; a module's chunks keep their order)."""
    if type(chunks) is ChunkBlocks:
        return chunks.blocks
    if len(chunks) == 1:  # a client's one chunk of many steps, a thin client's episode: nothing to group
        return [ChunkBlock.of(chunks, chunks[0].module_id or default_module_id)]
    groups: dict[tuple[Any, ...], list[EpisodeChunk]] = {}
    for chunk in chunks:
        groups.setdefault(_shape(chunk.module_id or default_module_id, chunk), []).append(chunk)
    return [ChunkBlock.of(members, key[0]) for key, members in groups.items()]


def merged(blocks: Sequence[ChunkBlock]) -> list[ChunkBlock]:
    """The blocks of each module and shape as one (in the order each first appears)."""
    groups: dict[tuple[Any, ...], list[ChunkBlock]] = {}
    for block in blocks:
        groups.setdefault(_shape(block.module_id, block), []).append(block)
    return [ChunkBlock.concat(members) for members in groups.values()]


def _shape(module_id: str, chunks: EpisodeChunk | ChunkBlock) -> tuple[Any, ...]:
    """What chunks in one block share: the module, each array's dtype and row shape (None if absent)."""
    arrays = (getattr(chunks, name) for name in _ARRAYS)
    return (module_id, *((a.dtype.str, a.shape[1:]) if a is not None else None for a in arrays))
