"""The batch scheduler alone: when a batch trains, who waits for it, what is dropped; no learner, no torch."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import numpy as np
import pytest

from app.experience import ChunkBlock, blocks_of
from app.schemas import EpisodeChunk
from app.settings.policies import PolicySet
from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE
from app.training.metrics import TrainingMetrics
from app.training.module_queue import ModuleQueue, QueueLimits
from app.training.registry import ClientRegistry
from app.training.scheduler import BatchScheduler

from . import helpers
from .gateway_process import ROOT

SPACES = PolicySet.single(CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE)
DEFAULT = SPACES.default_module_id


def chunk(steps: int, weights_seq_no: int | None = None) -> EpisodeChunk:
    return EpisodeChunk.model_validate(helpers.chunk(steps, weights_seq_no=weights_seq_no), context={"policies": SPACES})


def chunk_of(module_id: str, steps: int, weights_seq_no: int | None = None) -> EpisodeChunk:
    """A chunk of another module (no spaces checked)."""
    return EpisodeChunk.model_validate({**helpers.chunk(steps, weights_seq_no=weights_seq_no), "module_id": module_id})


class Trainer:
    """The injected training step: records each module's batch and publishes the next version."""

    def __init__(self, fail: bool = False) -> None:
        self.turns: list[dict[str, tuple[list[int], str]]] = []
        self.version = 0
        self.fail = fail
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, by_module: dict[str, list[ChunkBlock]], reasons: dict[str, str], stale_steps: int) -> None:
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the learner failed")
        lengths = {m: [steps for block in blocks for steps in block.lengths] for m, blocks in by_module.items()}
        self.turns.append({m: (lengths[m], reasons[m]) for m in by_module})
        self.version += 1

    @property
    def batches(self) -> list[tuple[list[int], str]]:
        """The default module's batches."""
        return [turn[DEFAULT] for turn in self.turns if DEFAULT in turn]


def limits(batch: int = 1000, min_barrier: int = 1, backlog: int | None = None, off_policy: bool = False) -> QueueLimits:
    return QueueLimits(batch, min(batch, min_barrier), backlog or 2 * batch, off_policy)


def scheduler(
    trainer: Trainer, *, batch: int = 1000, barrier_s: float = 60.0, lag: int = 2, modules: dict[str, QueueLimits] | None = None
):
    registry, metrics = ClientRegistry(), TrainingMetrics(list(modules or [DEFAULT]))
    queues = [ModuleQueue(m, q, lag) for m, q in (modules or {DEFAULT: limits(batch)}).items()]
    return registry, metrics, BatchScheduler(
        registry=registry,
        metrics=metrics,
        train=trainer,
        current_version=lambda: trainer.version,
        queues=queues,
        barrier_timeout_s=barrier_s,
    )


def add(batches: BatchScheduler, client, chunks: list[EpisodeChunk]) -> None:
    batches.add(client, blocks_of(chunks, DEFAULT))


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
    add(batches, a, [chunk(4)])
    await settled()
    assert trainer.batches == [] and batches.pending_env_steps == 4
    add(batches, b, [chunk(6)])
    await settled()
    assert trainer.batches == [([4, 6], "batch full")] and batches.pending_env_steps == 0


async def test_the_batch_trains_once_every_sampler_waits_and_a_watcher_holds_nobody_back():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer)
    a, b = sampler(registry), sampler(registry)
    registry.connect("ws", "watcher")  # never samples
    add(batches, a, [chunk(3)])
    waiting_a = asyncio.create_task(batches.wait_for_training(a))
    await settled()
    assert trainer.batches == [] and a.waiting  # b samples too and is not waiting yet
    add(batches, b, [chunk(5)])
    waiting_b = asyncio.create_task(batches.wait_for_training(b))
    await asyncio.wait_for(asyncio.gather(waiting_a, waiting_b), 10)
    assert trainer.batches == [([3, 5], "all clients waiting")]
    assert not a.waiting and not b.waiting


async def test_a_waiter_that_leaves_lets_the_others_train():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer)
    a, b = sampler(registry), sampler(registry)
    add(batches, a, [chunk(3)])
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
    add(batches, a, [chunk(2)])
    waiting = asyncio.create_task(batches.wait_for_training(a))
    await asyncio.wait_for(waiting, 10)
    assert trainer.batches == [([2], "barrier timeout")]


