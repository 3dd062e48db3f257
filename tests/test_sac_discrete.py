"""SAC for Discrete actions (algorithm: sac with a discrete action space): it learns CartPole
over a real socket from experience its clients send without waiting, trains every step a
thin client logs (LOG_ACTION), its ONNX actor is the categorical logits torch computes,
(test_sac.py checks that its checkpoint restores every part exactly)."""

from __future__ import annotations

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import torch

from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.sac.config import SACConfig
from app.training.algorithms.sac.discrete.networks import CategoricalActor
from app.training.algorithms.sac.discrete.onnx_head import export_onnx
from rllink_clients.gym_client import run

from .helpers import gateway_settings, running_gateway, wait_until

FAST_SAC = SACConfig(hidden_sizes=(64, 64), learning_starts=1000)


def cartpole_sac_settings(tmp_path, **overrides):
    return gateway_settings(tmp_path, **{"algorithm": "sac", "env_steps_per_sample": 200, "sac": FAST_SAC, **overrides})


@pytest.mark.e2e
def test_discrete_sac_learns_cartpole_over_tcp_without_clients_waiting(tmp_path):
    with running_gateway(cartpole_sac_settings(tmp_path)) as gateway, gateway.client("tcp", timeout=120) as client:
        config = client.request({"type": "GET_CONFIG"})
        # The target on sampled play alone: greedy evaluation episodes (tests/test_evaluation.py)
        # would cost this test three times the gradient steps.
        result = run(client, "CartPole-v1", target_return=150, max_env_steps=40_000, seed=0, evaluation_interval=0)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    assert config["action_distribution"] == "categorical" and config["force_on_policy"] is False
    # Random play lasts about 22 steps; 150 (sampled actions, not the greedy ones) needs a policy
    # (seed 0: 6,000 env steps, 26 s alone; 200 took 10,000, 45.5 s, with alpha from 1.0, 6,800 from 0.2).
    assert result.reached_target, (result.env_steps, result.mean_return)
    assert np.mean(result.first_returns) < 40
    assert metrics["dropped_env_steps"].get("stale", 0) == 0
    learner = metrics["learner"]
    assert learner["gradient_steps"] >= 1 and learner["alpha"] > 0 and 0 < learner["entropy"] < np.log(2)


def scripted_action(obs: list[float]) -> int:
    """A controller that balances the pole: push towards where it is falling."""
    return int(obs[2] + 0.5 * obs[3] > 0)


@pytest.mark.e2e
def test_every_step_a_thin_client_logs_with_log_action_is_trained(tmp_path):
    import gymnasium as gym

    settings = cartpole_sac_settings(tmp_path, sac=FAST_SAC.model_copy(update={"learning_starts": 200}))
    env = gym.make("CartPole-v1")
    steps = 0
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=120) as client:
        for episode in range(3):
            episode_id = client.request({"type": "START_EPISODE"})["episode_id"]
            obs, _ = env.reset(seed=episode)
            done = False
            while not done and steps < 1000:
                action = scripted_action(obs.tolist())
                client.send({"type": "LOG_ACTION", "episode_id": episode_id, "obs": obs.tolist(), "action": action})
                obs, reward, terminated, truncated, _ = env.step(action)
                client.send({"type": "LOG_RETURNS", "episode_id": episode_id, "reward": float(reward)})
                steps += 1
                done = terminated or truncated
            end = {"type": "END_EPISODE", "episode_id": episode_id, "obs": obs.tolist(), "is_terminated": bool(terminated)}
            client.send({**end, "is_truncated": not terminated})
        assert client.request({"type": "PING"})["type"] == "PONG"  # no ERROR came back for any of it
        wait_until(lambda: gateway.service.metrics.num_env_steps_trained_lifetime == steps, 60, "the logged steps to train")
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    assert steps >= 600  # the script balances: long episodes
    assert metrics["num_env_steps_sampled_lifetime"] == steps and not any(metrics["dropped_env_steps"].values())
    assert metrics["learner"]["gradient_steps"] >= 1


def test_the_onnx_actor_gives_the_logits_torch_computes():
    torch.manual_seed(0)
    for obs_shape in ((4,), (2, 3)):
        actor = CategoricalActor(BoxSpace(shape=obs_shape), DiscreteSpace(n=5), (32, 16))
        obs = np.random.default_rng(0).normal(size=(64, *obs_shape)).astype(np.float32)
        session = ort.InferenceSession(export_onnx(actor, 7), providers=["CPUExecutionProvider"])
        (onnx_logits,) = session.run(None, {"obs": obs})
        with torch.no_grad():
            torch_logits = actor(torch.from_numpy(obs)).numpy()
            probs, log_probs = actor.probs_and_log_probs(torch.from_numpy(obs))
        assert onnx_logits.shape == (64, 5)
        np.testing.assert_allclose(onnx_logits, torch_logits, atol=1e-5)
        np.testing.assert_allclose(probs.sum(dim=1).numpy(), 1.0, atol=1e-6)
        np.testing.assert_allclose(log_probs.numpy(), torch.log_softmax(torch.from_numpy(onnx_logits), 1).numpy(), atol=1e-5)
