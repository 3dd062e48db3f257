"""The one TrainingService every client connection feeds, on both transports.

A composition of parts, each with one job:
- `ClientRegistry` (registry.py): who is connected, who samples, who waits;
- `BatchScheduler` (scheduler.py): each module's pending steps (module_queue.py), when
  its batch trains, who waits and who is held back (no torch);
- a learner per trainable module (learner.py for PPO, sac_learner.py for SAC): its
  weights and one training step; all of them in one `Learners` (learners.py), hosted in
  a thread or a child process (learner_host.py);
- a `League` per self-play module (self_play.py): snapshots, references, opponents, ratings;
- `PolicyStore` (policy_store.py): the published versions, for SET_STATE and download.
Here they are wired together: a learner turn trains every module whose batch is due, in
the learners' thread or process (learner_host.py) so the event loop keeps serving; then
all modules are published as one new version (one gateway-wide weights_seq_no) and logged. The service keeps each module's hyperparameters
(`ModuleConfigs`, module_configs.py) and SAC's owed gradient steps itself, so that it
never has to ask the learners.

All methods are called from the asyncio event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from app.experience import ChunkBlock, blocks_of
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.hyperparameters import PPOConfig, SACConfig
from app.settings.policies import Module, PolicySet
from app.spaces.onnx_names import OUTPUT_NAME
from app.training.checkpoints import (
    CHECKPOINT_FILE,
    CheckpointMismatch,
    load_curriculum,
    save_adopted_spaces,
    save_curriculum,
)
from app.training.curriculum import Curriculum
from app.training.demos import DemoFileError
from app.training.device import resolve_device
from app.training.league_files import LeagueUnusable, clear_league, load_league, save_league
from app.training.learner_host import learner_host
from app.training.metrics import TrainingMetrics
from app.training.model_files import ModelFiles
from app.training.module_configs import ModuleConfigs
from app.training.module_queue import ModuleQueue, QueueLimits
from app.training.onnx_export import PolicyState
from app.training.policy_store import PolicySetState, PolicyStore
from app.training.registry import ClientInfo, ClientRegistry
from app.training.scheduler import BatchScheduler
from app.training.self_play import Game, League

__all__ = ["ClientInfo", "LocalTrainingService", "PolicySetState"]

logger = logging.getLogger("app.training")


STOP_REPORT_S = 5.0


class LearnerUnreachable(RuntimeError):
    """The learner (on Ray: another process) did not answer in time; it may still make the change."""


class LocalTrainingService:
    """The training service (app/training/interface.py) in this process: collects experience
    from every client and trains every module on it."""

    def __init__(self, settings: Settings, policies: PolicySet | None = None) -> None:
        self.settings = settings
        self.policies = policies or PolicySet.from_settings(settings)
        self.metrics = TrainingMetrics(list(self.policies.modules))
        self.device = resolve_device(settings.device)
        trainable = self.policies.trainable
        self._configs = ModuleConfigs(self.policies)
        off_policy = {m.module_id for m in trainable if m.off_policy}
        self._owed_updates = dict.fromkeys(off_policy, 0.0)  # SAC's gradient steps owed, as its last step left them
        self._learners = learner_host(settings, self.policies)
        # Clients wait for each version only while some module learns on-policy.
        self.force_on_policy = settings.force_on_policy and len(off_policy) < len(self._configs)
        self.leagues = {
            module.module_id: League(module.self_play, seed=settings.seed)
            for module in self.policies.trainable
            if module.self_play is not None
        }
        self._exports: dict[str, PolicyState] = {}  # each learner's latest export
        self._saved_ratings: dict[str, dict[str, Any]] = {}  # each league's ratings as last written (League.ratings)
        self._step_listeners: list[Callable[[], None]] = []
        self.curriculum = Curriculum(settings.env_params, self.policies.default_module_id)  # env_params and lessons
        self._saved_curriculum: dict[str, Any] | None = None  # its state as last written
        if self.curriculum.has_lessons:
            self.metrics.add_episode_listener(self._on_episode)
        # The modules whose spaces a game's GET_CONFIG may no longer set (see adoptable_modules).
        self._spaces_fixed = set() if not settings.spaces_given and settings.demos is None else set(self._configs)
        self._adopting = asyncio.Lock()
        self._registry = ClientRegistry()
        self._store = PolicyStore()
        self._model_files = ModelFiles(cast(Path, settings.models_dir), settings.models_kept)  # set by Settings
        self._model_writes: set[asyncio.Future[None]] = set()  # referenced until done
        self._scheduler = BatchScheduler(
            registry=self._registry,
            metrics=self.metrics,
            train=self._train,
            current_version=lambda: self._store.current.weights_seq_no,
            queues=[ModuleQueue(m.module_id, self._limits(m), settings.max_policy_lag) for m in trainable],
            barrier_timeout_s=settings.barrier_timeout_s,
            owed_env_steps=self._owed_env_steps,
            owes_updates=lambda module_id: self._owed_updates.get(module_id, 0.0) >= 1,
        )

    def _limits(self, module: Module) -> QueueLimits:
        """When the module's steps train, and how many may wait (settings, else the gateway's)."""
        settings = self.settings
        batch = module.train_batch_size or settings.train_batch_size
        return QueueLimits(
            train_batch_size=batch,
            min_barrier_batch=min(batch, settings.env_steps_per_sample),
            max_backlog=max(settings.max_backlog_env_steps or 2 * batch, batch),  # else a batch could never fill
            off_policy=module.off_policy,
        )

    def _owed_env_steps(self, module_id: str) -> float:
        """The env steps whose gradient steps an off-policy module still owes (0 for PPO)."""
        if (owed := self._owed_updates.get(module_id)) is None:
            return 0.0
        return owed / cast(SACConfig, self._configs[module_id]).utd_ratio

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
        restored, fresh, refused = {}, [], []
        for module_id in self._configs:
            try:
                version = await self._learners.call("restore", module_id)
                if version is not None:
                    restored[module_id] = version
                    self._spaces_fixed.add(module_id)  # its checkpoint was made for them
                else:
                    fresh.append(module_id)
            except DemoFileError:
                raise  # a bad demonstrations file is the settings' fault, not a checkpoint's: said as is
            except CheckpointMismatch as exc:
                refused.append(f"{module_id}: {exc}")
        directory = self.settings.checkpoint_dir.resolve()
        others = sorted(path.parent.name for path in directory.glob(f"*/{CHECKPOINT_FILE}") if path.parent.name not in self._configs)
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
        for module_id in self._configs:
            self._exports[module_id] = await self._learners.call("export", module_id)
        for module_id in self.leagues:
            await self._restore_league(module_id, restored=module_id in restored)
        if restored:
            await self._restore_curriculum()
        self._publish(max(restored.values(), default=0))
        self._write_model_files()

    async def stop(self) -> None:
        """Let a running training step finish, drop what is pending, save every checkpoint;
        the log says what it waits for."""
        report = asyncio.ensure_future(self._report_stopping())
        try:
            await self._scheduler.stop()
        finally:
            report.cancel()
        await asyncio.gather(*self._model_writes)
        await self._learners.call("save_all")
        await self._save_leagues()
        await self._save_curriculum()
        await self._learners.stop()
        version = self._store.current.weights_seq_no
        logger.info("checkpoints saved in %s (weights_seq_no %d)", self.settings.checkpoint_dir.resolve(), version)

    async def _report_stopping(self) -> None:
        """While the training step under way holds up the stop: what it is, every STOP_REPORT_S."""
        while self._scheduler.training_in_progress:
            logger.info(
                "stopping: waiting for the training step under way (%d env steps, %.0f s so far)",
                self._scheduler.training_env_steps, time.monotonic() - self._scheduler.turn_started,
            )
            await asyncio.sleep(STOP_REPORT_S)

    async def _restore_league(self, module_id: str, restored: bool) -> None:
        """A restored self-play module's ratings and snapshots, if they were saved and fit its
        model; else its league starts again (its folder emptied)."""
        module_dir = self.settings.checkpoint_dir / module_id
        saved = None
        if restored:
            try:
                saved = await self._learners.run(load_league, module_dir, self._exports[module_id].onnx_bytes)
            except LeagueUnusable as exc:
                logger.warning("self-play league of %s not restored, it starts again: %s", module_id, exc)
        if saved is None:
            await self._learners.run(clear_league, module_dir)
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
                await self._learners.run(save_league, self.settings.checkpoint_dir / module_id, ratings, snapshots)
            except OSError as exc:
                logger.warning("self-play league of %s not saved: %s", module_id, exc)
            else:
                self._saved_ratings[module_id] = ratings

    def _publish(self, weights_seq_no: int) -> None:
        """Publish every module's latest export as one version; self-play draws its opponents."""
        states = {}
        for module in self.policies.modules.values():
            if module.opponent_of is None:  # trainable
                states[module.module_id] = self._exports[module.module_id]
            else:
                learner = self._exports[module.opponent_of]
                states[module.module_id] = self.leagues[module.opponent_of].on_new_version(weights_seq_no, learner)
        curriculum = self.curriculum  # SET_STATE carries env_params from the first lesson change on
        self._store.publish(
            PolicySetState(weights_seq_no, states, self.policies.default_module_id, curriculum.values, curriculum.changes > 0)
        )
        curriculum.published()
        self.metrics.weights_seq_no = weights_seq_no

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
    def clients(self) -> list[ClientInfo]:
        return self._registry.clients

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
        games: dict[str, list[Game]] = {}  # each league's games ended in this message
        # Received, so sampled (or evaluated): from here on trained, dropped or pending.
        for block in blocks_of(episodes, self.policies.default_module_id):
            self.metrics.record_chunks(client.id, block)
            sampled = block.select([not evaluation for evaluation in block.evaluation]) if any(block.evaluation) else block
            training = sampled.with_versions(client.last_weights_seq_no_sent)
            if not training.num_chunks:
                continue
            blocks.append(training)
            if block.module_id in self.leagues and (ended := _games(training)):
                games.setdefault(block.module_id, []).extend(ended)
        for module_id, ended in games.items():
            self.leagues[module_id].record_games(ended)
        self._scheduler.add(client, blocks)

    # -- Spaces a game declares (RLLINK.md, "Spaces the game declares") --------------

    @property
    def adoptable_modules(self) -> frozenset[str]:
        """The modules that would adopt the spaces a game declares: the default module of a
        gateway given no spaces (nor demonstrations), until it has a checkpoint, some
        experience, or adopted a game's spaces already."""
        return frozenset(
            module_id for module_id in self._configs
            if module_id not in self._spaces_fixed and not self.metrics.modules[module_id].received_any
        )  # fmt: skip

    async def adopt_spaces(self, module_id: str, observation_space: Any, action_space: Any) -> bool:
        """The module takes these spaces (None: keeps its own): a fresh learner, published as a
        new version and saved for restarts. False if it could no longer adopt (another game
        was first); ValueError, and nothing changes, if the module cannot have them."""
        async with self._adopting:
            if module_id not in self.adoptable_modules:
                return False
            old = self.policies.modules[module_id]
            module = replace(
                old,
                observation_space=observation_space or old.observation_space,
                action_space=action_space or old.action_space,
            )  # its checks raise ValueError
            self.policies.replace(module)  # from here on, every session checks chunks against these spaces
            try:
                await self._learners.call("adopt", module)
                self._exports[module_id] = await self._learners.call("export", module_id)
            except Exception:
                self.policies.replace(old)
                await self._learners.call("adopt", old)
                raise
            self._spaces_fixed.add(module_id)
            spaces = {
                "observation_space": module.observation_space.model_dump(mode="json", exclude_none=True),
                "action_space": module.action_space.model_dump(mode="json", exclude_none=True),
            }
            self._publish(self._store.current.weights_seq_no + 1)
            self._write_model_files()
            try:
                await self._learners.run(save_adopted_spaces, self.settings.checkpoint_dir, spaces)
            except OSError as exc:
                logger.warning("the adopted spaces of %s were not saved (a restart goes back to the defaults): %s", module_id, exc)
            logger.info(
                "%s adopts the spaces the first game declared (weights_seq_no %d): observation_space %s, action_space %s",
                module_id, self._store.current.weights_seq_no,
                json.dumps(spaces["observation_space"]), json.dumps(spaces["action_space"]),
            )  # fmt: skip
            return True

    def stop_training(self, module_id: str, reason: str) -> None:
        """The module trains no more (its budget is spent): it keeps serving its last version,
        and the steps that come for it are dropped, counted under `reason`."""
        logger.info("%s trains no more (%s): it keeps its version %d; its env steps are dropped from now on",
                 module_id, reason, self.metrics.modules[module_id].weights_seq_no)
        self._scheduler.close(module_id, reason)

    def must_wait(self) -> bool:
        """Whether EPISODES_AND_GET_STATE waits for training: always while learning on-policy,
        else only while the learner is more than max_training_backlog env steps behind."""
        backlog = sum(self._scheduler.backlog(m) for m in self._configs) + self._scheduler.training_env_steps
        return self.force_on_policy or backlog > self.settings.max_training_backlog

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
    def onnx_output_names(self) -> list[str]:
        return [OUTPUT_NAME]

    @property
    def pending_env_steps(self) -> int:
        return self._scheduler.pending_env_steps

    @property
    def room_env_steps(self) -> float:
        """Env steps the fullest module may still take before its clients are held (may be negative)."""
        return self._scheduler.room_env_steps

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
        return self._configs.ppo_of(self.policies.default_module_id)

    def module_ppo_config(self, module_id: str) -> PPOConfig:
        return self._configs.ppo_of(module_id)

    def module_sac_config(self, module_id: str) -> SACConfig | None:
        return self._configs.sac_of(module_id)

    def algorithm_of(self, module_id: str) -> str:
        return self._configs.algorithm_of(module_id)

    def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Check every change (module_id, algorithm, values), then make them all. Raises
        ConfigRefused for the first bad one, and then nothing changes."""
        for module_id, cfg in self._configs.checked_all(changes).items():
            self.set_config(module_id, cfg)

    def set_config(self, module_id: str, cfg: PPOConfig | SACConfig) -> None:
        """Use `cfg` (checked: ModuleConfigs.checked) from the module's next training step on."""
        if self._configs.replace(module_id, cfg):
            self._learners.submit("set_config", module_id, cfg).add_done_callback(_log_failure)
            logger.info("%s hyperparameters of %s are now %s", self.algorithm_of(module_id).upper(), module_id, cfg.model_dump())

    # -- The training step (the scheduler calls it) ---------------------------------

    async def _train(self, by_module: dict[str, list[ChunkBlock]], reasons: dict[str, str], stale_steps: int) -> None:
        """Train each module given (its fresh chunks; SAC's may be none, for the gradient steps
        it owes) in the learners' thread or process, publish the new version, count and log it."""
        version = self._store.current.weights_seq_no + 1
        started = time.perf_counter()
        results = await self._learners.call("train", dict(by_module), version)
        seconds = time.perf_counter() - started
        for module_id, (state, stats) in results.items():
            self._exports[module_id] = state
            if module_id in self._owed_updates:
                self._owed_updates[module_id] = stats["owed_updates"]
        self._publish(version)
        trained = {m: (sum(block.num_steps for block in by_module[m]), stats) for m, (_, stats) in results.items()}
        self.metrics.record_training_step(version, trained, seconds)  # counted trained now
        for listener in self._step_listeners:
            listener()
        snapshot = self.metrics.snapshot()
        steps = sum(steps for steps, _ in trained.values())
        logger.info("weights_seq_no %d: %d steps (%d stale dropped) in %.2fs", version, steps, stale_steps, seconds)
        for module_id, (module_steps, stats) in trained.items():
            mean_return = snapshot["policies"][module_id]["episode_return_mean"]
            rating = f" | elo {self.leagues[module_id].elo:.0f}" if module_id in self.leagues else ""
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
        await self._save_leagues()  # a new snapshot, and the ratings so far (after clients heard of the version)
        await self._save_curriculum()
        self._write_model_files()

    # -- Curriculum lessons (env_params; app/training/curriculum.py) ------------------

    def curriculum_status(self) -> dict[str, dict[str, Any]]:
        return self.curriculum.status()

    def _on_episode(self, module_id: str, episode_return: float, length: int) -> None:
        """A training episode ended (TrainingMetrics calls it): the lessons it completes are logged;
        versions published from now on carry the new values in SET_STATE."""
        for change in self.curriculum.record_episode(module_id, episode_return, length):
            logger.info("%s", change.describe())

    async def _restore_curriculum(self) -> None:
        """A resumed run's lessons, as saved beside its checkpoints; a damaged file is logged, lessons start again."""
        directory = self.settings.checkpoint_dir
        try:
            saved = await self._learners.run(load_curriculum, directory)
        except (OSError, ValueError) as exc:
            logger.warning("curriculum lessons not restored, they start at the first: %s", exc)
            return
        if saved is not None:
            for line in self.curriculum.restore(saved):
                logger.info("curriculum: %s", line)

    async def _save_curriculum(self) -> None:
        """The lessons and their episodes so far, beside the checkpoints (in the learner thread);
        a failure is logged, and the next training step tries again."""
        if not self.curriculum.has_lessons or (state := self.curriculum.state()) == self._saved_curriculum:
            return
        try:
            await self._learners.run(save_curriculum, self.settings.checkpoint_dir, state)
        except OSError as exc:
            logger.warning("curriculum lessons not saved: %s", exc)
        else:
            self._saved_curriculum = state


def _games(block: ChunkBlock) -> list[Game]:
    """The games that chunks of the block end (those with an outcome)."""
    seats = zip(block.episode_id, block.agent_id, block.outcome, block.weights_seq_no)
    return [Game(episode_id, seat, outcome, version) for episode_id, seat, outcome, version in seats if outcome is not None]


def _log_failure(call: Future[None]) -> None:
    if not call.cancelled() and (exc := call.exception()) is not None:
        logger.error("the learners could not take new hyperparameters: %r", exc)