async def test_stale_chunks_are_dropped_and_every_step_is_accounted_for():
    trainer = Trainer()
    registry, metrics, batches = scheduler(trainer, batch=5, lag=1)
    a = sampler(registry)
    for steps, version in [(5, 0), (5, 1), (2, 0), (3, 1)]:  # the module changed in versions 1 and 2: 2 - 0 > 1
        (block,) = blocks_of([chunk(steps, version)], DEFAULT)
        metrics.record_chunks(a.id, block)
        batches.add(a, [block])
        await settled()
    assert trainer.batches == [([5], "batch full"), ([5], "batch full"), ([3], "batch full")]
    assert metrics.dropped_env_steps["stale"] == 2 and batches.training_env_steps == 0


async def test_staleness_counts_the_versions_of_the_chunks_own_module():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer, lag=0, modules={DEFAULT: limits(10), "other": limits(4)})
    a = sampler(registry)
    add(batches, a, [chunk(3, 0)])
    for _ in range(3):  # three new versions, none of which changes the default module
        add(batches, a, [chunk_of("other", 4, trainer.version)])
        await settled()
    add(batches, a, [chunk(7, trainer.version)])
    await settled()
    assert [turn["other"] for turn in trainer.turns[:3]] == [([4], "batch full")] * 3
    assert trainer.turns[3] == {DEFAULT: ([3, 7], "batch full")}  # its version-0 chunk is not stale


async def test_a_failed_training_step_drops_its_steps_and_releases_the_waiters():
    trainer = Trainer(fail=True)
    registry, metrics, batches = scheduler(trainer)
    a = sampler(registry)
    add(batches, a, [chunk(7)])
    await asyncio.wait_for(batches.wait_for_training(a), 10)
    assert metrics.dropped_env_steps["training_error"] == 7 and not batches.training_in_progress


async def test_data_arriving_during_training_goes_into_the_next_batch():
    trainer = Trainer()
    trainer.release.clear()
    registry, _, batches = scheduler(trainer, batch=3)
    a = sampler(registry)
    add(batches, a, [chunk(3)])
    await settled()
    assert batches.training_in_progress and batches.training_env_steps == 3
    add(batches, a, [chunk(4)])
    assert batches.pending_env_steps == 4
    trainer.release.set()
    await asyncio.wait_for(batches.wait_for_training(a), 10)
    assert trainer.batches == [([3], "batch full"), ([3], "batch full"), ([1], "all clients waiting")]


async def test_stop_drops_what_is_pending_and_releases_the_waiters():
    trainer = Trainer()
    registry, metrics, batches = scheduler(trainer)
    a, _ = sampler(registry), sampler(registry)
    add(batches, a, [chunk(8)])
    waiting = asyncio.create_task(batches.wait_for_training(a))
    await settled()
    await batches.stop()
    await asyncio.wait_for(waiting, 10)
    assert trainer.batches == [] and metrics.dropped_env_steps["shutdown"] == 8
    add(batches, a, [chunk(2)])
    assert metrics.dropped_env_steps["shutdown"] == 10


async def test_a_batch_never_holds_more_than_train_batch_size_and_the_cut_chunk_goes_on():
    trainer = Trainer()
    trainer.release.clear()
    registry, metrics, batches = scheduler(trainer, batch=4)
    a = registry.connect("tcp", "thin")  # never waits: only full batches train
    add(batches, a, [chunk(3), chunk(6)])
    await settled()
    assert batches.training_env_steps == 4 and batches.pending_env_steps == 5
    trainer.release.set()
    await settled()
    assert trainer.batches == [([3, 1], "batch full"), ([4], "batch full")] and batches.pending_env_steps == 1
    assert sum(metrics.dropped_env_steps.values()) == 0


def test_a_cut_chunk_keeps_every_step_once_and_its_end_on_the_tail():
    ended = chunk(6)
    ended.is_terminated, ended.outcome = True, "win"
    head, tail = (block.chunks()[-1] for block in ChunkBlock.of([chunk(2), ended], DEFAULT).split(6))
    whole = ended
    assert (head.num_steps, tail.num_steps) == (4, 2)
    assert not head.is_terminated and not head.is_truncated and head.outcome is None
    assert tail.is_terminated and tail.outcome == "win"
    assert (head.obs[-1] == tail.obs[0]).all()
    assert (np.concatenate([head.actions, tail.actions]) == whole.actions).all()
    assert (np.concatenate([head.obs[:-1], tail.obs]) == whole.obs).all()


