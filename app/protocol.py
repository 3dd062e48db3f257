"""The RLlink protocol without I/O: bytes in, events out; messages in, bytes out.

`FrameDecoder` cuts a byte stream into frame bodies, `decode_body`/`encode_body`
handle JSON and msgpack, and `Session` ties them to the message schemas for one
connection. Both transports (TCP bridge, WebSocket) feed the same `Session`.

Error policy: a frame whose header is corrupt or too large closes the connection
(the stream can no longer be trusted or is not worth reading); a well-framed frame
that fails to decode or validate gets an `ERROR` reply and the connection stays open.
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterator

import msgpack
import orjson
from pydantic import BaseModel, ValidationError

from app.json_arrays import loads_with_arrays
from app.schemas import (
    ARRAY_FIELDS,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    Episodes,
    Error,
    Request,
    SetState,
    SpacesContext,
    request_adapter,
)

log = logging.getLogger("app.protocol")

HEADER_SIZE = 8
MAX_BODY_SIZE = 10**HEADER_SIZE - 1


class ErrorCode(str, enum.Enum):
    """Stable codes of the `ERROR` message; the README lists what each means."""

    BAD_HEADER = "bad_header"  # fatal: the 8-byte header is not ASCII digits
    FRAME_TOO_LARGE = "frame_too_large"  # fatal: the header announces more than max_frame_bytes
    BAD_JSON = "bad_json"  # the body is not a JSON object
    BAD_MSGPACK = "bad_msgpack"  # the body looks like msgpack but does not decode to a map
    UNKNOWN_TYPE = "unknown_type"  # missing `type`, or not a request type
    INVALID_MESSAGE = "invalid_message"  # a known request whose fields are wrong, or over a limit
    INTERNAL_ERROR = "internal_error"  # the gateway failed; the request was not processed
    # Raised by the connection layer, not the session; all fatal.
    UNAUTHORIZED = "unauthorized"  # auth is on and the client did not present the token
    TOO_MANY_CONNECTIONS = "too_many_connections"  # a connection limit is reached
    FRAME_TIMEOUT = "frame_timeout"  # a started frame was not finished within frame_timeout_s
    IDLE_TIMEOUT = "idle_timeout"  # nothing sent nor awaited for idle_timeout_s


class Encoding(enum.Enum):
    """How a frame body is encoded; replies use the encoding of the request."""

    JSON = "json"
    MSGPACK = "msgpack"


class ProtocolError(Exception):
    """A frame the gateway refuses; `fatal` errors close the connection."""

    def __init__(self, code: ErrorCode, message: str, *, fatal: bool = False, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fatal = fatal
        self.details = details

    def to_message(self) -> Error:
        return Error(code=self.code.value, message=self.message, details=self.details)


# -- Framing -----------------------------------------------------------------------


def encode_frame(body: bytes) -> bytes:
    """Prefix a body with its 8-digit length header."""
    if len(body) > MAX_BODY_SIZE:
        raise ValueError(f"body of {len(body)} bytes does not fit an 8-digit header")
    return b"%08d" % len(body) + body


class FrameDecoder:
    """Incremental frame decoder: feed any slices of the stream, iterate whole bodies out."""

    def __init__(self, max_frame_bytes: int = MAX_BODY_SIZE) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._pos = 0  # start of the unread part of _buffer
        self._body_size: int | None = None  # size of the frame being read, once its header is in

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete (0 between frames)."""
        return len(self._buffer) - self._pos

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    def frames(self) -> Iterator[bytes]:
        """Yield the body of every complete frame fed so far.

        Raises a fatal `ProtocolError` on a bad or oversized header, after yielding the
        frames before it; the decoder is unusable afterwards, as the stream has lost its
        frame boundaries.
        """
        buffer = self._buffer
        while True:
            if self._body_size is None:
                if len(buffer) - self._pos < HEADER_SIZE:
                    return
                self._body_size = self._parse_header(bytes(buffer[self._pos : self._pos + HEADER_SIZE]))
                self._pos += HEADER_SIZE
            end = self._pos + self._body_size
            if len(buffer) < end:
                return
            with memoryview(buffer) as view:  # one copy, not two as bytes(buffer[a:b])
                body = view[self._pos : end].tobytes()
            self._pos = end
            self._body_size = None
            yield body

    def _parse_header(self, header: bytes) -> int:
        if not (header.isascii() and header.isdigit()):
            raise ProtocolError(
                ErrorCode.BAD_HEADER,
                f"a frame must start with 8 ASCII digits giving the body length, got {header!r}",
                fatal=True,
            )
        size = int(header)
        if size > self.max_frame_bytes:
            raise ProtocolError(
                ErrorCode.FRAME_TOO_LARGE,
                f"frame body of {size} bytes exceeds the limit of {self.max_frame_bytes} bytes",
                fatal=True,
                details={"size": size, "max_frame_bytes": self.max_frame_bytes},
            )
        return size


# -- Bodies ------------------------------------------------------------------------

_MSGPACK_MAP_FIRST_BYTES = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


def detect_encoding(body: bytes) -> Encoding:
    """msgpack if the body starts like a msgpack map, JSON otherwise."""
    return Encoding.MSGPACK if body[:1] and body[0] in _MSGPACK_MAP_FIRST_BYTES else Encoding.JSON


# JSON bodies from this size on (episode chunks, in practice) are parsed with their
# number lists as numpy arrays; below it, orjson alone is quicker.
ARRAYS_MIN_BODY_BYTES = 2048


