"""The learners in a process of their own (`learner_process`): they train as in the
gateway's thread, save and restore checkpoints, and a learner process that dies is
replaced without losing more than the batch it was training."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.training.algorithms.ppo.config import PPOConfig
from app.training.learner_host import LEARNER_NICENESS
from rllink_clients.gym_client import run

from .helpers import chunk, gateway_settings, running_gateway, wait_until

pytestmark = pytest.mark.e2e


def exited(pid: int) -> bool:
    """The process is gone, or a zombie (dead, not yet reaped) whose threads have all
    exited too (until then its parent's waitpid does not see it dead)."""
    try:
        zombie = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
        return zombie and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except FileNotFoundError:
        return True


def learner_pid(gateway) -> int:
    """The learner process's pid (the gateway's learner host is a LearnerProcess)."""
    pid = gateway.service._learners.pid
    assert pid is not None and pid != os.getpid()
    return pid


def test_cartpole_trains_with_the_learner_in_its_own_process_and_a_restart_resumes(tmp_path: Path) -> None:
    settings = gateway_settings(tmp_path, learner_process=True)
    with running_gateway(settings) as gateway:
        pid = learner_pid(gateway)
        # At a lower priority than the gateway: the event loop's thin clients come first.
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + LEARNER_NICENESS)
        os.kill(pid, signal.SIGTERM)  # a service manager's, sent to every process: the gateway's to act on
        with gateway.client("tcp", timeout=120) as client:
            result = run(client, "CartPole-v1", seed=0, target_return=200.0, max_env_steps=100_000)  # random play: 22
        assert learner_pid(gateway) == pid  # the same learner process trained throughout
        metrics = httpx.get(gateway.base_url + "/api/metrics").json()
        assert httpx.get(gateway.base_url + "/api/config").json()["learner_process"] is True
        assert not exited(pid)
    assert result.reached_target, f"mean of the last 20 returns {result.mean_return:.1f} < 200"
    assert metrics["num_env_steps_trained_lifetime"] == metrics["num_env_steps_sampled_lifetime"]
    assert metrics["num_env_steps_sampled_lifetime"] + metrics["num_env_steps_evaluated_lifetime"] == result.env_steps
    assert exited(pid)  # with the gateway

    with running_gateway(settings) as gateway:  # the checkpoint the learner process saved
        resumed = httpx.get(gateway.base_url + "/api/metrics").json()["weights_seq_no"]
    assert resumed == result.weights_seq_no


def test_a_learner_process_that_dies_is_replaced_from_the_checkpoint(tmp_path: Path) -> None:
    """Killed between steps: the next step starts a new one, nothing is lost. Killed during
    a step: that batch is dropped (`training_error`), the client still gets its reply,
    and the step after trains in a new process."""
    slow = PPOConfig(update_epochs=100, minibatch_size=64)  # a step of 20k steps that lasts long enough to kill it in
    settings = gateway_settings(tmp_path, learner_process=True, ppo=slow, train_batch_size=20_000)  # the big step: one batch
    with running_gateway(settings) as gateway:
        with gateway.client("tcp", timeout=300) as client:
            client.request({"type": "GET_CONFIG"})
            step = lambda chunks: client.request({"type": "EPISODES_AND_GET_STATE", "episodes": chunks})  # noqa: E731
            assert step([chunk(100)])["weights_seq_no"] == 1
            first = learner_pid(gateway)
            os.kill(first, signal.SIGKILL)
            wait_until(lambda: exited(first), 10, "the learner to die")
            assert step([chunk(100)])["weights_seq_no"] == 2  # a new learner, restored at 1
            second = learner_pid(gateway)
            assert second != first

            big = [chunk(500, seed=i) for i in range(40)]
            client.send({"type": "EPISODES_AND_GET_STATE", "episodes": big})
            wait_until(lambda: gateway.service.status().training_in_progress, 60, "the big step to start")
            os.kill(second, signal.SIGKILL)
            reply = client.receive()
            assert reply["type"] == "SET_STATE" and reply["weights_seq_no"] == 2  # no new version from the lost step
            assert step([chunk(100)])["weights_seq_no"] == 3
            assert learner_pid(gateway) not in (first, second)
        metrics = httpx.get(gateway.base_url + "/api/metrics").json()
    assert metrics["dropped_env_steps"].get("training_error") == 20_000
    assert metrics["num_env_steps_trained_lifetime"] == 300
    assert np.isclose(metrics["num_env_steps_sampled_lifetime"], 20_300)
