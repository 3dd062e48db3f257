"""One PPO update on a batch (Schulman et al. 2017), written after CleanRL's ppo.py.

The batch gives each minibatch's steps through the policy now: shuffled steps (batch.py),
or for a recurrent policy shuffled sequences run through the LSTM from their first
state, their padding left out (sequences.py); the loss below is the same for both.

Clipped surrogate objective, (optionally clipped) value loss, entropy bonus, several
epochs of shuffled minibatches, per-minibatch advantage normalisation, global
gradient clipping and an optional early stop when the policy moved too far (KL).

The entropy floor (`entropy_floor`, discrete actions): the entropy bonus is `ent_coef`
plus a multiplier that each minibatch moves by `entropy_floor_lr` times (floor - the
minibatch's entropy as a share of the largest entropy of its legal actions), kept in
[0, 1]: dual gradient ascent on the constraint "entropy share >= floor", as SAC tunes
its alpha (Haarnoja et al. 2018), but one-sided: above the floor it decays to 0 and PPO
is left alone. Self-play against a copy of itself otherwise lets PPO's entropy collapse
(every game the same) long before the policy is good. Per state (`entropy_floor_per_state`):
each state's entropy counts only up to its own floor and the bonus pulls only the states
below it, rising while any is (up to MAX_PER_STATE_BONUS): an average floor let a board
game's opening collapse to one move while the other states held the mean.

The behavioural-cloning term (`bc`, with demonstrations and `bc_strength`): each minibatch
adds its weight times the negative log-likelihood of a minibatch of demonstration steps
(behavior_cloning.py), as ML-Agents' `behavioral_cloning` does during RL.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.sequences import SequenceBatch
from app.training.batch import Batch
from app.training.behavior_cloning import BCTerm
from app.training.policy import ActorCritic


def ppo_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: Batch | SequenceBatch,
    cfg: PPOConfig,
    generator: torch.Generator,
    bc: BCTerm | None = None,
) -> dict[str, float]:
    """Train `policy` on `batch` (with `bc`: plus its behavioural-cloning loss); returns the
    learner stats averaged over minibatches."""
    sums = {"policy_loss": 0.0, "vf_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clip_frac": 0.0}
    if bc is not None:
        sums["bc_loss"] = 0.0
    num_minibatches = 0
    floor = cfg.entropy_floor or 0.0
    if floor <= 0 or not policy.is_discrete:
        policy.entropy_bonus = 0.0
    share_sum = 0.0
    for epoch in range(cfg.update_epochs):  # noqa: B007 - read after the loop (the epochs run)
        for mb in batch.minibatches(policy, cfg.minibatch_size, generator):
            logratio = mb.newlogprob - mb.logp
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()  # http://joschu.net/blog/kl-approx.html
                clip_frac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()

            mb_advantages = mb.advantages
            if cfg.norm_adv and len(mb_advantages) > 1:
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

            # Policy loss: the clipped surrogate objective, negated.
            pg_loss1 = -mb_advantages * ratio
            pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
            pg_loss = torch.max(pg_loss1, pg_loss2).mean()

            # Value loss, optionally clipped around the values the batch was built with.
            v_loss_unclipped = (mb.newvalue - mb.returns) ** 2
            if cfg.clip_vloss:
                v_clipped = mb.values + torch.clamp(mb.newvalue - mb.values, -cfg.clip_coef, cfg.clip_coef)
                v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - mb.returns) ** 2).mean()
            else:
                v_loss = 0.5 * v_loss_unclipped.mean()

            entropy_loss = mb.entropy.mean()
            max_entropy = policy.max_entropy(len(mb.entropy), mb.masks) if floor > 0 else None
            floor_entropy = None if max_entropy is None else floor * max_entropy
            bonus_term = entropy_loss
            if floor_entropy is not None and cfg.entropy_floor_per_state:  # only the states below their floor pull
                up_to_floor = torch.minimum(mb.entropy, floor_entropy)
                bonus_term = up_to_floor.mean()
            loss = pg_loss - cfg.ent_coef * entropy_loss - policy.entropy_bonus * bonus_term + cfg.vf_coef * v_loss

            # Behavioural cloning (optional): the demonstrated actions' negative log-likelihood
            # on a minibatch of demonstration steps, weighted.
            if bc is not None:
                bc_loss = bc.loss(policy, cfg.minibatch_size, generator)
                loss = loss + bc.weight * bc_loss
                sums["bc_loss"] += bc_loss.item()

            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optimizer.step()

            for name, value in (
                ("policy_loss", pg_loss),
                ("vf_loss", v_loss),
                ("entropy", entropy_loss),
                ("approx_kl", approx_kl),
                ("clip_frac", clip_frac),
            ):
                sums[name] += value.item()
            num_minibatches += 1
            if floor_entropy is not None:
                share = entropy_share(mb.entropy.detach(), max_entropy)
                share_sum += share
                if cfg.entropy_floor_per_state:  # rises while a state is below its floor (the share of the floor missed)
                    missed = 1.0 - entropy_share(up_to_floor.detach(), floor_entropy)
                    policy.entropy_bonus = min(MAX_PER_STATE_BONUS, policy.entropy_bonus + cfg.entropy_floor_lr * missed)
                else:
                    policy.entropy_bonus = min(1.0, max(0.0, policy.entropy_bonus + cfg.entropy_floor_lr * (floor - share)))

        if cfg.target_kl is not None and approx_kl > cfg.target_kl:
            break

    stats = {name: total / num_minibatches for name, total in sums.items()}
    stats["explained_var"] = explained_variance(batch.values, batch.returns)
    stats["epochs"] = float(epoch + 1)
    if bc is not None:
        stats["bc_weight"] = bc.weight
    if floor > 0 and policy.is_discrete:
        stats["entropy_share"] = share_sum / num_minibatches
        stats["entropy_bonus"] = policy.entropy_bonus
    return stats


MAX_PER_STATE_BONUS = 10.0  # a bonus that pulls only the states below their floor can be large: it leaves the others alone


def entropy_share(entropy: torch.Tensor, max_entropy: torch.Tensor) -> float:
    """The entropy of a minibatch as a share of the largest its legal actions allow
    (rows with one legal action have none to lose and count for nothing); 1 when none has a choice."""
    most = float(max_entropy.sum())
    return 1.0 if most <= 0 else float(entropy.sum()) / most


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var[returns - values] / Var[returns]: 1 is a perfect critic, 0 no better than a constant."""
    y_pred, y_true = values.cpu().numpy(), returns.cpu().numpy()
    var_y = np.var(y_true)
    return float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)
