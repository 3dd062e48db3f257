"""When to train: the pending batch, the barrier, and who waits for which batch.

Experience from every client goes into one pending batch. It trains when it holds
`train_batch_size` env steps, when every sampling client is waiting for it (so a lone
client never waits on others; with no sampling client nobody waits for it), or
`barrier_timeout_s` after its oldest data arrived. With `train_on_arrival` (every module
off-policy) it trains as soon as no step is running: what came in meanwhile is the batch,
and it trains on while `more_work` says the learners owe gradient steps, new data or not.
Chunks older than `max_policy_lag` versions are dropped as stale, unless `never_stale`
says their module learns off-policy.
Batches are numbered 1, 2, ... in the order they start training; the pending batch is
number `started + 1`. A client waits until the batch holding its latest data has
finished. The training step itself is injected (`train`): no torch here.

Every env step received is, at any moment, trained, dropped (by reason), pending, or in
the batch under way (`training_env_steps`). All methods run on the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.schemas import EpisodeChunk
from app.training.metrics import TrainingMetrics
from app.training.registry import ClientInfo, ClientRegistry

log = logging.getLogger("app.training")

# train(fresh chunks, why the batch is due, stale env steps dropped): one training step.
TrainStep = Callable[[list[EpisodeChunk], str, int], Awaitable[None]]


@dataclass(frozen=True)
class _PendingChunk:
    chunk: EpisodeChunk
    weights_seq_no: int | None  # version that collected it, None if unknown


class BatchScheduler:
    """Gathers experience into batches and starts the training step when one is due."""

    def __init__(
        self,
        *,
        registry: ClientRegistry,
        metrics: TrainingMetrics,
        train: TrainStep,
        current_version: Callable[[], int],
        train_batch_size: int,
        barrier_timeout_s: float,
        max_policy_lag: int,
        never_stale: Callable[[EpisodeChunk], bool] = lambda chunk: False,
        train_on_arrival: bool = False,
        more_work: Callable[[], bool] = lambda: False,
    ) -> None:
        self._registry = registry
        self._metrics = metrics
        self._train = train
        self._current_version = current_version
        self.train_batch_size = train_batch_size
        self.barrier_timeout_s = barrier_timeout_s
        self.max_policy_lag = max_policy_lag
        self._never_stale = never_stale
        self.train_on_arrival = train_on_arrival
        self._more_work = more_work
        self._due_batch: dict[int, int] = {}  # client id -> batch number holding its latest data
        self._pending: list[_PendingChunk] = []
        self.pending_env_steps = 0
        self.training_env_steps = 0  # of the batch under way, not yet counted trained or dropped
        self._barrier_timer: asyncio.TimerHandle | None = None  # set while data is pending
        self._barrier_timed_out = False
        self._started = 0  # batches that started training
        self._finished = 0
        self._batch_finished = asyncio.Condition()
        self._training: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def training_in_progress(self) -> bool:
        return self._training is not None

    def add(self, client: ClientInfo, episodes: list[EpisodeChunk]) -> None:
        """Add the chunks to the pending batch (already counted sampled); never blocks."""
        steps = sum(chunk.num_steps for chunk in episodes)
        if self._stopped:
            self._metrics.dropped_env_steps["shutdown"] += steps
            return
        for chunk in episodes:
            version = chunk.weights_seq_no if chunk.weights_seq_no is not None else client.last_weights_seq_no_sent
            self._pending.append(_PendingChunk(chunk, version))
        client.env_steps_sent += steps
        self.pending_env_steps += steps
        self._due_batch[client.id] = self._started + 1
        if self._barrier_timer is None:
            self._barrier_timer = asyncio.get_running_loop().call_later(self.barrier_timeout_s, self._on_barrier_timeout)
        self.maybe_train()

    def forget(self, client: ClientInfo) -> None:
        """The client left; its pending data stays in the batch. If everyone left is waiting now, train."""
        self._due_batch.pop(client.id, None)
        self.maybe_train()

    async def wait_for_training(self, client: ClientInfo) -> None:
        """Wait until a batch holding all the client's data added so far has trained.
        Safe to cancel (the client left)."""
        due = self._due_batch.get(client.id, 0)
        if due <= self._finished:
            return
        client.waiting = True
        try:
            self.maybe_train()
            async with self._batch_finished:
                await self._batch_finished.wait_for(lambda: self._finished >= due)
        finally:
            client.waiting = False

    async def stop(self) -> None:
        """Let a running training step finish, drop what is pending, release every waiter."""
        self._stopped = True
        if self._training is not None:
            await self._training
        dropped = self._take_pending()
        self._metrics.dropped_env_steps["shutdown"] += sum(p.chunk.num_steps for p in dropped)
        await self._finish_batch()

    def _waits_for_pending_batch(self, client: ClientInfo) -> bool:
        return client.waiting and self._due_batch.get(client.id) == self._started + 1

    def _someone_waits_and_everyone_does(self) -> bool:
        """Every sampling client waits for the pending batch, and there is one: with none
        (only thin clients, whose chunks the gateway builds, or the samplers have left),
        nobody is held back and the batch waits until it is full or times out."""
        samplers = self._registry.samplers()
        first = next(samplers, None)
        return first is not None and self._waits_for_pending_batch(first) and all(
            self._waits_for_pending_batch(c) for c in samplers
        )

    def maybe_train(self) -> None:
        """Start a training step if none is running and the pending batch is due."""
        if self._training is not None or self._stopped:
            return
        if self.train_on_arrival and (self._pending or self._more_work()):
            reason = "off-policy: train on arrival" if self._pending else "off-policy: gradient steps owed"
        elif not self._pending:
            return
        elif self.pending_env_steps >= self.train_batch_size:
            reason = "batch full"
        elif self._someone_waits_and_everyone_does():
            reason = "all clients waiting"
        elif self._barrier_timed_out:
            reason = "barrier timeout"
        else:
            return
        steps = self.pending_env_steps
        batch = self._take_pending()  # from now on, new data goes into the next batch
        self.training_env_steps = steps
        self._training = asyncio.get_running_loop().create_task(self._run_batch(batch, reason))

    def _on_barrier_timeout(self) -> None:
        """The oldest pending data is barrier_timeout_s old: train as soon as possible."""
        self._barrier_timed_out = True
        self.maybe_train()

    def _take_pending(self) -> list[_PendingChunk]:
        """Close the pending batch: it becomes batch number `_started`."""
        pending = self._pending
        self._pending, self.pending_env_steps = [], 0
        if self._barrier_timer is not None:
            self._barrier_timer.cancel()
        self._barrier_timer, self._barrier_timed_out = None, False
        self._started += 1
        return pending

    async def _run_batch(self, pending: list[_PendingChunk], reason: str) -> None:
        """Drop the stale chunks, train on the rest, then wake the batch's waiters."""
        current = self._current_version()
        fresh = [
            p.chunk
            for p in pending
            if p.weights_seq_no is None or current - p.weights_seq_no <= self.max_policy_lag or self._never_stale(p.chunk)
        ]
        stale_steps = sum(p.chunk.num_steps for p in pending) - sum(c.num_steps for c in fresh)
        self._metrics.dropped_env_steps["stale"] += stale_steps
        self.training_env_steps -= stale_steps
        try:
            if fresh or self.train_on_arrival:
                await self._train(fresh, reason, stale_steps)  # counts them trained
        except Exception:
            log.exception("training step failed; its %d env steps are dropped", self.training_env_steps)
            self._metrics.dropped_env_steps["training_error"] += self.training_env_steps
        finally:
            self.training_env_steps = 0
            self._training = None
            await self._finish_batch()
            self.maybe_train()

    async def _finish_batch(self) -> None:
        """Mark the batch that started last as done and wake the clients waiting on it."""
        self._finished = self._started
        async with self._batch_finished:
            self._batch_finished.notify_all()
