"""The RLlink protocol without I/O: bytes in, events out; messages in, bytes out.

`FrameDecoder` (the wire format's, rllink.framing) cuts a byte stream into frame bodies,
`decode_body`/`encode_body` handle JSON and msgpack (large episode bodies straight into
arrays), and `Session` ties them to the message schemas for one connection. Both
transports (TCP bridge, WebSocket) feed the same `Session`.

Error policy: a frame whose header is corrupt or too large closes the connection
(the stream can no longer be trusted or is not worth reading); a well-framed frame
that fails to decode or validate gets an `ERROR` reply and the connection stays open.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast, final

import msgpack
import orjson
from pydantic import BaseModel, ValidationError

from app.sansio.chunk_columns import ChunkColumns, loads_episodes
from app.sansio.json_arrays import loads_with_arrays
from app.schemas import (
    ARRAY_FIELDS,
    NO_REPLY_TYPES,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    Action,
    Episodes,
    Error,
    GetAction,
    Ping,
    Request,
    SetState,
    request_adapter,
)
from app.settings.policies import PolicySet
from rllink.errors import ErrorCode, ProtocolError
from rllink.framing import Encoding, FrameDecoder, detect_encoding, encode_frame, loads_body

log = logging.getLogger("app.sansio.protocol")


def error_reply(error: ProtocolError) -> Error:
    """The `ERROR` message that tells the client of `error`."""
    return Error(code=error.code.value, message=error.message, details=error.details)


# -- Bodies ------------------------------------------------------------------------

# JSON bodies from this size on (episode chunks, in practice) are parsed with their
# number lists as numpy arrays; below it, orjson alone is quicker.
ARRAYS_MIN_BODY_BYTES = 2048


def carries_episodes(body: bytes) -> bool:
    """Whether a JSON body may hold episode chunks (an `episodes` key), the only bodies the
    array parser and the decode workers speed up: for others, such as a thin client's
    batch of observations, orjson alone is an order of magnitude quicker."""
    return b'"episodes"' in body


def decode_body(body: bytes, columns: bool = True) -> tuple[dict[str, Any], Encoding]:
    """Decode a frame body into a dict, raising a non-fatal `ProtocolError` if it is not one.

    In large JSON bodies, the number lists of episode chunks (`ARRAY_FIELDS`) may be
    numpy arrays already (see `app.sansio.json_arrays`); the schemas take either. Several chunks
    may come as one `ChunkColumns` instead (`app.sansio.chunk_columns`), unless `columns` is false.
    """
    if (
        len(body) >= ARRAYS_MIN_BODY_BYTES
        and detect_encoding(body) is Encoding.JSON  # first: a msgpack body is never searched
        and carries_episodes(body)
        and (data := (loads_episodes if columns else loads_with_arrays)(body, ARRAY_FIELDS)) is not None
    ):
        return data, Encoding.JSON
    return loads_body(body)


def encode_body(message: BaseModel, encoding: Encoding) -> bytes:
    """Serialise a message; JSON is formatted like RLlib's own (`json.dumps` defaults)."""
    data = message.model_dump(mode="json", exclude_none=True)
    if encoding is Encoding.MSGPACK:
        packed: bytes = msgpack.packb(data)  # msgpack has no type hints
        return packed
    return json.dumps(data).encode()


def encode_message(message: BaseModel, encoding: Encoding = Encoding.JSON) -> bytes:
    """A whole frame for a message."""
    return encode_frame(encode_body(message, encoding))


def compact_action_body(message: Action) -> bytes:
    """ACTION as compact JSON, the reply to a thin client's every step: a twentieth of
    `encode_body`'s time (RLlib's own clients, whose spacing it keeps, never get one)."""
    data: dict[str, Any] = {"type": "ACTION"}
    if message.actions is None:
        data["episode_id"] = message.episode_id
        data["action"] = message.action
    else:
        data["actions"] = message.actions
    data["weights_seq_no"] = message.weights_seq_no
    return orjson.dumps(data)


MAX_CACHED_SET_STATES = 64  # encoded SET_STATE frames kept per encoding, of one version (one per population member)


