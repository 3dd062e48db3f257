"""Evaluation episodes (RLLINK.md, "Evaluation episodes"), over real sockets: a chunk or a thin
client's episode marked `evaluation` is played with the distribution's mode, never trained on,
and its return is reported apart (`evaluation_return_mean` in /api/metrics and /api/policies)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from rllink_clients.gym_client import run
from rllink_clients.thin_client import run_thin

from .helpers import TcpPeer, chunk, frame, gateway_settings, running_gateway, wait_until


def metrics(gateway) -> dict:
    return httpx.get(f"{gateway.base_url}/api/metrics").json()


def steps_accounted(gateway) -> int:
    """Env steps trained, dropped, pending or in the step under way, once no step is under way."""
    service = gateway.service
    wait_until(lambda: not service.status().training_in_progress, 60, "the training step to end")
    counts = service.metrics
    return (counts.num_env_steps_trained_lifetime + sum(counts.dropped_env_steps.values())
            + service.status().pending_env_steps + service.status().training_env_steps)


def test_evaluation_chunks_are_reported_apart_and_never_trained_on(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=64, env_steps_per_sample=64)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        evaluation = [chunk(100, reward=1.0, seed=s, episode_id=f"e{s}", evaluation=True) for s in range(3)]
        evaluation.append(chunk(40, reward=0.5, seed=9, episode_id="e9", evaluation=True, terminated=False))
        evaluation.append(chunk(10, reward=0.5, seed=10, episode_id="e9", evaluation=True))  # e9 goes on, then ends
        peer.send(frame({"type": "EPISODES", "episodes": evaluation}))
        peer.send(frame({"type": "EPISODES", "episodes": [chunk(5, reward=2.0, seed=20)]}))  # one training chunk
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"  # every EPISODES before it was taken in
        seen = metrics(gateway)
        policy = httpx.get(f"{gateway.base_url}/api/policies").json()[0]
        accounted = steps_accounted(gateway)
    assert seen["num_evaluation_episodes_lifetime"] == 4 and seen["num_env_steps_evaluated_lifetime"] == 350
    assert seen["evaluation_return_mean"] == pytest.approx((3 * 100 + 25) / 4)
    # Nothing of it was sampled for training: the training chunk's 5 steps are all there is.
    assert seen["num_env_steps_sampled_lifetime"] == 5 and seen["num_episodes_lifetime"] == 1
    assert seen["episode_return_mean"] == 10.0 and accounted == 5
    assert policy["evaluation_return_mean"] == pytest.approx(81.25) and policy["num_evaluation_episodes_lifetime"] == 4


def test_a_chunk_whose_evaluation_flag_is_not_a_boolean_is_refused(tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "EPISODES", "episodes": [chunk(3), chunk(3, evaluation=1)]}))
        reply = peer.receive()
        assert reply["type"] == "ERROR" and reply["code"] == "invalid_message", reply
        assert "evaluation" in reply["message"]
        assert metrics(gateway)["num_env_steps_sampled_lifetime"] == 0  # the message was refused whole


def test_a_thin_client_evaluation_episode_acts_with_the_mode_and_is_not_trained_on(tmp_path):
    rng = np.random.default_rng(0)
    observations = rng.uniform(-1, 1, (40, 4)).tolist()
    settings = gateway_settings(tmp_path, train_batch_size=32, env_steps_per_sample=32)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        ids = []
        for fields in ({"evaluation": True}, {}):
            peer.send(frame({"type": "START_EPISODE", **fields}))
            ids.append(peer.receive()["episode_id"])
        evaluated, greedy = [], []
        for obs in observations:  # an evaluation episode's actions, even asking to explore, are the greedy ones
            peer.send(frame({"type": "GET_ACTION", "episode_id": ids[0], "obs": obs, "explore": True}))
            evaluated.append(peer.receive()["action"])
            peer.send(frame({"type": "LOG_RETURNS", "episode_id": ids[0], "reward": 1.0}))
            peer.send(frame({"type": "GET_ACTION", "episode_id": ids[1], "obs": obs, "explore": False}))
            greedy.append(peer.receive()["action"])
        peer.send(frame({"type": "END_EPISODE", "episode_id": ids[0], "obs": observations[0]}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"
        seen = wait_until(lambda: (m := metrics(gateway))["num_evaluation_episodes_lifetime"] == 1 and m, 30, "the evaluation")
        accounted = steps_accounted(gateway)
    assert evaluated == greedy and len(set(greedy)) == 2  # the mode, which differs across observations
    assert seen["evaluation_return_mean"] == 40.0 and seen["num_env_steps_evaluated_lifetime"] == 40
    # The other (training) episode's steps went to training: 40 actions, one of them still waiting for its observation.
    assert seen["num_env_steps_sampled_lifetime"] == accounted == 32 and seen["num_episodes_lifetime"] == 0


@pytest.mark.e2e
def test_the_reference_client_runs_periodic_greedy_evaluations(tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, gateway.client("tcp") as client:
        result = run(client, "CartPole-v1", target_return=None, max_env_steps=12_000, seed=0, eval_every=2, eval_episodes=3)
        client.request({"type": "PING"})  # the last evaluation's EPISODES were taken in before this
        seen = metrics(gateway)
    versions, means = zip(*result.evaluations)
    assert len(versions) >= 5 and all(later - earlier >= 2 for earlier, later in zip(versions, versions[1:]))
    assert seen["num_evaluation_episodes_lifetime"] == 3 * len(versions) <= 100  # all in the gateway's window
    assert seen["evaluation_return_mean"] == pytest.approx(np.mean(means))  # as the client measured them
    assert seen["num_env_steps_sampled_lifetime"] == result.env_steps  # evaluation steps are not training's
    assert max(means[len(means) // 2 :]) > means[0]  # greedy play improved as it trained


@pytest.mark.e2e
def test_a_thin_reference_client_evaluates_between_its_episodes(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=1000)
    with running_gateway(settings) as gateway, gateway.client("tcp") as client:
        result = run_thin(client, "CartPole-v1", target_return=None, max_env_steps=8_000, seed=0, eval_every=2, eval_episodes=2)
        client.request({"type": "PING"})
        seen = metrics(gateway)
    versions, means = zip(*result.evaluations)
    assert len(versions) >= 3 and seen["num_evaluation_episodes_lifetime"] == 2 * len(versions)
    assert seen["evaluation_return_mean"] == pytest.approx(np.mean(means))
    assert seen["num_env_steps_sampled_lifetime"] == result.env_steps  # the evaluation episodes' steps are apart
    assert seen["serving"]["open_episodes"] == 0
