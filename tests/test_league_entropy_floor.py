"""PPO's entropy floor (ppo.py): a policy pushed towards one move keeps the floor's share of
the largest entropy its legal moves allow; without it, the entropy collapses."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.config import SELF_PLAY_ENTROPY_FLOOR, PPOConfig
from app.training.algorithms.ppo.learner import PPOLearner
from app.training.algorithms.ppo.loss import ppo_update
from app.training.batch import Batch
from app.training.policy import ActorCritic

STEPS = 256
MOVES = 9


def sampled_batch(policy: ActorCritic, obs: torch.Tensor, advantage_of: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
    """Moves sampled from the policy on `obs` with three moves forbidden, their advantages `advantage_of(actions)`."""
    masks = torch.ones(STEPS, MOVES)
    masks[:, 6:] = 0
    with torch.no_grad():
        dist = policy.distribution(policy(obs, masks))
        actions = dist.sample()
        logp = dist.log_prob(actions)
        values = policy.value(obs)
    advantages = advantage_of(actions)
    return Batch(obs, actions, logp, values, advantages, advantages + values, masks)


def greedy_batch(policy: ActorCritic, generator: torch.Generator) -> Batch:
    """Random boards where move 0 (always legal) is the only one that pays: every PPO step makes the policy sharper."""
    return sampled_batch(policy, torch.rand(STEPS, 4, generator=generator), lambda actions: (actions == 0).float() - 0.1)


def entropy_share_after(cfg: PPOConfig, updates: int = 40) -> tuple[float, dict[str, float]]:
    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=MOVES), (32,))
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    stats: dict[str, float] = {}
    for _ in range(updates):
        stats = ppo_update(policy, optimizer, greedy_batch(policy, generator), cfg, generator)
    batch = greedy_batch(policy, generator)
    with torch.no_grad():
        entropy = policy.distribution(policy(batch.obs, batch.masks)).entropy().mean()
    return float(entropy) / math.log(6), stats  # six legal moves


def test_without_a_floor_the_entropy_collapses_and_with_one_it_holds():
    collapsed, stats = entropy_share_after(PPOConfig(minibatch_size=64))
    assert collapsed < 0.1 and "entropy_bonus" not in stats, collapsed
    held, stats = entropy_share_after(PPOConfig(minibatch_size=64, entropy_floor=0.3))
    assert held > 0.2 and stats["entropy_bonus"] > 0, (held, stats)
    assert stats["entropy_share"] == pytest.approx(held, abs=0.1)


def test_a_self_play_learner_gets_the_floor_unless_it_sets_one(tmp_path):
    board = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": MOVES}}
    policies = {
        "learner": {**board, "self_play": {}},
        "tuned": {**board, "self_play": {}, "ppo": {"entropy_floor": 0.0}},
        "plain": board,
    }
    settings = Settings(policies=policies, checkpoint_dir=tmp_path)
    modules = PolicySet.from_settings(settings).modules
    assert modules["learner"].config.entropy_floor == SELF_PLAY_ENTROPY_FLOOR
    assert modules["tuned"].config.entropy_floor == 0.0 and modules["plain"].config.entropy_floor is None
    assert modules["learner"].config.entropy_floor_per_state and not modules["plain"].config.entropy_floor_per_state


def test_a_self_play_learner_trains_on_raw_observations_unless_it_asks_for_normalised_ones(tmp_path):
    """Observations are normalised by default, but a self-play learner's league was measured without it."""
    board = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": MOVES}}
    policies = {
        "learner": {**board, "self_play": {}},
        "normalised": {**board, "self_play": {}, "ppo": {"normalize_obs": True}},
        "plain": board,
    }
    modules = PolicySet.from_settings(Settings(policies=policies, checkpoint_dir=tmp_path)).modules
    normalising = {}
    for module_id in policies:
        module = modules[module_id]
        learner = PPOLearner(module.config, module.observation_space, module.action_space, seed=0,
                             checkpoint_dir=tmp_path / module_id, onnx_input_name="obs")
        normalising[module_id] = learner.policy.obs_norm is not None
    assert normalising == {"learner": False, "normalised": True, "plain": True}


OPENING = torch.tensor([1.0, 0.0, 0.0, 0.0])  # the one position where a move pays (a board game's opening)


def opening_batch(policy: ActorCritic, generator: torch.Generator) -> Batch:
    """An eighth of the steps are the opening, where move 0 pays; on the other (random) boards
    no move pays, so they keep their entropy and hold the floor on average on their own."""
    obs = torch.rand(STEPS, 4, generator=generator)
    obs[: STEPS // 8] = OPENING

    def advantage_of(actions: torch.Tensor) -> torch.Tensor:
        advantages = torch.zeros(STEPS)
        advantages[: STEPS // 8] = (actions[: STEPS // 8] == 0).float() - 0.1
        return advantages

    return sampled_batch(policy, obs, advantage_of)


def opening_share_after(cfg: PPOConfig, updates: int = 30) -> float:
    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=MOVES), (32,))
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(updates):
        ppo_update(policy, optimizer, opening_batch(policy, generator), cfg, generator)
    with torch.no_grad():
        entropy = policy.distribution(policy(OPENING[None], torch.ones(1, MOVES) * (torch.arange(MOVES) < 6))).entropy()
    return float(entropy) / math.log(6)


def test_the_floor_per_state_keeps_a_choice_the_average_lets_collapse():
    cfg = {"minibatch_size": 64, "update_epochs": 4, "entropy_floor": 0.3, "entropy_floor_lr": 0.1}
    on_average = opening_share_after(PPOConfig(**cfg))
    per_state = opening_share_after(PPOConfig(**cfg, entropy_floor_per_state=True))
    assert on_average < 0.1 and per_state > 0.25, (on_average, per_state)
