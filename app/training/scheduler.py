"""When to train: each module's pending steps, its batches, who waits for which, and who is held.

Every trainable module has its own queue (module_queue.py) and limits. A module's batch
is due when it holds `train_batch_size` steps (a batch never holds more: the rest waits
for the next one) or `barrier_timeout_s` after its oldest pending step arrived; an
off-policy module's as soon as it has data or owes gradient steps. When every sampling
client waits for training (so a lone client never waits on others; thin clients, whose
chunks the gateway builds, hold nobody back), the modules holding at least
`min_barrier_batch` steps train too, or, if none does, the one holding the most; the
others carry their steps to a later batch and let their waiters go on: the version they
get is, for those modules, the one that collected the steps, so these are not stale. So
a module with a small share of a scene trains on batches of its own size. Every module
due trains in one learner turn, one turn at a time; a turn is one new version.

Chunks collected more than `max_policy_lag` versions *of their module* ago are dropped
as stale (never an off-policy module's). A client that sends experience is held
(`wait_for_room`) while a module it feeds has more than `max_backlog` steps pending (plus,
off-policy, steps whose gradient steps are owed), so memory stays bounded however fast
clients are. Every env step received is, at any moment, trained, dropped (by reason),
pending, or in the turn under way (`training_env_steps`). A module may be closed (its
budget spent): it trains no more, and its steps are dropped under the reason given. The
training step itself is injected (`train`): no torch here. All methods run on the
asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from app.experience import ChunkBlock
from app.training.metrics import TrainingMetrics
from app.training.module_queue import ModuleQueue
from app.training.registry import ClientInfo, ClientRegistry

log = logging.getLogger("app.training")

# train(each due module's fresh chunks, why each is due, stale env steps dropped): one learner turn.
TrainStep = Callable[[dict[str, list[ChunkBlock]], dict[str, str], int], Awaitable[None]]


class BatchScheduler:
    """Gathers each module's experience into batches and starts a learner turn when one is due."""

    def __init__(
        self,
        *,
        registry: ClientRegistry,
        metrics: TrainingMetrics,
        train: TrainStep,
        current_version: Callable[[], int],
        queues: list[ModuleQueue],
        barrier_timeout_s: float,
        owed_env_steps: Callable[[str], float] = lambda module_id: 0.0,
        owes_updates: Callable[[str], bool] = lambda module_id: False,
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._train = train
        self._current_version = current_version
        self.queues: dict[str, ModuleQueue] = {queue.module_id: queue for queue in queues}
        self.barrier_timeout_s = barrier_timeout_s
        self._owed_env_steps = owed_env_steps
        self._owes_updates = owes_updates
        self._marks: dict[int, dict[str, int]] = {}  # client id -> module -> position its latest steps end at
        self._timers: dict[str, asyncio.TimerHandle] = {}  # module -> its barrier timeout, while steps are pending
        self._timed_out: set[str] = set()
        self.training_env_steps = 0  # of the turn under way, not yet counted trained or dropped
        self.turn_started = 0.0  # time.monotonic() when the turn under way started
        self._progress = asyncio.Event()  # set (and replaced) whenever a waiter may be done waiting
        self._training: asyncio.Task[None] | None = None
        self._turn_modules: frozenset[str] = frozenset()  # the modules of the turn under way
        self._stopped = False

    @property
    def training_in_progress(self) -> bool:
        return self._training is not None

    @property
    def pending_env_steps(self) -> int:
        return sum(queue.pending_env_steps for queue in self.queues.values())

    def backlog(self, module_id: str) -> float:
        """The module's steps not yet trained on: pending, plus (off-policy) those whose gradient
        steps are owed; none once it is closed (they will never be)."""
        queue = self.queues[module_id]
        return 0.0 if queue.closed is not None else queue.pending_env_steps + self._owed_env_steps(module_id)

    @property
    def room_env_steps(self) -> float:
        """What the fullest module may still take before its clients are held (negative: over)."""
        return min(q.limits.max_backlog - self.backlog(m) for m, q in self.queues.items())

    # -- Experience in -----------------------------------------------------------------

    def add(self, client: ClientInfo, blocks: list[ChunkBlock]) -> None:
        """Add the blocks to their modules' queues (already counted sampled; each chunk's
        weights_seq_no the version that collected it, where known); never blocks."""
        steps = sum(block.num_steps for block in blocks)
        if self._stopped:
            self._metrics.dropped_env_steps["shutdown"] += steps
            return
        marks = self._marks.setdefault(client.id, {})
        loop = asyncio.get_running_loop()
        for block in blocks:
            queue = self.queues[block.module_id]
            if queue.closed is not None:
                self._metrics.dropped_env_steps[queue.closed] += block.num_steps
                continue
            queue.add(block)
            marks[queue.module_id] = queue.received
            if queue.module_id not in self._timers:
                self._timers[queue.module_id] = loop.call_later(self.barrier_timeout_s, self._on_barrier_timeout, queue.module_id)
        client.env_steps_sent += steps
        self.maybe_train()

    def close(self, module_id: str, reason: str) -> None:
        """Train the module no more: its pending steps, and every step that comes for it
        later, are dropped (counted under `reason`); nobody waits for it or is held by it."""
        queue = self.queues[module_id]
        if queue.closed is not None:
            return
        queue.closed = reason
        self._metrics.dropped_env_steps[reason] += sum(block.num_steps for block in queue.take_all())
        if module_id not in self._turn_modules:  # else the turn under way finishes what it took
            queue.finished = queue.taken
        if (timer := self._timers.pop(module_id, None)) is not None:
            timer.cancel()
        self._timed_out.discard(module_id)
        self._wake_waiters()
        self.maybe_train()  # the barrier may hold only the others now

    def forget(self, client: ClientInfo) -> None:
        """The client left; its pending steps stay. If everyone left is waiting now, train."""
        self._marks.pop(client.id, None)
        self.maybe_train()

    # -- Waiting -----------------------------------------------------------------------

    async def wait_for_training(self, client: ClientInfo) -> None:
        """Wait until every step the client added so far is trained, dropped, or carried to
        a later batch (see the module's docstring). Safe to cancel (the client left)."""
        if self._done_waiting(client):
            return
        client.waiting = True
        try:
            self.maybe_train()
            await self._until(lambda: self._done_waiting(client))
        finally:
            client.waiting = False

    def has_room(self, client: ClientInfo) -> bool:
        """No module the client feeds holds more than its max_backlog steps."""
        return self._stopped or all(
            self.backlog(module_id) <= self.queues[module_id].limits.max_backlog for module_id in self._marks.get(client.id, ())
        )

    async def wait_for_room(self, client: ClientInfo) -> None:
        """Wait until `has_room`: how a client faster than the learner is held back."""
        await self._until(lambda: self.has_room(client))

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._progress.wait()

    def _wake_waiters(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    def _done_waiting(self, client: ClientInfo) -> bool:
        return all(self.queues[m].done_with(mark) for m, mark in self._marks.get(client.id, {}).items())

    def _waits_on_pending(self, client: ClientInfo) -> bool:
        return client.waiting and any(self.queues[m].unreleased(mark) for m, mark in self._marks.get(client.id, {}).items())

    def _everyone_waits(self) -> bool:
        """Every sampling client waits on pending steps, and there is one: with none (only
        thin clients, or the samplers have left), nobody is held back."""
        samplers = self._registry.samplers()
        first = next(samplers, None)
        return first is not None and self._waits_on_pending(first) and all(self._waits_on_pending(c) for c in samplers)

    # -- Training ----------------------------------------------------------------------

    def _due(self, queue: ModuleQueue) -> str | None:
        """Why the module's batch is due now, or None."""
        limits = queue.limits
        if queue.closed is not None:
            return None
        if limits.off_policy:
            if queue.pending_env_steps:
                return "off-policy: train on arrival"
            return "off-policy: gradient steps owed" if self._owes_updates(queue.module_id) else None
        if not queue.pending_env_steps:
            return None
        if queue.pending_env_steps >= limits.train_batch_size:
            return "batch full"
        if queue.module_id in self._timed_out:
            return "barrier timeout"
        return None

    def _at_the_barrier(self, reasons: dict[str, str]) -> None:
        """Every sampling client waits: the modules holding at least their min_barrier_batch
        train, or, if none does and none is due otherwise, the one holding the most (the
        waiters get a new version); the others carry their steps to a later batch."""
        stocked = [q for q in self.queues.values() if q.pending_env_steps and q.module_id not in reasons]
        ready = [q for q in stocked if q.pending_env_steps >= q.limits.min_barrier_batch]
        if not ready and not reasons and stocked:
            ready = [max(stocked, key=lambda q: q.pending_env_steps)]
        for queue in stocked:
            if queue in ready:
                reasons[queue.module_id] = "all clients waiting"
            else:
                queue.carry()
        self._wake_waiters()

    def maybe_train(self) -> None:
        """Start a learner turn if none is running and some module's batch is due."""
        if self._training is not None or self._stopped:
            return
        reasons: dict[str, str] = {}
        for queue in self.queues.values():
            if (reason := self._due(queue)) is not None:
                reasons[queue.module_id] = reason
        if self._everyone_waits():
            self._at_the_barrier(reasons)
        if not reasons:
            return
        batch = {module_id: self._take(self.queues[module_id]) for module_id in reasons}
        self._turn_modules = frozenset(batch)
        self.training_env_steps = sum(block.num_steps for blocks in batch.values() for block in blocks)
        self.turn_started = time.monotonic()
        self._wake_waiters()  # room made
        self._training = asyncio.get_running_loop().create_task(self._run_turn(batch, reasons))

    def _take(self, queue: ModuleQueue) -> list[ChunkBlock]:
        """The module's next batch; its barrier timer restarts with what is left."""
        taken = queue.take(queue.limits.train_batch_size)
        module_id = queue.module_id
        self._timed_out.discard(module_id)
        if (timer := self._timers.pop(module_id, None)) is not None:
            timer.cancel()
        if queue.pending_env_steps:
            self._timers[module_id] = asyncio.get_running_loop().call_later(
                self.barrier_timeout_s, self._on_barrier_timeout, module_id
            )
        return taken

    def _on_barrier_timeout(self, module_id: str) -> None:
        """The module's oldest pending step is barrier_timeout_s old: train it as soon as possible."""
        self._timers.pop(module_id, None)
        self._timed_out.add(module_id)
        self.maybe_train()

    async def _run_turn(self, batch: dict[str, list[ChunkBlock]], reasons: dict[str, str]) -> None:
        """Drop the stale chunks, train every module on the rest, then wake the waiters."""
        fresh: dict[str, list[ChunkBlock]] = {}
        stale_steps = 0
        for module_id, blocks in batch.items():
            queue = self.queues[module_id]
            kept = [kept for block in blocks if (kept := queue.fresh(block)).num_chunks]
            stale_steps += sum(block.num_steps for block in blocks) - sum(block.num_steps for block in kept)
            if kept or queue.limits.off_policy:
                fresh[module_id] = kept
        self._metrics.dropped_env_steps["stale"] += stale_steps
        self.training_env_steps -= stale_steps
        try:
            if fresh:
                await self._train(fresh, {m: reasons[m] for m in fresh}, stale_steps)  # counts them trained
                version = self._current_version()
                for module_id in fresh:
                    self.queues[module_id].trained_in(version)
        except Exception:
            log.exception("training step failed; its %d env steps are dropped", self.training_env_steps)
            self._metrics.dropped_env_steps["training_error"] += self.training_env_steps
        finally:
            self.training_env_steps = 0
            self._training = None
            self._turn_modules = frozenset()
            for module_id in batch:
                queue = self.queues[module_id]
                queue.finished = queue.taken
            self._wake_waiters()
            self.maybe_train()

    async def stop(self) -> None:
        """Let a running turn finish, drop what is pending, release every waiter."""
        self._stopped = True
        if self._training is not None:
            await self._training
        for queue in self.queues.values():
            dropped = queue.take_all()
            self._metrics.dropped_env_steps["shutdown"] += sum(block.num_steps for block in dropped)
            queue.finished = queue.taken
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._wake_waiters()

