"""The one TrainingService every client connection feeds, on both transports.

A composition of four parts, each with one job:
- `ClientRegistry` (registry.py): who is connected, who samples, who waits;
- `BatchScheduler` (scheduler.py): the pending batch and when it trains (no torch);
- `Learner` (learner.py): the policy's weights and one training step, in one thread;
- `PolicyStore` (policy_store.py): the published versions, for SET_STATE and download.
Here they are wired together: the training step runs in the learner thread so the
event loop keeps serving, and each new version is published and logged.

All methods are called from the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from app.config import PPOConfig, Settings
from app.schemas import EpisodeChunk
from app.training.checkpoints import CHECKPOINT_FILE
from app.training.learner import Learner
from app.training.metrics import TrainingMetrics
from app.training.onnx_export import OUTPUT_NAME, PolicyState
from app.training.policy_store import PolicyStore
from app.training.registry import ClientInfo, ClientRegistry
from app.training.scheduler import BatchScheduler

__all__ = ["ClientInfo", "PolicyState", "TrainingService"]

logger = logging.getLogger("app.training")


class TrainingService:
    """Collects experience from every client and trains the one shared policy."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = TrainingMetrics()
        self._learner = Learner(
            settings.ppo,
            settings.observation_space,
            settings.action_space,
            seed=settings.seed,
            checkpoint_dir=settings.checkpoint_dir,
            onnx_input_name=settings.onnx_input_name,
        )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner")
        self._registry = ClientRegistry()
        self._store = PolicyStore()
        self._scheduler = BatchScheduler(
            registry=self._registry,
            metrics=self.metrics,
            train=self._train,
            current_version=lambda: self._store.current.weights_seq_no,
            train_batch_size=settings.train_batch_size,
            barrier_timeout_s=settings.barrier_timeout_s,
            max_policy_lag=settings.max_policy_lag,
        )

    # -- Lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Restore the checkpoint if there is one and export the current version.

        Raises CheckpointMismatch when the checkpoint was made for other spaces or sizes.
        """
        # One intra-op thread: the MLP is small, so more threads only add overhead,
        # and the second core stays free for the event loop.
        await self._in_learner_thread(torch.set_num_threads, 1)
        restored = await self._in_learner_thread(self._learner.restore)
        self._store.publish(await self._in_learner_thread(self._learner.export))
        self.metrics.weights_seq_no = self._store.current.weights_seq_no
        checkpoint = self.settings.checkpoint_dir / CHECKPOINT_FILE
        if restored:
            logger.info("policy restored from %s at weights_seq_no %d", checkpoint.resolve(), self.metrics.weights_seq_no)
        else:
            logger.info("no checkpoint at %s: training starts fresh; checkpoints go there", checkpoint.resolve())

    async def stop(self) -> None:
        """Let a running training step finish, drop what is pending, save a checkpoint."""
        await self._scheduler.stop()
        await self._in_learner_thread(self._learner.save)
        self._executor.shutdown(wait=True)

    async def _in_learner_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- Clients ------------------------------------------------------------------

    def connect(self, transport: str, peer: str) -> ClientInfo:
        return self._registry.connect(transport, peer)

    def disconnect(self, client: ClientInfo) -> None:
        """Forget the client; its pending data stays in the batch. If everyone left is
        waiting now, train."""
        self._registry.disconnect(client)
        self.metrics.forget_client(client.id)
        self._scheduler.forget(client)

    def start_sampling(self, client: ClientInfo) -> None:
        """The client samples (it asked for GET_CONFIG or sent experience): the barrier now waits for it."""
        client.sampling = True

    @property
    def clients(self) -> list[ClientInfo]:
        return self._registry.clients

    # -- Experience in, weights out -----------------------------------------------

    def ingest(self, client: ClientInfo, episodes: list[EpisodeChunk]) -> None:
        """Add the chunks to the pending batch (and to the metrics); never blocks."""
        self.start_sampling(client)
        if not episodes:
            return
        for chunk in episodes:  # received, so sampled: from here on trained, dropped or pending
            self.metrics.record_chunk(client.id, chunk)
        self._scheduler.add(client, episodes)

    async def wait_for_training(self, client: ClientInfo) -> PolicyState:
        """Wait until the policy has trained on a batch holding all the client's data
        ingested so far, then return the current state. Safe to cancel."""
        await self._scheduler.wait_for_training(client)
        return self.current_state()

    def current_state(self) -> PolicyState:
        """The latest published version (cached; no export happens here)."""
        return self._store.current

    def note_state_sent(self, client: ClientInfo, state: PolicyState) -> None:
        """Record that `state` went to the client in a SET_STATE. Call it for every
        SET_STATE sent: chunks without their own weights_seq_no are dated by it."""
        client.last_weights_seq_no_sent = state.weights_seq_no

    def kept_state(self, weights_seq_no: int) -> PolicyState | None:
        """One of the last kept versions, or None if it is not kept."""
        return self._store.kept(weights_seq_no)

    @property
    def kept_versions(self) -> list[int]:
        return self._store.kept_versions

    @property
    def onnx_output_names(self) -> list[str]:
        return [OUTPUT_NAME]

    @property
    def pending_env_steps(self) -> int:
        return self._scheduler.pending_env_steps

    @property
    def training_env_steps(self) -> int:
        """Env steps in the training step under way (neither trained nor dropped yet)."""
        return self._scheduler.training_env_steps

    @property
    def training_in_progress(self) -> bool:
        return self._scheduler.training_in_progress

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

    # -- The training step (the scheduler calls it) ---------------------------------

    async def _train(self, chunks: list[EpisodeChunk], reason: str, stale_steps: int) -> None:
        """Train on the chunks in the learner thread, publish the new version, count and log it."""
        steps = sum(c.num_steps for c in chunks)
        started = time.perf_counter()
        state, stats = await self._in_learner_thread(self._learner.train, chunks)
        seconds = time.perf_counter() - started
        self._store.publish(state)
        self.metrics.record_training_step(state.weights_seq_no, steps, stats, seconds)  # counted trained now
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
