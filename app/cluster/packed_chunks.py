"""A front-end's pre-batched experience as a few arrays, for the hop to the learner actor.

Sent as they are, chunks pickle as pydantic models with up to six arrays each, and the
learner deserialises every array and copies it out of Ray's object store: per env step,
a third of what a front-end spends on the whole message (bench/scale_out.py, 500-step
chunks). Packed, the chunks of one shape (their array fields, dtypes, row shapes) share
one array per field and one list per other field: a handful of buffers per call, copied
once on arrival, each chunk a view of them again (`unpack`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.schemas import ARRAY_FIELDS, EpisodeChunk, checked_chunk
from app.training.registry import ClientInfo

_FIELDS = tuple(EpisodeChunk.model_fields)
_ARRAYS = tuple(name for name in _FIELDS if name in ARRAY_FIELDS)
_SCALARS = tuple(name for name in _FIELDS if name not in ARRAY_FIELDS)

Sent = list[tuple[ClientInfo, list[EpisodeChunk], bool]]  # (client, its chunks, sampling), in order


@dataclass
class _Group:
    """Chunks of one shape: `arrays[name]` holds field `name` of each, one after the other
    (`lengths[name]` each one's share); `scalars[name]` one value per chunk."""

    fields_set: set[str]  # the fields their clients gave
    arrays: dict[str, np.ndarray]
    lengths: dict[str, list[int]]
    scalars: dict[str, list[Any]]

    def chunks(self) -> list[EpisodeChunk]:
        names = (*self.arrays, *self.scalars, *(name for name in _ARRAYS if name not in self.arrays))
        columns = [
            *(_pieces(np.array(array), self.lengths[name]) for name, array in self.arrays.items()),  # copied: ours now
            *self.scalars.values(),
        ]
        absent = (None,) * (len(names) - len(columns))
        return [checked_chunk(dict(zip(names, (*values, *absent))), set(self.fields_set)) for values in zip(*columns)]


@dataclass
class PackedChunks:
    """What `RemoteTrainingService` sends in one call: each entry's client, how many chunks
    it sent and whether it samples; the chunks in groups of one shape, `group_of` saying
    which group holds each chunk, in order."""

    entries: list[tuple[ClientInfo, int, bool]]
    groups: list[_Group]
    group_of: list[int]

    def unpack(self) -> Sent:
        """The (client, chunks, sampling) sent, with arrays of their own (not the object store's)."""
        built = [iter(group.chunks()) for group in self.groups]
        chunks = [next(built[group]) for group in self.group_of]
        sent, start = [], 0
        for client, count, sampling in self.entries:
            sent.append((client, chunks[start : start + count], sampling))
            start += count
        return sent


def pack(sent: Sent) -> PackedChunks:
    """Pack what front-end clients sent, each client's chunks (per `sampling`) in one entry
    in their order: the learner then ingests once per client and call, not once per message."""
    merged: dict[tuple[int, bool], tuple[ClientInfo, list[EpisodeChunk], bool]] = {}
    for client, chunks, sampling in sent:
        merged.setdefault((client.id, sampling), (client, [], sampling))[1].extend(chunks)
    sent = list(merged.values())
    members: dict[tuple, list[EpisodeChunk]] = {}
    group_of, index = [], {}
    for _, chunks, _ in sent:
        for chunk in chunks:
            shape = _shape(chunk)
            if shape not in index:
                index[shape] = len(index)
                members[shape] = []
            members[shape].append(chunk)
            group_of.append(index[shape])
    groups = [_group(chunks, shape) for shape, chunks in members.items()]
    return PackedChunks([(client, len(chunks), sampling) for client, chunks, sampling in sent], groups, group_of)


def _shape(chunk: EpisodeChunk) -> tuple:
    """What chunks packed together share: (field, dtype, row shape) of each array they have,
    and last the fields their clients gave."""
    values = chunk.__dict__
    arrays = tuple((name, values[name].dtype.str, values[name].shape[1:]) for name in _ARRAYS if values[name] is not None)
    return (*arrays, frozenset(chunk.model_fields_set))


def _group(chunks: list[EpisodeChunk], shape: tuple) -> _Group:
    arrays, lengths = {}, {}
    for name, _, _ in shape[:-1]:
        pieces = [getattr(chunk, name) for chunk in chunks]
        arrays[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        lengths[name] = [len(piece) for piece in pieces]
    scalars = {name: [getattr(chunk, name) for chunk in chunks] for name in _SCALARS}
    return _Group(set(shape[-1]), arrays, lengths, scalars)


def _pieces(array: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
    """Views of consecutive pieces of `array`, of these lengths."""
    ends = np.cumsum(lengths).tolist()
    return [array[end - length : end] for end, length in zip(ends, lengths)]
