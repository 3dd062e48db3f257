"""The one TrainingService every client connection feeds, on both transports.

A composition of parts, each with one job:
- `ClientRegistry` (registry.py): who is connected, who samples, who waits;
- `BatchScheduler` (scheduler.py): each module's pending steps (module_queue.py), when
  its batch trains, who waits and who is held back (no torch); `StepBudgets`
  (budgets.py): each module's queue limits and an off-policy one's owed gradient steps;
- a learner per trainable module, its algorithm's (algorithms/: PPO, SAC): its weights
  and one training step; all of them in one `ModuleLearners` (module_learners.py), hosted
  in a thread or a child process (learner_host.py);
- a `League` per self-play module (self_play.py): snapshots, references, opponents,
  ratings, saved beside the checkpoints (`LeagueFiles`, league_files.py); the curriculum
  (curriculum.py, saved by `CurriculumFiles`, curriculum_files.py);
- `SpaceAdoption` (space_adoption.py): a game's declared spaces, taken by a module given none;
- `PolicyStore` (policy_store.py): the published versions, for SET_STATE and download;
- `Populations` (populations.py): each population's members, exploit steps, the member served.
Here they are wired together: a learner turn trains every module whose batch is due, in
the learners' thread or process (learner_host.py) so the event loop keeps serving; then
all modules are published as one new version (one gateway-wide weights_seq_no) and
logged. The service keeps each module's hyperparameters (`ModuleConfigs`,
module_configs.py) itself, so that it never has to ask the learners.

All methods are called from the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from app.experience import ChunkBlock, blocks_of
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.training.best_models import BestModels
from app.training.budgets import StepBudgets
from app.training.checkpoints import CHECKPOINT_FILE, CheckpointMismatch
from app.training.curriculum import Curriculum
from app.training.curriculum_files import CurriculumFiles
from app.training.demos import DemoFileError
from app.training.device import resolve_device
from app.training.leagues import Leagues
from app.training.learner_host import LearnerProcess, LearnerThread, learner_host
from app.training.metrics import TrainingMetrics
from app.training.model_files import ModelFiles
from app.training.module_configs import ModuleConfigs
from app.training.module_queue import ModuleQueue
from app.training.policy_state import PolicyState
from app.training.policy_store import PolicySetState, PolicyStore
from app.training.populations import Populations
from app.training.recurrent_states import check_states
from app.training.registry import ClientInfo, ClientRegistry
from app.training.scheduler import BatchScheduler
from app.training.self_play import League
from app.training.space_adoption import SpaceAdoption
from app.training.status import TrainingStatus

__all__ = ["ClientInfo", "LocalTrainingService", "PolicySetState"]

logger = logging.getLogger("app.training")


STOP_REPORT_S = 5.0


class LocalTrainingService:
    """The training service (app/training/interface.py) in this process: collects experience
    from every client and trains every module on it."""

    def __init__(self, settings: Settings, policies: PolicySet | None = None) -> None:
        self.settings = settings
        self.policies = policies or PolicySet.from_settings(settings)
        self.metrics = TrainingMetrics(list(self.policies.modules))
        self.device = resolve_device(settings.device)
        self._configs = ModuleConfigs(self.policies)
        self._budgets = StepBudgets(settings, self.policies, self._configs)
        self._learners = learner_host(settings, self.policies)
        self.leagues = Leagues(self.policies, settings.checkpoint_dir, settings.seed, self._learners)
        self._slot_modules = bool(self.policies.slot_modules)  # a client's slot decides what it plays
        self._exports: dict[str, PolicyState] = {}  # each learner's latest export
        self._step_listeners: list[Callable[[], None]] = []
        self.curriculum = Curriculum(settings.env_params, self.policies.default_module_id)  # env_params and lessons
        self._curriculum_files = CurriculumFiles(settings.checkpoint_dir, self.curriculum, self._learners.run)
        if self.curriculum.has_lessons:
            self.metrics.add_episode_listener(self._on_episode)
        self._registry = ClientRegistry()
        self.populations = Populations(self.policies, settings, self._configs, self.metrics, self._learners, self.set_config)
        self._store = PolicyStore()
        self.adoption = SpaceAdoption(
            settings, self.policies, self._configs, self.metrics, self._learners, self._store, self._adopted
        )
        self._model_files = ModelFiles(cast(Path, settings.models_dir), settings.models_kept)  # set by Settings
        self.best_models = BestModels(
            cast(Path, settings.models_dir), settings.best_model_episodes, list(self._configs), self._store, self._learners.run
        )
        self.metrics.add_evaluation_listener(self.best_models.on_evaluation)
        self._model_writes: set[asyncio.Future[None]] = set()  # referenced until done
        budgets = self._budgets
        self._scheduler = BatchScheduler(
            registry=self._registry,
            metrics=self.metrics,
            train=self._train,
            current_version=lambda: self._store.current.weights_seq_no,
            queues=[ModuleQueue(m.module_id, budgets.limits(m), settings.max_policy_lag) for m in self.policies.trainable],
            barrier_timeout_s=settings.barrier_timeout_s,
            owed_env_steps=budgets.owed_env_steps,
            owes_updates=budgets.owes_updates,
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
        await self._learners.start()
        await self._learners.call("set_num_threads", self.settings.learner_threads)
        where = "in a process of their own" if self.settings.learner_process else "in a thread of the gateway"
        logger.info("learners train on %s, %d intra-op thread(s), %s", self.device, self.settings.learner_threads, where)
        restored = await _restore_checkpoints(self._learners, list(self._configs), self.settings.checkpoint_dir)
        for module_id in restored:
            self.adoption.keep(module_id)  # its checkpoint was made for its spaces
        for module_id in self._configs:
            self._exports[module_id] = await self._learners.call("export", module_id)
        await self.populations.start()
        await self.leagues.restore(restored, self._exports)
        if restored:
            await self._curriculum_files.restore()
            await self._learners.run(self.best_models.restore, list(restored))
        self._publish(max(restored.values(), default=0))
        self._write_model_files()

    async def stop(self) -> None:
        """Let a running training step finish, drop what is pending, save every checkpoint;
        the log says what it waits for."""
        report = asyncio.ensure_future(_report_stopping(self._scheduler))
        try:
            await self._scheduler.stop()
        finally:
            report.cancel()
        await asyncio.gather(*self._model_writes)
        await self._learners.call("save_all")
        await self.leagues.save()
        await self._curriculum_files.save()
        await self._learners.stop()
        version = self._store.current.weights_seq_no
        logger.info("checkpoints saved in %s (weights_seq_no %d)", self.settings.checkpoint_dir.resolve(), version)

    def _publish(self, weights_seq_no: int) -> None:
        """Publish every module's latest export as one version; self-play draws its opponents."""
        states = {}
        for module in self.policies.modules.values():
            if module.population is not None:  # its best member's
                states[module.module_id] = self._exports[self.populations.serves(module.module_id)]
            elif module.opponent_of is None:  # trainable
                states[module.module_id] = self._exports[module.module_id]
            else:
                learner = self._exports[module.opponent_of]
                states[module.module_id] = self.leagues.opponent(module.opponent_of, weights_seq_no, learner)
        curriculum = self.curriculum  # SET_STATE carries env_params from the first lesson change on
        self._store.publish(
            PolicySetState(
                weights_seq_no, states, self.policies.default_module_id, curriculum.values, curriculum.changes > 0,
                self.policies.slot_modules,
            )  # fmt: skip
        )
        curriculum.published()
        self.metrics.weights_seq_no = weights_seq_no

    def _adopted(self, module_id: str, state: PolicyState) -> None:
        """A module adopted a game's spaces (SpaceAdoption): its fresh learner's export is the next version."""
        self._exports[module_id] = state
        self._publish(self._store.current.weights_seq_no + 1)
        self._write_model_files()

    def _write_model_files(self) -> None:
        """The version just published as .onnx files, on the learner thread, in order with its
        calls; nobody waits for it (the waiters of the version are released meanwhile)."""
        self._model_writes.add(task := asyncio.ensure_future(self._learners.run(self._model_files.write, self._store.current)))
        task.add_done_callback(self._model_writes.discard)

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
    def clients_here(self) -> list[ClientInfo]:
        """The clients of this process's transports (all of them; on Ray, one front-end's)."""
        return self._registry.clients

    # -- Experience in, weights out -----------------------------------------------

    def ingest(self, client: ClientInfo, episodes: Sequence[EpisodeChunk], sampling: bool = True) -> None:
        """Add the chunks to their modules' pending batches (and to the metrics); never blocks.
        `sampling`: the client samples with downloaded policies and may wait for training
        (the barrier waits for it); False for chunks the gateway built for a thin client.
        Evaluation chunks go to the metrics only: never trained on, no game of the league.
        A message's chunks come as blocks (app.experience): the work is per block, not per chunk."""
        if sampling:
            self.start_sampling(client)
        if not episodes:
            return
        blocks = []
        received = blocks_of(episodes, self.policies.default_module_id)
        if self._slot_modules:  # a population's module's chunks are the client's member's, a learner's its exploiter's
            received = [block.as_module(self.policies.played_by(block.module_id, client.slot)) for block in received]
        check_states(received, self.policies, partial(self.metrics.continues_episode, client.id))  # before any is kept
        # Received, so sampled (or evaluated): from here on trained, dropped or pending.
        for block in received:
            self.metrics.record_chunks(client.id, block)
            sampled = block.select([not evaluation for evaluation in block.evaluation]) if any(block.evaluation) else block
            if any(block.evaluation):
                self.leagues.record_evaluations(block.with_versions(client.last_weights_seq_no_sent))
            training = sampled.with_versions(client.last_weights_seq_no_sent)
            if training.num_chunks:
                blocks.append(training)
        self.leagues.record_games(blocks)
        self._scheduler.add(client, blocks)

    def stop_training(self, module_id: str, reason: str) -> None:
        """The module trains no more (its budget is spent): it keeps serving its last version,
        and the steps that come for it are dropped, counted under `reason`."""
        logger.info("%s trains no more (%s): it keeps its version %d; its env steps are dropped from now on",
                 module_id, reason, self.metrics.modules[module_id].weights_seq_no)
        self._scheduler.close(module_id, reason)

    def must_wait(self) -> bool:
        """Whether EPISODES_AND_GET_STATE waits for training (StepBudgets.must_wait)."""
        return self._budgets.must_wait(self._scheduler)

    async def wait_for_room(self, client: ClientInfo) -> None:
        """Wait while a module the client feeds holds more than its max_backlog env steps:
        the back-pressure on a client faster than the learner. Safe to cancel."""
        await self._scheduler.wait_for_room(client)

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
    def room_env_steps(self) -> float:
        """Env steps the fullest module may still take before its clients are held (may be negative)."""
        return self._scheduler.room_env_steps

    def status(self) -> TrainingStatus:
        """Progress and hyperparameters now (a new snapshot each call; metrics apart)."""
        scheduler, configs, trainable = self._scheduler, self._configs, list(self._configs)
        return TrainingStatus(
            pending_env_steps=scheduler.pending_env_steps,
            training_env_steps=scheduler.training_env_steps,
            training_in_progress=scheduler.training_in_progress,
            force_on_policy=self._budgets.force_on_policy,
            device=str(self.device),
            default_module_id=self.policies.default_module_id,
            configs={module_id: (configs.algorithm_of(module_id), configs[module_id]) for module_id in trainable}
            | self.populations.served_configs(),
            clients=self._registry.clients,
            leagues=self.leagues.by_module,
            curriculum=self.curriculum.status(),
            best_models=dict(self.best_models.best),
            populations=self.populations.status(),
            exploiters=self.leagues.exploiter_status(),
        )

    # -- Hyperparameters ------------------------------------------------------------

    def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Check every change (module_id, algorithm, values), then make them all. Raises
        ConfigRefused for the first bad one, and then nothing changes."""
        for module_id, cfg in self._configs.checked_all(changes).items():
            self.set_config(module_id, cfg)

    def set_config(self, module_id: str, cfg: BaseModel) -> None:
        """Use `cfg` (checked: ModuleConfigs.checked) from the module's next training step on."""
        if self._configs.replace(module_id, cfg):
            self._learners.submit("set_config", module_id, cfg).add_done_callback(_log_failure)
            logger.info("%s hyperparameters of %s are now %s", self._configs.algorithm_of(module_id).upper(), module_id, cfg.model_dump())

    # -- The training step (the scheduler calls it) ---------------------------------

    async def _train(self, by_module: dict[str, list[ChunkBlock]], reasons: dict[str, str], stale_steps: int) -> None:
        """Train each module given (its fresh chunks; an off-policy one's may be none, for the
        gradient steps it owes) in the learners' thread or process, publish the new version,
        count and log it."""
        version = self._store.current.weights_seq_no + 1
        started = time.perf_counter()
        results = await self._learners.call("train", dict(by_module), version)
        seconds = time.perf_counter() - started
        for module_id, (state, stats) in results.items():
            self._exports[module_id] = state
            self._budgets.trained(module_id, stats)
        trained = {m: (sum(block.num_steps for block in by_module[m]), stats) for m, (_, stats) in results.items()}
        if self.populations:
            await self.populations.after_training(version, trained, self._exports)
        await self.leagues.after_training(version, trained, self._exports)
        self._publish(version)
        self.metrics.record_training_step(version, trained, seconds)  # counted trained now
        for listener in self._step_listeners:
            listener()
        _log_training_step(version, trained, reasons, stale_steps, seconds, self.metrics.snapshot(), self.leagues.by_module)
        await self.leagues.save()  # a new snapshot, and the ratings so far (after clients heard of the version)
        await self._curriculum_files.save()
        self._write_model_files()

    def _on_episode(self, module_id: str, episode_return: float, length: int) -> None:
        """A training episode ended (TrainingMetrics calls it): the curriculum lessons it completes
        are logged; versions published from now on carry the new values in SET_STATE."""
        for change in self.curriculum.record_episode(module_id, episode_return, length):
            logger.info("%s", change.describe())


