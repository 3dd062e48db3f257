"""`python -m app --ray-address ADDR --frontends N`: the learner and N front-ends on Ray.

The learner actor asks Ray for `learner_num_gpus` GPUs (so it lands on a GPU node);
front-ends are spread over the cluster's nodes. On one host front-end i listens on
`http_port + i` and `tcp_port + i` (ports 0 stay 0: each picks a free one).
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field
from typing import Any

import ray

from app.cluster.frontend_actor import FrontendActor
from app.cluster.learner_actor import LearnerActor
from app.gateway import StartupError
from app.settings.config import Settings
from app.settings.runs import RunExists, prepare_run
from app.training.checkpoints import with_adopted_spaces

log = logging.getLogger("app.cluster")

LEARNER_NAME = "rllink-learner"
WATCH_INTERVAL_S = 0.5


@dataclass
class Cluster:
    """The actors of one gateway on Ray, where each front-end listens, and a watcher
    thread that starts again a front-end Ray has restarted after a death."""

    learner: Any
    frontends: list[Any]
    addresses: list[dict[str, Any]]  # per front-end: frontend, host, http_port, tcp_port
    serving: list[ray.ObjectRef]  # each front-end's `serve` call: it ends when the front-end dies
    _stopping: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None

    def watch(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name="front-end watcher", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            ended, _ = ray.wait(list(self.serving), num_returns=1, timeout=WATCH_INTERVAL_S)
            for ref in ended:
                if self._stopping.is_set():
                    return
                index = self.serving.index(ref)
                try:
                    ray.get(ref)
                    log.warning("front-end %d stopped serving; starting it again", index)
                except ray.exceptions.RayError as exc:
                    log.warning("front-end %d died (%s); Ray restarts it", index, type(exc).__name__)
                try:
                    self.restart_frontend(index)
                except ray.exceptions.RayError as exc:  # e.g. the learner is restarting too: next round
                    log.warning("front-end %d could not start again yet (%s); retrying", index, type(exc).__name__)
                    self._stopping.wait(WATCH_INTERVAL_S)

    def restart_frontend(self, index: int) -> None:
        """Its clients are forgotten (their pending data stays in the batch); the actor Ray
        restarted binds its ports again and serves; clients reconnect."""
        gone = ray.get(self.learner.disconnect_frontend.remote(index))
        self.addresses[index] = ray.get(self.frontends[index].start.remote())
        self.serving[index] = self.frontends[index].serve.remote()
        log.info("front-end %d serves again at %s (%d clients of its last life forgotten)", index, self.addresses[index], gone)

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=WATCH_INTERVAL_S * 4)  # it may be waiting on a restart
        # Each front-end stops serving first (its clients' last chunks reach the learner,
        # its event files are closed), then goes.
        try:
            ray.get([actor.stop.remote() for actor in self.frontends], timeout=30)
            ray.wait(self.serving, num_returns=len(self.serving), timeout=30)
        except ray.exceptions.RayError as exc:  # a front-end dead or restarting: it has nothing to close
            log.warning("a front-end could not stop cleanly (%s)", type(exc).__name__)
        for actor in self.frontends:
            ray.kill(actor, no_restart=True)
        ray.get(self.learner.stop.remote())
        ray.kill(self.learner, no_restart=True)


def frontend_settings(settings: Settings, index: int) -> Settings:
    """Front-end `index`'s settings: its own ports on a shared host, no Ray of its own;
    front-end 0 alone writes the TensorBoard event files."""
    shift = lambda port: port + index if port else 0  # noqa: E731
    # The run's folder is prepared once, by `run`; a front-end restarted later must not find it "existing".
    update = {"http_port": shift(settings.http_port), "tcp_port": shift(settings.tcp_port), "ray_address": None, "run_id": None}
    if index > 0:
        update["tensorboard_dir"] = None
    return settings.model_copy(update=update)


def start_cluster(settings: Settings) -> Cluster:
    """Start the learner (restored from its checkpoints) and the front-ends; Ray must be initialised."""
    settings = with_adopted_spaces(settings)  # a local start's, before this one: the learner is built with them
    learner = (
        ray.remote(LearnerActor)
        .options(
            name=LEARNER_NAME, num_cpus=1, num_gpus=settings.learner_num_gpus, max_concurrency=10_000,
            max_restarts=-1, max_task_retries=-1,  # back from its checkpoint after a death; calls wait for it
        )
        .remote(settings)
    )
    # The front-ends' processes start (and import the app) while the learner restores; they
    # bind and serve only once it has started.
    frontends = [
        ray.remote(FrontendActor)
        .options(num_cpus=0, scheduling_strategy="SPREAD", max_concurrency=10_000, max_restarts=-1)
        .remote(frontend_settings(settings, i), learner, i)
        for i in range(settings.frontends)
    ]
    version = ray.get(learner.start.remote())
    addresses = ray.get([frontend.start.remote() for frontend in frontends])
    serving = [frontend.serve.remote() for frontend in frontends]
    log.info("on Ray: the learner at weights_seq_no %d, %d front-ends: %s", version, len(frontends), addresses)
    cluster = Cluster(learner, frontends, addresses, serving)
    cluster.watch()
    return cluster


def run(settings: Settings) -> None:
    """Connect to (or start) the Ray cluster, start the gateway's actors, serve until interrupted."""
    try:
        prepare_run(settings)  # the run's folder and settings snapshot, once, before any actor
    except (RunExists, OSError) as exc:
        raise StartupError(str(exc)) from None
    # "local" starts a new cluster here (never joins one found running), "auto" joins the running one.
    ray.init(address=settings.ray_address, include_dashboard=False, logging_level=settings.log_level.upper())
    signal.signal(signal.SIGTERM, _interrupt)  # stop as on Ctrl-C (Ray's own handler only dumps stacks)
    cluster = start_cluster(settings)
    try:
        threading.Event().wait()  # until interrupted; the watcher keeps the front-ends up
    finally:
        log.info("stopping the front-ends and the learner (saving its checkpoints)")
        cluster.stop()
        ray.shutdown()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
