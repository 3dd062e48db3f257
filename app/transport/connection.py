"""One client connection, whatever its transport: a pump between the bytes and the application.

A transport adapter (TCP bridge, WebSocket route) calls `serve` with three callables,
`receive`, `send` and `close`. The protocol itself (frames, validation, the auth
handshake, error replies, reply order) is the sans-I/O `Session`'s, and what a request
does is the `Application`'s (app/application/dispatch.py); here, bytes go in, requests
go to the application in the order they arrived, and the replies the session releases
go out. Reading and answering run apart, so a client that waits for
`SET_STATE` is still seen when it disconnects, and one slow client blocks nobody else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.application.dispatch import Application, Reply
from app.sansio.protocol import Event, FrameRejected, RequestReceived, carries_episodes, encode_message, error_reply
from app.schemas import Episodes, EpisodesAndGetState, Error
from app.telemetry.traffic import TrafficStats
from app.transport.decode_workers import DecodeWorkers
from app.transport.read_deadline import ReadDeadline
from rllink.errors import ErrorCode, ProtocolError

log = logging.getLogger("app.transport.connection")

Tag = TypeVar("Tag")  # what the transport needs to answer in kind (the WebSocket opcode)

MAX_QUEUED_EVENTS = 64  # reading pauses beyond this, which pushes back on the client


@dataclass(frozen=True)
class ConnectionContext:
    """What every connection of one gateway shares (the gateway builds it once)."""

    application: Application
    decoders: DecodeWorkers  # worker processes for large JSON bodies
    traffic: TrafficStats
    frame_timeout_s: float  # a started frame must finish within this
    idle_timeout_s: float  # between frames, unless the client awaits a reply


@dataclass(frozen=True)
class _Decoding:
    """A frame body a worker process is decoding; its event comes once it is back."""

    body: bytes
    decoded: asyncio.Future  # of the body's dict, or None: decode it here


class Connection(Generic[Tag]):
    """Serves one client: feeds its bytes to a `Session`, its requests to the service."""

    def __init__(
        self,
        context: ConnectionContext,
        *,
        transport: str,
        peer: str,
        send: Callable[[bytes, Tag], Awaitable[None]],
        authenticated: bool,
    ) -> None:
        self._application = context.application
        self._decoders = context.decoders
        self._traffic = context.traffic
        self._send = send
        self._session = self._application.new_session(authenticated)
        self._tags: dict[int, Tag] = {}  # of each reply waiting for its turn: the opcode to answer in
        self._queue: asyncio.Queue[tuple[Event | _Decoding, Tag] | None] = asyncio.Queue(MAX_QUEUED_EVENTS)
        self._busy = False  # the responder is working on a request (e.g. waiting for SET_STATE)
        self._decoding: _Decoding | None = None  # the body the responder waits on a worker for
        self.client = self._application.connect(transport, peer)
        self.name = f"{transport}:{peer}#{self.client.id}"
        self._traffic.connections_total[transport] += 1
        self.read_deadline = ReadDeadline()  # of the read under way (serve's)
        self.responder = asyncio.create_task(self._answer_requests(), name=f"responder {self.name}")
        self.responder.add_done_callback(self._stop_reading)
        log.info("%s connected", self.name)

    @property
    def closing(self) -> bool:
        """True once the connection must stop reading (fatal error or responder gone)."""
        return self._session.closed or self.responder.done()

    def _stop_reading(self, _responder: asyncio.Task) -> None:
        """The responder ended (after a fatal error): end the read under way now."""
        self.read_deadline.expire_now()

    @property
    def idle(self) -> bool:
        """Nothing half-received, queued or being answered."""
        return not self._busy and self._decoding is None and self._queue.empty() and self._session.buffered == 0

    @property
    def mid_frame(self) -> bool:
        return self._session.buffered > 0

    async def data_received(self, data: bytes, tag: Tag) -> None:
        """Feed bytes from the client; waits while too many requests are pending.

        A large JSON body goes to a decode worker and is handled, in its turn, by the
        responder. Anything else is handled right here if nothing is queued or being
        answered (same order, one task hop less), else queued behind the rest.
        """
        self._traffic.bytes_received += len(data)
        for frame in self._session.receive_frames(data):
            if (
                type(frame) is bytes
                and carries_episodes(frame)
                and (decoded := await self._decoders.submit(frame)) is not None
            ):
                await self._queue.put((_Decoding(frame, decoded), tag))
                continue
            if (event := self._session.parse(frame)) is None:
                break  # a fatal error ended the session
            if self._answerable_at_once(event):
                await self._answer(event, tag)
            else:
                await self._queue.put((event, tag))

    def _answerable_at_once(self, event: Event) -> bool:
        return (
            not self._busy
            and self._decoding is None
            and self._queue.empty()
            and not (isinstance(event, RequestReceived) and isinstance(event.request, EpisodesAndGetState))
        )

    async def reject(self, error: ProtocolError, tag: Tag) -> None:
        """A fatal error found by the transport (a timeout): sent after the replies already due."""
        if (event := self._session.reject(error)) is not None:
            await self._queue.put((event, tag))

    async def finish(self) -> None:
        """Answer every request received, then stop (after a fatal error)."""
        if not self.responder.done():
            await self._queue.put(None)
        await asyncio.wait([self.responder])

    async def close(self, reason: str) -> None:
        """The client is gone or done: stop answering, keep the experience it sent.

        Episodes still queued are ingested (they arrived whole; nothing acknowledged or
        received is lost); a pending `SET_STATE` wait is cancelled, which the training
        service treats as the client leaving.
        """
        self.read_deadline.close()
        self.responder.cancel()
        await asyncio.wait([self.responder])
        if not self.responder.cancelled() and (exc := self.responder.exception()) is not None:
            log.debug("%s: reply failed: %r", self.name, exc)
        unanswered = [self._decoding] if self._decoding is not None else []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                unanswered.append(item[0])
        for event in unanswered:
            if isinstance(event, _Decoding):
                event = self._parse_now(event)
            if isinstance(event, RequestReceived) and isinstance(event.request, Episodes):
                self._application.keep(self.client, event.request.episodes)
        self._application.disconnect(self.client)
        log.info("%s disconnected (%s); %d env steps received", self.name, reason, self.client.env_steps_sent)

    async def _answer_requests(self) -> None:
        while (item := await self._queue.get()) is not None:
            event, tag = item
            if isinstance(event, _Decoding):
                self._decoding = event  # close() ingests it if we are cancelled while it decodes
                decoded = await event.decoded
                self._decoding = None
                if (event := self._session.parse(event.body, decoded)) is None:
                    return
            if not await self._answer(event, tag):
                return

    def _parse_now(self, decoding: _Decoding) -> Event | None:
        """The event of a body sent to a worker: from its result if back, else decoded here."""
        future = decoding.decoded
        decoded = future.result() if future.done() and not future.cancelled() else None
        return self._session.parse(decoding.body, decoded)

    async def _answer(self, event: Event, tag: Tag) -> bool:
        """Handle one event and send the replies it releases; False after a fatal error."""
        self._busy = True
        try:
            reply = await self._reply_to(event)
            if reply is not None or isinstance(event, FrameRejected):
                self._tags[event.seq] = tag  # the opcode its reply goes out in, once its turn comes
            for answered, frame in self._session.send(event, reply):
                self._traffic.bytes_sent += len(frame)
                await self._send(frame, self._tags.pop(answered.seq))
        finally:
            self._busy = False
        return not (isinstance(event, FrameRejected) and event.fatal)

    async def _reply_to(self, event: Event) -> Reply | Error | None:
        """The reply to a request (None for a rejected frame: the session words its error)."""
        if isinstance(event, FrameRejected):
            log.warning("%s: %s: %s", self.name, event.error.code.value, event.error.message)
            self._traffic.errors[event.error.code.value] += 1
            return None
        self._traffic.frames_received[event.request.type] += 1
        try:
            return await self._application.handle(self.client, event.request)
        except ProtocolError as error:  # a request the service refuses (a thin client's unknown episode, ...)
            episode_id = getattr(event.request, "episode_id", None)
            if episode_id is not None and error.details is None:  # which of its episodes (LOG_* get no other reply)
                error.details = {"episode_id": episode_id}
            log.info("%s: %s refused: %s: %s", self.name, event.request.type, error.code.value, error.message)
            self._traffic.errors[error.code.value] += 1
            return error_reply(error)
        except Exception:
            log.exception("%s: failed to handle %s", self.name, event.request.type)
            self._traffic.errors[ErrorCode.INTERNAL_ERROR.value] += 1
            return error_reply(ProtocolError(ErrorCode.INTERNAL_ERROR, f"the gateway failed to handle {event.request.type}"))


async def refuse(
    traffic: TrafficStats, error: ProtocolError, send: Callable[[bytes], Awaitable[None]], close: Callable[[], Awaitable[None]]
) -> None:
    """Answer a connection refused before it had a session with its ERROR, then close it."""
    traffic.errors[error.code.value] += 1
    try:
        await send(encode_message(error_reply(error)))
    finally:
        await close()


async def serve(
    context: ConnectionContext,
    *,
    transport: str,
    peer: str,
    receive: Callable[[], Awaitable[tuple[bytes, Tag] | None]],
    send: Callable[[bytes, Tag], Awaitable[None]],
    close: Callable[[], Awaitable[None]],
    default_tag: Tag,
    authenticated: bool,
) -> None:
    """Serve one client until it leaves, idles out or hits a fatal error; both transports use it.

    `receive` returns the next bytes read (with their tag) or None at end of stream.
    `authenticated` is False when the client must still present the token in a PING.
    """
    if (error := context.application.admission_error(transport)) is not None:
        log.warning("%s:%s refused: %s", transport, peer, error.message)
        await refuse(context.traffic, error, lambda frame: send(frame, default_tag), close)
        return

    connection: Connection[Tag] = Connection(
        context, transport=transport, peer=peer, send=send, authenticated=authenticated
    )
    reason = "closed by client"
    try:
        while not connection.closing:
            received = await _receive_within_limits(connection, receive, context)
            if isinstance(received, ProtocolError):
                await connection.reject(received, default_tag)
                break
            if received is None:
                break
            await connection.data_received(*received)
        if connection.closing:
            reason = "protocol error"
            await connection.finish()  # the ERROR frame goes out before the socket closes
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        reason = f"connection lost: {exc or type(exc).__name__}"
    finally:
        await connection.close(reason)
        await close()


async def _receive_within_limits(
    connection: Connection[Tag],
    receive: Callable[[], Awaitable[tuple[bytes, Tag] | None]],
    context: ConnectionContext,
) -> tuple[bytes, Tag] | None | ProtocolError:
    """The next read; None at end of stream or once the connection must close; or the
    timeout error that ends the connection.

    A started frame must finish within `frame_timeout_s`; between frames, a client may
    stay silent for `idle_timeout_s`, or as long as it likes while it awaits a reply.
    """
    while True:
        mid_frame = connection.mid_frame
        timeout = context.frame_timeout_s if mid_frame else context.idle_timeout_s
        deadline = connection.read_deadline
        deadline.start(timeout)
        try:
            return await receive()
        except asyncio.CancelledError:
            if not deadline.expired or asyncio.current_task().uncancel() > 0:
                raise  # (also) cancelled from outside: the gateway is stopping
        finally:
            deadline.finish()
        if connection.closing:  # the responder sent a fatal error (e.g. unauthorized)
            return None
        if mid_frame:
            return ProtocolError(
                ErrorCode.FRAME_TIMEOUT,
                f"a frame was started but not finished within {context.frame_timeout_s:g} s",
                fatal=True,
            )
        if connection.idle:
            return ProtocolError(
                ErrorCode.IDLE_TIMEOUT, f"nothing received for {context.idle_timeout_s:g} s", fatal=True
            )
