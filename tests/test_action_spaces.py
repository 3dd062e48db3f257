"""MultiDiscrete action spaces and action masks: over real sockets, in the exported ONNX,
in PPO's training and in server-side inference."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from app.experience import blocks_of
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace, MultiDiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.learner import PPOLearner
from app.training.algorithms.ppo.onnx_head import export_onnx
from app.training.policy import ActorCritic
from rllink.action_dists import sample_actions
from rllink_clients.choice_envs import MASKED_PICK_ENV_ID, TWO_TARGETS_ENV_ID
from rllink_clients.gym_client import run
from rllink_clients.thin_client import run_thin

from .helpers import TcpPeer, frame, gateway_settings, running_gateway, wait_until

TWO_TARGETS = dict(observation_space={"type": "box", "shape": [6]}, action_space={"type": "multi_discrete", "nvec": [3, 3]})
MASKED_PICK = dict(observation_space={"type": "box", "shape": [12]}, action_space={"type": "discrete", "n": 6}, action_masking=True)
MASKED_MULTI = dict(
    observation_space={"type": "box", "shape": [2]}, action_space={"type": "multi_discrete", "nvec": [4, 3]}, action_masking=True
)


def masked_chunk(steps: int, mask: list[list[int]], actions: list, obs_dim: int = 2) -> dict:
    return {
        "obs": [[0.1] * obs_dim] * (steps + 1),
        "actions": actions,
        "rewards": [1.0] * steps,
        "is_terminated": True,
        "is_truncated": False,
        "action_mask": mask,
    }


# -- Learning over real sockets ------------------------------------------------------------


@pytest.mark.e2e
def test_a_multi_discrete_policy_learns_both_sub_actions(tmp_path: Path) -> None:
    # Random play returns 5.33, perfect play 16; one sub-action right every step: 8.
    with running_gateway(gateway_settings(tmp_path, **TWO_TARGETS)) as gateway, gateway.client("tcp", timeout=120) as client:
        result = run(client, TWO_TARGETS_ENV_ID, target_return=14.0, max_env_steps=60_000)
    print(f"TwoTargets: {result.env_steps} steps, first 20 {np.mean(result.first_returns):.2f}, last 20 {result.mean_return:.2f}")
    assert np.mean(result.first_returns) < 8
    assert result.reached_target, f"mean of the last 20 returns {result.mean_return:.2f} after {result.env_steps} steps"


@pytest.mark.e2e
@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_a_masked_policy_learns_to_pick_the_best_allowed_item_and_never_a_forbidden_one(tmp_path: Path, transport: str) -> None:
    # The env raises on a forbidden pick: the run finishing proves none was taken, by any
    # version of the ONNX policy. Random allowed picks return 5.0, the best allowed 7.5.
    with running_gateway(gateway_settings(tmp_path, **MASKED_PICK)) as gateway, gateway.client(transport, timeout=120) as client:
        result = run(client, MASKED_PICK_ENV_ID, target_return=7.0, max_env_steps=80_000)
    print(f"MaskedPick: {result.env_steps} steps, first 20 {np.mean(result.first_returns):.2f}, last 20 {result.mean_return:.2f}")
    assert np.mean(result.first_returns) < 6
    assert result.reached_target, f"mean of the last 20 returns {result.mean_return:.2f} after {result.env_steps} steps"


@pytest.mark.e2e
def test_a_thin_client_with_masks_learns_and_is_never_given_a_forbidden_action(tmp_path: Path) -> None:
    with running_gateway(gateway_settings(tmp_path, **MASKED_PICK)) as gateway, gateway.client("tcp", timeout=120) as client:
        result = run_thin(client, MASKED_PICK_ENV_ID, target_return=6.8, max_env_steps=80_000)
    assert result.reached_target, f"mean of the last 20 returns {result.mean_return:.2f} after {result.env_steps} steps"


# -- The exported model ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "action_space", [DiscreteSpace(n=5), MultiDiscreteSpace(nvec=(4, 3, 2))], ids=["discrete", "multi_discrete"]
)
def test_the_masked_onnx_matches_torch_and_gives_forbidden_actions_probability_zero(action_space) -> None:
    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(3,)), action_space, (16, 16), normalize_obs=True)
    policy.obs_norm.update(torch.randn(50, 3) * 3 + 1)
    with torch.no_grad():  # large logits, so that an unmasked forbidden action would be likely
        policy.actor[-1].weight.mul_(300)
    session = ort.InferenceSession(export_onnx(policy, 7, "obs", action_masking=True), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "action_mask"]

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(400, 3)).astype(np.float32)
    width = policy.num_dist_inputs
    mask = (rng.random((400, width)) < 0.5).astype(np.float32)
    nvec = (action_space.n,) if isinstance(action_space, DiscreteSpace) else action_space.nvec
    starts = np.cumsum((0, *nvec[:-1]))
    mask[np.arange(400)[:, None], starts + rng.integers(0, nvec, (400, len(nvec)))] = 1  # one allowed per sub-action

    (onnx_out,) = session.run(None, {"obs": obs, "action_mask": mask})
    with torch.no_grad():
        torch_out = policy(torch.from_numpy(obs), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(onnx_out, torch_out, rtol=1e-5, atol=1e-2)  # masked logits are about -1e8

    distribution = "categorical" if isinstance(action_space, DiscreteSpace) else "multi_categorical"
    extra = {} if isinstance(action_space, DiscreteSpace) else {"nvec": nvec}
    for _ in range(5):
        actions, logp = sample_actions(distribution, onnx_out.astype(np.float64), rng, **extra)
        columns = actions.reshape(400, -1) + starts
        assert np.take_along_axis(mask, columns, axis=1).all(), "a forbidden action was sampled"
        assert np.isfinite(logp).all()
    # Without the mask input's effect (all ones) the same network does pick forbidden actions.
    (free,) = session.run(None, {"obs": obs, "action_mask": np.ones_like(mask)})
    actions, _ = sample_actions(distribution, free.astype(np.float64), rng, **extra)
    assert not np.take_along_axis(mask, actions.reshape(400, -1) + starts, axis=1).all()


def test_the_multi_discrete_onnx_outputs_each_sub_actions_logits_in_turn() -> None:
    policy = ActorCritic(BoxSpace(shape=(2,)), MultiDiscreteSpace(nvec=(3, 2)), (8,))
    model = export_onnx(policy, 1, "obs")
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs"]
    obs = np.random.default_rng(1).normal(size=(10, 2)).astype(np.float32)
    (out,) = session.run(None, {"obs": obs})
    assert out.shape == (10, 5)
    with torch.no_grad():
        np.testing.assert_allclose(out, policy(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-6)
        logp, entropy = policy.log_prob_and_entropy(torch.from_numpy(obs), torch.tensor([[2, 1]] * 10))
    parts = np.split(out, [3], axis=1)
    expected = sum(np.log(np.exp(p[:, a]) / np.exp(p).sum(1)) for p, a in zip(parts, (2, 1)))
    np.testing.assert_allclose(logp.numpy(), expected, rtol=1e-5)
    assert entropy.shape == (10,) and (entropy > 0).all()


# -- Configuration and bad input ------------------------------------------------------------


def test_set_config_names_the_mask_input_and_the_distribution(tmp_path: Path) -> None:
    with running_gateway(gateway_settings(tmp_path, **MASKED_MULTI)) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "GET_CONFIG"}))
        config = peer.receive()
        peer.send(frame({"type": "GET_STATE"}))
        state = peer.receive()
    assert config["action_distribution"] == "multi_categorical"
    assert config["onnx_action_mask_input_name"] == "action_mask"
    assert config["policies"]["default_policy"]["onnx_action_mask_input_name"] == "action_mask"
    session = ort.InferenceSession(gzip.decompress(base64.b64decode(state["onnx_file"])), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape[1:]) for i in session.get_inputs()] == [("obs", [2]), ("action_mask", [7])]


def test_action_masking_needs_a_discrete_action_space() -> None:
    with pytest.raises(ValueError, match="action_masking needs a discrete or multi_discrete action space"):
        Settings(action_space={"type": "box", "shape": [1], "low": -1, "high": 1}, action_masking=True)


def test_the_gateways_action_masking_applies_to_every_discrete_module_that_does_not_say_otherwise() -> None:
    discrete, box = {"type": "discrete", "n": 3}, {"type": "box", "shape": [1], "low": -1, "high": 1}
    observation = {"type": "box", "shape": [2]}
    settings = Settings(action_masking=True, policies={
        "picker": {"observation_space": observation, "action_space": discrete},
        "mover": {"observation_space": observation, "action_space": box},
        "free": {"observation_space": observation, "action_space": discrete, "action_masking": False},
    })
    masking = {module_id: module.action_masking for module_id, module in PolicySet.from_settings(settings).modules.items()}
    assert masking == {"picker": True, "mover": False, "free": False}


@pytest.mark.parametrize(
    ("settings", "chunk", "message"),
    [
        (TWO_TARGETS, {"actions": [[0, 1], [3, 0]]}, "actions[1][0] must lie in 0..2"),
        (TWO_TARGETS, {"actions": [[0, 1], [1]]}, "lists of 2 integers for MultiDiscrete([3, 3])"),
        (TWO_TARGETS, {"actions": [[0, 1.5], [1, 1]]}, "lists of 2 integers"),
        (TWO_TARGETS, {"actions": [[0, 1], [1, 1]], "action_mask": [[1] * 6] * 2}, "takes no action masks (set action_masking)"),
        (MASKED_MULTI, {"actions": [[0, 1], [1, 1]], "action_mask": [[1] * 6] * 2}, "must hold 7 values, one per logit"),
        (MASKED_MULTI, {"actions": [[0, 1], [1, 1]], "action_mask": [[1] * 7] * 3}, "action_mask must hold len(actions) = 2"),
        (MASKED_MULTI, {"actions": [[0, 1], [1, 1]], "action_mask": [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]},
         "action_mask at step 1 allows no action for sub-action 1"),
        (MASKED_MULTI, {"actions": [[0, 1], [1, 1]], "action_mask": [[1] * 7, [1, 0, 1, 1, 1, 1, 1]]},
         "actions[1] is an action that action_mask[1] forbids"),
        (MASKED_MULTI, {"actions": [[0, 1], [1, 1]], "action_mask": [[1] * 7, [1, 2, 1, 1, 1, 1, 1]]}, "0/1 (or false/true) values only"),
        (
            MASKED_MULTI,
            {"actions": [[0, 1], [1, 1]], "action_mask": [[True] * 7, [True, "no"] + [True] * 5]},
            "action_mask must be a rectangular list of numbers",
        ),
    ],
    ids=["out-of-range", "ragged", "float", "unmasked-module", "width", "length", "nothing-allowed", "forbidden-taken",
         "not-binary", "string"],
)
def test_bad_actions_and_masks_get_an_error_naming_the_field_and_cost_nothing(tmp_path, settings, chunk, message) -> None:
    steps = len(chunk["actions"])
    dim = settings["observation_space"]["shape"][0]
    bad = {"obs": [[0.1] * dim] * (steps + 1), "rewards": [1.0] * steps, "is_terminated": True, "is_truncated": False, **chunk}
    good_actions = [[0, 1], [1, 1]]
    good = {**bad, "actions": good_actions}
    if settings.get("action_masking"):
        good["action_mask"] = [[1] * 7] * 2
    else:
        good.pop("action_mask", None)
    with running_gateway(gateway_settings(tmp_path, **settings)) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "EPISODES", "episodes": [bad]}))
        error = peer.receive()
        assert error["type"] == "ERROR" and message in error["message"], error
        peer.send(frame({"type": "EPISODES", "episodes": [good]}) + frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"  # the connection goes on, and the good chunk counts
        wait_until(lambda: gateway.service.metrics.num_env_steps_sampled_lifetime == 2, 10, "the good chunk")


# -- Server-side inference -------------------------------------------------------------------


def test_get_action_never_returns_a_forbidden_action_and_every_allowed_one_occurs(tmp_path: Path) -> None:
    masks = [[1, 0, 0, 1, 0, 1, 1], [0, 1, 1, 0, 1, 0, 0], [1] * 7]
    with running_gateway(gateway_settings(tmp_path, **MASKED_MULTI)) as gateway, TcpPeer.connect(gateway) as peer:
        ids = []
        for _ in masks:
            peer.send(frame({"type": "START_EPISODE", "training_enabled": False}))
            ids.append(peer.receive()["episode_id"])
        seen = [set() for _ in masks]
        for _ in range(150):
            batch = [{"episode_id": e, "obs": [0.3, -0.2], "action_mask": m} for e, m in zip(ids, masks)]
            peer.send(frame({"type": "GET_ACTION", "batch": batch}))
            reply = peer.receive()
            assert reply["type"] == "ACTION", reply
            for i, action in enumerate(reply["actions"]):
                seen[i].add(tuple(action))
            for episode_id in ids:  # each step needs its next observation: log a reward, end nothing
                peer.send(frame({"type": "LOG_RETURNS", "episode_id": episode_id, "reward": 0.0}))
        peer.send(frame({"type": "GET_ACTION", "episode_id": ids[0], "obs": [0.0, 0.0], "action_mask": [1, 1, 1, 1, 0, 0, 0]}))
        refused = peer.receive()
        peer.send(frame({"type": "GET_ACTION", "batch": [{"episode_id": ids[0], "obs": [0.0, 0.0]},
                                                         {"episode_id": ids[1], "obs": [0.0, 0.0], "action_mask": [0] * 7}]}))
        refused_in_batch = peer.receive()
        peer.send(frame({"type": "LOG_ACTION", "episode_id": ids[0], "obs": [0.0, 0.0], "action": [1, 0],
                         "action_mask": [1, 0, 1, 1, 1, 1, 1]}))
        forbidden = peer.receive()
    allowed = [{(a, b) for a in range(4) for b in range(3) if m[a] and m[4 + b]} for m in masks]
    assert seen == allowed  # nothing forbidden, and every allowed pair occurred in 150 draws
    assert refused["type"] == "ERROR" and "action_mask allows no action for sub-action 1:" in refused["message"], refused
    assert refused_in_batch["type"] == "ERROR" and "batch[1].action_mask allows no action for sub-action 0" in refused_in_batch["message"]
    assert forbidden["type"] == "ERROR" and "forbids" in forbidden["message"]


# -- Training ----------------------------------------------------------------------------------


def test_ppo_trains_on_the_masked_distribution_the_actions_were_sampled_from(tmp_path: Path) -> None:
    # With a learning rate of ~0 the policy stays the one that chose the actions: PPO's ratio
    # is exactly 1 (approx_kl 0) only if it, too, applies the chunk's masks; its entropy is
    # the masked policy's, at most log(3) with 3 of 6 actions allowed.
    cfg = PPOConfig(learning_rate=1e-12, update_epochs=1, minibatch_size=64, normalize_obs=False, normalize_reward=False)
    learner = PPOLearner(cfg, BoxSpace(shape=(12,)), DiscreteSpace(n=6), seed=0, checkpoint_dir=tmp_path, onnx_input_name="obs",
                      action_masking=True)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(65, 12)).astype(np.float32) * 3
    mask = np.zeros((64, 6), np.float32)
    for row in mask:
        row[rng.choice(6, 3, replace=False)] = 1
    with torch.no_grad():
        learner.policy.actor[-1].weight.mul_(100)  # far from uniform: masking changes the log-probs a lot
        dist_inputs = learner.policy(torch.from_numpy(obs[:-1]), torch.from_numpy(mask)).numpy().astype(np.float64)
    actions, logp = sample_actions("categorical", dist_inputs, rng)
    chunk = EpisodeChunk.model_validate(
        {"obs": obs.tolist(), "actions": actions.tolist(), "rewards": rng.normal(size=64).tolist(), "action_logp": logp.tolist(),
         "action_mask": mask.tolist(), "is_terminated": True, "is_truncated": False}
    )
    _, stats = learner.train(blocks_of([chunk], "x"), 1)
    assert abs(stats["approx_kl"]) < 1e-6 and stats["clip_frac"] == 0, stats
    assert stats["entropy"] <= np.log(3) + 1e-6, stats
