"""One module's experience on its way to the learner: its pending steps, in arrival order.

Positions count the module's env steps since start: `received` (added), `taken` (into a
batch, or dropped at shutdown), `finished` (their batch is done) and `released` (waiting
clients need not wait for steps up to here: they stay pending for a later batch). A
client that added steps is done waiting once `finished` or `released` reaches the
position its steps ended at. The steps wait as the blocks they came in (app.experience).
A batch takes at most `train_batch_size` steps: the last chunk is cut where the batch is
full (the head goes on past its end, bootstrapped like a chunk a client cut; the tail
waits for the next batch). No torch, no event loop here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from app.experience import ChunkBlock


@dataclass(frozen=True)
class QueueLimits:
    """When one module's steps train, and how many may wait."""

    train_batch_size: int  # a batch is due at this many steps, and never holds more
    min_barrier_batch: int  # when every sampling client waits: train from this many steps, else carry them
    max_backlog: int  # clients that send it experience wait while more steps than this are pending (or owed)
    off_policy: bool  # trains as soon as it has data; never stale
    whole_chunks: bool = False  # a recurrent module's: a batch ends at a chunk's end (one chunk may pass the size)


class ModuleQueue:
    """The pending steps of one trainable module and where its batches stand."""

    def __init__(self, module_id: str, limits: QueueLimits, max_policy_lag: int) -> None:
        self.module_id = module_id
        self.limits = limits
        self.max_policy_lag = max_policy_lag
        self._blocks: deque[ChunkBlock] = deque()
        self.pending_env_steps = 0
        self.received = 0
        self.taken = 0
        self.finished = 0
        self.released = 0
        # The versions in which this module last changed (oldest first): a chunk's lag is how
        # many of them came after the version that collected it.
        self._updates: deque[int] = deque(maxlen=max_policy_lag + 1)
        self.closed: str | None = None  # why the module trains no more (its steps are then dropped), or None

    def add(self, block: ChunkBlock) -> None:
        """Chunks of this module, their weights_seq_no the versions that collected them (None: unknown)."""
        self._blocks.append(block)
        self.pending_env_steps += block.num_steps
        self.received += block.num_steps

    def take(self, limit: int) -> list[ChunkBlock]:
        """The oldest pending steps, at most `limit` of them (the last chunk cut to fit; with
        `whole_chunks`, the last chunk whole: up to one chunk more)."""
        taken: list[ChunkBlock] = []
        room = limit
        while self._blocks and room > 0:
            block = self._blocks[0]
            if block.num_steps <= room:
                taken.append(self._blocks.popleft())
                room -= block.num_steps
                continue
            if self.limits.whole_chunks:
                head, rest = block.split_after_chunk(room)
                if rest is None:
                    self._blocks.popleft()
                else:
                    self._blocks[0] = rest
                taken.append(head)
                room -= head.num_steps
                break
            head, self._blocks[0] = block.split(room)
            taken.append(head)
            room = 0
        steps = limit - room
        self.pending_env_steps -= steps
        self.taken += steps
        return taken

    def take_all(self) -> list[ChunkBlock]:
        return self.take(self.pending_env_steps)

    def fresh(self, block: ChunkBlock) -> ChunkBlock:
        """The block's chunks collected at most max_policy_lag versions of this module ago
        (all of them off-policy, and those of unknown version)."""
        if self.limits.off_policy or not self._updates:
            return block
        fresh = {version: self._lag(version) <= self.max_policy_lag for version in set(block.weights_seq_no)}
        return block.select([fresh[version] for version in block.weights_seq_no])

    def _lag(self, version: int | None) -> int:
        """How many of the module's versions came after `version` (0 if unknown)."""
        return 0 if version is None else len(self._updates) - bisect_right(self._updates, version)

    def trained_in(self, weights_seq_no: int) -> None:
        """The module changed in version `weights_seq_no`."""
        self._updates.append(weights_seq_no)

    def carry(self) -> None:
        """Release the clients waiting on what is pending: it trains in a later batch."""
        self.released = self.received

    def done_with(self, mark: int) -> bool:
        """The steps up to `mark` are trained, dropped, or carried."""
        return self.finished >= mark or self.released >= mark

    def unreleased(self, mark: int) -> bool:
        """Steps up to `mark` are still pending and not carried (a waiter on them holds the barrier)."""
        return mark > max(self.taken, self.released)