class ReplyEncoder:
    """Encodes replies, once for those that many clients get alike.

    A message with no field but its type (PONG) always encodes the same, and SET_STATE
    for the latest version carries the same ~24 kB payload to every client (encoding it
    costs ~0.1 ms, per client, on the event loop). One encoder serves every session of
    a gateway; it keeps one frame per (message class, encoding). ACTION, in JSON, is
    written compactly (`compact_action_body`).
    """

    def __init__(self) -> None:
        # By encoding, the frames of one version (one per population member a client plays): version, files, frame.
        self._set_state: dict[Encoding, list[tuple[int, str, dict[str, str], bytes]]] = {}
        self._fieldless: dict[tuple[type[BaseModel], Encoding], bytes] = {}
        self._has_fields: set[type[BaseModel]] = set()

    def encode(self, message: BaseModel, encoding: Encoding) -> bytes:
        # type(message) in each test, not once in a variable: as quick (CPython specializes
        # type(x)), and mypy narrows `message` only on the call itself.
        if type(message) is Action and encoding is Encoding.JSON:
            return encode_frame(compact_action_body(message))
        if type(message) is SetState:
            frames = self._set_state.setdefault(encoding, [])
            for version, onnx_file, onnx_files, encoded_before in frames:
                if (
                    version == message.weights_seq_no
                    and (onnx_file is message.onnx_file or onnx_file == message.onnx_file)
                    and onnx_files == message.onnx_files  # the same strings: compared by identity
                ):
                    return encoded_before
            encoded = encode_message(message, encoding)
            if len(frames) >= MAX_CACHED_SET_STATES or any(version != message.weights_seq_no for version, *_ in frames):
                frames.clear()  # another version's: the frames of one version are kept
            frames.append((message.weights_seq_no, message.onnx_file, message.onnx_files, encoded))
            return encoded
        cls = type(message)
        if cls in self._has_fields:
            return encode_message(message, encoding)
        if (frame := self._fieldless.get((cls, encoding))) is None:
            if set(cls.model_fields) != {"type"}:
                self._has_fields.add(cls)
                return encode_message(message, encoding)
            frame = self._fieldless[(cls, encoding)] = encode_message(message, encoding)
        return frame


# -- Session -----------------------------------------------------------------------


@dataclass(frozen=True)
class RequestReceived:
    """A valid request, the encoding its reply must use, and its place in the stream."""

    request: Request
    encoding: Encoding
    seq: int = 0

    @property
    def expects_reply(self) -> bool:
        """Whether handling it produces a reply: EPISODES and the thin clients' LOG_ACTION,
        LOG_RETURNS and END_EPISODE get none (unless refused)."""
        return self.request.type not in NO_REPLY_TYPES


@final  # for mypy: where `type(item) is FrameRejected` is false, the item is not one
@dataclass(frozen=True)
class FrameRejected:
    """A frame refused with an error; its reply is `error_reply(error)`."""

    error: ProtocolError
    encoding: Encoding
    seq: int = 0
    expects_reply = True

    @property
    def fatal(self) -> bool:
        return self.error.fatal


Event = RequestReceived | FrameRejected


