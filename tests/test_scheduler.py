"""The batch scheduler alone: when a batch trains, who waits for it, what is dropped; no learner, no torch."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from app.schemas import EpisodeChunk
from app.settings.policies import PolicySet
from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE
from app.training.metrics import TrainingMetrics
from app.training.registry import ClientRegistry
from app.training.scheduler import BatchScheduler

from . import helpers
from .gateway_process import ROOT

SPACES = PolicySet.single(CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE)


def chunk(steps: int, weights_seq_no: int | None = None) -> EpisodeChunk:
    return EpisodeChunk.model_validate(helpers.chunk(steps, weights_seq_no=weights_seq_no), context={"policies": SPACES})


class Trainer:
    """The injected training step: records each batch and publishes the next version."""

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[tuple[list[int], str]] = []
        self.version = 0
        self.fail = fail
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, chunks: list[EpisodeChunk], reason: str, stale_steps: int) -> None:
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the learner failed")
        self.batches.append(([c.num_steps for c in chunks], reason))
        self.version += 1


def scheduler(trainer: Trainer, *, batch: int = 1000, barrier_s: float = 60.0, lag: int = 2):
    registry, metrics = ClientRegistry(), TrainingMetrics()
    return registry, metrics, BatchScheduler(
        registry=registry,
        metrics=metrics,
        train=trainer,
        current_version=lambda: trainer.version,
        train_batch_size=batch,
        barrier_timeout_s=barrier_s,
        max_policy_lag=lag,
    )


def sampler(registry: ClientRegistry):
    client = registry.connect("tcp", "test")
    client.sampling = True
    return client


async def settled() -> None:
    """Let the scheduler's tasks run until nothing more is ready."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_full_batch_trains_at_once_with_everything_pending():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer, batch=10)
    a, b = sampler(registry), sampler(registry)
    batches.add(a, [chunk(4)])
    await settled()
    assert trainer.batches == [] and batches.pending_env_steps == 4
    batches.add(b, [chunk(6)])
    await settled()
    assert trainer.batches == [([4, 6], "batch full")] and batches.pending_env_steps == 0


async def test_the_batch_trains_once_every_sampler_waits_and_a_watcher_holds_nobody_back():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer)
    a, b = sampler(registry), sampler(registry)
    registry.connect("ws", "watcher")  # never samples
    batches.add(a, [chunk(3)])
    waiting_a = asyncio.create_task(batches.wait_for_training(a))
    await settled()
    assert trainer.batches == [] and a.waiting  # b samples too and is not waiting yet
    batches.add(b, [chunk(5)])
    waiting_b = asyncio.create_task(batches.wait_for_training(b))
    await asyncio.wait_for(asyncio.gather(waiting_a, waiting_b), 10)
    assert trainer.batches == [([3, 5], "all clients waiting")]
    assert not a.waiting and not b.waiting


async def test_a_waiter_that_leaves_lets_the_others_train():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer)
    a, b = sampler(registry), sampler(registry)
    batches.add(a, [chunk(3)])
    waiting_a = asyncio.create_task(batches.wait_for_training(a))
    await settled()
    registry.disconnect(b)
    batches.forget(b)
    await asyncio.wait_for(waiting_a, 10)
    assert trainer.batches == [([3], "all clients waiting")]


async def test_the_barrier_timeout_trains_what_is_there():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer, barrier_s=0.05)
    a, _ = sampler(registry), sampler(registry)
    batches.add(a, [chunk(2)])
    waiting = asyncio.create_task(batches.wait_for_training(a))
    await asyncio.wait_for(waiting, 10)
    assert trainer.batches == [([2], "barrier timeout")]


async def test_stale_chunks_are_dropped_and_every_step_is_accounted_for():
    trainer = Trainer()
    trainer.version = 5
    registry, metrics, batches = scheduler(trainer, batch=10, lag=2)
    a = sampler(registry)
    for steps, version in [(4, 1), (5, 3), (6, None)]:  # 5 - 1 > 2: stale
        metrics.record_chunk(a.id, c := chunk(steps, version))
        batches.add(a, [c])
    await settled()
    assert trainer.batches == [([5, 6], "batch full")]
    assert metrics.dropped_env_steps["stale"] == 4 and batches.training_env_steps == 0


async def test_a_failed_training_step_drops_its_steps_and_releases_the_waiters():
    trainer = Trainer(fail=True)
    registry, metrics, batches = scheduler(trainer)
    a = sampler(registry)
    batches.add(a, [chunk(7)])
    await asyncio.wait_for(batches.wait_for_training(a), 10)
    assert metrics.dropped_env_steps["training_error"] == 7 and not batches.training_in_progress


async def test_data_arriving_during_training_goes_into_the_next_batch():
    trainer = Trainer()
    trainer.release.clear()
    registry, _, batches = scheduler(trainer, batch=3)
    a = sampler(registry)
    batches.add(a, [chunk(3)])
    await settled()
    assert batches.training_in_progress and batches.training_env_steps == 3
    batches.add(a, [chunk(4)])
    assert batches.pending_env_steps == 4
    trainer.release.set()
    await asyncio.wait_for(batches.wait_for_training(a), 10)
    assert trainer.batches == [([3], "batch full"), ([4], "batch full")]


async def test_stop_drops_what_is_pending_and_releases_the_waiters():
    trainer = Trainer()
    registry, metrics, batches = scheduler(trainer)
    a, _ = sampler(registry), sampler(registry)
    batches.add(a, [chunk(8)])
    waiting = asyncio.create_task(batches.wait_for_training(a))
    await settled()
    await batches.stop()
    await asyncio.wait_for(waiting, 10)
    assert trainer.batches == [] and metrics.dropped_env_steps["shutdown"] == 8
    batches.add(a, [chunk(2)])
    assert metrics.dropped_env_steps["shutdown"] == 10


@pytest.mark.parametrize("module", ["app.training.scheduler", "app.training.registry"])
def test_the_scheduler_needs_no_torch(module):
    check = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT).returncode == 0
