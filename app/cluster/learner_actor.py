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
import os
from typing import Any

import numpy as np
import ray

from app.config import PPOConfig, Settings
from app.log_redaction import configure_logging
from app.schemas import ARRAY_FIELDS, EpisodeChunk
from app.training.registry import ClientInfo
from app.training.service import TrainingService

log = logging.getLogger("app.cluster")

TURN_TIMEOUT_S = 10.0  # how long a call waits for an earlier one that may have died with a learner


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
    """Owns the TrainingService; every method runs on the actor's event loop.

    Calls about clients and experience run in each front-end's order (see `_turn`). It
    starts (restores its checkpoints, publishes its version) on the first call, so that an
    actor Ray restarts after a death comes back at its last checkpointed version by
    itself. Calls name their client in full: a restarted learner learns of the clients of
    every front-end again from the calls that concern them.
    """

    def __init__(self, settings: Settings) -> None:
        configure_logging(settings.log_level)  # tokens redacted here too
        self.service = TrainingService(settings)
        self._clients: dict[int, ClientInfo] = {}
        self._started: asyncio.Task | None = None
        self._new_version: asyncio.Event | None = None
        self._state_refs: dict[int, ray.ObjectRef] = {}
        self._next_call: dict[int, int] = {}  # front-end -> the number of its next call to run
        self._turns: dict[tuple[int, int], asyncio.Event] = {}  # (front-end, number) -> its go-ahead

    async def _ready(self) -> None:
        """Start once; callers queue behind the start in the order they came."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        await self._started

    async def _start(self) -> None:
        self._new_version = asyncio.Event()
        await self.service.start()
        self.service.add_step_listener(self._on_step)
        log.info("learner actor ready at weights_seq_no %d", self.service.current_state().weights_seq_no)

    async def start(self) -> int:
        """Start now (rather than at the first call); the current version."""
        await self._ready()
        return self.service.current_state().weights_seq_no

    async def stop(self) -> None:
        if self._started is not None:
            await self._ready()
            await self.service.stop()

    def _on_step(self) -> None:
        self._new_version.set()
        self._new_version = asyncio.Event()

    def _client(self, client: ClientInfo) -> ClientInfo:
        """The learner's record of a front-end's client, made at its first mention."""
        known = self._clients.get(client.id)
        if known is None:
            known = self._clients[client.id] = client
            self.service.add_client(client)
        return known

    # -- Clients and experience, in each front-end's order ------------------------------
    #
    # Ray may start an async actor's calls out of order (a large ingest waits for its
    # arguments to arrive; a retried call comes late), so each front-end numbers its calls
    # 0, 1, 2, ... (`seq`), from its `hello`, and each runs only after the one before it. A
    # learner restarted meanwhile starts at the first number it sees of each front-end.

    async def hello(self, frontend: int) -> None:
        """A front-end starting (or starting again): its calls number from 0."""
        await self._ready()
        self._next_call[frontend] = 0

    async def _turn(self, frontend: int, seq: int) -> None:
        await self._ready()
        expected = self._next_call.setdefault(frontend, seq)
        if seq > expected:
            event = self._turns[(frontend, seq)] = asyncio.Event()
            try:
                await asyncio.wait_for(event.wait(), TURN_TIMEOUT_S)
            except asyncio.TimeoutError:  # the calls before it were lost (sent to a learner that died)
                self._turns.pop((frontend, seq), None)
                log.warning("front-end %d: call %d ran without calls %d..%d (lost with a learner)", frontend, seq, self._next_call.get(frontend, 0), seq - 1)

    def _turn_done(self, frontend: int, seq: int) -> None:
        following = self._next_call[frontend] = max(self._next_call.get(frontend, 0), seq + 1)
        if (event := self._turns.pop((frontend, following), None)) is not None:
            event.set()

    async def connect(self, frontend: int, seq: int, client: ClientInfo) -> None:
        await self._turn(frontend, seq)
        self._client(client)
        self._turn_done(frontend, seq)

    async def disconnect(self, frontend: int, seq: int, client_id: int) -> None:
        await self._turn(frontend, seq)
        client = self._clients.pop(client_id, None)
        if client is not None:
            self.service.disconnect(client)
        self._turn_done(frontend, seq)

    async def start_sampling(self, frontend: int, seq: int, client: ClientInfo) -> None:
        await self._turn(frontend, seq)
        self.service.start_sampling(self._client(client))
        self._turn_done(frontend, seq)

    async def ingest(self, frontend: int, seq: int, batch: list[tuple[ClientInfo, list[EpisodeChunk], bool]]) -> None:
        """Experience from one front-end: (client, chunks, sampling) in arrival order."""
        await self._turn(frontend, seq)
        for client, chunks, sampling in batch:
            self.service.ingest(self._client(client), [_owned(chunk) for chunk in chunks], sampling)
        self._turn_done(frontend, seq)

    async def note_state_sent(self, frontend: int, seq: int, client: ClientInfo, weights_seq_no: int) -> None:
        await self._turn(frontend, seq)
        self._client(client).last_weights_seq_no_sent = weights_seq_no
        self._turn_done(frontend, seq)

    async def wait_for_training(self, frontend: int, seq: int, client: ClientInfo) -> int:
        """Wait until the client's data so far (every call before this one) is trained; the version that holds it."""
        await self._turn(frontend, seq)
        waiting = asyncio.ensure_future(self.service.wait_for_training(self._client(client)))
        self._turn_done(frontend, seq)
        return (await waiting).weights_seq_no

    async def keep_only(self, frontend: int, seq: int, client_ids: list[int]) -> None:
        """The front-end's clients now: forget any other of its clients (one whose disconnect
        was lost with a learner that died would hold the barrier for ever)."""
        await self._turn(frontend, seq)
        live = set(client_ids)
        gone = [client_id for client_id, client in self._clients.items() if client.frontend == frontend and client_id not in live]
        for client_id in gone:
            self.service.disconnect(self._clients.pop(client_id))
        if gone:
            log.warning("front-end %d: forgot clients %s, gone from it without a word to the learner", frontend, gone)
        self._turn_done(frontend, seq)

    async def disconnect_frontend(self, frontend: int) -> int:
        """Forget every client of a front-end that died (their pending data stays) and its
        call numbers: its next life numbers from 0 again."""
        await self._ready()
        gone = [client_id for client_id, client in self._clients.items() if client.frontend == frontend]
        for client_id in gone:
            self.service.disconnect(self._clients.pop(client_id))
        self._next_call.pop(frontend, None)
        for key in [key for key in self._turns if key[0] == frontend]:
            self._turns.pop(key).set()  # calls of the dead life still waiting: let them through
        return len(gone)

    # -- Versions and status -------------------------------------------------------------

    async def next_state(self, after: int) -> tuple[int, list[ray.ObjectRef]]:
        """The first version newer than `after` (waiting for it; a restarted learner's own
        at once, even if older): its number and, in a list so that Ray passes the
        reference itself, the PolicySetState put once in the store."""
        await self._ready()
        while 0 <= after and self.service.current_state().weights_seq_no == after:
            await self._new_version.wait()
        state = self.service.current_state()
        ref = self._state_refs.get(state.weights_seq_no)
        if ref is None:
            ref = self._state_refs[state.weights_seq_no] = ray.put(state)
            for old in sorted(self._state_refs)[:-4]:  # the store keeps the few versions still being fetched
                del self._state_refs[old]
        return state.weights_seq_no, [ref]

    def pid(self) -> int:
        """The actor's process id (benchmarks read its CPU time from /proc)."""
        return os.getpid()

    async def status(self) -> LearnerStatus:
        await self._ready()
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


def _owned(chunk: EpisodeChunk) -> EpisodeChunk:
    """The chunk with arrays of its own: a large batch arrives as read-only views of Ray's
    object store, which would stay pinned there for as long as the chunk waits to train."""
    for name in ARRAY_FIELDS:
        array = getattr(chunk, name)
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            setattr(chunk, name, array.copy())
    return chunk