async def _report_stopping(scheduler: BatchScheduler) -> None:
    """While the training step under way holds up the stop: what it is, every STOP_REPORT_S."""
    while scheduler.training_in_progress:
        logger.info(
            "stopping: waiting for the training step under way (%d env steps, %.0f s so far)",
            scheduler.training_env_steps, time.monotonic() - scheduler.turn_started,
        )  # fmt: skip
        await asyncio.sleep(STOP_REPORT_S)


async def _restore_checkpoints(learners: LearnerThread | LearnerProcess, module_ids: list[str], checkpoint_dir: Path) -> dict[str, int]:
    """Restore every module that has a checkpoint; the version of each restored (`_report_checkpoints`)."""
    restored, fresh, refused = {}, [], []
    for module_id in module_ids:
        try:
            version = await learners.call("restore", module_id)
            if version is not None:
                restored[module_id] = version
            else:
                fresh.append(module_id)
        except DemoFileError:
            raise  # a bad demonstrations file is the settings' fault, not a checkpoint's: said as is
        except CheckpointMismatch as exc:
            refused.append(f"{module_id}: {exc}")
    _report_checkpoints(checkpoint_dir, module_ids, restored, fresh, refused)
    return restored


def _report_checkpoints(
    checkpoint_dir: Path, module_ids: list[str], restored: dict[str, int], fresh: list[str], refused: list[str]
) -> None:
    """Log which modules were restored (and at which version), which start fresh and which
    checkpoints belong to no module. Raises CheckpointMismatch, naming every module
    refused, when checkpoints were made for other spaces or sizes."""
    directory = checkpoint_dir.resolve()
    others = sorted(path.parent.name for path in directory.glob(f"*/{CHECKPOINT_FILE}") if path.parent.name not in module_ids)
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


