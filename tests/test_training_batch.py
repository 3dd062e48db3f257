"""Chunks to a training batch: GAE, bootstrapping at chunk ends, behaviour log-probs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.experience import blocks_of
from app.schemas import EpisodeChunk
from app.settings.policies import PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.batch import Batch, gae_advantages
from app.training.batch import build_batch as build_from_blocks
from app.training.policy import ActorCritic

from . import helpers

OBS, ACT = BoxSpace(shape=(4,)), DiscreteSpace(n=2)
GAMMA = 0.9


def chunk(steps: int, seed: int = 0, **fields) -> EpisodeChunk:
    rewards = np.random.default_rng(seed).uniform(0, 2, steps).astype(np.float32).tolist()
    data = helpers.chunk(steps, seed=seed, terminated=False, **{"rewards": rewards, **fields})
    return EpisodeChunk.model_validate(data, context={"policies": PolicySet.single(OBS, ACT)})


def build_batch(chunks: list[EpisodeChunk], policy: ActorCritic, gamma: float, gae_lambda: float) -> Batch:
    """The batch of chunks as the learner gets them: as blocks (a block per shape of chunk)."""
    return build_from_blocks(blocks_of(chunks, "default_policy"), policy, gamma, gae_lambda)


@pytest.fixture
def policy() -> ActorCritic:
    torch.manual_seed(0)
    policy = ActorCritic(OBS, ACT, (16,))
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # values far from zero
    return policy


def values(policy: ActorCritic, c: EpisodeChunk) -> np.ndarray:
    with torch.no_grad():
        return policy.value(torch.from_numpy(c.obs)).numpy()


def discounted_sums(rewards: np.ndarray, gamma: float, bootstrap: float) -> np.ndarray:
    out, running = np.zeros(len(rewards)), bootstrap
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def test_terminated_chunk_with_lambda_one_gives_monte_carlo_returns(policy):
    c = chunk(6, is_terminated=True)
    batch = build_batch([c], policy, GAMMA, gae_lambda=1.0)
    np.testing.assert_allclose(batch.returns.numpy(), discounted_sums(c.rewards, GAMMA, 0.0), rtol=1e-5)


@pytest.mark.parametrize("flags", [{"is_truncated": True}, {}], ids=["truncated", "cut by the client"])
def test_unfinished_chunks_bootstrap_from_the_value_of_their_last_observation(policy, flags):
    c = chunk(6, **flags)
    v = values(policy, c)
    batch = build_batch([c], policy, GAMMA, gae_lambda=1.0)
    np.testing.assert_allclose(batch.returns.numpy(), discounted_sums(c.rewards, GAMMA, v[-1]), rtol=1e-5)


def test_lambda_zero_gives_one_step_td_errors(policy):
    c = chunk(4, is_terminated=True)
    v = values(policy, c)
    batch = build_batch([c], policy, GAMMA, gae_lambda=0.0)
    next_v = np.append(v[1:-1], 0.0)  # terminal: no value after the last step
    np.testing.assert_allclose(batch.advantages.numpy(), c.rewards + GAMMA * next_v - v[:-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch.values.numpy(), v[:-1], rtol=1e-6)


@pytest.mark.parametrize("gamma_lambda", [0.0, 0.5, 0.9405, 1.0])
def test_gae_over_many_chunks_matches_the_step_by_step_recurrence(gamma_lambda):
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(1, 9, 200), [1_500], rng.integers(1, 300, 20), [1]])
    last_steps = np.cumsum(lengths) - 1
    deltas = rng.normal(0, 1, int(lengths.sum())).astype(np.float32)
    expected, following, ends = np.zeros(len(deltas)), 0.0, set(last_steps.tolist())
    for t in reversed(range(len(deltas))):
        following = float(deltas[t]) + (0.0 if t in ends else gamma_lambda * following)
        expected[t] = following
    advantages = gae_advantages(deltas, last_steps, gamma_lambda)
    assert advantages.dtype == np.float32
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-5)


def test_chunks_do_not_leak_advantages_into_each_other(policy):
    a, b = chunk(3, seed=1, is_terminated=True), chunk(5, seed=2)
    together = build_batch([a, b], policy, GAMMA, 0.95)
    alone = [build_batch([x], policy, GAMMA, 0.95) for x in (a, b)]
    np.testing.assert_allclose(together.advantages.numpy(), np.concatenate([x.advantages.numpy() for x in alone]))
    assert together.num_steps == 8 and together.obs.shape == (8, 4) and together.actions.dtype == torch.int64


def test_behaviour_logp_comes_from_the_client_then_its_logits_then_the_policy(policy):
    logp = np.full(3, -0.5, np.float32)
    logits = np.array([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]], np.float32)
    given = chunk(3, action_logp=logp, action_dist_inputs=logits)
    from_logits = chunk(3, action_dist_inputs=logits)
    neither = chunk(3)
    batch = build_batch([given, from_logits, neither], policy, GAMMA, 0.95)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected_from_logits = log_softmax[np.arange(3), from_logits.actions]
    with torch.no_grad():
        expected_from_policy, _ = policy.log_prob_and_entropy(
            torch.from_numpy(neither.obs[:-1]), torch.from_numpy(neither.actions)
        )
    np.testing.assert_allclose(batch.logp[:3].numpy(), logp)
    np.testing.assert_allclose(batch.logp[3:6].numpy(), expected_from_logits, rtol=1e-6)
    np.testing.assert_allclose(batch.logp[6:].numpy(), expected_from_policy.numpy(), rtol=1e-6)


def test_box_actions_batch_and_log_probs():
    obs_space, act_space = BoxSpace(shape=(3,)), BoxSpace(shape=(2,), low=-1, high=1)
    policy = ActorCritic(obs_space, act_space, (8,))
    rng = np.random.default_rng(0)
    c = EpisodeChunk.model_validate(
        {
            "obs": rng.standard_normal((5, 3)),
            "actions": rng.standard_normal((4, 2)),
            "rewards": [1, 1, 1, 1],
            "is_terminated": False,
            "is_truncated": False,
        },
        context={"policies": PolicySet.single(obs_space, act_space)},
    )
    batch = build_batch([c], policy, GAMMA, 0.95)
    assert batch.actions.shape == (4, 2) and batch.logp.shape == (4,)
    with torch.no_grad():
        dist = torch.distributions.Normal(policy.actor(torch.from_numpy(c.obs[:-1])), policy.log_std.exp())
        np.testing.assert_allclose(
            batch.logp.numpy(), dist.log_prob(torch.from_numpy(c.actions)).sum(-1).numpy(), rtol=1e-5
        )
