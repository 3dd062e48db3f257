"""The one TrainingService every client connection feeds, on both transports.

A composition of parts, each with one job:
- `ClientRegistry` (registry.py): who is connected, who samples, who waits;
- `BatchScheduler` (scheduler.py): the pending batch and when it trains (no torch);
- a learner per trainable module (learner.py for PPO, sac_learner.py for SAC): its
  weights and one training step;
- a `League` per self-play module (self_play.py): snapshots, opponents, the rating;
- `PolicyStore` (policy_store.py): the published versions, for SET_STATE and download.
Here they are wired together: a training step trains every module that has data in
the batch, in the one learner thread so the event loop keeps serving; then all
modules are published as one new version (one gateway-wide weights_seq_no) and logged.

All methods are called from the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from app.config import PPOConfig, SACConfig, Settings, check_hyperparameter_names
from app.onnx_names import OUTPUT_NAME
from app.policies import PolicySet
from app.schemas import EpisodeChunk
from app.training.checkpoints import CHECKPOINT_FILE, CheckpointMismatch
from app.training.league_files import LeagueUnusable, clear_league, load_league, save_league
from app.training.device import resolve_device
from app.training.learner import Learner
from app.training.metrics import TrainingMetrics
from app.training.onnx_export import PolicyState
from app.training.policy_store import PolicySetState, PolicyStore
from app.training.registry import ClientInfo, ClientRegistry
from app.training.sac_learner import SACLearner
from app.training.scheduler import BatchScheduler
from app.training.self_play import League

__all__ = ["ClientInfo", "PolicySetState", "TrainingService"]

logger = logging.getLogger("app.training")

class WrongAlgorithm(ValueError):
    """Hyperparameters of another algorithm than the module trains with."""


class ConfigRefused(ValueError):
    """One change of `change_config` refused (nothing changed): the `index` of the change,
    and whether it names the wrong algorithm (else a value is invalid or fixed)."""

    def __init__(self, index: int, message: str, wrong_algorithm: bool) -> None:
        super().__init__(message)
        self.index, self.message, self.wrong_algorithm = index, message, wrong_algorithm

    def __reduce__(self):  # pickled whole (a Ray learner returns it to the front-end)
        return ConfigRefused, (self.index, self.message, self.wrong_algorithm)


class LearnerUnreachable(RuntimeError):
    """The learner (on Ray: another process) did not answer in time; it may still make the change."""


FIXED_WHILE_TRAINING = {  # hyperparameters PATCH cannot change, and why
    "ppo": {
        "hidden_sizes": "the weights have that shape",
        "normalize_obs": "the checkpoint holds its statistics, or none",
        "normalize_reward": "the checkpoint holds its statistics, or none",
    },
    "sac": {
        "hidden_sizes": "the weights have that shape",
        "buffer_size": "the replay buffer is allocated",
        "alpha": "with autotune it is learned; set it at start-up",
        "autotune": "set it at start-up",
    },
}


class TrainingService:
    """Collects experience from every client and trains every module on it."""

    def __init__(self, settings: Settings, policies: PolicySet | None = None) -> None:
        self.settings = settings
        self.policies = policies or PolicySet.from_settings(settings)
        self.metrics = TrainingMetrics(list(self.policies.modules))
        self.device = resolve_device(settings.device)
        # Torch work on this thread (building the networks) stays on it: an OpenMP team of
        # its own would make libgomp count more threads than cores and stop spinning, so the
        # learner thread's `learner_threads` would wait on futexes at every operation.
        torch.set_num_threads(1)
        self._learners: dict[str, Learner | SACLearner] = {
            module.module_id: self._learner(module, settings.seed + i) for i, module in enumerate(self.policies.trainable)
        }
        off_policy = {m.module_id for m in self.policies.trainable if m.off_policy}
        # Clients wait for each version only while some module learns on-policy.
        self.force_on_policy = settings.force_on_policy and len(off_policy) < len(self._learners)
        self.leagues = {
            module.module_id: League(module.self_play, seed=settings.seed)
            for module in self.policies.trainable
            if module.self_play is not None
        }
        self._exports: dict[str, PolicyState] = {}  # each learner's latest export
        self._saved_ratings: dict[str, dict] = {}  # each league's ratings as last written (League.ratings)
        self._step_listeners: list[Callable[[], None]] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner")
        self._registry = ClientRegistry()
        self._store = PolicyStore()
        self._scheduler = BatchScheduler(
            registry=self._registry,
            metrics=self.metrics,
            train=self._train,
            current_version=lambda: self._store.current.weights_seq_no,
            train_batch_size=settings.train_batch_size,
            barrier_timeout_s=settings.barrier_timeout_s,
            max_policy_lag=settings.max_policy_lag,
            never_stale=lambda chunk: (chunk.module_id or self.policies.default_module_id) in off_policy,
            train_on_arrival=len(off_policy) == len(self._learners),
            more_work=lambda: any(learner.owes_updates for learner in self._learners.values()),
        )

    # -- Lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Restore every module that has a checkpoint, and publish the current version.

        Logs which modules were restored (and at which version), which start fresh and
        which checkpoints belong to no module. Raises CheckpointMismatch, naming every
        module refused, when checkpoints were made for other spaces or sizes.
        """
        # One intra-op thread by default: the other cores stay free for the event loop and
        # the simulators; more trains SAC's 256x256 networks faster where cores are free.
        await self._in_learner_thread(torch.set_num_threads, self.settings.learner_threads)
        logger.info("learners train on %s, %d intra-op thread(s)", self.device, self.settings.learner_threads)
        restored, fresh, refused = {}, [], []
        for module_id, learner in self._learners.items():
            try:
                if await self._in_learner_thread(learner.restore):
                    restored[module_id] = learner.weights_seq_no
                else:
                    fresh.append(module_id)
            except CheckpointMismatch as exc:
                refused.append(f"{module_id}: {exc}")
        directory = self.settings.checkpoint_dir.resolve()
        others = sorted(path.parent.name for path in directory.glob(f"*/{CHECKPOINT_FILE}") if path.parent.name not in self._learners)
        summary = "; ".join(
            part
            for part in (
                restored and "restored " + ", ".join(f"{m} at weights_seq_no {v}" for m, v in restored.items()),
                fresh and "training starts fresh for " + ", ".join(fresh),
                others and "ignored (no such module): " + ", ".join(others),
            )
            if part
        )
        if refused:
            raise CheckpointMismatch(f"checkpoints in {directory}: {summary}; refused " + "; ".join(refused))
        logger.info("checkpoints in %s: %s", directory, summary)
        for module_id, learner in self._learners.items():
            self._exports[module_id] = await self._in_learner_thread(learner.export)
        for module_id in self.leagues:
            await self._restore_league(module_id, restored=module_id in restored)
        self._publish(max(restored.values(), default=0))

    async def stop(self) -> None:
        """Let a running training step finish, drop what is pending, save every checkpoint."""
        await self._scheduler.stop()
        for learner in self._learners.values():
            await self._in_learner_thread(learner.save)
        await self._save_leagues()
        self._executor.shutdown(wait=True)

    async def _restore_league(self, module_id: str, restored: bool) -> None:
        """A restored self-play module's ratings and snapshots, if they were saved and fit its
        model; else its league starts again (its folder emptied)."""
        module_dir = self.settings.checkpoint_dir / module_id
        saved = None
        if restored:
            try:
                saved = await self._in_learner_thread(load_league, module_dir, self._exports[module_id].onnx_bytes)
            except LeagueUnusable as exc:
                logger.warning("self-play league of %s not restored, it starts again: %s", module_id, exc)
        if saved is None:
            await self._in_learner_thread(clear_league, module_dir)
            return
        league = self.leagues[module_id]
        league.restore(*saved)
        versions = [s.weights_seq_no for s in league.snapshots]
        logger.info("self-play league of %s restored: elo %.0f after %d rated games, snapshots of versions %s",
                    module_id, league.elo, league.rated_games, versions)

    async def _save_leagues(self) -> None:
        """Every self-play module's ratings and snapshots, beside its checkpoint (in the learner
        thread); a failure is logged, and the next training step tries again."""
        for module_id, league in self.leagues.items():  # taken here, on the event loop that changes them
            ratings, snapshots = league.ratings(), league.snapshot_files()
            if ratings == self._saved_ratings.get(module_id):  # no new game, no new snapshot: on disk already
                continue
            try:
                await self._in_learner_thread(save_league, self.settings.checkpoint_dir / module_id, ratings, snapshots)
            except OSError as exc:
                logger.warning("self-play league of %s not saved: %s", module_id, exc)
            else:
                self._saved_ratings[module_id] = ratings

    async def _in_learner_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _publish(self, weights_seq_no: int) -> None:
        """Publish every module's latest export as one version; self-play draws its opponents."""
        states = {}
        for module in self.policies.modules.values():
            if module.trainable:
                states[module.module_id] = self._exports[module.module_id]
            else:
                learner = self._exports[module.opponent_of]
                states[module.module_id] = self.leagues[module.opponent_of].on_new_version(weights_seq_no, learner)
        self._store.publish(PolicySetState(weights_seq_no, states, self.policies.default_module_id))
        self.metrics.weights_seq_no = weights_seq_no

    def _learner(self, module: Module, seed: int) -> Learner | SACLearner:
        """A module's learner: SAC's for an off-policy module, else PPO's."""
        common = {
            "seed": seed,
            "checkpoint_dir": self.settings.checkpoint_dir / module.module_id,
            "onnx_input_name": self.settings.onnx_input_name,
            "device": self.device,
        }
        if module.off_policy:
            return SACLearner(module.sac, module.observation_space, module.action_space, **common)
        return Learner(module.ppo, module.observation_space, module.action_space, action_masking=module.action_masking, **common)

    # -- Clients ------------------------------------------------------------------

    def add_step_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` on the event loop after every training step, once it is counted."""
        self._step_listeners.append(listener)

    def connect(self, transport: str, peer: str) -> ClientInfo:
        return self._registry.connect(transport, peer)

    def add_client(self, client: ClientInfo) -> None:
        """A client numbered by a front-end on Ray (app/cluster/)."""
        self._registry.add(client)

    def disconnect(self, client: ClientInfo) -> None:
        """Forget the client; its pending data stays in the batch. If everyone left is
        waiting now, train."""
        self._registry.disconnect(client)
        self.metrics.forget_client(client.id)
        self._scheduler.forget(client)

    def start_sampling(self, client: ClientInfo) -> None:
        """The client samples (it asked for GET_CONFIG or sent experience): the barrier now waits for it."""
        client.sampling = True

    @property
    def clients(self) -> list[ClientInfo]:
        return self._registry.clients

    @property
    def clients_here(self) -> list[ClientInfo]:
        """The clients of this process's transports (all of them; on Ray, one front-end's)."""
        return self._registry.clients

    # -- Experience in, weights out -----------------------------------------------

    def ingest(self, client: ClientInfo, episodes: list[EpisodeChunk], sampling: bool = True) -> None:
        """Add the chunks to the pending batch (and to the metrics); never blocks.
        `sampling`: the client samples with downloaded policies and may wait for training
        (the barrier waits for it); False for chunks the gateway built for a thin client."""
        if sampling:
            self.start_sampling(client)
        if not episodes:
            return
        for chunk in episodes:  # received, so sampled: from here on trained, dropped or pending
            self.metrics.record_chunk(client.id, chunk)
            if chunk.outcome is not None and (league := self.leagues.get(chunk.module_id)) is not None:
                version = chunk.weights_seq_no if chunk.weights_seq_no is not None else client.last_weights_seq_no_sent
                league.record_game(chunk.outcome, version)
        self._scheduler.add(client, episodes)

    def must_wait(self) -> bool:
        """Whether EPISODES_AND_GET_STATE waits for training: always while learning on-policy,
        else only while the learner is more than max_training_backlog env steps behind."""
        owed = sum(learner.owed_env_steps for learner in self._learners.values())
        backlog = self._scheduler.pending_env_steps + self._scheduler.training_env_steps + owed
        return self.force_on_policy or backlog > self.settings.max_training_backlog

    async def wait_for_training(self, client: ClientInfo) -> PolicySetState:
        """Wait until the policy has trained on a batch holding all the client's data
        ingested so far, then return the current state. Safe to cancel."""
        await self._scheduler.wait_for_training(client)
        return self.current_state()

    def current_state(self) -> PolicySetState:
        """The latest published version (cached; no export happens here)."""
        return self._store.current

    def note_state_sent(self, client: ClientInfo, state: PolicySetState) -> None:
        """Record that `state` went to the client in a SET_STATE. Call it for every
        SET_STATE sent: chunks without their own weights_seq_no are dated by it."""
        client.last_weights_seq_no_sent = state.weights_seq_no

    def kept_state(self, weights_seq_no: int) -> PolicySetState | None:
        """One of the last kept versions, or None if it is not kept."""
        return self._store.kept(weights_seq_no)

    @property
    def kept_versions(self) -> list[int]:
        return self._store.kept_versions

    @property
    def onnx_output_names(self) -> list[str]:
        return [OUTPUT_NAME]

    @property
    def pending_env_steps(self) -> int:
        return self._scheduler.pending_env_steps

    @property
    def training_env_steps(self) -> int:
        """Env steps in the training step under way (neither trained nor dropped yet)."""
        return self._scheduler.training_env_steps

    @property
    def training_in_progress(self) -> bool:
        return self._scheduler.training_in_progress

    # -- Hyperparameters ------------------------------------------------------------

    @property
    def ppo_config(self) -> PPOConfig:
        """The default module's PPO hyperparameters."""
        return self.module_ppo_config(self.policies.default_module_id)

    def module_ppo_config(self, module_id: str) -> PPOConfig:
        learner = self._learners[module_id]
        return learner.cfg if isinstance(learner, Learner) else self.policies.modules[module_id].ppo

    def module_sac_config(self, module_id: str) -> SACConfig | None:
        """A SAC module's hyperparameters; None for a PPO module."""
        learner = self._learners[module_id]
        return learner.cfg if isinstance(learner, SACLearner) else None

    def algorithm_of(self, module_id: str) -> str:
        """What a trainable module trains with: "ppo" or "sac"."""
        return "sac" if isinstance(self._learners[module_id], SACLearner) else "ppo"

    def checked_config(
        self, module_id: str, algorithm: str, changes: dict[str, Any], base: PPOConfig | SACConfig | None = None
    ) -> PPOConfig | SACConfig:
        """A module's hyperparameters of `algorithm` (`base`, default its current ones) with
        `changes`. Raises ValueError for an unknown or frozen module, another algorithm than
        the module's, unknown or invalid values, and values fixed while training."""
        if module_id not in self._learners:
            raise ValueError(f"{module_id!r} is not a trainable module; trainable modules: {', '.join(self._learners)}")
        if (trains := self.algorithm_of(module_id)) != algorithm:
            raise WrongAlgorithm(f"{module_id!r} trains with {trains}, not {algorithm}: change its {trains} hyperparameters")
        model = SACConfig if algorithm == "sac" else PPOConfig
        current = base or self._learners[module_id].cfg
        check_hyperparameter_names(changes, model)
        updated = model.model_validate({**current.model_dump(), **changes})  # ValidationError is a ValueError
        for name, why in FIXED_WHILE_TRAINING[algorithm].items():
            if getattr(updated, name) != getattr(current, name):
                raise ValueError(f"{name} cannot change while training ({why})")
        return updated

    def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Check every change (module_id, algorithm, values), then make them all: a module's
        later changes build on its earlier ones. Raises ConfigRefused for the first bad
        one, and then nothing changes."""
        updated: dict[str, PPOConfig | SACConfig] = {}
        for index, (module_id, algorithm, values) in enumerate(changes):
            try:
                updated[module_id] = self.checked_config(module_id, algorithm, values, updated.get(module_id))
            except WrongAlgorithm as exc:
                raise ConfigRefused(index, str(exc), wrong_algorithm=True) from None
            except ValueError as exc:
                raise ConfigRefused(index, str(exc), wrong_algorithm=False) from None
        for module_id, cfg in updated.items():
            self.set_config(module_id, cfg)

    def set_config(self, module_id: str, cfg: PPOConfig | SACConfig) -> None:
        """Use `cfg` (from checked_config) from the module's next training step on."""
        if cfg != self._learners[module_id].cfg:
            self._learners[module_id].cfg = cfg
            logger.info("%s hyperparameters of %s are now %s", self.algorithm_of(module_id).upper(), module_id, cfg.model_dump())

    # -- The training step (the scheduler calls it) ---------------------------------

    async def _train(self, chunks: list[EpisodeChunk], reason: str, stale_steps: int) -> None:
        """Train every module that has data in the learner thread, publish the new version, count and log it."""
        by_module: dict[str, list[EpisodeChunk]] = defaultdict(list)
        for module_id, learner in self._learners.items():
            if learner.owes_updates:  # an off-policy learner with gradient steps to do
                by_module[module_id] = []
        for chunk in chunks:
            by_module[chunk.module_id or self.policies.default_module_id].append(chunk)
        version = self._store.current.weights_seq_no + 1
        started = time.perf_counter()
        results = await self._in_learner_thread(self._train_modules, by_module, version)
        seconds = time.perf_counter() - started
        for module_id, (state, _) in results.items():
            self._exports[module_id] = state
        self._publish(version)
        trained = {m: (sum(c.num_steps for c in by_module[m]), stats) for m, (_, stats) in results.items()}
        self.metrics.record_training_step(version, trained, seconds)  # counted trained now
        for listener in self._step_listeners:
            listener()
        snapshot = self.metrics.snapshot()
        steps = sum(steps for steps, _ in trained.values())
        logger.info(
            "weights_seq_no %d: %d steps (%s, %d stale dropped) in %.2fs",
            version, steps, reason, stale_steps, seconds,
        )
        for module_id, (module_steps, stats) in trained.items():
            mean_return = snapshot["policies"][module_id]["episode_return_mean"]
            rating = f" | elo {self.leagues[module_id].elo:.0f}" if module_id in self.leagues else ""
            logger.info(
                "  %s: %d steps | return mean %s over %d episodes%s | %s",
                module_id,
                module_steps,
                "n/a" if mean_return is None else f"{mean_return:.1f}",
                snapshot["policies"][module_id]["episodes_in_window"],
                rating,
                " ".join(f"{name} {value:.4g}" for name, value in stats.items()),
            )
        await self._save_leagues()  # a new snapshot, and the ratings so far (after clients heard of the version)

    def _train_modules(
        self, by_module: dict[str, list[EpisodeChunk]], version: int
    ) -> dict[str, tuple[PolicyState, dict[str, float]]]:
        """In the learner thread: one training step per module that has data."""
        return {module_id: self._learners[module_id].train(chunks, version) for module_id, chunks in by_module.items()}
