"""Evaluation episodes (RLLINK.md, "Evaluation episodes"), over real sockets: a chunk or a thin
client's episode marked `evaluation` is played with the distribution's mode, never trained on,
and its return is reported apart (`evaluation_return_mean` in /api/metrics and /api/policies)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from rllink_clients.gym_client import run
from rllink_clients.thin_client import run_thin

from .helpers import TcpPeer, chunk, frame, gateway_settings, running_gateway, wait_until

ROOT = Path(__file__).parent.parent


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
def test_the_reference_client_follows_evaluation_interval_and_the_best_version_is_shipped(tmp_path):
    """SET_CONFIG's evaluation_interval: every 3rd episode is played with the mode and sent as
    an evaluation episode; best.onnx is the version whose window of evaluation episodes
    scored highest, best.json says so, /api/policies too, and `export --version best` writes it."""
    settings = gateway_settings(
        tmp_path, evaluation_interval=3, best_model_episodes=5, run_id="evaluated", runs_dir=tmp_path,
        checkpoint_dir=tmp_path / "evaluated" / "checkpoints",
    )
    with running_gateway(settings) as gateway, gateway.client("tcp") as client:
        assert client.request({"type": "GET_CONFIG"})["evaluation_interval"] == 3
        result = run(client, "CartPole-v1", target_return=None, max_env_steps=12_000, seed=0)
        client.request({"type": "PING"})  # the last EPISODES were taken in before this
        seen = metrics(gateway)
        policy = httpx.get(f"{gateway.base_url}/api/policies").json()[0]
    played = result.episodes + len(result.evaluations)
    assert len(result.evaluations) == played // 3 >= 10 and seen["num_evaluation_episodes_lifetime"] == len(result.evaluations)
    returns = [episode_return for _, episode_return in result.evaluations]
    assert seen["evaluation_return_mean"] == pytest.approx(np.mean(returns[-100:]))  # the gateway's window, as the client measured
    # Evaluation steps are counted apart from training's; together they are every step the client took.
    assert seen["num_env_steps_sampled_lifetime"] + seen["num_env_steps_evaluated_lifetime"] == result.env_steps
    # The best window of 5: its mean is the highest of every window the gateway saw, its version the newest in it.
    windows = [result.evaluations[i - 5 : i] for i in range(5, len(result.evaluations) + 1)]
    best_window = max(reversed(windows), key=lambda window: np.mean([r for _, r in window]))  # the newest of the best
    best = json.loads((tmp_path / "evaluated" / "models" / "default_policy" / "best.json").read_text())
    assert best == policy["best_model"]
    assert best["evaluation_return_mean"] == pytest.approx(np.mean([r for _, r in best_window]))
    assert best["episodes"] == 5 and best["weights_seq_no"] == max(v for v, _ in best_window)
    assert best["evaluation_return_mean"] > np.mean(returns[:5])  # greedy play improved as it trained
    out = tmp_path / "shipped.onnx"
    exported = subprocess.run(
        [sys.executable, "-m", "app", "export", "--run-id", "evaluated", "--runs-dir", str(tmp_path), "--version", "best",
         "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
    )
    assert exported.returncode == 0, exported.stderr
    assert f"best version {best['weights_seq_no']}" in exported.stdout
    shipped = tmp_path / "evaluated" / "models" / "default_policy" / "best.onnx"
    assert out.read_bytes() == shipped.read_bytes()
    ort.InferenceSession(str(out)).run(None, {settings.onnx_input_name: np.zeros((1, 4), np.float32)})


@pytest.mark.e2e
def test_a_thin_reference_client_gets_the_gateways_evaluation_episodes(tmp_path):
    """A thin client's every 2nd episode the gateway plays as an evaluation one, and says so in EPISODE_STARTED."""
    settings = gateway_settings(tmp_path, train_batch_size=1000, evaluation_interval=2)
    with running_gateway(settings) as gateway, gateway.client("tcp") as client:
        result = run_thin(client, "CartPole-v1", target_return=None, max_env_steps=8_000, seed=0)
        client.request({"type": "PING"})
        seen = metrics(gateway)
    assert len(result.evaluations) in (result.episodes, result.episodes - 1) and result.episodes >= 10
    assert seen["num_evaluation_episodes_lifetime"] == len(result.evaluations)
    returns = [episode_return for _, episode_return in result.evaluations]
    assert seen["evaluation_return_mean"] == pytest.approx(np.mean(returns[-100:]))
    assert seen["num_env_steps_sampled_lifetime"] + seen["num_env_steps_evaluated_lifetime"] == result.env_steps
    assert seen["serving"]["open_episodes"] == 0