def decode_body(body: bytes) -> tuple[dict[str, Any], Encoding]:
    """Decode a frame body into a dict, raising a non-fatal `ProtocolError` if it is not one.

    In large JSON bodies, the number lists of episode chunks (`ARRAY_FIELDS`) may be
    numpy arrays already (see `app.json_arrays`); the schemas take either.
    """
    encoding = detect_encoding(body)
    if encoding is Encoding.MSGPACK:
        try:
            data = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types
            raise ProtocolError(ErrorCode.BAD_MSGPACK, f"body is not valid msgpack: {exc}") from None
        if not isinstance(data, dict):  # pragma: no cover - the first byte promised a map
            raise ProtocolError(ErrorCode.BAD_MSGPACK, "body must be a msgpack map")
        return data, encoding
    if len(body) >= ARRAYS_MIN_BODY_BYTES and (data := loads_with_arrays(body, ARRAY_FIELDS)) is not None:
        return data, encoding
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_JSON, f"body must be a JSON object, got {type(data).__name__}")
    return data, encoding


def encode_body(message: BaseModel, encoding: Encoding) -> bytes:
    """Serialise a message; JSON is formatted like RLlib's own (`json.dumps` defaults)."""
    data = message.model_dump(mode="json", exclude_none=True)
    if encoding is Encoding.MSGPACK:
        return msgpack.packb(data)
    return json.dumps(data).encode()


def encode_message(message: BaseModel, encoding: Encoding = Encoding.JSON) -> bytes:
    """A whole frame for a message.

    Replies that many clients get alike are encoded once: a message with no field but
    its type (PONG), and SET_STATE for the latest version, whose ~24 kB payload is the
    same for every client (encoding it costs ~0.1 ms, per client, on the event loop).
    """
    cls = type(message)
    if cls is SetState:
        key = (cls, encoding)
        cached = _frames.get(key)
        if (
            cached is not None
            and cached[0] == message.weights_seq_no
            and (cached[1] is message.onnx_file or cached[1] == message.onnx_file)
        ):
            return cached[2]
        frame = encode_frame(encode_body(message, encoding))
        _frames[key] = (message.weights_seq_no, message.onnx_file, frame)
        return frame
    if (fieldless := _fieldless.get(cls)) is None:
        fieldless = _fieldless[cls] = set(cls.model_fields) == {"type"}
    if fieldless:
        key = (cls, encoding)
        if (frame := _frames.get(key)) is None:
            frame = _frames[key] = encode_frame(encode_body(message, encoding))
        return frame
    return encode_frame(encode_body(message, encoding))


# encode_message's caches: one frame per (message class, encoding); which classes have
# no field but their type.
_frames: dict[tuple[type, Encoding], Any] = {}
_fieldless: dict[type, bool] = {}


# -- Session -----------------------------------------------------------------------


@dataclass(frozen=True)
class RequestReceived:
    """A valid request, and the encoding its reply must use."""

    request: Request
    encoding: Encoding


@dataclass(frozen=True)
class FrameRejected:
    """A frame refused with an error; the reply is `error.to_message()`."""

    error: ProtocolError
    encoding: Encoding

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


class Session:
    """One connection's protocol state: bytes in -> events; replies -> bytes."""

    def __init__(
        self,
        spaces: SpacesContext,
        max_frame_bytes: int,
        max_episodes_per_message: int | None = None,
        max_steps_per_message: int | None = None,
    ) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        # JSON bodies say so: the chunk validators then skip a check (see schemas).
        self._contexts = {Encoding.JSON: {"spaces": spaces, "from_json": True}, Encoding.MSGPACK: {"spaces": spaces}}
        self._max_episodes = max_episodes_per_message
        self._max_steps = max_steps_per_message
        self.closed = False  # set after a fatal error: further bytes are ignored

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished frame."""
        return self._decoder.buffered

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed received bytes; return one event per complete frame (the last may be fatal)."""
        return [self.parse(frame) if type(frame) is bytes else frame for frame in self.receive_frames(data)]

    def receive_frames(self, data: bytes) -> list[bytes | FrameRejected]:
        """Feed received bytes; return the body of each complete frame, for `parse`, and
        last, if the stream broke, the fatal rejection that ends it."""
        if self.closed:
            return []
        self._decoder.feed(data)
        frames: list[bytes | FrameRejected] = []
        try:
            frames.extend(self._decoder.frames())
        except ProtocolError as exc:
            self.closed = True
            frames.append(FrameRejected(exc, Encoding.JSON))
        return frames

    def parse(self, body: bytes, decoded: dict[str, Any] | None = None) -> Event:
        """The event for one frame body; `decoded` is what `loads_with_arrays` made of it
        elsewhere (a worker process), if it could."""
        encoding = detect_encoding(body)
        try:
            data, encoding = (decoded, encoding) if decoded is not None else decode_body(body)
            message_type = data.get("type")
            if not isinstance(message_type, str) or message_type not in REQUEST_TYPES:
                raise self._unknown_type(message_type)
            try:
                request = request_adapter.validate_python(data, context=self._contexts[encoding])
            except ValidationError as exc:
                raise _describe_validation_error(message_type, exc) from None
            if isinstance(request, Episodes):
                self._check_size(request)
        except ProtocolError as exc:
            return FrameRejected(exc, encoding)
        except Exception as exc:  # a bug of ours must cost the client one reply, not its connection
            log.exception("failed to parse a frame")
            error = ProtocolError(ErrorCode.INTERNAL_ERROR, f"the gateway failed to read this frame ({type(exc).__name__})")
            return FrameRejected(error, encoding)
        return RequestReceived(request, encoding)

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

    def reply(self, message: BaseModel, encoding: Encoding) -> bytes:
        """The frame that answers a request in the client's encoding."""
        return encode_message(message, encoding)
