"""Recurrent policies (RLLINK.md "Recurrent policies"): PPO with an LSTM.

- The exported ONNX carries the state (`state_in` in, `state_out` out, its size in the
  metadata, no LSTM operator) and onnxruntime agrees with torch step by step over an episode.
- SET_CONFIG says each module's `state_size`; a checkpoint keeps the cell size, and a
  gateway of another size refuses it.
- Bad input over a real socket: a chunk whose `state_in` has the wrong length, one of a
  feed-forward module that carries one, a continued chunk without one: each an ERROR that
  names the field and both sizes, and the other client loses nothing.
- Settings: use_lstm with SAC is refused at start, in one line.
- best.onnx, `export` and a restart keep the state (a real gateway, trained, restarted).
- The multi-agent reference client carries each agent's state, and an LSTM learns through it.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from pydantic import ValidationError

from app.settings.config import Settings
from app.settings.hyperparameters import ModelConfig
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.learner import PPOLearner
from app.training.checkpoints import CheckpointMismatch
from app.training.onnx_export import OPSET
from rllink_clients.gym_client import run
from rllink_clients.multi_agent import run_scene
from rllink_clients.multi_agent_env import gymnasium_scene
from rllink_clients.thin_client import run_thin_envs

from .gateway_process import ROOT
from .helpers import TcpPeer, chunk, frame, gateway_settings, running_gateway, wait_until

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5}


def learner(tmp_path, cell: int = 8, normalize_obs: bool = True) -> PPOLearner:
    return PPOLearner(
        PPOConfig(hidden_sizes=(16,), normalize_obs=normalize_obs), BoxSpace(type="box", shape=[3]),
        DiscreteSpace(type="discrete", n=4), seed=0, checkpoint_dir=tmp_path, onnx_input_name="obs",
        model=ModelConfig(use_lstm=True, lstm_cell_size=cell),
    )


def test_the_onnx_model_carries_the_state_and_agrees_with_torch_over_an_episode(tmp_path):
    trained = learner(tmp_path)
    trained.policy.obs_norm.update(torch.randn(500, 3) * 2 + 1)  # a normaliser that changes something, folded in
    model = onnx.load_from_string(trained.export().onnx_bytes)
    assert [i.name for i in model.graph.input] == ["obs", "state_in"]
    assert [o.name for o in model.graph.output] == ["action_dist_inputs", "state_out"]
    assert model.opset_import[0].version == OPSET <= 15
    assert {node.op_type for node in model.graph.node}.isdisjoint({"LSTM", "Scan", "Loop"})
    assert {p.key: p.value for p in model.metadata_props}["state_size"] == "16"
    session = ort.InferenceSession(model.SerializeToString())
    episode = np.random.default_rng(0).normal(size=(1, 60, 3)).astype(np.float32)
    with torch.no_grad():
        features, final = trained.policy.recurrent(torch.from_numpy(episode), torch.zeros(1, 16))
        expected = trained.policy.dist_inputs(features).numpy()[0]
    state = np.zeros((1, 16), np.float32)
    for step in range(60):
        outputs, state = session.run(None, {"obs": episode[:, step], "state_in": state})
        np.testing.assert_allclose(outputs[0], expected[step], atol=1e-5)
    np.testing.assert_allclose(state, final.numpy(), atol=1e-5)


def test_a_checkpoint_keeps_the_cell_size(tmp_path):
    trained = learner(tmp_path)
    trained.save()
    assert learner(tmp_path).restore() is True  # the same size: restored
    with pytest.raises(CheckpointMismatch, match="lstm_cell_size"):
        learner(tmp_path, cell=16).restore()


def test_set_config_says_each_modules_state_size(tmp_path):
    box = {"type": "box", "shape": [4]}
    policies = {
        "memory": {"observation_space": box, "action_space": {"type": "discrete", "n": 2}, "model": LSTM},
        "plain": {"observation_space": box, "action_space": {"type": "discrete", "n": 2}},
    }
    settings = gateway_settings(tmp_path, policies=policies, policy_mapping={"m*": "memory", "*": "plain"})
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "GET_CONFIG"}))
        config = peer.receive()
        peer.send(frame({"type": "GET_STATE"}))
        state = peer.receive()
    assert config["policies"]["memory"]["state_size"] == 16 and config["policies"]["plain"]["state_size"] == 0
    assert config["state_size"] == 16  # the default module's: the first declared
    assert set(state["onnx_files"]) == {"memory", "plain"}


def test_bad_states_are_refused_and_cost_the_other_client_nothing(tmp_path):
    settings = gateway_settings(tmp_path, model=LSTM, train_batch_size=10_000)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as bad, TcpPeer.connect(gateway) as good:
        sampled = lambda: gateway.service.metrics.num_env_steps_sampled_lifetime  # noqa: E731
        good.send(frame({"type": "EPISODES", "episodes": [chunk(4, episode_id="g", terminated=False, state_in=[0.0] * 16)]}))

        bad.send(frame({"type": "EPISODES", "episodes": [chunk(3, episode_id="b", state_in=[0.0] * 5)]}))
        reply = bad.receive()
        assert reply["type"] == "ERROR" and reply["code"] == "invalid_message", reply
        assert "state_in" in reply["message"] and "16" in reply["message"] and "got 5" in reply["message"]

        bad.send(frame({"type": "EPISODES", "episodes": [chunk(3, episode_id="b2", terminated=False)]}))  # starts: zeros
        bad.send(frame({"type": "EPISODES", "episodes": [chunk(3, episode_id="b2")]}))  # goes on without a state
        reply = bad.receive()
        assert reply["type"] == "ERROR" and reply["code"] == "invalid_message", reply
        assert "state_in" in reply["message"] and "state_size = 16" in reply["message"] and "b2" in reply["message"]

        good.send(frame({"type": "EPISODES", "episodes": [chunk(4, episode_id="g", state_in=np.ones(16).tolist())]}))
        good.send(frame({"type": "PING"}))
        assert good.receive()["type"] == "PONG"
        wait_until(lambda: sampled() == 11, 10, "the good client's 8 steps and the bad one's 3 first")
        assert gateway.service.status().pending_env_steps == 11


def test_a_feed_forward_module_refuses_a_state(tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "EPISODES", "episodes": [chunk(3, state_in=[0.0, 0.0])]}))
        reply = peer.receive()
    assert reply["type"] == "ERROR" and "state_in" in reply["message"] and "state_size 0" in reply["message"], reply


def test_use_lstm_with_sac_is_refused_at_start():
    box = {"type": "box", "shape": [1], "low": -1, "high": 1}
    with pytest.raises(ValidationError, match="use_lstm trains with ppo only"):
        Settings(algorithm="sac", action_space=box, model=LSTM)


def test_what_memory_does_not_do_yet_is_refused_clearly():
    with pytest.raises(ValidationError, match="self-play leagues are for feed-forward policies"):
        box = {"type": "box", "shape": [4]}
        Settings(policies={"duel": {"observation_space": box, "action_space": {"type": "discrete", "n": 2}, "model": LSTM,
                                    "self_play": {}}})


def test_a_thin_clients_episodes_keep_their_own_states(tmp_path):
    """The gateway keeps each thin-client episode's state: its greedy actions are those of
    the model run step by step with the state carried, from zeros at each START_EPISODE,
    whether the episode's requests come alone or batched with another's."""
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(30, 4)).astype(np.float32)
    with running_gateway(gateway_settings(tmp_path, model=LSTM, evaluation_interval=0)) as gateway, TcpPeer.connect(gateway) as peer:
        model = httpx.get(f"{gateway.base_url}/api/model.onnx").content
        ids = []
        for _ in range(3):
            peer.send(frame({"type": "START_EPISODE"}))
            ids.append(peer.receive()["episode_id"])
        alone, batched = [], []
        for obs in observations:
            peer.send(frame({"type": "GET_ACTION", "episode_id": ids[0], "obs": obs.tolist(), "explore": False}))
            alone.append(peer.receive()["action"])
            batch = [{"episode_id": ids[1], "obs": obs.tolist(), "explore": False},
                     {"episode_id": ids[2], "obs": (-obs).tolist(), "explore": False}]
            peer.send(frame({"type": "GET_ACTION", "batch": batch}))
            batched.append(peer.receive()["actions"])
    session, expected = ort.InferenceSession(model), {}
    for sign in (1, -1):
        state, actions = np.zeros((1, 16), np.float32), []
        for obs in observations:
            logits, state = session.run(None, {"obs": sign * obs[None], "state_in": state})
            actions.append(int(np.argmax(logits)))
        expected[sign] = actions
    assert alone == [first for first, _ in batched] == expected[1]
    assert [second for _, second in batched] == expected[-1]
    assert expected[1] != expected[-1]  # the two episodes' states differ, and each got its own


@pytest.mark.e2e
@pytest.mark.parametrize("inference", ["local", "thin"])
def test_an_lstm_learns_stateless_cartpole_through_a_real_socket(tmp_path, inference):
    """CartPole seeing only the cart's position and the pole's angle. Local: the reference
    client carries the state step to step and sends each chunk's state_in; thin: 8 envs in
    one batched GET_ACTION per step, the gateway keeping each episode's state. The gateway
    trains the LSTM on sequences. A feed-forward policy cannot hold the pole here: its last 20
    episodes averaged 44-55 after 500,000 env steps (bench/memory.py), a third of the target."""
    env_id = "rllink_clients.memory_envs:StatelessCartPole-v1"
    with running_gateway(gateway_settings(tmp_path, model={"use_lstm": True})) as gateway, gateway.client("tcp") as client:
        if inference == "local":
            assert client.request({"type": "GET_CONFIG"})["state_size"] == 128
            result = run(client, env_id, target_return=150, max_env_steps=150_000, seed=0)
        else:
            result = run_thin_envs(client, env_id, 8, target_return=150, max_env_steps=150_000, seed=0)
    assert result.reached_target, f"mean of the last 20 returns {result.mean_return:.1f} < 150 after {result.env_steps} env steps"


@pytest.mark.e2e
def test_the_shipped_exported_and_restarted_models_keep_the_memory(tmp_path):
    """A recurrent run's best.onnx, its `export` from the checkpoint and the gateway restarted
    on it all keep the state: state_in and state_out of the module's size (and the size in the
    metadata); the export is the last version's model; the restart resumes that version and
    says the same state_size."""
    settings = gateway_settings(
        tmp_path, model=LSTM, train_batch_size=500, evaluation_interval=2, best_model_episodes=2, run_id="memory",
        runs_dir=tmp_path, checkpoint_dir=tmp_path / "memory" / "checkpoints",
    )
    env_id = "rllink_clients.memory_envs:StatelessCartPole-v1"
    with running_gateway(settings) as gateway, gateway.client("tcp") as client:
        first = run(client, env_id, target_return=None, max_env_steps=3_000, seed=0)
        client.request({"type": "PING"})  # the last EPISODES were taken in before this
        latest = httpx.get(f"{gateway.base_url}/api/model.onnx").content
        version = client.request({"type": "GET_STATE"})["weights_seq_no"]
    assert version >= 3 and len(first.evaluations) >= 2
    models = tmp_path / "memory" / "models" / "default_policy"
    out = tmp_path / "exported.onnx"
    exported = subprocess.run(
        [sys.executable, "-m", "app", "export", "--run-id", "memory", "--runs-dir", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert exported.returncode == 0, exported.stderr
    assert f"version {version}" in exported.stdout
    obs = np.random.default_rng(0).normal(size=(10, 1, 2)).astype(np.float32)
    for path in (models / "best.onnx", out):
        model = onnx.load(path)
        assert {p.key: p.value for p in model.metadata_props}["state_size"] == "16"
        session = ort.InferenceSession(str(path))
        assert [i.name for i in session.get_inputs()] == ["obs", "state_in"]
        assert [o.name for o in session.get_outputs()][-1] == "state_out"
    # The export is the last version's model: step by step, the same logits and states.
    played = [ort.InferenceSession(source) for source in (str(out), latest)]
    states = [np.zeros((1, 16), np.float32)] * 2
    for step in obs:
        (a, states[0]), (b, states[1]) = (s.run(None, {"obs": step, "state_in": x}) for s, x in zip(played, states))
        np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(states[0], states[1], atol=1e-6)
    assert np.abs(states[0]).max() > 0  # the state moved: there is memory to keep
    with running_gateway(settings.model_copy(update={"resume": True})) as gateway, gateway.client("tcp") as client:
        assert client.request({"type": "GET_CONFIG"})["state_size"] == 16
        assert client.request({"type": "GET_STATE"})["weights_seq_no"] == version
        second = run(client, env_id, target_return=None, max_env_steps=1_000, seed=1)
    assert second.weights_seq_no > version


@pytest.mark.e2e
def test_the_multi_agent_client_carries_each_agents_state_and_an_lstm_learns_through_it(tmp_path):
    """The multi-agent reference client with a recurrent module: each agent's state goes from
    step to step (zeros when its episode starts), every chunk that goes on with an episode
    carries its state_in (the gateway refuses one without, and the client would stop), and
    the LSTM learns StatelessCartPole played as a scene of 4 carts, each restarting alone."""
    scene = gymnasium_scene({f"cart_{i}": "rllink_clients.memory_envs:StatelessCartPole-v1" for i in range(4)})
    settings = gateway_settings(tmp_path, model={"use_lstm": True}, observation_space={"type": "box", "shape": [2]})
    with running_gateway(settings) as gateway, gateway.client("tcp") as client:
        result = run_scene(client, scene, target_return=150, max_env_steps=40_000, seed=0)
    assert np.mean(result.first_returns["default_policy"]) < 50  # the start: no memory of the velocities yet
    assert result.reached_target, result.summary()
