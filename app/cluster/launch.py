"""`python -m app --ray-address ADDR --frontends N`: the learner and N front-ends on Ray.

The learner actor asks Ray for `learner_num_gpus` GPUs (so it lands on a GPU node);
front-ends are spread over the cluster's nodes. On one host front-end i listens on
`http_port + i` and `tcp_port + i` (ports 0 stay 0: each picks a free one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ray

from app.cluster.frontend_actor import FrontendActor
from app.cluster.learner_actor import LearnerActor
from app.config import Settings

log = logging.getLogger("app.cluster")

LEARNER_NAME = "rllink-learner"


@dataclass
class Cluster:
    """The actors of one gateway on Ray, and where each front-end listens."""

    learner: Any
    frontends: list[Any]
    addresses: list[dict[str, Any]]  # per front-end: frontend, host, http_port, tcp_port
    serving: list[ray.ObjectRef]  # each front-end's `serve` call: done when it stops

    def stop(self) -> None:
        for actor in self.frontends:
            ray.kill(actor)
        ray.get(self.learner.stop.remote())
        ray.kill(self.learner)


def frontend_settings(settings: Settings, index: int) -> Settings:
    """Front-end `index`'s settings: its own ports on a shared host, no Ray of its own;
    front-end 0 alone keeps the run's folder and writes the TensorBoard event files."""
    shift = lambda port: port + index if port else 0  # noqa: E731
    update = {"http_port": shift(settings.http_port), "tcp_port": shift(settings.tcp_port), "ray_address": None}
    if index > 0:
        update.update(run_id=None, tensorboard_dir=None)
    return settings.model_copy(update=update)


def start_cluster(settings: Settings) -> Cluster:
    """Start the learner (restored from its checkpoints) and the front-ends; Ray must be initialised."""
    learner = (
        ray.remote(LearnerActor)
        .options(name=LEARNER_NAME, num_cpus=1, num_gpus=settings.learner_num_gpus, max_concurrency=10_000)
        .remote(settings)
    )
    version = ray.get(learner.start.remote())
    frontends = [
        ray.remote(FrontendActor)
        .options(num_cpus=0, scheduling_strategy="SPREAD", max_concurrency=10_000)
        .remote(frontend_settings(settings, i), learner, i)
        for i in range(settings.frontends)
    ]
    addresses = ray.get([frontend.start.remote() for frontend in frontends])
    serving = [frontend.serve.remote() for frontend in frontends]
    log.info("on Ray: the learner at weights_seq_no %d, %d front-ends: %s", version, len(frontends), addresses)
    return Cluster(learner, frontends, addresses, serving)


def run(settings: Settings) -> None:
    """Connect to (or start) the Ray cluster, start the gateway's actors, serve until interrupted."""
    address = None if settings.ray_address == "local" else settings.ray_address
    ray.init(address=address, include_dashboard=False, logging_level=settings.log_level.upper())
    cluster = start_cluster(settings)
    try:
        ray.get(cluster.serving)
    finally:
        cluster.stop()
