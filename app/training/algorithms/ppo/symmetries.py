"""Data augmentation by the game's symmetries: a PPO batch and its images under each.

A symmetry (a Connect Four board mirrored left to right) maps each step to one that is
just as likely in the same game: its observation, action mask and action permuted, its
rewards, and so its values, advantages and returns, unchanged. The image of a trajectory
is a trajectory of the mirrored behaviour policy, which chose the image action with the
probability the behaviour policy chose the original one: so the image keeps the step's
behaviour log-prob, and PPO's ratio and clipping treat it like any other step. Learning a
position teaches its mirror image too, as AlphaZero's training on the board's symmetries
does (Silver et al. 2018), and a policy that is not yet symmetric is pulled towards one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from app.settings.hyperparameters import Symmetry
from app.training.batch import Batch


class Symmetries:
    """The symmetries' index tensors, built once: `augment` applies them to a batch."""

    def __init__(self, symmetries: Sequence[Symmetry], device: torch.device) -> None:
        # (observation gather, mask gather, action map): the image's action of action a is the j with action[j] == a.
        self._maps = [
            (
                torch.tensor(s.observation, dtype=torch.int64, device=device),
                torch.tensor(s.action, dtype=torch.int64, device=device),
                torch.argsort(torch.tensor(s.action, dtype=torch.int64, device=device)),
            )
            for s in symmetries
        ]

    def __bool__(self) -> bool:
        return bool(self._maps)

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        """`obs` [N, ...] followed by its images under each symmetry, in order (`obs` itself without any)."""
        if not self._maps:
            return obs
        flat = obs.reshape(len(obs), -1)
        return torch.cat([obs, *(flat[:, observation.to(obs.device)].reshape(obs.shape) for observation, _, _ in self._maps)])

    def augment(self, batch: Batch) -> Batch:
        """The batch's steps followed by their images under each symmetry, in order."""
        if not self._maps:
            return batch
        copies = 1 + len(self._maps)
        masks = batch.masks
        if masks is not None:
            masks = torch.cat([masks, *(masks[:, action] for _, action, _ in self._maps)])
        return Batch(
            obs=self.observations(batch.obs),
            actions=torch.cat([batch.actions, *(image_of[batch.actions] for _, _, image_of in self._maps)]),
            logp=batch.logp.repeat(copies),
            values=batch.values.repeat(copies),
            advantages=batch.advantages.repeat(copies),
            returns=batch.returns.repeat(copies),
            masks=masks,
        )
