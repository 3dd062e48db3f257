"""Symmetries (a module's `symmetries`): the learner trains on each step and its images.

The batch's images are checked as data; then a real gateway over a real socket learns a
two-armed bandit seen from one side only, and with the mirror symmetry it plays the other
side (never sent) as well; without it, it does not. Bad symmetries are refused in a line.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from app.settings.config import Settings
from app.settings.hyperparameters import Symmetry
from app.training.algorithms.ppo.symmetries import Symmetries
from app.training.batch import Batch
from rllink_clients.gym_client import OnnxPolicy

from .helpers import gateway_settings, running_gateway

MODULE = "bandit"
SIDE = [1.0, 0.0]  # the only observation a client sends: the arm to pull is action 0
OTHER_SIDE = [0.0, 1.0]  # its mirror image, never sent: there the arm is action 1
MIRROR = {"observation": [1, 0], "action": [1, 0]}


def bandit(symmetries: list[dict]) -> dict:
    return {
        MODULE: {
            "observation_space": {"type": "box", "shape": [2]},
            "action_space": {"type": "discrete", "n": 2},
            "symmetries": symmetries,
            # Raw observations: without the mirror the learner only ever sees SIDE, and a normaliser of a
            # constant input (std near 0) would blow OTHER_SIDE up to saturation, whatever was learnt.
            "ppo": {"normalize_obs": False},
        }
    }


def test_a_batchs_image_permutes_observations_masks_and_actions() -> None:
    # Three actions; the symmetry swaps observation halves and actions 0 and 2.
    symmetry = Symmetry(observation=[2, 3, 0, 1], action=[2, 1, 0])
    batch = Batch(
        obs=torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]),
        actions=torch.tensor([0, 1]),
        logp=torch.tensor([-0.1, -0.2]),
        values=torch.tensor([0.5, 0.6]),
        advantages=torch.tensor([1.0, -1.0]),
        returns=torch.tensor([1.5, -0.4]),
        masks=torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]),
    )
    both = Symmetries([symmetry], torch.device("cpu")).augment(batch)
    assert both.num_steps == 4
    assert both.obs[2:].tolist() == [[3.0, 4.0, 1.0, 2.0], [7.0, 8.0, 5.0, 6.0]]
    assert both.actions.tolist() == [0, 1, 2, 1]
    assert both.masks[2:].tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    # Each image action is allowed by its image mask, as the action was by its mask.
    assert all(both.masks[i, both.actions[i]] == 1 for i in range(4))
    for name in ("logp", "values", "advantages", "returns"):
        assert getattr(both, name).tolist() == getattr(batch, name).tolist() * 2, name


def train_on_one_side(tmp_path: Path, symmetries: list[dict]) -> tuple[float, float, dict]:
    """Play the bandit from SIDE only for 20 versions of 200 steps (reward 1 for action 0)
    over TCP; then the trained model's probability of the right arm on SIDE and on
    OTHER_SIDE, and the learner's stats of its last step."""
    settings = gateway_settings(tmp_path, policies=bandit(symmetries), train_batch_size=200, env_steps_per_sample=200)
    rng = np.random.default_rng(0)
    with running_gateway(settings) as gateway, gateway.client("tcp", timeout=60) as client:
        config = client.request({"type": "GET_CONFIG"})
        state = client.request({"type": "GET_STATE"})
        for _ in range(20):
            policy = OnnxPolicy(state, config["onnx_input_name"], config["action_space"], rng)
            actions, logps = policy.act_batch(np.array([SIDE] * 200, np.float32))
            chunks = [
                {"obs": [SIDE, SIDE], "actions": [int(a)], "rewards": [float(a == 0)], "action_logp": [float(lp)],
                 "is_terminated": True, "is_truncated": False}
                for a, lp in zip(actions, logps)
            ]
            state = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": chunks, "timesteps": len(chunks)})
            assert state["type"] == "SET_STATE", state
        logits = OnnxPolicy(state, config["onnx_input_name"], config["action_space"], rng).dist_inputs(
            np.array([SIDE, OTHER_SIDE], np.float32)
        )
        stats = httpx.get(f"{gateway.base_url}/api/metrics").json()["policies"][MODULE]["learner"]
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    return float(probs[0, 0]), float(probs[1, 1]), stats


def test_with_the_mirror_symmetry_the_side_never_played_is_learned_too(tmp_path: Path) -> None:
    right_here, right_there, stats = train_on_one_side(tmp_path, [MIRROR])
    assert right_here > 0.9
    assert right_there > 0.9, f"the mirrored side's right arm has probability {right_there:.3f}"
    assert stats["augmented_steps"] == 400  # each version's 200 steps and their images


def test_without_it_the_side_never_played_is_not_learned(tmp_path: Path) -> None:
    right_here, right_there, stats = train_on_one_side(tmp_path, [])
    assert right_here > 0.9
    assert right_there < 0.5, f"the unplayed side's right arm has probability {right_there:.3f}"
    assert stats.get("augmented_steps") is None


@pytest.mark.parametrize(
    ("symmetries", "extra", "message"),
    [
        ([{"observation": [0, 0], "action": [1, 0]}], {}, "observation must hold each of 0..1 once"),
        ([{"observation": [1, 0, 2], "action": [1, 0]}], {}, r"symmetries\[0\].observation has 3 indices; the observation has 2"),
        ([{"observation": [1, 0], "action": [2, 1, 0]}], {}, r"symmetries\[0\].action has 3 indices; the action space has 2"),
        ([MIRROR], {"algorithm": "sac"}, "symmetries train with ppo only"),
        ([MIRROR], {"action_space": {"type": "box", "shape": [2], "low": -1, "high": 1}}, "symmetries need a discrete action space"),
    ],
)
def test_bad_symmetries_are_refused_in_a_line(tmp_path: Path, symmetries: list[dict], extra: dict, message: str) -> None:
    policies = bandit(symmetries)
    policies[MODULE].update(extra)
    with pytest.raises(ValueError, match=message):
        Settings(policies=policies, checkpoint_dir=tmp_path)
