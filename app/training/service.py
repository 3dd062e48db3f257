"""The one TrainingService every client connection feeds, on both transports.

It gathers episode chunks from all clients into a pending batch and trains on it when
the batch is full, when every sampling client (one that asked for GET_CONFIG or sent
experience) is waiting for new weights (so a lone client never waits on others), or
when the oldest pending data is `barrier_timeout_s` old. Training runs in a single learner thread so the event loop keeps serving; data
that arrives meanwhile goes into the next batch. Every training step publishes the
next weights_seq_no, exported to ONNX once and cached.

All methods are called from the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from app.config import PPOConfig, Settings
from app.schemas import EpisodeChunk
from app.training.learner import Learner
from app.training.metrics import TrainingMetrics
from app.training.onnx_export import OUTPUT_NAME, PolicyState

__all__ = ["ClientInfo", "PolicyState", "TrainingService"]

logger = logging.getLogger("app.training")

KEPT_VERSIONS = 10  # recent policy versions kept for download (GET /api/model.onnx?version=)


@dataclass
class ClientInfo:
    """One connected simulator, as the service and the REST API see it."""

    id: int
    transport: str  # "tcp" or "ws"
    peer: str
    connected_at: float = field(default_factory=time.time)  # Unix time
    env_steps_sent: int = 0
    sampling: bool = False  # asked for the sampling config or sent experience: the barrier waits for it
    waiting: bool = False  # inside wait_for_training, its data not yet trained on
    last_weights_seq_no_sent: int | None = None


@dataclass(frozen=True)
class _PendingChunk:
    chunk: EpisodeChunk
    weights_seq_no: int | None  # version that collected it, None if unknown


class TrainingService:
    """Collects experience from every client and trains the one shared policy.

    Batches are numbered 1, 2, ... in the order they start training; the pending batch
    is number `_batches_started + 1`. A client waits until the batch holding its latest
    data has finished, which is when the version trained on it is published.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = TrainingMetrics()
        self._learner = Learner(settings)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner")
        self._state: PolicyState | None = None
        self._kept: OrderedDict[int, PolicyState] = OrderedDict()
        self._clients: dict[int, ClientInfo] = {}
        self._client_ids = itertools.count(1)
        self._due_batch: dict[int, int] = {}  # client id -> batch number holding its latest data
        self._pending: list[_PendingChunk] = []
        self._pending_steps = 0
        self._barrier_timer: asyncio.TimerHandle | None = None  # set while data is pending
        self._barrier_timed_out = False
        self._batches_started = 0
        self._batches_finished = 0
        self._batch_finished = asyncio.Condition()
        self._training: asyncio.Task[None] | None = None
        self._training_env_steps = 0  # of the batch under way, not yet counted trained or dropped
        self._stopped = False

    # -- Lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Restore the checkpoint if there is one and export the current version.

        Raises CheckpointMismatch when the checkpoint was made for other spaces or sizes.
        """
        loop = asyncio.get_running_loop()
        # One intra-op thread: the MLP is small, so more threads only add overhead,
        # and the second core stays free for the event loop.
        await loop.run_in_executor(self._executor, torch.set_num_threads, 1)
        restored = await loop.run_in_executor(self._executor, self._learner.restore)
        self._publish(await loop.run_in_executor(self._executor, self._learner.export))
        self.metrics.weights_seq_no = self._state.weights_seq_no
        logger.info(
            "policy %s at weights_seq_no %d (%s)",
            "restored" if restored else "initialised",
            self._state.weights_seq_no,
            self.settings.checkpoint_dir,
        )

    async def stop(self) -> None:
        """Let a running training step finish, drop what is pending, save a checkpoint."""
        self._stopped = True
        if self._training is not None:
            await self._training
        dropped = self._take_pending()
        self.metrics.dropped_env_steps["shutdown"] += sum(p.chunk.num_steps for p in dropped)
        await self._finish_batch()  # releases anyone still waiting
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._learner.save)
        self._executor.shutdown(wait=True)

    # -- Clients ------------------------------------------------------------------

    def connect(self, transport: str, peer: str) -> ClientInfo:
        client = ClientInfo(id=next(self._client_ids), transport=transport, peer=peer)
        self._clients[client.id] = client
        return client

    def disconnect(self, client: ClientInfo) -> None:
        """Forget the client; its pending data stays in the batch. If everyone left is
        waiting now, train."""
        self._clients.pop(client.id, None)
        self._due_batch.pop(client.id, None)
        self.metrics.forget_client(client.id)
        self._maybe_train()

    def start_sampling(self, client: ClientInfo) -> None:
        """The client samples (it asked for GET_CONFIG or sent experience): the barrier now waits for it."""
        client.sampling = True

    @property
    def clients(self) -> list[ClientInfo]:
        return list(self._clients.values())

    # -- Experience in, weights out -----------------------------------------------

    def ingest(self, client: ClientInfo, episodes: list[EpisodeChunk]) -> None:
        """Add the chunks to the pending batch (and to the metrics); never blocks."""
        self.start_sampling(client)
        if not episodes:
            return
        steps = sum(chunk.num_steps for chunk in episodes)
        for chunk in episodes:  # received, so sampled: from here on trained, dropped or pending
            self.metrics.record_chunk(client.id, chunk)
        if self._stopped:
            self.metrics.dropped_env_steps["shutdown"] += steps
            return
        for chunk in episodes:
            version = chunk.weights_seq_no if chunk.weights_seq_no is not None else client.last_weights_seq_no_sent
            self._pending.append(_PendingChunk(chunk, version))
        client.env_steps_sent += steps
        self._pending_steps += steps
        self._due_batch[client.id] = self._batches_started + 1
        if self._barrier_timer is None:
            loop = asyncio.get_running_loop()
            self._barrier_timer = loop.call_later(self.settings.barrier_timeout_s, self._on_barrier_timeout)
        self._maybe_train()

    async def wait_for_training(self, client: ClientInfo) -> PolicyState:
        """Wait until the policy has trained on a batch holding all the client's data
        ingested so far, then return the current state. Safe to cancel."""
        due = self._due_batch.get(client.id, 0)
        if due > self._batches_finished:
            client.waiting = True
            try:
                self._maybe_train()
                async with self._batch_finished:
                    await self._batch_finished.wait_for(lambda: self._batches_finished >= due)
            finally:
                client.waiting = False
        return self.current_state()

    def current_state(self) -> PolicyState:
        """The latest published version (cached; no export happens here)."""
        if self._state is None:
            raise RuntimeError("TrainingService.start() has not run yet")
        return self._state

    def note_state_sent(self, client: ClientInfo, state: PolicyState) -> None:
        """Record that `state` went to the client in a SET_STATE. Call it for every
        SET_STATE sent: chunks without their own weights_seq_no are dated by it."""
        client.last_weights_seq_no_sent = state.weights_seq_no

    def kept_state(self, weights_seq_no: int) -> PolicyState | None:
        """One of the last KEPT_VERSIONS versions, or None if it is not kept."""
        return self._kept.get(weights_seq_no)

    @property
    def kept_versions(self) -> list[int]:
        return list(self._kept)

    @property
    def onnx_output_names(self) -> list[str]:
        return [OUTPUT_NAME]

    # -- Hyperparameters ------------------------------------------------------------

    @property
    def ppo_config(self) -> PPOConfig:
        return self._learner.cfg

    def update_ppo_config(self, changes: dict[str, Any]) -> PPOConfig:
        """Change PPO hyperparameters from the next training step on. Raises ValueError
        for unknown or invalid values, and for hidden_sizes (fixed by the checkpoint)."""
        current = self._learner.cfg
        unknown = set(changes) - set(PPOConfig.model_fields)
        if unknown:
            raise ValueError(f"unknown PPO hyperparameters: {', '.join(sorted(unknown))}")
        if "hidden_sizes" in changes and tuple(changes["hidden_sizes"]) != current.hidden_sizes:
            raise ValueError("hidden_sizes cannot change while training (the weights have that shape)")
        updated = PPOConfig.model_validate({**current.model_dump(), **changes})  # ValidationError is a ValueError
        self._learner.cfg = updated
        logger.info("PPO hyperparameters changed: %s", changes)
        return updated

    @property
    def pending_env_steps(self) -> int:
        return self._pending_steps

    @property
    def training_env_steps(self) -> int:
        """Env steps in the training step under way (neither trained nor dropped yet)."""
        return self._training_env_steps

    @property
    def training_in_progress(self) -> bool:
        return self._training is not None

    # -- When and how to train ------------------------------------------------------

    def _samplers(self) -> Iterator[ClientInfo]:
        """The clients the barrier waits for: those that asked for GET_CONFIG (as every
        RLlink client does before sampling) or sent experience. A client that only
        watches (PING, GET_STATE) holds nobody back."""
        return (client for client in self._clients.values() if client.sampling)  # lazy: all() stops early

    def _waits_for_pending_batch(self, client: ClientInfo) -> bool:
        return client.waiting and self._due_batch.get(client.id) == self._batches_started + 1

    def _maybe_train(self) -> None:
        """Start a training step if none is running and the pending batch is due."""
        if self._training is not None or not self._pending or self._stopped:
            return
        if self._pending_steps >= self.settings.train_batch_size:
            reason = "batch full"
        elif all(self._waits_for_pending_batch(c) for c in self._samplers()):
            reason = "all clients waiting"
        elif self._barrier_timed_out:
            reason = "barrier timeout"
        else:
            return
        steps = self._pending_steps
        batch = self._take_pending()  # from now on, new data goes into the next batch
        self._training_env_steps = steps
        self._training = asyncio.get_running_loop().create_task(self._train_batch(batch, reason))

    def _on_barrier_timeout(self) -> None:
        """The oldest pending data is barrier_timeout_s old: train as soon as possible."""
        self._barrier_timed_out = True
        self._maybe_train()

    def _take_pending(self) -> list[_PendingChunk]:
        """Close the pending batch: it becomes batch number `_batches_started`."""
        pending = self._pending
        self._pending, self._pending_steps = [], 0
        if self._barrier_timer is not None:
            self._barrier_timer.cancel()
        self._barrier_timer, self._barrier_timed_out = None, False
        self._batches_started += 1
        return pending

    async def _train_batch(self, pending: list[_PendingChunk], reason: str) -> None:
        """Drop the stale chunks, train on the rest, then wake the batch's waiters."""
        current = self.current_state().weights_seq_no
        fresh = [
            p.chunk
            for p in pending
            if p.weights_seq_no is None or current - p.weights_seq_no <= self.settings.max_policy_lag
        ]
        stale_steps = sum(p.chunk.num_steps for p in pending) - sum(c.num_steps for c in fresh)
        self.metrics.dropped_env_steps["stale"] += stale_steps
        self._training_env_steps -= stale_steps
        try:
            if fresh:
                await self._train(fresh, reason, stale_steps)
        except Exception:
            logger.exception("training step failed; its %d env steps are dropped", self._training_env_steps)
            self.metrics.dropped_env_steps["training_error"] += self._training_env_steps
        finally:
            self._training_env_steps = 0
            self._training = None
            await self._finish_batch()
            self._maybe_train()

    async def _train(self, chunks: list[EpisodeChunk], reason: str, stale_steps: int) -> None:
        steps = sum(c.num_steps for c in chunks)
        started = time.perf_counter()
        state, stats = await asyncio.get_running_loop().run_in_executor(self._executor, self._learner.train, chunks)
        seconds = time.perf_counter() - started
        self._publish(state)
        self.metrics.record_training_step(state.weights_seq_no, steps, stats, seconds)
        self._training_env_steps = 0  # counted as trained now
        snapshot = self.metrics.snapshot()
        mean_return = snapshot["episode_return_mean"]
        logger.info(
            "weights_seq_no %d: %d steps (%s, %d stale dropped) in %.2fs | return mean %s over %d episodes | "
            "policy_loss %.4f vf_loss %.4f entropy %.3f approx_kl %.4f clip_frac %.3f explained_var %.3f",
            state.weights_seq_no,
            steps,
            reason,
            stale_steps,
            seconds,
            "n/a" if mean_return is None else f"{mean_return:.1f}",
            snapshot["episodes_in_window"],
            stats["policy_loss"],
            stats["vf_loss"],
            stats["entropy"],
            stats["approx_kl"],
            stats["clip_frac"],
            stats["explained_var"],
        )

    def _publish(self, state: PolicyState) -> None:
        """Make `state` the current version and keep it for download."""
        self._state = state
        self._kept[state.weights_seq_no] = state
        while len(self._kept) > KEPT_VERSIONS:
            self._kept.popitem(last=False)

    async def _finish_batch(self) -> None:
        """Mark the batch that started last as done and wake the clients waiting on it."""
        self._batches_finished = self._batches_started
        async with self._batch_finished:
            self._batch_finished.notify_all()
