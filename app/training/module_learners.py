"""Every trainable module's learner (its algorithm's: app/training/algorithms/), and the few
calls the TrainingService makes on them.

The TrainingService never touches a learner itself: it names a call (`train`, `export`,
...) and a learner host (learner_host.py) runs it, on a thread of the gateway's process
or in a process of its own. So everything that crosses here is plain data that pickles:
chunks, configs, `PolicyState`s, stats.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol, cast

import torch
from pydantic import BaseModel

from app.experience import ChunkBlock
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.policies import Module, PolicySet
from app.training.algorithms import ALGORITHMS
from app.training.behavior_cloning import Demonstrations
from app.training.checkpoints import Checkpointed
from app.training.demos import load_demos
from app.training.device import resolve_device
from app.training.policy_state import PolicyState

log = logging.getLogger("app.training")


class Learner(Protocol):
    """What every algorithm's learner does (algorithms/*/learner.py); one thread calls it at a time."""

    cfg: Any  # its algorithm's config: replaced between training steps (set_config)
    weights_seq_no: int

    def restore(self) -> bool: ...
    def save(self) -> None: ...
    def export(self) -> PolicyState: ...
    def train(self, blocks: list[ChunkBlock], weights_seq_no: int) -> tuple[PolicyState, dict[str, float]]: ...


class ClonesDemonstrations(Learner, Protocol):
    """A learner of an algorithm with `demos` (AlgorithmSpec): behavioural cloning (app/training/behavior_cloning.py)."""

    env_steps_trained: int

    def demonstrations(self, chunks: list[EpisodeChunk]) -> Demonstrations: ...
    def pretrain(self, demos: Demonstrations, epochs: int, fit_value: bool) -> dict[str, float]: ...
    def clone_during_rl(self, demos: Demonstrations, strength: float, decay_steps: int) -> None: ...


