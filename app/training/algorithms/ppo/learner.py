"""The PPO learner: policy, optimizer and version number, and one synchronous training
step (batch, PPO update, new version, ONNX export, checkpoint). It runs in the
TrainingService's single learner thread, never on the event loop. It is given its
algorithm's config and its spaces, not the gateway's settings: one learner per module.
Versions are the gateway's (one weights_seq_no for every module): `train` is told its number.
Every algorithm's learner has the same methods (`Learner`, app/training/module_learners.py).
With demonstrations it pre-trains by behavioural cloning (`pretrain`) and/or adds a decaying
BC loss to its PPO updates (`clone_during_rl`), whose decay counts the env steps it has
trained, kept in its checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.experience import ChunkBlock
from app.schemas import EpisodeChunk
from app.settings.hyperparameters import ModelConfig, Symmetry
from app.spaces.models import ActionSpace, BoxSpace, DictSpace, architecture_json, has_cnn_parts, has_images, observation_parts
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.loss import ppo_update
from app.training.algorithms.ppo.onnx_head import policy_state
from app.training.algorithms.ppo.sequences import SequenceBatch, build_sequence_batch
from app.training.algorithms.ppo.symmetries import Symmetries
from app.training.batch import Batch, build_batch
from app.training.behavior_cloning import BCSchedule, Demonstrations, bc_pretrain
from app.training.checkpoints import Checkpointed
from app.training.policy import ActorCritic, RewardScaler
from app.training.policy_state import PolicyState


class PPOLearner(Checkpointed):
    """Owns the policy's weights; every method is called from one thread at a time."""

    owed_env_steps = 0.0  # every step trains on the whole batch: nothing is left owed
    owes_updates = False
    architecture_remedies = {  # CheckpointMismatch names this instead of "set grid_cnn" (no such setting)
        "grid_cnn": "declare the observation_space flat (one dimension of H x W x C values), as the checkpoint read it,",
    }

    def __init__(
        self,
        cfg: PPOConfig,
        observation_space: BoxSpace | DictSpace,
        action_space: ActionSpace,
        *,
        seed: int,
        checkpoint_dir: Path,
        onnx_input_name: str,
        device: torch.device = torch.device("cpu"),
        action_masking: bool = False,
        symmetries: tuple[Symmetry, ...] = (),
        model: ModelConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.model = model or ModelConfig()
        self.checkpoint_dir = checkpoint_dir
        self.onnx_input_name = onnx_input_name
        self.action_masking = action_masking
        torch.manual_seed(seed)
        normalize_obs = cfg.normalize_obs
        if normalize_obs is None:  # on, but not for images (scaled to 0..1 instead) nor grids (read as they are)
            normalize_obs = not has_cnn_parts(observation_space)
        lstm_cell_size = self.model.lstm_cell_size if self.model.use_lstm else 0
        self.policy = ActorCritic(observation_space, action_space, cfg.hidden_sizes, normalize_obs, lstm_cell_size).to(device)
        self.symmetries = Symmetries(symmetries, device)
        normalize_reward = cfg.normalize_reward  # unset: on, but not for images (a self-play learner's is False: self_play_defaults)
        if normalize_reward is None:
            normalize_reward = not has_images(observation_space)
        self.reward_scaler = RewardScaler(cfg.gamma) if normalize_reward else None
        # fused: one kernel for all parameters, 4x faster than the default for small nets on CPU.
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.learning_rate, eps=1e-5, fused=True)
        self.generator = torch.Generator().manual_seed(seed)
        self.weights_seq_no = 0
        self.env_steps_trained = 0  # in the checkpoint (OptimizerAndProgress): the BC weight decays with it
        self.bc: BCSchedule | None = None

    @property
    def architecture(self) -> dict[str, object]:
        """What a checkpoint must agree on to be loaded into this learner."""
        architecture: dict[str, object] = {
            "observation_space": architecture_json(self.policy.observation_space),
            "action_space": architecture_json(self.policy.action_space),
            "hidden_sizes": list(self.policy.hidden_sizes),
        }
        if self.policy.obs_norm is not None:  # absent otherwise, as in checkpoints made before it existed
            architecture["normalize_obs"] = True
        if self.reward_scaler is not None:
            architecture["normalize_reward"] = True
        if self.policy.lstm is not None:  # absent for a feed-forward policy, as before there were others
            architecture["lstm_cell_size"] = self.policy.lstm.hidden_size
        if any(part.space.is_grid for part in observation_parts(self.policy.observation_space)):
            # Absent otherwise: a box [H, W, C] checkpointed before grids existed went flat into the MLPs.
            architecture["grid_cnn"] = True
        return architecture

    def _parts(self) -> dict[str, object]:
        parts: dict[str, object] = {"policy": self.policy, "optimizer": OptimizerAndProgress(self)}
        if self.reward_scaler is not None:
            parts["reward_scaler"] = self.reward_scaler.returns
        return parts

    def export(self) -> PolicyState:
        return policy_state(self.policy, self.weights_seq_no, self.onnx_input_name, self.action_masking)

    def demonstrations(self, chunks: list[EpisodeChunk]) -> Demonstrations:
        """The chunks as this policy's tensors, on its device: what `pretrain` and `clone_during_rl` take."""
        return Demonstrations.from_chunks(chunks, self.policy, self.cfg.gamma, self.model.max_seq_len)

    def pretrain(self, demos: Demonstrations, epochs: int, fit_value: bool) -> dict[str, float]:
        """Behavioural cloning on the demonstrations (behavior_cloning.py), then a checkpoint,
        so that a restart restores the pre-trained policy instead of pre-training again. The
        value head is fitted only where returns are not rescaled (no reward normalisation)."""
        stats = bc_pretrain(self.policy, demos, epochs, self.generator, fit_value=fit_value and self.reward_scaler is None)
        self.save()
        return stats

    def clone_during_rl(self, demos: Demonstrations, strength: float, decay_steps: int) -> None:
        """Add a BC loss on `demos` to every PPO update, weighted `strength` at first and falling
        linearly to 0 at `decay_steps` env steps trained (the learner's own count, kept in its checkpoint)."""
        self.bc = BCSchedule(demos, strength, decay_steps)

    def train(self, blocks: list[ChunkBlock], weights_seq_no: int) -> tuple[PolicyState, dict[str, float]]:
        """Train on the chunks, export the result as version `weights_seq_no` and checkpoint it."""
        cfg = self.cfg  # may be replaced between steps (TrainingService.set_config)
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.learning_rate
        if self.policy.obs_norm is not None:  # statistics first: the batch's values use them
            observations = torch.from_numpy(np.concatenate([b.obs.reshape(len(b.obs), -1) for b in blocks]))
            self.policy.obs_norm.update(self.symmetries.observations(observations))  # the images are trained on too
        reward_scale = 1.0 if self.reward_scaler is None else self.reward_scaler.update([r for b in blocks for r in b.chunk_rewards()])
        batch: Batch | SequenceBatch
        if self.policy.lstm is not None:
            batch = build_sequence_batch(blocks, self.policy, cfg.gamma, cfg.gae_lambda, self.model.max_seq_len, reward_scale)
        else:
            batch = build_batch(blocks, self.policy, cfg.gamma, cfg.gae_lambda, reward_scale)
        env_steps = batch.num_steps
        if self.symmetries:
            batch = self.symmetries.augment(batch)  # and the steps' images, if the game has symmetries (feed-forward)
        bc = None if self.bc is None else self.bc.term(self.env_steps_trained)
        stats = ppo_update(self.policy, self.optimizer, batch, cfg, self.generator, bc)
        if self.bc is not None and bc is None:  # decayed to 0: no BC term, its weight still reported
            stats["bc_weight"] = 0.0
        if self.symmetries:
            stats["augmented_steps"] = float(batch.num_steps)
        self.env_steps_trained += env_steps
        self.weights_seq_no = weights_seq_no
        state = self.export()
        self.save()
        return state, stats


class OptimizerAndProgress:
    """The checkpoint's `optimizer` entry: the optimizer's state, and beside it the env steps the
    learner has trained on, so that a restart keeps them (a checkpoint made before they were
    kept loads as 0 steps; torch's optimizer ignores the extra key)."""

    def __init__(self, learner: PPOLearner) -> None:
        self.learner = learner

    def state_dict(self) -> dict[str, Any]:
        return {**self.learner.optimizer.state_dict(), "env_steps_trained": self.learner.env_steps_trained}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        self.learner.env_steps_trained = int(state.pop("env_steps_trained", 0))
        self.learner.optimizer.load_state_dict(state)
