"""Thin-client chunks go to training a few per turn of the event loop, none lost, none late
past a disconnect (in-process: the serving and training services themselves)."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

from app.config import Settings
from app.policies import PolicySet
from app.schemas import GetAction, StartEpisode
from app.serving.service import ServingService
from app.training.service import TrainingService

OBS = [0.01, 0.02, 0.03, 0.04]
EPISODES = 10
STEPS = 4  # env_steps_per_sample: the 5th action of each episode cuts a chunk of 4 steps


@asynccontextmanager
async def services(tmp_path):
    settings = Settings(
        checkpoint_dir=tmp_path / "checkpoints", train_batch_size=100_000, barrier_timeout_s=60.0,
        env_steps_per_sample=STEPS,
    )
    policies = PolicySet.from_settings(settings)
    training = TrainingService(settings, policies)
    await training.start()
    serving = ServingService(settings, policies, training)
    try:
        yield serving, training
    finally:
        await serving.stop()
        await training.stop()


async def cut_a_chunk_in_every_episode(serving: ServingService, client) -> None:
    ids = [serving.start_episode(client, StartEpisode()).episode_id for _ in range(EPISODES)]
    batch = GetAction.model_validate({"type": "GET_ACTION", "batch": [{"episode_id": i, "obs": OBS} for i in ids]})
    for _ in range(STEPS + 1):
        await serving.get_action(client, batch, time.perf_counter())


async def test_chunks_cut_together_are_ingested_over_several_turns_and_none_is_lost(tmp_path):
    async with services(tmp_path) as (serving, training):
        serving.ingest_budget_s = 0.0  # one chunk a turn
        client = training.connect("tcp", "test:1")
        await cut_a_chunk_in_every_episode(serving, client)
        total = EPISODES * STEPS
        # Cut, not ingested yet: the reply that cut them did not wait for their validation.
        assert (serving.open_episode_steps, training.pending_env_steps) == (total, 0)
        await asyncio.sleep(0)
        assert 0 < training.pending_env_steps < total
        assert serving.open_episode_steps + training.pending_env_steps == total
        for _ in range(100):
            if training.pending_env_steps == total:
                break
            await asyncio.sleep(0)
        assert (serving.open_episode_steps, training.pending_env_steps) == (0, total)


async def test_a_disconnect_ingests_what_was_cut_before_the_client_is_forgotten(tmp_path):
    async with services(tmp_path) as (serving, training):
        serving.ingest_budget_s = 0.0
        client = training.connect("tcp", "test:1")
        await cut_a_chunk_in_every_episode(serving, client)
        serving.disconnect(client)  # as a connection closing does, before the training service's disconnect
        assert (serving.open_episode_steps, training.pending_env_steps) == (0, EPISODES * STEPS)
        training.disconnect(client)
        assert training.metrics.snapshot()["num_env_steps_sampled_lifetime"] == EPISODES * STEPS


async def test_chunks_cut_faster_than_the_budget_allows_do_not_pile_up(tmp_path):
    async with services(tmp_path) as (serving, training):
        serving.ingest_budget_s = 0.0
        serving.ingest_backlog = 3  # past 3 waiting chunks, a turn ingests until 3 are left
        client = training.connect("tcp", "test:1")
        await cut_a_chunk_in_every_episode(serving, client)
        await asyncio.sleep(0)
        assert (serving.open_episode_steps, training.pending_env_steps) == (3 * STEPS, (EPISODES - 3) * STEPS)
