"""The codes of RLlink's `ERROR` message (RLLINK.md, "Errors"), and the exception that carries one."""

from __future__ import annotations

import enum
from typing import Any


class ErrorCode(str, enum.Enum):  # noqa: UP042 - StrEnum would change how a code formats
    """Stable codes of the `ERROR` message; the README lists what each means."""

    BAD_HEADER = "bad_header"  # fatal: the 8-byte header is not ASCII digits
    FRAME_TOO_LARGE = "frame_too_large"  # fatal: the header announces more than max_frame_bytes
    BAD_JSON = "bad_json"  # the body is not a JSON object
    BAD_MSGPACK = "bad_msgpack"  # the body looks like msgpack but does not decode to a map
    UNKNOWN_TYPE = "unknown_type"  # missing `type`, or not a request type
    INVALID_MESSAGE = "invalid_message"  # a known request whose fields are wrong, or over a limit
    INTERNAL_ERROR = "internal_error"  # the gateway failed; the request was not processed
    UNKNOWN_EPISODE = "unknown_episode"  # a thin client's episode that is not open on this connection
    TOO_MANY_EPISODES = "too_many_episodes"  # START_EPISODE over max_open_episodes(_per_connection)
    # Raised by the connection layer, not the session; all fatal.
    UNAUTHORIZED = "unauthorized"  # auth is on and the client did not present the token
    TOO_MANY_CONNECTIONS = "too_many_connections"  # a connection limit is reached
    FRAME_TIMEOUT = "frame_timeout"  # a started frame was not finished within frame_timeout_s
    IDLE_TIMEOUT = "idle_timeout"  # nothing sent nor awaited for idle_timeout_s


class ProtocolError(Exception):
    """A frame the gateway refuses; `fatal` errors close the connection."""

    def __init__(self, code: ErrorCode, message: str, *, fatal: bool = False, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fatal = fatal
        self.details = details
