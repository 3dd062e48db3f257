"""The multi-agent reference client samples a Box module's actions with the noise SET_CONFIG's
`action_noise` names (docs/protocol.md, "Exploration noise"): pink, each agent episode its
own processes advanced one step per action, or white, the policies' generator's draws as
ever. Through a real SAC gateway and sockets, its one version (no learning) acting for two
agents on a fixed observation, so that each action's noise can be read back from it."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from app.spaces.models import BoxSpace
from app.training.algorithms.sac.config import SACConfig
from rllink_clients.multi_agent import GatewayConfig, run_scene
from rllink_clients.multi_agent_env import ALL

from .helpers import gateway_settings, recording_client, running_gateway

OBS = np.array([0.1, -0.2, 0.3], np.float32)
AGENTS = ("agent_0", "agent_1")
EPISODE_STEPS = 25
SCENE_STEPS = 1000  # 40 episodes of each agent, 2,000 actions


class StillScene:
    """Two agents that see the same observation every step, rewarded nothing, for
    EPISODE_STEPS steps an episode: their actions are the policy's noise and nothing else."""

    possible_agents = list(AGENTS)

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
        self.steps = 0
        return dict.fromkeys(AGENTS, OBS), {}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(AGENTS)
        self.steps += 1
        return dict.fromkeys(AGENTS, OBS), dict.fromkeys(AGENTS, 0.0), {ALL: False}, {ALL: self.steps == EPISODE_STEPS}, {}


def played_noise(tmp_path, exploration: str) -> tuple[str, np.ndarray]:
    """SET_CONFIG's action_noise, and each action's pre-squash noise [episode, step, agent]:
    (atanh of the action scaled to [-1, 1] - the model's mean) / exp(its log std)."""
    sac = SACConfig(hidden_sizes=(64, 64), learning_starts=1_000_000, exploration=exploration)  # one version throughout
    settings = gateway_settings(
        tmp_path, algorithm="sac", observation_space=BoxSpace(shape=(3,)), action_space=BoxSpace(shape=(1,), low=-2.0, high=2.0),
        sac=sac, env_steps_per_sample=100, evaluation_interval=0,
    )
    with running_gateway(settings) as gateway, recording_client(gateway) as client:
        action_noise = GatewayConfig.from_set_config(client.request({"type": "GET_CONFIG"})).modules["default_policy"].action_noise
        result = run_scene(client, StillScene(), max_env_steps=SCENE_STEPS, seed=0)
    assert result.env_steps == SCENE_STEPS
    outputs = {tuple(dist_inputs(models["default_policy"])) for models in client.models.values()}
    assert len(outputs) == 1  # every version the same policy: nothing learned
    ((mean, log_std),) = outputs
    episodes: dict[tuple[str, str], list[float]] = {}  # (agent, episode id) -> its actions, in the order played
    for chunk in (c for message in client.sent for c in message["episodes"]):
        episodes.setdefault((chunk["agent_id"], chunk["episode_id"]), []).extend(a for (a,) in chunk["actions"])
    by_agent = [[actions for (agent, _), actions in episodes.items() if agent == agent_id] for agent_id in AGENTS]
    assert [len(played) for played in by_agent] == [SCENE_STEPS // EPISODE_STEPS] * 2
    actions = np.array(by_agent).transpose(1, 2, 0)  # [episode, step, agent]
    return action_noise, (np.arctanh(np.clip(actions / 2.0, -0.999999, 0.999999)) - mean) / np.exp(log_std)


def dist_inputs(payload: str) -> np.ndarray:
    """A SET_STATE model's outputs on OBS: the mean and log std of the pre-squash action."""
    model = ort.InferenceSession(gzip.decompress(base64.b64decode(payload)), providers=["CPUExecutionProvider"])
    return model.run(None, {model.get_inputs()[0].name: OBS[None]})[0][0]


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


@pytest.mark.parametrize("exploration, noise", [("pink", "pink"), ("gaussian", "white")])
def test_each_agents_episode_explores_with_its_own_pink_noise_where_the_module_says_pink(tmp_path, exploration, noise) -> None:
    """Pink (SAC's default): an agent's noise drifts from step to step within its episode,
    the two agents' do not move together, and each new episode starts new processes (its
    first draw unrelated to the last one's). White: each draw is the policies' generator's
    next, row by row, exactly as before pink noise was followed."""
    action_noise, unit = played_noise(tmp_path, exploration)
    assert action_noise == noise
    assert 0.8 < unit.std() < 1.2 and abs(unit.mean()) < 0.2  # each step's draw is N(0, 1) either way
    within = correlation(unit[:, :-1], unit[:, 1:])  # each step's noise and the next's, in the same agent episode
    agents = correlation(unit[..., 0], unit[..., 1])
    across = correlation(unit[:-1, -1], unit[1:, 0])  # an episode's last step's noise and the next episode's first
    if noise == "pink":
        assert within > 0.6, within
        assert abs(agents) < 0.3, agents
        assert abs(across) < 0.35, across
    else:
        assert abs(within) < 0.1 and abs(agents) < 0.1 and abs(across) < 0.35, (within, agents, across)
        draws = np.random.default_rng(0).standard_normal(unit.size).reshape(unit.shape)  # run_scene's generator (seed 0)
        np.testing.assert_allclose(unit, draws, atol=1e-4)
