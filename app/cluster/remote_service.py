"""A front-end's stand-in for the TrainingService, which lives in the learner actor.

It answers what the transports and the REST API ask the service (connect, ingest, wait
for training, the current version, metrics) so that a front-end is an ordinary gateway:
- clients are numbered here (front-end i in life l, as the learner counts its lives, from
  i * 10**9 + (l - 1) % 1000 * 10**6 + 1) and announced, each with its slot (which member
  of a population it plays: front-ends start spread over the members);
- experience is pre-batched: queued and sent in one call once FLUSH_ENV_STEPS env steps
  are queued or the oldest has waited FLUSH_AFTER_S (several clients' chunks together),
  and at once before any other call about a client; every call is numbered, and the
  learner runs them in that order, so a wait for training comes after the experience it
  waits for;
- versions are followed with `next_state` (one Ray object per version, fetched once here);
- metrics, clients, the batch's state and the hyperparameters are a status the learner
  sends every STATUS_INTERVAL_S and after every version, held as it came (`status()`):
  REST shows the whole gateway, slightly late; each time, the front-end tells the learner
  which clients it has (`keep_only`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ray

from app.cluster.calls import Call
from app.cluster.packed_chunks import Sent, pack
from app.experience import blocks_of
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.training.interface import LearnerUnreachable
from app.training.metrics import MAX_OPEN_EPISODES, TrainingMetrics
from app.training.policy_store import KEPT_VERSIONS, PolicySetState
from app.training.recurrent_states import RecurrentEpisodes
from app.training.registry import ClientInfo, lowest_free_slot
from app.training.status import TrainingStatus

log = logging.getLogger("app.cluster")

STATUS_INTERVAL_S = 0.5
LEARNER_RETRY_S = 0.5  # between tries to reach a learner that is restarting
CONFIG_CHANGE_TIMEOUT_S = 30.0  # PATCH /api/config waits this long for the learner
CLIENT_IDS_PER_FRONTEND = 10**9
CLIENT_IDS_PER_LIFE = 10**6  # a front-end's lives number their clients in blocks of their own
# Pre-batching: each call to the learner actor costs it CPU whatever it carries (Ray's task,
# fetching its argument, the ordering), and its chunks a few us each (packed_chunks.py).
# bench/scale_out.py, 500-step chunks, the learner's CPU per million env steps: 0.33-0.43 s
# with a call per turn of the event loop (a message, mostly), 0.19 with a call per 20 ms,
# 0.14 per 50 ms, against a front-end's 0.8-1.0; on a slower day, 0.17 / 0.17 per 50 ms and
# 0.12 / 0.12 per 100 ms (front-ends 1.5-1.6). Nobody waits on the window: every request
# that waits for the learner sends the queue first.
FLUSH_AFTER_S = 0.1
FLUSH_ENV_STEPS = 131072


class RemoteTrainingService:
    """The TrainingService's interface, over the learner actor `learner`."""

    def __init__(self, settings: Settings, learner: Any, frontend: int) -> None:
        self.settings = settings
        self.policies = PolicySet.from_settings(settings)
        self.frontend = frontend
        self._learner = learner
        self._ids: Iterator[int] | None = None  # from the life the learner gives at the first hello
        self._here: dict[int, ClientInfo] = {}
        self._epoch = 0  # the numbering of this front-end's calls (a new one per hello)
        self._calls = itertools.count()
        self._incarnation: str | None = None  # the learner's life this front-end said hello to
        self._outbox: Sent = []
        self._outbox_steps = 0  # env steps queued in it
        self._flush: asyncio.TimerHandle | None = None  # sends the outbox when its window ends
        self._states: OrderedDict[int, PolicySetState] = OrderedDict()
        self._version_arrived = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._step_listeners: list[Callable[[], None]] = []
        self._recurrent_episodes = RecurrentEpisodes(self.policies, MAX_OPEN_EPISODES)
        self._status: Any = None  # LearnerStatus (app/cluster/learner_actor.py)
        self._sent_since_status = 0  # env steps ingested here since the status was asked for
        self.metrics = TrainingMetrics(list(self.policies.modules))
        self.adoption = None  # on Ray, the spaces a game declares are checked only (docs/ray.md)
        # Front-ends number slots apart, each from its share of the longest slot cycle (a
        # population's size, an exploiter's `every`): with 2 front-ends and 4 members, 0 and 2.
        self.first_slot = frontend * self.policies.slot_cycle // settings.frontends

    # -- Lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Say hello (this front-end's calls number from 0), fetch the current version and
        status, then follow both."""
        await self._say_hello()
        await self._fetch_state(-1)
        await self._refresh_status()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow_versions()), loop.create_task(self._poll_status())]

    async def stop(self) -> None:
        self._send_outbox()
        for task in self._tasks:
            task.cancel()

    async def _fetch_state(self, after: int) -> int:
        version, (ref,) = await self._learner.next_state.remote(after)
        state: PolicySetState = await ref
        self._states[version] = state
        self._states.move_to_end(version)  # the newest last, even if a restarted learner is back at an older one
        while len(self._states) > KEPT_VERSIONS:
            self._states.popitem(last=False)
        self._version_arrived.set()
        self._version_arrived = asyncio.Event()
        return version

    async def _follow_versions(self) -> None:
        while True:
            try:
                await self._fetch_state(self.current_state().weights_seq_no)
                await self._refresh_status()
                for listener in self._step_listeners:
                    listener()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the learner restarting: try again shortly
                log.warning("front-end %d: cannot reach the learner for new versions (%s); retrying", self.frontend, type(exc).__name__)
                await asyncio.sleep(LEARNER_RETRY_S)

    async def _poll_status(self) -> None:
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            self._learner.keep_only.remote(self._call(), list(self._here))  # no ghosts after a learner restart
            try:
                await self._refresh_status()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("front-end %d: no status from the learner (%s)", self.frontend, type(exc).__name__)

    async def _say_hello(self) -> None:
        """Number this front-end's calls from 0 in a new numbering, with the learner's consent."""
        self._epoch += 1
        self._calls = itertools.count()
        self._incarnation, life = await self._learner.hello.remote(self.frontend, self._epoch)
        if self._ids is None:
            lives_per_frontend = CLIENT_IDS_PER_FRONTEND // CLIENT_IDS_PER_LIFE
            first = self.frontend * CLIENT_IDS_PER_FRONTEND + (life - 1) % lives_per_frontend * CLIENT_IDS_PER_LIFE
            self._ids = itertools.count(first + 1)

    async def _refresh_status(self) -> None:
        sent, self._sent_since_status = self._sent_since_status, 0
        try:
            self._status = await self._learner.status.remote()
        except BaseException:
            self._sent_since_status += sent
            raise
        self.metrics = self._status.metrics
        if self._status.incarnation != self._incarnation:  # the learner restarted: which calls ran is unknown
            log.warning("front-end %d: the learner restarted; numbering calls afresh", self.frontend)
            await self._say_hello()

    def add_step_listener(self, listener: Callable[[], None]) -> None:
        """Called on this front-end's event loop when a new version has arrived."""
        self._step_listeners.append(listener)

    # -- Clients and experience ----------------------------------------------------------

    def _call(self) -> Call:
        """This front-end's next call: the learner runs them in this order."""
        return Call(self.frontend, self._epoch, next(self._calls))

    def connect(self, transport: str, peer: str) -> ClientInfo:
        """Number a new client and tell the learner. Its slot is the lowest free one from this
        front-end's first (`first_slot`), so that one client on each front-end plays a
        different member of a population."""
        slot = lowest_free_slot((other.slot for other in self._here.values()), self.first_slot)
        client = ClientInfo(id=next(self._ids), transport=transport, peer=peer, frontend=self.frontend, slot=slot)
        self._here[client.id] = client
        self._learner.connect.remote(self._call(), client)
        return client

    def disconnect(self, client: ClientInfo) -> None:
        self._here.pop(client.id, None)
        self._recurrent_episodes.forget(client.id)
        self._send_outbox()  # its last chunks first
        self._learner.disconnect.remote(self._call(), client.id)

    def start_sampling(self, client: ClientInfo) -> None:
        client.sampling = True
        self._send_outbox()
        self._learner.start_sampling.remote(self._call(), client)

    def ingest(self, client: ClientInfo, episodes: Sequence[EpisodeChunk], sampling: bool = True) -> None:
        client.sampling = client.sampling or sampling
        blocks = blocks_of(episodes, self.policies.default_module_id)
        self._recurrent_episodes.check_and_record(client.id, blocks)  # refused here, before any is queued
        received = sum(block.num_steps for block in blocks)
        steps = received - sum(block.evaluation_steps for block in blocks)  # evaluation steps never wait for room
        client.env_steps_sent += steps
        self._sent_since_status += steps
        self._outbox.append((client, blocks, sampling))
        self._outbox_steps += received
        if self._outbox_steps >= FLUSH_ENV_STEPS:
            self._send_outbox()
        elif self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(FLUSH_AFTER_S, self._send_outbox)

    def stop_training(self, module_id: str, reason: str) -> None:
        self._send_outbox()  # the experience before it still trains
        self._learner.stop_training.remote(self._call(), module_id, reason)

    def _send_outbox(self) -> None:
        """One call with everything queued (call it before any other call about a client, so
        that the learner has the client's experience first)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._outbox:
            batch, self._outbox, self._outbox_steps = self._outbox, [], 0
            self._learner.ingest.remote(self._call(), pack(batch))

    def must_wait(self) -> bool:
        return self._status is None or self._status.must_wait

    async def wait_for_training(self, client: ClientInfo) -> PolicySetState:
        """Wait until the learner has trained on the client's data so far, and this
        front-end has that version. If the learner dies meanwhile, the data it held is
        gone: wait for it to come back, then answer with the version it restored."""
        self._send_outbox()
        while True:
            try:
                version = await self._learner.wait_for_training.remote(self._call(), client)
                break
            except ray.exceptions.RayActorError:
                log.warning("front-end %d: the learner died while client #%d waited; waiting for it", self.frontend, client.id)
                await asyncio.sleep(LEARNER_RETRY_S)
        while self.current_state().weights_seq_no < version:
            await self._version_arrived.wait()
        return self.current_state()

    async def wait_for_room(self, client: ClientInfo) -> None:
        """Hold the client while the learner has no room: once this front-end has sent more
        since the last status than the room it showed, ask the learner (after this client's
        experience) to answer when there is room."""
        if self._status is not None and self._sent_since_status <= self._status.room_env_steps:
            return
        self._send_outbox()
        try:
            await self._learner.wait_for_room.remote(self._call(), client)
        except ray.exceptions.RayActorError:
            log.warning("front-end %d: the learner died while client #%d waited for room", self.frontend, client.id)
        await self._refresh_status()

    def current_state(self) -> PolicySetState:
        return next(reversed(self._states.values()))

    def note_state_sent(self, client: ClientInfo, state: PolicySetState) -> None:
        client.last_weights_seq_no_sent = state.weights_seq_no
        self._send_outbox()  # the chunks before it are dated by the version sent before
        self._learner.note_state_sent.remote(self._call(), client, state.weights_seq_no)

    def kept_state(self, weights_seq_no: int) -> PolicySetState | None:
        return self._states.get(weights_seq_no)

    @property
    def kept_versions(self) -> list[int]:
        return list(self._states)

    @property
    def clients_here(self) -> list[ClientInfo]:
        """This front-end's clients, now (its connection limits count them)."""
        return list(self._here.values())

    def status(self) -> TrainingStatus:
        """The learner's, as of its last status (every STATUS_INTERVAL_S and after every
        version): every front-end's clients, the whole gateway's progress."""
        return self._status

    # -- Hyperparameters -------------------------------------------------------------------

    def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Made by the learner, which checks them as a single gateway does (ConfigRefused);
        this front-end's status shows them at once, the others' within STATUS_INTERVAL_S.
        Blocking: PATCH /api/config runs in a worker thread."""
        try:
            result = ray.get(self._learner.change_config.remote(changes), timeout=CONFIG_CHANGE_TIMEOUT_S)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as exc:
            raise LearnerUnreachable(f"the learner did not answer ({type(exc).__name__}); try again") from None
        if isinstance(result, Exception):
            raise result
        self._status = dataclasses.replace(self._status, configs=result)

