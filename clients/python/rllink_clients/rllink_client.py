"""A small blocking RLlink client over TCP or WebSocket, for scripts, tests and benchmarks.

It speaks exactly what RLlib's reference client speaks (8-digit header + JSON body),
optionally msgpack, and reuses the gateway's own frame decoder. It keeps the gateway's
environment parameters (RLLINK.md, "Environment parameters") from every SET_CONFIG and
SET_STATE that carries them: `get_env_param(name, default)`.
"""

from __future__ import annotations

import socket
import ssl
from contextlib import ExitStack
from typing import Any, Literal
from urllib.parse import urlsplit

import msgpack
import orjson
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect

from rllink.framing import Encoding, FrameDecoder, encode_frame, loads_body

# numpy arrays and scalars as JSON arrays and numbers, int keys as strings (as json.dumps
# writes them); orjson encodes a message several times faster than json.dumps.
JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

Transport = Literal["tcp", "ws"]
DEFAULT_PORTS = {"tcp": 5555, "ws": 8000}


class GatewayUnreachable(ConnectionError):
    """No gateway answered at the address given, or it refused the token (one line, for a command line)."""


class RLlinkClient:
    """One connection to a gateway; `request` sends a message and returns the reply."""

    def __init__(
        self,
        transport: Transport,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        path: str = "/rllink",
        encoding: Encoding = Encoding.JSON,
        binary: bool = False,
        timeout: float = 60.0,
        tls_cafile: str | None = None,
    ) -> None:
        self.transport = transport
        self.encoding = encoding
        self.binary = binary  # WebSocket only: send binary messages instead of text
        self._decoder = FrameDecoder()
        self._pending: list[bytes] = []
        self._sock: socket.socket | None = None
        self._ws: ClientConnection | None = None
        self._exit_stack = ExitStack()
        self.env_params: dict[str, Any] = {}  # the latest SET_CONFIG's or SET_STATE's env_params
        # TLS when given the CA (or self-signed certificate) that signed the gateway's certificate.
        tls = ssl.create_default_context(cafile=tls_cafile) if tls_cafile else None
        if transport == "tcp":
            sock = socket.create_connection((host, port or 5555), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = tls.wrap_socket(sock, server_hostname=host) if tls else sock
        elif transport == "ws":
            url = f"{'wss' if tls else 'ws'}://{host}:{port or 8000}{path}"
            self._ws = self._exit_stack.enter_context(connect(url, open_timeout=timeout, max_size=None, ssl=tls))
            self._timeout = timeout
        else:
            raise ValueError(f"transport must be 'tcp' or 'ws', got {transport!r}")

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RLlinkClient:
        """`tcp://host:port` or `ws://host:port/path`."""
        parts = urlsplit(url)
        if parts.scheme == "tcp":
            return cls("tcp", parts.hostname or "127.0.0.1", parts.port, **kwargs)
        if parts.scheme == "ws":
            return cls("ws", parts.hostname or "127.0.0.1", parts.port, path=parts.path or "/rllink", **kwargs)
        raise ValueError(f"URL must start with tcp:// or ws://, got {url!r}")

    @classmethod
    def open(
        cls, transport: Transport, host: str = "127.0.0.1", port: int | None = None, token: str | None = None, **kwargs: Any
    ) -> RLlinkClient:
        """A connection as the constructor makes it (port None: the transport's default port),
        with `token` presented in a first PING where given; GatewayUnreachable, one line naming
        the address or the gateway's refusal, where no connection can be made or the token is refused."""
        port = port or DEFAULT_PORTS.get(transport)
        try:
            client = cls(transport, host, port, **kwargs)
        except (OSError, WebSocketException) as exc:
            raise GatewayUnreachable(f"cannot reach a gateway at {transport}://{host}:{port}: {str(exc) or type(exc).__name__}") from exc
        if token is not None and (reply := client.request({"type": "PING", "token": token}))["type"] != "PONG":
            client.close()
            raise GatewayUnreachable(f"the gateway refused the token: {reply.get('message', reply)}")
        return client

    def encode(self, message: dict[str, Any]) -> bytes:
        if self.encoding is Encoding.MSGPACK:
            return encode_frame(msgpack.packb(message))
        return encode_frame(orjson.dumps(message, option=JSON_OPTIONS))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (one WebSocket message, or written to the socket)."""
        if self._sock is not None:
            self._sock.sendall(data)
        elif self.binary:
            self._ws.send(data)
        else:
            self._ws.send(data.decode("utf-8", errors="surrogateescape"))

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(self.encode(message))

    def receive(self) -> dict[str, Any]:
        """The next message from the gateway (blocks); raises ConnectionError at EOF."""
        while not self._pending:
            self._decoder.feed(self._read())
            self._pending.extend(self._decoder.frames())
        data, _ = loads_body(self._pending.pop(0))
        if data.get("type") in ("SET_CONFIG", "SET_STATE") and isinstance(data.get("env_params"), dict):
            self.env_params = data["env_params"]
        return data

    def get_env_param(self, name: str, default: Any = None) -> Any:
        """The gateway's current value of environment parameter `name`, or `default` if it sets none."""
        return self.env_params.get(name, default)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.receive()

    def _read(self) -> bytes:
        if self._sock is not None:
            data = self._sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the gateway closed the connection")
            return data
        try:
            message = self._ws.recv(timeout=self._timeout)
        except Exception as exc:  # websockets' ConnectionClosed* and TimeoutError
            raise ConnectionError(f"the gateway closed the connection: {exc}") from exc
        return message if isinstance(message, bytes) else message.encode("utf-8", errors="surrogateescape")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._exit_stack.close()

    def __enter__(self) -> RLlinkClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