def test_evaluation_interval_zero_asks_for_none(tmp_path):
    with running_gateway(gateway_settings(tmp_path, evaluation_interval=0)) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "GET_CONFIG"}))
        assert peer.receive()["evaluation_interval"] == 0
        for _ in range(12):  # no thin-client episode is made an evaluation one
            peer.send(frame({"type": "START_EPISODE"}))
            assert "evaluation" not in peer.receive()


def test_a_restarted_run_keeps_its_best_model_until_a_better_window(tmp_path):
    """best.json is read back at start: a window must beat it to replace best.onnx."""
    settings = gateway_settings(tmp_path, best_model_episodes=2, train_batch_size=64, env_steps_per_sample=64)

    def evaluate(gateway, peer, returns: list[float]) -> None:
        version = gateway.service.current_state().weights_seq_no
        episodes = [chunk(10, reward=r / 10, seed=k, episode_id=f"e{version}-{k}", evaluation=True, weights_seq_no=version)
                    for k, r in enumerate(returns)]
        peer.send(frame({"type": "EPISODES", "episodes": episodes}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"

    best_json = tmp_path / "models" / "default_policy" / "best.json"
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        evaluate(gateway, peer, [30.0, 50.0])
        wait_until(best_json.exists, 30, "best.json")
        first = json.loads(best_json.read_text())
        peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(64, seed=5)], "timesteps": 64}))
        assert peer.receive()["type"] == "SET_STATE"  # a training step: version 1
    assert first == {"weights_seq_no": 0, "evaluation_return_mean": 40.0, "episodes": 2, "oldest_weights_seq_no": 0}
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        assert httpx.get(f"{gateway.base_url}/api/policies").json()[0]["best_model"] == first
        evaluate(gateway, peer, [20.0, 40.0])  # mean 30: not better
        assert json.loads(best_json.read_text()) == first
        evaluate(gateway, peer, [60.0])  # the window now 40 and 60: mean 50
        wait_until(lambda: json.loads(best_json.read_text()) != first, 30, "the new best")
        assert json.loads(best_json.read_text())["evaluation_return_mean"] == 50.0
        shipped = (tmp_path / "models" / "default_policy" / "best.onnx").read_bytes()
        assert shipped == httpx.get(f"{gateway.base_url}/api/model.onnx").content  # version 1, the current one


def test_an_evaluation_turn_the_client_plays_itself_is_trained_on(tmp_path):
    """A thin client's episode the gateway chose as an evaluation one, whose first step is a
    LOG_ACTION (a heuristic or a human plays it), is experience: trained on, not evaluated."""
    settings = gateway_settings(tmp_path, evaluation_interval=2, train_batch_size=1000)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        started = []
        for _ in range(4):
            peer.send(frame({"type": "START_EPISODE"}))
            started.append(peer.receive())
        assert [reply.get("evaluation", False) for reply in started] == [False, True, False, True]
        logged, served = started[1]["episode_id"], started[3]["episode_id"]
        for step in range(5):
            obs = [0.01 * step, 0.0, 0.0, 0.0]
            peer.send(frame({"type": "LOG_ACTION", "episode_id": logged, "obs": obs, "action": step % 2}))
            peer.send(frame({"type": "LOG_RETURNS", "episode_id": logged, "reward": 1.0}))
            peer.send(frame({"type": "GET_ACTION", "episode_id": served, "obs": obs}))
            assert peer.receive()["type"] == "ACTION"
            peer.send(frame({"type": "LOG_RETURNS", "episode_id": served, "reward": 2.0}))
        for episode_id in (logged, served):
            peer.send(frame({"type": "END_EPISODE", "episode_id": episode_id, "obs": [0.0] * 4}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"
        seen = wait_until(lambda: (m := metrics(gateway))["num_evaluation_episodes_lifetime"] == 1 and m, 30, "the evaluation")
    assert seen["evaluation_return_mean"] == 10.0  # the served one
    assert seen["num_env_steps_sampled_lifetime"] == 5 and seen["episode_return_mean"] == 5.0  # the logged one, trained on
