"""One module's experience on its way to the learner: its pending steps, in arrival order.

Positions count the module's env steps since start: `received` (added), `taken` (into a
batch, or dropped at shutdown), `finished` (their batch is done) and `released` (waiting
clients need not wait for steps up to here: they stay pending for a later batch). A
client that added steps is done waiting once `finished` or `released` reaches the
position its steps ended at. A batch takes at most `train_batch_size` steps: the last
chunk is cut where the batch is full (the head goes on past its end, bootstrapped like a
chunk a client cut; the tail waits for the next batch). No torch, no event loop here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from app.schemas import EpisodeChunk

_CHUNK_ARRAYS = ("actions", "rewards", "action_logp", "action_dist_inputs", "action_mask")  # one entry per step


@dataclass(frozen=True)
class PendingChunk:
    chunk: EpisodeChunk
    weights_seq_no: int | None  # the version that collected it, None if unknown


@dataclass(frozen=True)
class QueueLimits:
    """When one module's steps train, and how many may wait."""

    train_batch_size: int  # a batch is due at this many steps, and never holds more
    min_barrier_batch: int  # when every sampling client waits: train from this many steps, else carry them
    max_backlog: int  # clients that send it experience wait while more steps than this are pending (or owed)
    off_policy: bool  # trains as soon as it has data; never stale


class ModuleQueue:
    """The pending steps of one trainable module and where its batches stand."""

    def __init__(self, module_id: str, limits: QueueLimits, max_policy_lag: int) -> None:
        self.module_id = module_id
        self.limits = limits
        self.max_policy_lag = max_policy_lag
        self._chunks: deque[PendingChunk] = deque()
        self.pending_env_steps = 0
        self.received = 0
        self.taken = 0
        self.finished = 0
        self.released = 0
        # The versions in which this module last changed (oldest first): a chunk's lag is how
        # many of them came after the version that collected it.
        self._updates: deque[int] = deque(maxlen=max_policy_lag + 1)
        self.closed: str | None = None  # why the module trains no more (its steps are then dropped), or None

    def add(self, chunk: EpisodeChunk, weights_seq_no: int | None) -> None:
        self._chunks.append(PendingChunk(chunk, weights_seq_no))
        self.pending_env_steps += chunk.num_steps
        self.received += chunk.num_steps

    def take(self, limit: int) -> list[PendingChunk]:
        """The oldest pending steps, at most `limit` of them (the last chunk cut to fit)."""
        taken: list[PendingChunk] = []
        room = limit
        while self._chunks and room > 0:
            pending = self._chunks[0]
            if pending.chunk.num_steps <= room:
                taken.append(self._chunks.popleft())
                room -= pending.chunk.num_steps
                continue
            head, tail = split_chunk(pending.chunk, room)
            taken.append(PendingChunk(head, pending.weights_seq_no))
            self._chunks[0] = PendingChunk(tail, pending.weights_seq_no)
            room = 0
        steps = limit - room
        self.pending_env_steps -= steps
        self.taken += steps
        return taken

    def take_all(self) -> list[PendingChunk]:
        return self.take(self.pending_env_steps)

    def is_stale(self, pending: PendingChunk) -> bool:
        """Collected more than max_policy_lag versions of this module ago (never, off-policy)."""
        if self.limits.off_policy or pending.weights_seq_no is None:
            return False
        return len(self._updates) - bisect_right(self._updates, pending.weights_seq_no) > self.max_policy_lag

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


def split_chunk(chunk: EpisodeChunk, steps: int) -> tuple[EpisodeChunk, EpisodeChunk]:
    """The chunk's first `steps` steps (the episode goes on after them: neither flag set, no
    outcome) and the rest (which keeps its flags and outcome); observation `steps` is both
    the head's last and the tail's first."""
    head = chunk.model_copy(update={"is_terminated": False, "is_truncated": False, "outcome": None})
    tail = chunk.model_copy()
    head.obs, tail.obs = chunk.obs[: steps + 1], chunk.obs[steps:]
    for name in _CHUNK_ARRAYS:
        array = getattr(chunk, name)
        if array is not None:
            setattr(head, name, array[:steps])
            setattr(tail, name, array[steps:])
    return head, tail