def _describe_validation_error(message_type: str, exc: ValidationError) -> ProtocolError:
    """Turn pydantic's errors into one line a person can act on, plus structured details."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = ".".join(str(part) for part in err["loc"][1:])  # drop the union tag
        problems.append({"field": loc or "(message)", "problem": err["msg"].removeprefix("Value error, ")})
    summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems[:5])
    if len(problems) > 5:
        summary += f"; and {len(problems) - 5} more"
    return ProtocolError(ErrorCode.INVALID_MESSAGE, f"invalid {message_type}: {summary}", details=problems)


UNAUTHORIZED_FIRST_MESSAGE = "auth is on: the first message must be a PING with the gateway's token in 'token'"


class Session:
    """One connection's whole protocol state, without I/O: bytes in -> events, replies -> bytes.

    It cuts and validates frames, runs the auth handshake, knows which requests get a
    reply and releases replies strictly in the order of the requests, whatever order
    they are produced in; after a fatal error it reads nothing more. The caller:

        for item in session.receive_frames(data):     # bodies, in stream order
            event = session.parse(item) if type(item) is bytes else item
            ... handle event.request, then:
            for answered, frame in session.send(event, reply):
                write(frame)                          # answered says in reply to what

    `parse` must be called in the order `receive_frames` returned the bodies (it numbers
    the events); `receive_data` does both steps at once.
    """

    def __init__(
        self,
        policies: PolicySet,
        max_frame_bytes: int,
        max_episodes_per_message: int | None = None,
        max_steps_per_message: int | None = None,
        max_actions_per_message: int | None = None,
        *,
        check_token: Callable[[str | None], bool] | None = None,
        encoder: ReplyEncoder | None = None,
    ) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        self._policies = policies
        # JSON bodies say so: the chunk validators then skip a check (see schemas).
        self._contexts = {
            Encoding.JSON: {"policies": policies, "from_json": True},
            Encoding.MSGPACK: {"policies": policies},
        }
        self._max_episodes = max_episodes_per_message
        self._max_steps = max_steps_per_message
        self._max_actions = max_actions_per_message
        self._check_token = check_token
        self.authenticated = check_token is None  # else the first request must be a PING with the token
        self._encoder = encoder or ReplyEncoder()
        self._next_seq = 0
        self._unanswered: collections.deque[int] = collections.deque()  # seqs owed a reply, oldest first
        self._ready: dict[int, tuple[Event, bytes | None]] = {}  # replies produced ahead of an older one (None: owed none)
        self._broken = False  # the stream lost its frame boundaries: nothing more is cut
        self._ended = False  # a fatal error was admitted: nothing after it is read

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished frame."""
        return self._decoder.buffered

    @property
    def closed(self) -> bool:
        """A fatal error was found: the connection must end once its reply is out."""
        return self._broken or self._ended

    @property
    def unanswered(self) -> int:
        """Events read whose turn has not passed yet (reply not released, or not handled)."""
        return len(self._unanswered)

    # -- Bytes in ---------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed received bytes; return one event per complete frame (the last may be fatal)."""
        events = (self.parse(frame) for frame in self.receive_frames(data))
        return [event for event in events if event is not None]

    def receive_frames(self, data: bytes) -> list[bytes | FrameRejected]:
        """Feed received bytes; return the body of each complete frame and last, if the
        stream broke, the fatal rejection that ends it: each for `parse`, in this order."""
        if self.closed:
            return []
        self._decoder.feed(data)
        frames: list[bytes | FrameRejected] = []
        try:
            frames.extend(self._decoder.frames())
        except ProtocolError as exc:
            self._broken = True
            frames.append(FrameRejected(exc, Encoding.JSON))
        return frames

    def parse(self, frame: bytes | FrameRejected, decoded: dict[str, Any] | None = None) -> Event | None:
        """The event for one item of `receive_frames`, in its turn (None once a fatal error
        ended the session); `decoded` is what `app.sansio.chunk_columns.loads_episodes` made of a
        body elsewhere (a decode worker), if it could."""
        if self._ended:
            return None
        seq = self._next_seq
        self._next_seq += 1
        if type(frame) is FrameRejected:  # the stream broke here
            return self._admit(dataclasses.replace(frame, seq=seq))
        encoding = detect_encoding(frame)
        try:
            data, encoding = (decoded, encoding) if decoded is not None else decode_body(frame)
            if type(data.get("episodes")) is ChunkColumns:
                data = self._with_chunks(data, frame)
            event: Event = RequestReceived(self._validate(data, encoding), encoding, seq)
        except ProtocolError as exc:
            event = FrameRejected(exc, encoding, seq)
        except Exception as exc:  # a bug of ours must cost the client one reply, not its connection
            log.exception("failed to parse a frame")
            error = ProtocolError(ErrorCode.INTERNAL_ERROR, f"the gateway failed to read this frame ({type(exc).__name__})")
            event = FrameRejected(error, encoding, seq)
        return self._admit(self._authenticate(event))

    def reject(self, error: ProtocolError) -> FrameRejected | None:
        """An event for an error the transport found (a timeout), answered in its turn
        (None once a fatal error ended the session)."""
        if self._ended:
            return None
        seq = self._next_seq
        self._next_seq += 1
        rejected = FrameRejected(error, Encoding.JSON, seq)
        self._admit(rejected)
        return rejected

    def _with_chunks(self, data: dict[str, Any], frame: bytes) -> dict[str, Any]:
        """The message with its columns as checked blocks (app.experience); if they may be invalid, its body
        decoded again chunk by chunk, for EpisodeChunk's validators to say what is wrong."""
        blocks = data["episodes"].blocks(self._policies)
        if blocks is None:
            return decode_body(frame, columns=False)[0]
        return {**data, "episodes": blocks}

    def _validate(self, data: dict[str, Any], encoding: Encoding) -> Request:
        message_type = data.get("type")
        if not isinstance(message_type, str) or message_type not in REQUEST_TYPES:
            raise self._unknown_type(message_type)
        try:
            request: Request = request_adapter.validate_python(data, context=self._contexts[encoding])
        except ValidationError as exc:
            raise _describe_validation_error(message_type, exc) from None
        if isinstance(request, Episodes):
            self._check_size(request)
        elif isinstance(request, GetAction) and request.batch is not None and self._max_actions is not None:
            if len(request.batch) > self._max_actions:
                raise ProtocolError(
                    ErrorCode.INVALID_MESSAGE,
                    f"GET_ACTION asks for {len(request.batch)} actions at once; "
                    f"the limit is {self._max_actions} (max_actions_per_message)",
                )
        return request

    def _authenticate(self, event: Event) -> Event:
        """Before auth, only a PING with the right token passes; anything else is fatal."""
        if self.authenticated:
            return event
        if isinstance(event, RequestReceived) and isinstance(event.request, Ping):
            token = event.request.token
            check_token = cast("Callable[[str | None], bool]", self._check_token)  # set while not authenticated
            if check_token(token.get_secret_value() if token else None):
                self.authenticated = True
                return event
        error = ProtocolError(ErrorCode.UNAUTHORIZED, UNAUTHORIZED_FIRST_MESSAGE, fatal=True)
        return FrameRejected(error, event.encoding, event.seq)

    def _admit(self, event: Event) -> Event:
        """Give the event its turn in the replies (one that owes none may still get an
        ERROR, in that turn); a fatal one ends the stream."""
        self._unanswered.append(event.seq)
        if type(event) is FrameRejected and event.fatal:
            self._ended = True
        return event

    def _check_size(self, request: Episodes) -> None:
        if self._max_episodes is not None and len(request.episodes) > self._max_episodes:
            raise ProtocolError(
                ErrorCode.INVALID_MESSAGE,
                f"{request.type} holds {len(request.episodes)} episode chunks; "
                f"the limit is {self._max_episodes} (max_episodes_per_message)",
            )
        if self._max_steps is not None and request.num_steps > self._max_steps:
            raise ProtocolError(
                ErrorCode.INVALID_MESSAGE,
                f"{request.type} holds {request.num_steps} env steps; "
                f"the limit is {self._max_steps} (max_steps_per_message)",
            )

    @staticmethod
    def _unknown_type(message_type: Any) -> ProtocolError:
        expected = sorted(REQUEST_TYPES)
        if message_type is None:
            text = "message has no 'type' field"
        elif isinstance(message_type, str) and message_type in RESPONSE_TYPES:
            text = f"{message_type} is a server message; clients send one of {', '.join(expected)}"
        else:
            text = f"unknown message type {message_type!r}; expected one of {', '.join(expected)}"
        return ProtocolError(ErrorCode.UNKNOWN_TYPE, text, details={"expected": expected})

    # -- Bytes out --------------------------------------------------------------------

    def send(self, event: Event, reply: BaseModel | None = None) -> list[tuple[Event, bytes]]:
        """Answer `event`: a rejected frame with its error, a request with `reply`, or with
        nothing (None) if it owes none (EPISODES; an ERROR is a reply it may still get).
        Return every reply now due, oldest first, with the event it answers.

        Each event has its turn: a reply produced before an older request is answered
        (or handled, if it owes nothing) waits here for it.
        """
        if isinstance(event, FrameRejected):
            reply = error_reply(event.error)
        elif reply is None and event.expects_reply:
            raise ValueError(f"{event.request.type} needs a reply")
        self._ready[event.seq] = (event, None if reply is None else self._encoder.encode(reply, event.encoding))
        due = []
        while self._unanswered and self._unanswered[0] in self._ready:
            answered, frame = self._ready.pop(self._unanswered.popleft())
            if frame is not None:
                due.append((answered, frame))
        return due

    def reply(self, message: BaseModel, encoding: Encoding) -> bytes:
        """The frame of a message in the client's encoding (outside the request order)."""
        return self._encoder.encode(message, encoding)