async def test_each_module_trains_when_its_own_batch_is_due():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer, modules={DEFAULT: limits(5), "arm": limits(20)})
    thin = registry.connect("tcp", "thin")
    add(batches, thin, [chunk(5), chunk_of("arm", 5)])
    await settled()
    assert trainer.turns == [{DEFAULT: ([5], "batch full")}] and batches.queues["arm"].pending_env_steps == 5
    add(batches, thin, [chunk_of("arm", 15), chunk(5)])
    await settled()
    assert trainer.turns[1] == {DEFAULT: ([5], "batch full"), "arm": ([5, 15], "batch full")}  # both due: one turn


async def test_at_the_barrier_a_module_short_of_its_minimum_carries_its_steps_and_its_waiters_go_on():
    trainer = Trainer()
    registry, _, batches = scheduler(trainer, modules={DEFAULT: limits(100, min_barrier=8), "arm": limits(100, min_barrier=8)})
    a = sampler(registry)
    add(batches, a, [chunk(8), chunk_of("arm", 2)])
    await asyncio.wait_for(batches.wait_for_training(a), 10)
    assert trainer.turns == [{DEFAULT: ([8], "all clients waiting")}]
    assert batches.queues["arm"].pending_env_steps == 2  # carried: the version that collected it is still the arm's
    add(batches, a, [chunk(9), chunk_of("arm", 4)])
    await asyncio.wait_for(batches.wait_for_training(a), 10)
    assert trainer.turns[1] == {DEFAULT: ([9], "all clients waiting")}  # arm: 6 < 8, carried again
    add(batches, a, [chunk(2), chunk_of("arm", 1)])
    await asyncio.wait_for(batches.wait_for_training(a), 10)  # none holds 8: the one holding the most trains
    assert trainer.turns[2] == {"arm": ([2, 4, 1], "all clients waiting")}
    assert batches.queues[DEFAULT].pending_env_steps == 2


async def test_a_client_is_held_while_its_module_holds_more_than_max_backlog():
    trainer = Trainer()
    trainer.release.clear()
    registry, metrics, batches = scheduler(trainer, modules={DEFAULT: limits(4, backlog=6), "arm": limits(4, backlog=6)})
    fast, other = registry.connect("tcp", "fast"), registry.connect("tcp", "other")
    add(batches, fast, [chunk(4)])  # trains (held in the learner)
    add(batches, fast, [chunk(4)])
    assert batches.has_room(fast)  # 4 pending
    add(batches, fast, [chunk(3)])
    assert not batches.has_room(fast)  # 7 pending > 6
    add(batches, other, [chunk_of("arm", 2)])
    assert batches.has_room(other)  # it feeds another module
    held = asyncio.create_task(batches.wait_for_room(fast))
    await settled()
    assert not held.done()
    trainer.release.set()
    await asyncio.wait_for(held, 10)
    assert batches.queues[DEFAULT].pending_env_steps <= 6


async def test_a_closed_module_drops_its_steps_and_neither_trains_nor_holds_anyone():
    trainer = Trainer()
    registry, metrics, batches = scheduler(trainer, modules={DEFAULT: limits(100, min_barrier=4), "arm": limits(10, backlog=10)})
    a = sampler(registry)
    add(batches, a, [chunk(3), chunk_of("arm", 8)])
    batches.close("arm", "budget")  # its 8 pending steps dropped
    assert metrics.dropped_env_steps["budget"] == 8 and batches.queues["arm"].pending_env_steps == 0
    add(batches, a, [chunk(2), chunk_of("arm", 50)])  # more than arm's batch and backlog: dropped, no hold
    assert batches.has_room(a) and metrics.dropped_env_steps["budget"] == 58
    await asyncio.wait_for(batches.wait_for_training(a), 10)  # the barrier trains the default module alone
    assert trainer.turns == [{DEFAULT: ([3, 2], "all clients waiting")}]
    assert batches.pending_env_steps == 0


@pytest.mark.parametrize("module", ["app.training.scheduler", "app.training.registry"])
def test_the_scheduler_needs_no_torch(module):
    check = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT).returncode == 0
