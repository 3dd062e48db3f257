"""RLlink's framing: each message is a body behind an 8-digit ASCII length header, the
body JSON or msgpack. Shared by the gateway and the clients; no I/O."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import msgpack
import orjson

from rllink.errors import ErrorCode, ProtocolError

HEADER_SIZE = 8
MAX_BODY_SIZE = 10**HEADER_SIZE - 1


class Encoding(enum.Enum):
    """How a frame body is encoded; replies use the encoding of the request."""

    JSON = "json"
    MSGPACK = "msgpack"


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


_MSGPACK_MAP_FIRST_BYTES = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


def detect_encoding(body: bytes) -> Encoding:
    """msgpack if the body starts like a msgpack map, JSON otherwise."""
    return Encoding.MSGPACK if body[:1] and body[0] in _MSGPACK_MAP_FIRST_BYTES else Encoding.JSON


def loads_body(body: bytes) -> tuple[dict[str, Any], Encoding]:
    """A frame body as a dict and how it was encoded; a non-fatal `ProtocolError`
    (`bad_json`, `bad_msgpack`) if it is not one."""
    encoding = detect_encoding(body)
    if encoding is Encoding.MSGPACK:
        try:
            data = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types
            raise ProtocolError(ErrorCode.BAD_MSGPACK, f"body is not valid msgpack: {exc}") from None
        if not isinstance(data, dict):  # pragma: no cover - the first byte promised a map
            raise ProtocolError(ErrorCode.BAD_MSGPACK, "body must be a msgpack map")
        return data, encoding
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.BAD_JSON, f"body must be a JSON object, got {type(data).__name__}")
    return data, encoding
