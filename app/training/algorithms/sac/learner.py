"""The SAC learner: SAC's networks and optimisers (loss.py for a Box, discrete/ for Discrete
actions), a replay buffer, and one training step (store the chunks, the gradient steps owed,
at most `updates_per_version`, new version, ONNX export, checkpoint). The same methods as every
learner (`Learner`, app/training/module_learners.py); it runs in the learner thread.
Every env step received owes `utd_ratio` gradient steps once the buffer holds
`learning_starts` transitions; what one training step leaves owed, the next one does
(the TrainingService starts it even if no new data came).

Off-policy: every step received goes to the buffer whatever policy chose it, so nothing is
stale, and clients never wait for a training step (its registry entry is `off_policy`).
The checkpoint holds the networks, optimisers and alpha, not the buffer (it refills).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from app.experience import ChunkBlock
from app.spaces.models import ActionSpace, BoxSpace, DictSpace, DiscreteSpace, architecture_json
from app.training.algorithms.sac.config import SACConfig
from app.training.algorithms.sac.discrete.loss import DiscreteSAC
from app.training.algorithms.sac.discrete.networks import CategoricalActor
from app.training.algorithms.sac.discrete.onnx_head import CategoricalHead
from app.training.algorithms.sac.loss import SAC
from app.training.algorithms.sac.networks import SquashedGaussianActor
from app.training.algorithms.sac.onnx_head import SquashedGaussianHead
from app.training.algorithms.sac.replay import ReplayBuffer
from app.training.checkpoints import Checkpointed
from app.training.onnx_export import OnnxActor, policy_state
from app.training.policy_state import PolicyState


class SACLearner(Checkpointed):
    """Owns SAC's weights and buffer; every method is called from one thread at a time."""

    @property
    def owes_updates(self) -> bool:
        """Whether a training step with no new data would still take a gradient step."""
        return self.owed_updates >= 1

    @property
    def owed_env_steps(self) -> float:
        """The env steps whose gradient steps are still owed (for the rate limiter)."""
        return self.owed_updates / self.cfg.utd_ratio

    def __init__(
        self,
        cfg: SACConfig,
        observation_space: BoxSpace | DictSpace,
        action_space: ActionSpace,
        *,
        seed: int,
        checkpoint_dir: Path,
        onnx_input_name: str,
        device: torch.device = torch.device("cpu"),
    ) -> None:
        self.cfg = cfg
        self.checkpoint_dir = checkpoint_dir
        self.onnx_input_name = onnx_input_name
        self.device = device
        torch.manual_seed(seed)
        discrete = isinstance(action_space, DiscreteSpace)
        self.sac = (DiscreteSAC if discrete else SAC)(observation_space, action_space, cfg).to(device)
        action_dim = 1 if discrete else action_space.flat_dim  # Discrete: the action's index
        self.buffer = ReplayBuffer(cfg.buffer_size, observation_space.flat_dim, action_dim)
        self.rng = np.random.default_rng(seed)
        self.noise_rng = np.random.default_rng([seed, 1])  # gsde's draws of theta, apart from the batches'
        self.exploration_noise: np.ndarray | None = None  # gsde: the theta clients play, drawn per version
        self.versions_since_draw = 0
        self.weights_seq_no = 0
        self.owed_updates = 0.0  # gradient steps the data received so far asks for, not yet done

    @property
    def architecture(self) -> dict[str, object]:
        """What a checkpoint must agree on to be loaded into this learner."""
        actor = self.sac.actor
        architecture: dict[str, object] = {
            "algorithm": "sac",
            "observation_space": architecture_json(actor.observation_space),
            "action_space": architecture_json(actor.action_space),
            "hidden_sizes": list(actor.hidden_sizes),
        }
        if isinstance(actor, SquashedGaussianActor) and actor.gsde:
            architecture["exploration"] = "gsde"  # its log std is a matrix, not a head
        return architecture

    def _parts(self) -> dict[str, object]:
        return {"sac": self.sac, **self.sac.optimizers()}

    def _onnx_actor(self, exploration_noise: np.ndarray | None = None) -> OnnxActor:
        """The actor as export_onnx writes it (its onnx_head.py), with gSDE's drawn theta if given."""
        actor = self.sac.actor
        return CategoricalHead(actor) if isinstance(actor, CategoricalActor) else SquashedGaussianHead(actor, exploration_noise)

    def export(self) -> PolicyState:
        """The version as published: with gsde, SET_STATE's model plays the current theta."""
        played = None if self.exploration_noise is None else self._onnx_actor(self.exploration_noise)
        return policy_state(self._onnx_actor(), self.weights_seq_no, self.onnx_input_name, played)

    def _draw_exploration_noise(self) -> None:
        """gsde: a new theta every `gsde_sample_every` versions (the first at the first version)."""
        actor = self.sac.actor
        if not (isinstance(actor, SquashedGaussianActor) and actor.gsde):
            return
        if self.exploration_noise is None or self.versions_since_draw >= self.cfg.gsde_sample_every:
            self.exploration_noise = actor.exploration_noise(self.noise_rng)
            self.versions_since_draw = 0
        self.versions_since_draw += 1

    def train(self, blocks: list[ChunkBlock], weights_seq_no: int) -> tuple[PolicyState, dict[str, float]]:
        """Store the chunks, take the gradient steps they ask for once the buffer holds
        `learning_starts` transitions, export the result as version `weights_seq_no`."""
        cfg = self.cfg  # may be replaced between steps (TrainingService.set_config)
        for group in self.sac.q_optimizer.param_groups + self.sac.a_optimizer.param_groups:
            group["lr"] = cfg.q_lr
        for group in self.sac.actor_optimizer.param_groups:
            group["lr"] = cfg.policy_lr
        received = sum(self.buffer.add(block) for block in blocks)
        if self.buffer.size >= cfg.learning_starts:
            self.owed_updates += received * cfg.utd_ratio
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        updates = min(int(self.owed_updates), cfg.updates_per_version)
        for _ in range(updates):
            for name, value in self.sac.update(cfg, self.buffer.sample(cfg.batch_size, self.rng, self.device)).items():
                sums[name] = sums.get(name, 0.0) + value
                counts[name] = counts.get(name, 0) + 1
        self.owed_updates -= updates
        stats = {name: total / counts[name] for name, total in sums.items()}
        stats.update(gradient_steps=float(updates), buffer_size=float(self.buffer.size), owed_updates=self.owed_updates)
        self.weights_seq_no = weights_seq_no
        self._draw_exploration_noise()
        state = self.export()
        self.save()
        return state, stats
