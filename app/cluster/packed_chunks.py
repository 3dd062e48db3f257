"""A front-end's pre-batched experience, for the hop to the learner actor.

Experience travels as blocks (app.experience): a few arrays per module and shape of chunk,
however many chunks. A call packs each client's blocks (one entry per client and
sampling flag, in order of first appearance; its blocks merged, one per module and
shape), so that the learner ingests once per client and call, not once per message, and
deserialises a handful of buffers. On arrival they are copied: Ray's deserialised arrays
are views of its object store, read-only, and would stay pinned while they wait to train.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.experience import ChunkBlock, ChunkBlocks, merged
from app.training.registry import ClientInfo

Sent = list[tuple[ClientInfo, list[ChunkBlock], bool]]  # (client, its blocks, sampling), in order


@dataclass
class PackedChunks:
    """What `RemoteTrainingService` sends in one call."""

    entries: Sent

    def unpack(self) -> list[tuple[ClientInfo, ChunkBlocks, bool]]:
        """The (client, chunks, sampling) sent, with arrays of their own (not the object store's)."""
        return [(client, ChunkBlocks([block.copy() for block in blocks]), sampling) for client, blocks, sampling in self.entries]


def pack(sent: Sent) -> PackedChunks:
    """Each client's blocks (per `sampling`) in one entry, merged per module and shape."""
    by_client: dict[tuple[int, bool], tuple[ClientInfo, list[ChunkBlock], bool]] = {}
    for client, blocks, sampling in sent:
        by_client.setdefault((client.id, sampling), (client, [], sampling))[1].extend(blocks)
    return PackedChunks([(client, merged(blocks), sampling) for client, blocks, sampling in by_client.values()])