class ModuleLearners:
    """One learner per trainable module, of the algorithm it trains with."""

    def __init__(self, settings: Settings, policies: PolicySet) -> None:
        # Torch work on this thread (building the networks) stays on one intra-op thread: an
        # OpenMP team of its own would make libgomp count more threads than cores and stop
        # spinning, so the learner's `learner_threads` would wait on futexes at every operation.
        torch.set_num_threads(1)
        self.settings = settings
        self.policies = policies
        self.device = resolve_device(settings.device)
        self.by_module: dict[str, Learner] = {module.module_id: self._learner(module) for module in policies.trainable}
        if settings.bc_strength > 0 and settings.demos is None:
            log.warning("bc_strength %g is ignored: no demos are set (give demos: a file of demonstrations)", settings.bc_strength)

    def _learner(self, module: Module) -> Learner:
        """A fresh learner for the module, seeded by its place among the trainable ones; with
        its action masks and symmetries where its algorithm trains with them."""
        settings, spec = self.settings, ALGORITHMS[module.algorithm]
        options: dict[str, Any] = {}
        if spec.action_masking:
            options["action_masking"] = module.action_masking
        if spec.symmetries:
            options["symmetries"] = module.symmetries
        if spec.recurrent:
            options["model"] = module.model
        learner = spec.learner_class()(
            module.config,
            module.observation_space,
            module.action_space,
            seed=settings.seed + [m.module_id for m in self.policies.trainable].index(module.module_id),
            checkpoint_dir=settings.checkpoint_dir / module.module_id,
            onnx_input_name=settings.onnx_input_name,
            device=self.device,
            **options,
        )
        return cast(Learner, learner)

    def call(self, method: str, args: tuple) -> Any:
        """Run one of the calls below by name (what a learner host sends)."""
        if method not in CALLS:
            raise ValueError(f"no learner call {method!r}")
        return getattr(self, method)(*args)

    def set_num_threads(self, threads: int) -> None:
        """Torch's intra-op threads for training, on the thread that trains."""
        torch.set_num_threads(threads)

    def num_threads(self) -> int:
        return torch.get_num_threads()

    def restore(self, module_id: str) -> int | None:
        """Load the module's checkpoint: its weights_seq_no, or None if it has none. A module
        with demonstrations (of an algorithm with `demos`: PPO) is pre-trained on them if it starts
        fresh (once: its checkpoint then holds the result), and with `bc_strength` > 0 trains with
        a BC loss on them, restored or not."""
        learner = self.by_module[module_id]
        restored = learner.restore()
        path = self._demos_path(module_id)
        if restored and path is not None:
            log.info("%s: restored from its checkpoint, no behavioural-cloning pre-training", module_id)
        clones = ALGORITHMS[self.policies.modules[module_id].algorithm].demos
        if clones and path is not None and (not restored or self.settings.bc_strength > 0):
            self._use_demos(module_id, cast(ClonesDemonstrations, learner), path, pretrain=not restored)
        return learner.weights_seq_no if restored else None

    def _demos_path(self, module_id: str) -> Any:
        demos = self.settings.demos
        return demos.get(module_id) if isinstance(demos, dict) else demos

    def _use_demos(self, module_id: str, learner: ClonesDemonstrations, path: Path, pretrain: bool) -> None:
        """Load the module's demonstrations (once; a file refused: DemoFileError, the start
        fails), pre-train on them if `pretrain`, and keep them for the BC loss during RL if
        `bc_strength` > 0. Settings refuse demos for modules of algorithms without `demos`."""
        chunks = [c for c in load_demos(path, self.policies, None) if c.module_id == module_id]
        if not chunks:
            log.warning("%s: no chunk of demos file %s trains it, no behavioural cloning", module_id, path)
            return
        demos = learner.demonstrations(chunks)
        settings = self.settings
        if pretrain:
            stats = learner.pretrain(demos, settings.bc_pretrain_epochs, settings.bc_fit_value)
            log.info(
                "%s: starts fresh, pre-trained by behavioural cloning on %d steps of %s for %d epochs: %s",
                module_id, int(stats.pop("bc_steps")), path, settings.bc_pretrain_epochs,
                ", ".join(f"{name} {value:.3f}" for name, value in stats.items()),
            )  # fmt: skip
        if settings.bc_strength > 0:
            learner.clone_during_rl(demos, settings.bc_strength, settings.bc_steps)
            log.info(
                "%s: behavioural-cloning loss during RL on %d steps of %s, weight %g falling to 0 at %d env steps "
                "trained (%d trained so far)",
                module_id, demos.num_steps, path, settings.bc_strength, settings.bc_steps, learner.env_steps_trained,
            )  # fmt: skip

    def adopt(self, module: Module) -> None:
        """A fresh learner for `module`, whose spaces changed (it adopted a game's: the service
        allows it only before the module has a checkpoint or any experience)."""
        self.policies.replace(module)  # in a learner process, its own copy of the modules
        self.by_module[module.module_id] = self._learner(module)

    def export(self, module_id: str) -> PolicyState:
        return self.by_module[module_id].export()

    def save_all(self) -> None:
        for learner in self.by_module.values():
            learner.save()

    def copy_weights(self, source: str, member: str) -> None:
        """A population's exploit: `member` takes `source`'s weights, optimizer state and statistics."""
        learner = self.by_module[member]
        if not isinstance(learner, Checkpointed):
            raise TypeError(f"{member}'s learner cannot copy another's state")
        learner.copy_from(cast(Checkpointed, self.by_module[source]))

    def set_config(self, module_id: str, cfg: BaseModel) -> None:
        """Use `cfg` from the module's next training step on."""
        self.by_module[module_id].cfg = cfg

    def train(self, by_module: dict[str, list[ChunkBlock]], version: int) -> dict[str, tuple[PolicyState, dict[str, float]]]:
        """One training step of each module that has data (or, off-policy, owes gradient steps)."""
        return {module_id: self.by_module[module_id].train(blocks, version) for module_id, blocks in by_module.items()}


CALLS = frozenset(
    {"set_num_threads", "num_threads", "restore", "adopt", "export", "save_all", "set_config", "copy_weights", "train"}
)
