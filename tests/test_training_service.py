"""The shared LocalTrainingService: versions, the barrier, stale data, metrics, checkpoints."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.hyperparameters import DEFAULT_MODULE_ID
from app.settings.policies import PolicySet
from app.training.algorithms.ppo.config import PPOConfig
from app.training.checkpoints import CHECKPOINT_FILE, CheckpointMismatch
from app.training.onnx_export import load_payload
from app.training.service import LocalTrainingService

from . import helpers

WAIT_S = 20  # generous bound on anything that should happen "now"


def make_settings(tmp_path: Path, **overrides) -> Settings:
    """Only the barrier trains unless a test says otherwise."""
    defaults = {"checkpoint_dir": tmp_path / "checkpoints", "train_batch_size": 100_000, "barrier_timeout_s": 60.0}
    return Settings(**{**defaults, **overrides})


@asynccontextmanager
async def running(settings: Settings):
    service = LocalTrainingService(settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


def chunk(steps: int = 10, reward: float = 1.0, **fields) -> EpisodeChunk:
    data = helpers.chunk(steps, reward=reward, seed=steps, **fields)
    return EpisodeChunk.model_validate(
        data, context={"policies": PolicySet.single(Settings().observation_space, Settings().action_space)}
    )


async def send_and_wait(service: LocalTrainingService, client, chunks: list[EpisodeChunk]):
    """What a connection does for EPISODES_AND_GET_STATE."""
    service.ingest(client, chunks)
    state = await asyncio.wait_for(service.wait_for_training(client), WAIT_S)
    service.note_state_sent(client, state)
    return state


async def settle() -> None:
    """Let every ready task run (a training step started now would be under way)."""
    for _ in range(5):
        await asyncio.sleep(0.01)


async def until(condition) -> None:
    """Yield to other tasks until `condition()` holds (without giving a training step
    time to finish: it can only end on the event loop, which we check between yields)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_one_client_alone_never_deadlocks(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        client = service.connect("tcp", "127.0.0.1:1")
        assert service.current_state().weights_seq_no == 0
        state = await send_and_wait(service, client, [chunk()])
        assert state.weights_seq_no == 1 and client.last_weights_seq_no_sent == 1
        assert client.env_steps_sent == 10 and client.waiting is False


async def test_each_training_step_increases_weights_seq_no_by_exactly_one(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        client = service.connect("ws", "browser")
        versions = [(await send_and_wait(service, client, [chunk()])).weights_seq_no for _ in range(4)]
        assert versions == [1, 2, 3, 4]
        assert service.metrics.num_training_steps == 4 and service.metrics.weights_seq_no == 4
        assert service.kept_versions == [0, 1, 2, 3, 4]
        assert load_payload(service.kept_state(2).default.onnx_gzip_b64).metadata_props[0].value == "2"
        assert service.kept_state(99) is None


async def test_nothing_ingested_means_no_wait(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        client = service.connect("tcp", "a")
        state = await asyncio.wait_for(service.wait_for_training(client), 1)
        assert state.weights_seq_no == 0 and service.metrics.num_training_steps == 0


async def test_barrier_trains_once_every_client_sending_experience_waits(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        a, b = service.connect("tcp", "a"), service.connect("ws", "b")
        service.ingest(b, [chunk(7)])  # b sends a first piece with EPISODES and collects on
        a_waits = asyncio.create_task(send_and_wait(service, a, [chunk(10)]))
        await settle()
        assert a.waiting and not a_waits.done() and not service.status().training_in_progress
        assert service.status().pending_env_steps == 17
        b_state = await send_and_wait(service, b, [chunk(3)])
        a_state = await a_waits
        assert a_state.weights_seq_no == b_state.weights_seq_no == 1  # one step, on both clients' data
        assert service.metrics.num_env_steps_trained_lifetime == 20


async def test_watchers_do_not_hold_the_barrier(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        a, watcher = service.connect("tcp", "a"), service.connect("ws", "dashboard")
        assert (await send_and_wait(service, a, [chunk()])).weights_seq_no == 1
        assert watcher.env_steps_sent == 0 and [c.id for c in service.status().clients] == [a.id, watcher.id]


async def test_a_client_that_asked_for_its_config_holds_the_barrier(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        a, starting = service.connect("tcp", "a"), service.connect("ws", "starting")
        service.start_sampling(starting)  # GET_CONFIG: it will send experience soon
        a_waits = asyncio.create_task(send_and_wait(service, a, [chunk(10)]))
        await settle()
        assert a.waiting and not service.status().training_in_progress
        starting_state = await send_and_wait(service, starting, [chunk(5)])
        assert (await a_waits).weights_seq_no == starting_state.weights_seq_no == 1
        assert service.metrics.num_env_steps_trained_lifetime == 15


async def test_a_client_leaving_while_waiting_harms_nobody(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        a, b, busy = service.connect("tcp", "a"), service.connect("tcp", "b"), service.connect("ws", "busy")
        service.ingest(busy, [chunk(2)])  # busy has sent experience and is collecting more
        a_waits = asyncio.create_task(send_and_wait(service, a, [chunk(10)]))
        b_waits = asyncio.create_task(send_and_wait(service, b, [chunk(5)]))
        await settle()
        assert a.waiting and b.waiting and not service.status().training_in_progress  # `busy` holds the barrier

        b_waits.cancel()  # b's connection drops: its task is cancelled, then it disconnects
        await asyncio.gather(b_waits, return_exceptions=True)
        service.disconnect(b)
        assert b.waiting is False and not a_waits.done()

        service.disconnect(busy)  # now everyone left is waiting
        state = await a_waits
        assert state.weights_seq_no == 1
        assert service.metrics.num_env_steps_trained_lifetime == 17  # b's and busy's data were still used
        assert [c.id for c in service.status().clients] == [a.id]
        assert (await send_and_wait(service, a, [chunk(3)])).weights_seq_no == 2  # and a goes on alone


async def test_a_client_leaving_during_training_harms_nobody(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        a, b = service.connect("tcp", "a"), service.connect("tcp", "b")
        a_waits = asyncio.create_task(send_and_wait(service, a, [chunk(50)]))
        b_waits = asyncio.create_task(send_and_wait(service, b, [chunk(50)]))
        await until(lambda: service.status().training_in_progress)
        b_waits.cancel()
        service.disconnect(b)
        assert (await a_waits).weights_seq_no == 1
        assert (await send_and_wait(service, a, [chunk(3)])).weights_seq_no == 2


async def test_a_full_batch_trains_and_data_during_training_goes_into_the_next(tmp_path):
    async with running(make_settings(tmp_path, train_batch_size=20)) as service:
        a, b = service.connect("tcp", "a"), service.connect("tcp", "b")  # b never waits
        service.ingest(a, [chunk(25)])
        assert service.status().training_in_progress and service.status().training_env_steps == 20  # never more than a batch
        assert service.status().pending_env_steps == 5  # the chunk's tail waits for the next
        service.ingest(a, [chunk(5)])  # arrives while the first step trains ...
        service.ingest(b, [chunk(20)])  # ... and fills the next batch
        assert service.status().pending_env_steps == 30
        state = await asyncio.wait_for(service.wait_for_training(a), WAIT_S)
        assert state.weights_seq_no == 2  # a waited for the second batch, which holds its latest data
        assert service.metrics.num_env_steps_trained_lifetime == 40 and service.status().pending_env_steps == 10
        assert b.env_steps_sent == 20 and not b.waiting


async def test_barrier_timeout_trains_what_is_there(tmp_path):
    async with running(make_settings(tmp_path, barrier_timeout_s=0.3)) as service:
        a, busy = service.connect("tcp", "a"), service.connect("tcp", "busy")
        service.ingest(busy, [chunk(3)])  # and never waits
        loop = asyncio.get_running_loop()
        started = loop.time()
        state = await send_and_wait(service, a, [chunk()])
        assert state.weights_seq_no == 1 and 0.25 <= loop.time() - started < WAIT_S


async def test_stale_data_is_dropped_and_counted(tmp_path):
    async with running(make_settings(tmp_path, max_policy_lag=1, train_batch_size=10)) as service:
        old, fresh = service.connect("tcp", "old"), service.connect("tcp", "fresh")
        service.note_state_sent(old, service.current_state())  # `old` collects with version 0 ...
        for _ in range(2):  # ... while `fresh` trains twice (each message fills a batch)
            await send_and_wait(service, fresh, [chunk(10)])
        service.disconnect(fresh)
        assert service.current_state().weights_seq_no == 2

        # Version 0 is now 2 versions old, one more than max_policy_lag allows; a chunk
        # without weights_seq_no is dated by the last version the client was sent.
        state = await send_and_wait(service, old, [chunk(8), chunk(4, weights_seq_no=1)])
        # The 12 steps make a full batch of 10: the 8 stale, 2 of the 4 trained (version 3);
        # the other 2, cut off and still of version 1, are now 2 versions old themselves.
        assert state.weights_seq_no == 3
        assert service.metrics.dropped_env_steps["stale"] == 8 + 2
        assert service.metrics.num_env_steps_trained_lifetime == 10 + 10 + 2

        state = await send_and_wait(service, old, [chunk(6, weights_seq_no=0)])
        assert state.weights_seq_no == 3  # nothing fresh: no training step, yet the wait ends
        assert service.metrics.dropped_env_steps["stale"] == 16
        assert service.metrics.num_training_steps == 3


async def test_episode_metrics_join_chunks_per_client_and_by_id(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        a, b = service.connect("tcp", "a"), service.connect("tcp", "b")
        service.ingest(a, [chunk(5, reward=1.0, is_terminated=False)])
        service.ingest(b, [chunk(4, reward=10.0, is_terminated=False, episode_id="x")])
        service.ingest(b, [chunk(2, reward=5.0, is_terminated=False, episode_id="y")])
        service.ingest(a, [chunk(3, reward=1.0, is_terminated=True)])  # continues a's first chunk
        service.ingest(b, [chunk(1, reward=10.0, is_terminated=False, is_truncated=True, episode_id="x")])
        snapshot = service.metrics.snapshot()
        assert sorted(service.metrics.episode_returns) == [8.0, 50.0]
        assert sorted(service.metrics.episode_lengths) == [5, 8]
        assert snapshot["num_episodes_lifetime"] == 2 and snapshot["num_env_steps_sampled_lifetime"] == 15
        assert snapshot["episode_return_mean"] == 29.0 and snapshot["episode_len_max"] == 8
        assert service.metrics.env_steps_per_s() > 0
        service.disconnect(b)  # forgets b's unfinished episode "y"
        service.ingest(a, [chunk(2, reward=5.0, episode_id="y")])
        assert sorted(service.metrics.episode_returns) == [8.0, 10.0, 50.0]


async def test_learner_stats_after_a_step(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        client = service.connect("tcp", "a")
        await send_and_wait(service, client, [chunk(30)])
        learner = service.metrics.snapshot()["learner"]
        for key in ("policy_loss", "vf_loss", "entropy", "approx_kl", "clip_frac", "explained_var"):
            assert key in learner
        assert learner["entropy"] > 0 and service.metrics.last_training_step_s > 0


async def test_checkpoint_restores_version_and_outputs(tmp_path):
    settings = make_settings(tmp_path)
    async with running(settings) as service:
        client = service.connect("tcp", "a")
        for _ in range(3):
            await send_and_wait(service, client, [chunk(20)])
        before = service.current_state()
    module_dir = settings.checkpoint_dir / DEFAULT_MODULE_ID
    assert [p.name for p in module_dir.iterdir()] == [CHECKPOINT_FILE]  # no temp files left

    async with running(settings) as restored:
        after = restored.current_state()
        assert after.weights_seq_no == 3
        obs = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
        outputs = [ort.InferenceSession(s.default.onnx_bytes).run(None, {"obs": obs})[0] for s in (before, after)]
        np.testing.assert_array_equal(outputs[0], outputs[1])
        client = restored.connect("tcp", "a")
        assert (await send_and_wait(restored, client, [chunk()])).weights_seq_no == 4


async def test_a_save_interrupted_by_a_crash_leaves_no_file_behind_after_restart(tmp_path):
    settings = make_settings(tmp_path)
    async with running(settings) as service:
        await send_and_wait(service, service.connect("tcp", "a"), [chunk()])
    directory = settings.checkpoint_dir / DEFAULT_MODULE_ID
    # What a SIGKILL during torch.save leaves, an hour ago; and a save under way now.
    orphan, fresh = directory / f"{CHECKPOINT_FILE}k1l2.tmp", directory / f"{CHECKPOINT_FILE}n0w.tmp"
    for path in (orphan, fresh):
        path.write_bytes(b"half a checkpoint")
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    async with running(settings) as restored:
        assert restored.current_state().weights_seq_no == 1
    assert sorted(p.name for p in directory.iterdir()) == sorted([CHECKPOINT_FILE, fresh.name])


async def test_checkpoint_of_another_architecture_is_refused_clearly(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        await send_and_wait(service, service.connect("tcp", "a"), [chunk()])
    other = LocalTrainingService(make_settings(tmp_path, ppo=PPOConfig(hidden_sizes=(32,))))
    with pytest.raises(CheckpointMismatch, match="hidden_sizes"):
        await other.start()


async def test_ppo_hyperparameters_change_from_the_next_step(tmp_path):
    async with running(make_settings(tmp_path)) as service:
        service.change_config([(DEFAULT_MODULE_ID, "ppo", {"learning_rate": 0.0123, "ent_coef": 0.02})])
        assert service.status().default_config.learning_rate == 0.0123
        await send_and_wait(service, service.connect("tcp", "a"), [chunk()])
        assert helpers.learner_of(service).optimizer.param_groups[0]["lr"] == 0.0123
        for bad, why in (({"learning_rate": -1}, "greater than 0"), ({"hidden_sizes": [8]}, "hidden_sizes cannot change"),
                         ({"normalize_obs": True}, "normalize_obs cannot change"), ({"no_such_thing": 1}, "unknown PPO")):
            with pytest.raises(ValueError, match=why):
                service.change_config([(DEFAULT_MODULE_ID, "ppo", {"ent_coef": 0.03}), (DEFAULT_MODULE_ID, "ppo", bad)])
        with pytest.raises(ValueError, match="trains with ppo, not sac"):
            service.change_config([(DEFAULT_MODULE_ID, "sac", {"tau": 0.01})])
        assert service.status().default_config.learning_rate == 0.0123 and service.status().default_config.ent_coef == 0.02  # all or none


async def test_stop_releases_waiters_and_saves(tmp_path):
    settings = make_settings(tmp_path)
    service = LocalTrainingService(settings)
    await service.start()
    a, busy = service.connect("tcp", "a"), service.connect("tcp", "busy")
    service.ingest(busy, [chunk(3)])  # busy holds the barrier
    a_waits = asyncio.create_task(send_and_wait(service, a, [chunk()]))
    await settle()
    await service.stop()
    assert (await a_waits).weights_seq_no == 0  # released with the current version
    assert service.metrics.dropped_env_steps["shutdown"] == 13
    assert (settings.checkpoint_dir / DEFAULT_MODULE_ID / CHECKPOINT_FILE).exists()
    service.ingest(a, [chunk(4)])  # a straggler after stop: dropped, and nobody waits for it
    assert (await asyncio.wait_for(service.wait_for_training(a), 1)).weights_seq_no == 0
    assert service.metrics.dropped_env_steps["shutdown"] == 17
    assert unaccounted(service) == 0  # the straggler counts as sampled too


def unaccounted(service: LocalTrainingService) -> int:
    """Env steps sampled but neither trained, dropped, pending nor in training (must be 0)."""
    m = service.metrics
    accounted = m.num_env_steps_trained_lifetime + sum(m.dropped_env_steps.values())
    return m.num_env_steps_sampled_lifetime - accounted - service.status().pending_env_steps - service.status().training_env_steps


async def test_every_env_step_is_accounted_for_at_every_moment(tmp_path):
    settings = make_settings(tmp_path, train_batch_size=20, max_policy_lag=0)
    async with running(settings) as service:
        a, b = service.connect("tcp", "a"), service.connect("tcp", "b")
        service.note_state_sent(b, service.current_state())  # b collects with version 0
        service.ingest(a, [chunk(25)])  # fills a batch: training starts, 5 steps wait
        assert service.status().training_in_progress and service.status().training_env_steps == 20 and unaccounted(service) == 0
        service.ingest(b, [chunk(7)])  # pending while a's batch trains; stale once it is done
        assert service.status().pending_env_steps == 12 and unaccounted(service) == 0
        topped_up = False
        while service.status().training_in_progress or service.status().pending_env_steps:
            assert unaccounted(service) == 0
            if not service.status().training_in_progress and not topped_up:
                service.ingest(a, [chunk(8)])  # 5 + 7 + 8: a batch, which takes b's stale chunk along
                topped_up = True
            await asyncio.sleep(0.001)
        m = service.metrics
        assert m.dropped_env_steps["stale"] == 7 and m.num_env_steps_trained_lifetime == 20 + 13
        assert service.status().training_env_steps == 0 and unaccounted(service) == 0


async def test_a_checkpoint_restores_the_observation_and_reward_statistics(tmp_path):
    normalising = PPOConfig(normalize_obs=True, normalize_reward=True)
    settings = make_settings(tmp_path, ppo=normalising)
    async with running(settings) as service:
        client = service.connect("tcp", "a")
        for steps in (20, 30):
            await send_and_wait(service, client, [chunk(steps, reward=5.0)])
        learner = helpers.learner_of(service)
        saved = {name: tensor.clone() for name, tensor in learner.policy.obs_norm.state_dict().items()}
        scale = learner.reward_scaler.scale
    assert saved["count"] > 50 and scale != 1.0  # they learned from the data

    async with running(settings) as restored:
        learner = helpers.learner_of(restored)
        for name, tensor in learner.policy.obs_norm.state_dict().items():
            assert torch.equal(tensor, saved[name]), name
        assert learner.reward_scaler.scale == scale
    with pytest.raises(CheckpointMismatch, match="normalize_obs"):  # a checkpoint without them is refused
        await LocalTrainingService(make_settings(tmp_path, ppo=PPOConfig(normalize_obs=False))).start()


@pytest.mark.parametrize("threads", [1, 2])
async def test_the_learner_trains_with_the_intra_op_threads_it_is_given(tmp_path, threads):
    async with running(make_settings(tmp_path, learner_threads=threads)) as service:
        assert await service._learners.call("num_threads") == threads


def test_the_thread_that_builds_the_service_runs_torch_on_one_thread(tmp_path):
    """Its own OpenMP team would make libgomp stop spinning, and the learner's threads
    then wait on futexes (Pendulum SAC, 2 learner threads: 267 s, 1 thread: 202 s)."""

    def build() -> int:
        torch.set_num_threads(2)
        LocalTrainingService(make_settings(tmp_path, learner_threads=2))
        return torch.get_num_threads()

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(build).result() == 1
