"""One client connection, whatever its transport: protocol session + training service.

A transport adapter (TCP bridge, WebSocket route) calls `data_received` with what it
reads and supplies `send`/`close` callables; this class answers requests strictly in
the order they arrived. Reading and answering run apart, so a client that waits for
`SET_STATE` is still seen when it disconnects, and one slow client blocks nobody else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from app.config import Settings
from app.protocol import ErrorCode, Event, FrameRejected, ProtocolError, RequestReceived, Session
from app.schemas import (
    Episodes,
    EpisodesAndGetState,
    GetConfig,
    GetState,
    Ping,
    Pong,
    SetConfig,
    SetState,
    SpacesContext,
)
from app.traffic import TrafficStats
from app.training.service import PolicyState, TrainingService

log = logging.getLogger("app.connection")

Tag = TypeVar("Tag")  # what the transport needs to answer in kind (the WebSocket opcode)

MAX_QUEUED_EVENTS = 64  # reading pauses beyond this, which pushes back on the client


def spaces_context(settings: Settings) -> SpacesContext:
    return SpacesContext(settings.observation_space, settings.action_space)


class Connection(Generic[Tag]):
    """Serves one client: feeds its bytes to a `Session`, answers through `send`."""

    def __init__(
        self,
        *,
        settings: Settings,
        service: TrainingService,
        transport: str,
        peer: str,
        traffic: TrafficStats,
        send: Callable[[bytes, Tag], Awaitable[None]],
    ) -> None:
        self._settings = settings
        self._service = service
        self._traffic = traffic
        self._send = send
        self._session = Session(spaces_context(settings), settings.max_frame_bytes)
        self._queue: asyncio.Queue[tuple[Event, Tag] | None] = asyncio.Queue(MAX_QUEUED_EVENTS)
        self.client = service.connect(transport, peer)
        self.name = f"{transport}:{peer}#{self.client.id}"
        traffic.connections_total[transport] += 1
        self._responder = asyncio.create_task(self._answer_requests(), name=f"responder {self.name}")
        log.info("%s connected", self.name)

    @property
    def closing(self) -> bool:
        """True once the connection must stop reading (fatal error or responder gone)."""
        return self._session.closed or self._responder.done()

    async def data_received(self, data: bytes, tag: Tag) -> None:
        """Feed bytes from the client; waits while too many requests are pending."""
        self._traffic.bytes_received += len(data)
        for event in self._session.receive_data(data):
            await self._queue.put((event, tag))

    async def finish(self) -> None:
        """Answer every request received, then stop (after a fatal error)."""
        if not self._responder.done():
            await self._queue.put(None)
        await asyncio.wait([self._responder])

    async def close(self, reason: str) -> None:
        """The client is gone or done: stop answering, keep the experience it sent.

        Episodes still queued are ingested (they arrived whole; nothing acknowledged or
        received is lost); a pending `SET_STATE` wait is cancelled, which the training
        service treats as the client leaving.
        """
        self._responder.cancel()
        await asyncio.wait([self._responder])
        if not self._responder.cancelled() and (exc := self._responder.exception()) is not None:
            log.debug("%s: reply failed: %r", self.name, exc)
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and isinstance(item[0], RequestReceived):
                if isinstance(request := item[0].request, Episodes):
                    self._service.ingest(self.client, request.episodes)
        self._service.disconnect(self.client)
        log.info("%s disconnected (%s); %d env steps received", self.name, reason, self.client.env_steps_sent)

    async def _answer_requests(self) -> None:
        while (item := await self._queue.get()) is not None:
            event, tag = item
            reply = await self._reply_to(event)
            if reply is not None:
                self._traffic.bytes_sent += len(reply)
                await self._send(reply, tag)
            if isinstance(event, FrameRejected) and event.fatal:
                return

    async def _reply_to(self, event: Event) -> bytes | None:
        if isinstance(event, FrameRejected):
            log.warning("%s: %s: %s", self.name, event.error.code.value, event.error.message)
            self._traffic.errors[event.error.code.value] += 1
            return self._session.reply(event.error.to_message(), event.encoding)
        self._traffic.frames_received[event.request.type] += 1
        try:
            reply = await self._handle(event.request)
        except Exception:
            log.exception("%s: failed to handle %s", self.name, event.request.type)
            error = ProtocolError(ErrorCode.INTERNAL_ERROR, f"the gateway failed to handle {event.request.type}")
            self._traffic.errors[error.code.value] += 1
            return self._session.reply(error.to_message(), event.encoding)
        return None if reply is None else self._session.reply(reply, event.encoding)

    async def _handle(self, request) -> Pong | SetConfig | SetState | None:
        match request:
            case Ping():
                return Pong()
            case GetConfig():
                return self._set_config()
            case GetState():
                return self._set_state(self._service.current_state())
            case EpisodesAndGetState():
                self._service.ingest(self.client, request.episodes)
                if self._settings.force_on_policy:
                    return self._set_state(await self._service.wait_for_training(self.client))
                return self._set_state(self._service.current_state())
            case Episodes():
                self._service.ingest(self.client, request.episodes)
                return None
        raise AssertionError(f"unhandled request {request!r}")  # pragma: no cover

    def _set_config(self) -> SetConfig:
        settings = self._settings
        return SetConfig(
            env_steps_per_sample=settings.env_steps_per_sample,
            force_on_policy=settings.force_on_policy,
            observation_space=settings.observation_space,
            action_space=settings.action_space,
            onnx_input_name=settings.onnx_input_name,
            onnx_output_names=self._service.onnx_output_names,
        )

    def _set_state(self, state: PolicyState) -> SetState:
        self._service.note_state_sent(self.client, state)
        return SetState(onnx_file=state.onnx_gzip_b64, weights_seq_no=state.weights_seq_no)


async def serve(
    connection: Connection[Tag],
    receive: Callable[[], Awaitable[tuple[bytes, Tag] | None]],
    close: Callable[[], Awaitable[None]],
) -> None:
    """Run a connection until the client leaves or a fatal error; used by both transports.

    `receive` returns the next bytes read (with their tag) or None at end of stream.
    """
    reason = "closed by client"
    try:
        while not connection.closing:
            received = await receive()
            if received is None:
                break
            await connection.data_received(*received)
        else:
            reason = "protocol error"
            await connection.finish()  # the ERROR frame goes out before the socket closes
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        reason = f"connection lost: {exc or type(exc).__name__}"
    finally:
        await connection.close(reason)
        await close()