def _log_training_step(
    version: int,
    trained: dict[str, tuple[int, dict[str, float]]],
    reasons: dict[str, str],
    stale_steps: int,
    seconds: float,
    snapshot: dict[str, Any],
    leagues: dict[str, League],
) -> None:
    """A line for the version, and one per module trained: its steps, why, its return and stats."""
    steps = sum(steps for steps, _ in trained.values())
    logger.info("weights_seq_no %d: %d steps (%d stale dropped) in %.2fs", version, steps, stale_steps, seconds)
    for module_id, (module_steps, stats) in trained.items():
        mean_return = snapshot["policies"][module_id]["episode_return_mean"]
        rating = f" | elo {leagues[module_id].elo:.0f}" if module_id in leagues else ""
        logger.info(
            "  %s: %d steps (%s) | return mean %s over %d episodes%s | %s",
            module_id,
            module_steps,
            reasons[module_id],
            "n/a" if mean_return is None else f"{mean_return:.1f}",
            snapshot["policies"][module_id]["episodes_in_window"],
            rating,
            " ".join(f"{name} {value:.4g}" for name, value in stats.items()),
        )


def _log_failure(call: Future[None]) -> None:
    if not call.cancelled() and (exc := call.exception()) is not None:
        logger.error("the learners could not take new hyperparameters: %r", exc)
