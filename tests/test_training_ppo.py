"""One PPO update: it moves the policy towards advantageous actions and reports its stats."""

from __future__ import annotations

import math

import torch

from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.loss import ppo_update
from app.training.batch import Batch
from app.training.policy import ActorCritic

STATS = {"policy_loss", "vf_loss", "entropy", "approx_kl", "clip_frac", "explained_var"}


def setup(n: int = 256) -> tuple[ActorCritic, torch.optim.Optimizer, Batch]:
    """A batch where action 0 was good (advantage +1) and action 1 bad (-1)."""
    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=2), (32, 32))
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3, eps=1e-5)
    obs = torch.randn(n, 4)
    actions = torch.randint(0, 2, (n,))
    with torch.no_grad():
        logp, _ = policy.log_prob_and_entropy(obs, actions)
        values = policy.value(obs)
    advantages = 1.0 - 2.0 * actions.float()
    batch = Batch(obs, actions, logp, values, advantages, advantages + values)
    return policy, optimizer, batch


def prob_of_action_0(policy: ActorCritic, obs: torch.Tensor) -> float:
    with torch.no_grad():
        return policy.distribution(policy(obs)).probs[:, 0].mean().item()


def test_update_favours_the_advantageous_action_and_reports_stats():
    policy, optimizer, batch = setup()
    before = prob_of_action_0(policy, batch.obs)
    stats = ppo_update(policy, optimizer, batch, PPOConfig(minibatch_size=64), torch.Generator().manual_seed(0))
    assert prob_of_action_0(policy, batch.obs) > before + 0.1
    assert STATS <= set(stats) and all(math.isfinite(stats[k]) for k in STATS)
    assert stats["approx_kl"] > 0 and 0 < stats["clip_frac"] <= 1 and stats["epochs"] == 10


def test_clipping_bounds_how_far_one_update_moves_the_policy():
    cfgs = {
        "clipped": PPOConfig(clip_coef=0.05, minibatch_size=64),
        "loose": PPOConfig(clip_coef=1.0, minibatch_size=64),
    }
    moved = {}
    for name, cfg in cfgs.items():
        policy, optimizer, batch = setup()
        before = prob_of_action_0(policy, batch.obs)
        ppo_update(policy, optimizer, batch, cfg, torch.Generator().manual_seed(0))
        moved[name] = prob_of_action_0(policy, batch.obs) - before
    assert 0 < moved["clipped"] < moved["loose"]


def test_target_kl_stops_the_epochs_early():
    policy, optimizer, batch = setup()
    cfg = PPOConfig(target_kl=1e-6, minibatch_size=64)  # KL is measured before each minibatch step
    stats = ppo_update(policy, optimizer, batch, cfg, torch.Generator().manual_seed(0))
    assert stats["epochs"] == 1


def test_clipped_value_loss_and_a_ragged_last_minibatch_run():
    policy, optimizer, batch = setup(n=257)  # the last minibatch holds one step
    cfg = PPOConfig(clip_vloss=True, minibatch_size=64, update_epochs=2)
    stats = ppo_update(policy, optimizer, batch, cfg, torch.Generator().manual_seed(0))
    assert all(math.isfinite(stats[k]) for k in STATS)
