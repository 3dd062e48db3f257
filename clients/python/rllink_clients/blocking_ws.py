"""A WebSocket client on one blocking socket, driven on the caller's thread.

websockets' own sync client reads in a background thread. This one drives websockets'
sans-I/O protocol itself, so
- a round trip costs only what the network and the server cost (no thread hand-off),
  which is what a latency measurement wants;
- the caller sees the bytes: `wire_bytes` gives one WebSocket message as it would go on
  the wire, so a tool can send any prefix of it and drop the socket, as a killed
  process would.

It carries payloads (bytes); RLlink frames inside them are the caller's (see
`app.sansio.protocol.FrameDecoder`). It imports nothing from the gateway, so a script can use
it against any gateway version.
"""

from __future__ import annotations

import socket
import time

from websockets.client import ClientProtocol
from websockets.uri import parse_uri


class BlockingWebSocket:
    """One WebSocket connection (`ws://host:port/path`); `timeout` bounds the handshake
    and, when `recv` has no deadline, each wait for data."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        uri = parse_uri(url)
        self.timeout = timeout
        self.sock = socket.create_connection((uri.host, uri.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.protocol = ClientProtocol(uri, max_size=None)
        self._messages: list[bytes] = []
        try:
            self.protocol.send_request(self.protocol.connect())
            self._flush()
            deadline = time.monotonic() + timeout
            while self.protocol.handshake_exc is None and self.protocol.state.name == "CONNECTING":
                self._receive(deadline)
            if self.protocol.handshake_exc is not None:
                raise self.protocol.handshake_exc
        except BaseException:
            self.sock.close()
            raise

    def wire_bytes(self, payload: bytes, *, text: bool = False) -> bytes:
        """The bytes of one WebSocket message carrying `payload`, not sent: the caller
        puts them (or a part of them) on `sock` itself."""
        if text:
            self.protocol.send_text(payload)
        else:
            self.protocol.send_binary(payload)
        return b"".join(self.protocol.data_to_send())

    def send(self, payload: bytes, *, text: bool = False) -> None:
        """Send `payload` as one binary (or, with `text`, text: UTF-8 bytes) message."""
        self.sock.sendall(self.wire_bytes(payload, text=text))

    def recv(self, deadline: float | None = None) -> bytes:
        """The payload of the next data message (text as its UTF-8 bytes). Raises
        TimeoutError after `deadline` (time.monotonic()), ConnectionError once closed."""
        while not self._messages:
            self._receive(time.monotonic() + self.timeout if deadline is None else deadline)
        return self._messages.pop(0)

    def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no WebSocket message in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            raise TimeoutError("no WebSocket message in time") from None
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        for event in self.protocol.events_received():
            if getattr(event, "opcode", None) is not None and event.opcode.name in ("TEXT", "BINARY"):
                self._messages.append(bytes(event.data))
        self._flush()  # pongs, close frames
        if not data:
            raise ConnectionError("the server closed the connection")

    def _flush(self) -> None:
        for chunk in self.protocol.data_to_send():
            if chunk:
                self.sock.sendall(chunk)

    def close(self) -> None:
        """Send a close frame if the socket still takes one, and close the socket."""
        try:
            self.protocol.send_close()
            self._flush()
        except Exception:  # the connection is gone already
            pass
        self.sock.close()

    def __enter__(self) -> BlockingWebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
