"""The learner on Ray: the gateway's TrainingService in one async actor.

Front-ends (remote_service.py) number their own clients and tell the learner of them;
experience arrives in batches; every new version is put in Ray's object store once
(`next_state` hands out its reference), and each front-end builds its SET_STATE replies
from it. The barrier is the service's own: it sees every client of every front-end.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import ray

from app.cluster.calls import Call
from app.cluster.packed_chunks import PackedChunks
from app.settings.config import Settings
from app.settings.logs import configure_logging
from app.training.module_configs import ConfigRefused
from app.training.registry import ClientInfo
from app.training.service import LocalTrainingService
from app.training.status import TrainingStatus
from rllink.errors import ProtocolError

log = logging.getLogger("app.cluster")

TURN_TIMEOUT_S = 10.0  # how long a call waits for an earlier one that may never come


@dataclasses.dataclass(frozen=True)
class LearnerStatus(TrainingStatus):
    """What a front-end's REST API shows of the whole gateway (the service's TrainingStatus
    and its metrics), and when it holds its clients; refreshed often."""

    metrics: Any  # TrainingMetrics
    must_wait: bool
    room_env_steps: float  # what the fullest module may still take before its clients are held
    incarnation: str  # the learner actor's life: a new one means it restarted


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
        self.service = LocalTrainingService(settings)
        self._clients: dict[int, ClientInfo] = {}
        self._started: asyncio.Task | None = None
        self._new_version: asyncio.Event | None = None
        self._state_refs: dict[int, ray.ObjectRef] = {}
        self.incarnation = uuid.uuid4().hex  # new when Ray restarts the actor: front-ends then say hello again
        self._epochs: dict[int, int] = {}  # front-end -> the numbering of its calls (from its last hello)
        self._lives: dict[int, int] = {}  # front-end -> its lives (actors) this learner has seen
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
    # 0, 1, 2, ... after each `hello` (a numbering, `epoch`, per hello), and each call of
    # the current numbering runs only after the one before it. Calls of another numbering
    # (sent before a restart of the learner or of the front-end: which of them ran is not
    # known) run at once; a front-end says hello again when it sees the learner restarted.

    async def hello(self, frontend: int, epoch: int) -> tuple[str, int]:
        """A front-end (re)starting its numbering `epoch` at 0. Returns this learner's
        incarnation and the front-end's life (counted at each epoch 1: a new actor), from
        which it numbers its clients, so that a new life's ids are not a dead life's."""
        await self._ready()
        self._release(frontend)
        self._epochs[frontend] = epoch
        self._next_call[frontend] = 0
        if epoch == 1:
            self._lives[frontend] = self._lives.get(frontend, 0) + 1
        return self.incarnation, self._lives.get(frontend, 1)

    def _release(self, frontend: int) -> None:
        """Let every call of the front-end that waits for its turn go ahead (its numbering is over)."""
        for key in [key for key in self._turns if key[0] == frontend]:
            self._turns.pop(key).set()

    @contextlib.asynccontextmanager
    async def _in_order(self, call: Call) -> AsyncIterator[None]:
        """Run the body after the front-end's calls numbered before `call` (if it is of the
        current numbering), then let the next one go."""
        await self._ready()
        ordered = self._epochs.get(call.frontend) == call.epoch
        if ordered and call.seq > self._next_call[call.frontend]:
            event = self._turns[(call.frontend, call.seq)] = asyncio.Event()
            try:
                await asyncio.wait_for(event.wait(), TURN_TIMEOUT_S)
            except TimeoutError:  # a call before it never came: go on without it
                self._turns.pop((call.frontend, call.seq), None)
                log.warning("front-end %d: call %d ran without calls %d..%d, which never came",
                            call.frontend, call.seq, self._next_call.get(call.frontend, 0), call.seq - 1)
            ordered = self._epochs.get(call.frontend) == call.epoch  # a hello meanwhile ends the numbering
        try:
            yield
        finally:
            if ordered:
                following = self._next_call[call.frontend] = max(self._next_call[call.frontend], call.seq + 1)
                if (event := self._turns.pop((call.frontend, following), None)) is not None:
                    event.set()

    async def connect(self, call: Call, client: ClientInfo) -> None:
        async with self._in_order(call):
            self._client(client)

    async def disconnect(self, call: Call, client_id: int) -> None:
        async with self._in_order(call):
            client = self._clients.pop(client_id, None)
            if client is not None:
                self.service.disconnect(client)

    async def start_sampling(self, call: Call, client: ClientInfo) -> None:
        async with self._in_order(call):
            self.service.start_sampling(self._client(client))

    async def ingest(self, call: Call, packed: PackedChunks) -> None:
        """Experience from one front-end: (client, chunks, sampling) in arrival order, packed
        (app/cluster/packed_chunks.py; unpacked, the chunks' arrays are the learner's own,
        not views of Ray's object store that would stay pinned while they wait to train)."""
        async with self._in_order(call):
            for client, chunks, sampling in packed.unpack():
                try:
                    self.service.ingest(self._client(client), chunks, sampling)
                except ProtocolError as exc:  # the front-end checks what the service does: a bug of ours
                    log.error("front-end %d: client %d's chunks refused by the learner, not trained on: %s",
                              call.frontend, client.id, exc.message)

    async def stop_training(self, call: Call, module_id: str, reason: str) -> None:
        async with self._in_order(call):
            self.service.stop_training(module_id, reason)

    async def note_state_sent(self, call: Call, client: ClientInfo, weights_seq_no: int) -> None:
        async with self._in_order(call):
            self._client(client).last_weights_seq_no_sent = weights_seq_no

    async def wait_for_training(self, call: Call, client: ClientInfo) -> int:
        """Wait until the client's data so far (every call before this one) is trained; the version that holds it."""
        async with self._in_order(call):
            waiting = asyncio.ensure_future(self.service.wait_for_training(self._client(client)))
        return (await waiting).weights_seq_no

    async def wait_for_room(self, call: Call, client: ClientInfo) -> None:
        """Wait until the modules the client feeds have room (every call before this one counted)."""
        async with self._in_order(call):
            waiting = asyncio.ensure_future(self.service.wait_for_room(self._client(client)))
        await waiting

    async def keep_only(self, call: Call, client_ids: list[int]) -> None:
        """The front-end's clients now: forget any other of its clients (one whose disconnect
        was lost with a learner that died would hold the barrier for ever)."""
        async with self._in_order(call):
            live = set(client_ids)
            gone = [cid for cid, client in self._clients.items() if client.frontend == call.frontend and cid not in live]
            for client_id in gone:
                self.service.disconnect(self._clients.pop(client_id))
            if gone:
                log.warning("front-end %d: forgot clients %s, gone from it without a word to the learner", call.frontend, gone)

    async def disconnect_frontend(self, frontend: int) -> int:
        """Forget every client of a front-end that died (their pending data stays) and its
        numbering: calls of its past life run at once, its next life says hello."""
        await self._ready()
        gone = [client_id for client_id, client in self._clients.items() if client.frontend == frontend]
        for client_id in gone:
            self.service.disconnect(self._clients.pop(client_id))
        self._epochs.pop(frontend, None)
        self._next_call.pop(frontend, None)
        self._release(frontend)
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

    async def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> dict | Exception:
        """PATCH /api/config on a front-end: the changes made as a single gateway makes them;
        the modules' algorithms and hyperparameters now (TrainingStatus.configs), or the ConfigRefused to raise."""
        await self._ready()
        try:
            self.service.change_config(changes)
        except ConfigRefused as exc:
            return exc
        status = self.service.status()
        return status.configs

    def pid(self) -> int:
        """The actor's process id (benchmarks read its CPU time from /proc)."""
        return os.getpid()

    async def status(self) -> LearnerStatus:
        await self._ready()
        service = self.service
        status = service.status()
        return LearnerStatus(
            **{field.name: getattr(status, field.name) for field in dataclasses.fields(status)},
            metrics=service.metrics,
            must_wait=service.must_wait(),
            room_env_steps=service.room_env_steps,
            incarnation=self.incarnation,
        )
