"""The learner on Ray: the gateway's TrainingService in one async actor.

Front-ends (remote_service.py) number their own clients and tell the learner of them;
experience arrives in batches; every new version is put in Ray's object store once
(`next_state` hands out its reference), and each front-end builds its SET_STATE replies
from it. The barrier is the service's own: it sees every client of every front-end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import ray

from app.config import PPOConfig, Settings
from app.schemas import EpisodeChunk
from app.training.registry import ClientInfo
from app.training.service import TrainingService

log = logging.getLogger("app.cluster")


@dataclasses.dataclass
class LearnerStatus:
    """What a front-end's REST API shows of the whole gateway, refreshed often."""

    metrics: Any  # TrainingMetrics
    leagues: dict[str, Any]
    clients: list[ClientInfo]
    pending_env_steps: int
    training_env_steps: int
    training_in_progress: bool
    must_wait: bool
    ppo_configs: dict[str, PPOConfig]
    sac_configs: dict[str, Any]
    force_on_policy: bool
    device: str


class LearnerActor:
    """Owns the TrainingService; every method runs on the actor's event loop."""

    def __init__(self, settings: Settings) -> None:
        logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.service = TrainingService(settings)
        self._clients: dict[int, ClientInfo] = {}
        self._new_version: asyncio.Event | None = None
        self._state_refs: dict[int, ray.ObjectRef] = {}

    async def start(self) -> int:
        """Restore the checkpoints and publish the current version; returns its number."""
        self._new_version = asyncio.Event()
        await self.service.start()
        self.service.add_step_listener(self._on_step)
        version = self.service.current_state().weights_seq_no
        log.info("learner actor ready at weights_seq_no %d", version)
        return version

    async def stop(self) -> None:
        await self.service.stop()

    def _on_step(self) -> None:
        self._new_version.set()
        self._new_version = asyncio.Event()

    # -- Clients and experience (calls from one front-end arrive in order) -------------

    def connect(self, client: ClientInfo) -> None:
        self._clients[client.id] = client
        self.service.add_client(client)

    def disconnect(self, client_id: int) -> None:
        client = self._clients.pop(client_id, None)
        if client is not None:
            self.service.disconnect(client)

    def disconnect_frontend(self, frontend: int) -> int:
        """Forget every client of a front-end that died; their pending data stays."""
        gone = [client_id for client_id, client in self._clients.items() if client.frontend == frontend]
        for client_id in gone:
            self.disconnect(client_id)
        return len(gone)

    def start_sampling(self, client_id: int) -> None:
        if (client := self._clients.get(client_id)) is not None:
            self.service.start_sampling(client)

    def ingest(self, batch: list[tuple[int, list[EpisodeChunk], bool]]) -> None:
        """Experience from one front-end: (client id, chunks, sampling) in arrival order."""
        for client_id, chunks, sampling in batch:
            if (client := self._clients.get(client_id)) is not None:
                self.service.ingest(client, chunks, sampling)

    def note_state_sent(self, client_id: int, weights_seq_no: int) -> None:
        if (client := self._clients.get(client_id)) is not None:
            client.last_weights_seq_no_sent = weights_seq_no

    async def wait_for_training(self, client_id: int) -> int:
        """Wait until the client's data so far is trained; the version that holds it."""
        client = self._clients.get(client_id)
        if client is None:
            return self.service.current_state().weights_seq_no
        return (await self.service.wait_for_training(client)).weights_seq_no

    # -- Versions and status -------------------------------------------------------------

    async def next_state(self, after: int) -> tuple[int, list[ray.ObjectRef]]:
        """The first version newer than `after` (waiting for it): its number and, in a list
        so that Ray passes the reference itself, the PolicySetState put once in the store."""
        while self.service.current_state().weights_seq_no <= after:
            await self._new_version.wait()
        state = self.service.current_state()
        ref = self._state_refs.get(state.weights_seq_no)
        if ref is None:
            ref = self._state_refs[state.weights_seq_no] = ray.put(state)
            for old in sorted(self._state_refs)[:-4]:  # the store keeps the few versions still being fetched
                del self._state_refs[old]
        return state.weights_seq_no, [ref]

    def status(self) -> LearnerStatus:
        service = self.service
        modules = service.policies.trainable
        return LearnerStatus(
            metrics=service.metrics,
            leagues=service.leagues,
            clients=service.clients,
            pending_env_steps=service.pending_env_steps,
            training_env_steps=service.training_env_steps,
            training_in_progress=service.training_in_progress,
            must_wait=service.must_wait(),
            ppo_configs={m.module_id: service.module_ppo_config(m.module_id) for m in modules},
            sac_configs={m.module_id: service.module_sac_config(m.module_id) for m in modules},
            force_on_policy=service.force_on_policy,
            device=str(service.device),
        )

    def set_ppo_config(self, cfg: PPOConfig, module_id: str | None) -> None:
        self.service.set_ppo_config(cfg, module_id)
