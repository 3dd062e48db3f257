"""The raw TCP transport: RLlink frames on a socket, as RLlib's own clients speak them.

A thin adapter: bytes read from the socket go to a `Connection`, reply bytes are
written back. Many clients at once, each served by its own task.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from app.settings.config import Settings
from app.transport.connection import ConnectionContext, serve

log = logging.getLogger("app.transport.tcp")

READ_SIZE = 256 * 1024


class TcpBridge:
    """An asyncio TCP server feeding every connection into the gateway's one training service."""

    def __init__(self, connections: ConnectionContext, settings: Settings) -> None:
        self._connections = connections
        self._settings = settings
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def port(self) -> int:
        """The port actually bound (useful when configured as 0)."""
        assert self._server is not None, "the TCP transport is not started"
        return self._server.sockets[0].getsockname()[1]

    def check_address(self) -> None:
        """Bind the bridge's address as `start` will, and let it go at once: the OSError
        `start` would raise for the address (the port taken, say), before anything starts.
        A port of 0 is always free."""
        host, port = self._settings.tcp_bind_host, self._settings.tcp_port
        if port == 0:
            return
        # As asyncio.start_server binds: every address the host names, each reusable
        # (a port left in TIME_WAIT is free), IPv6 ones for IPv6 only.
        for family, kind, proto, _, address in socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)

    async def start(self) -> None:
        """Listen; raises OSError if the address is taken or the TLS files cannot be read."""
        self._server = await asyncio.start_server(
            self._handle,
            self._settings.tcp_bind_host,
            self._settings.tcp_port,
            limit=READ_SIZE,
            ssl=self._tls_context(),
        )
        log.info(
            "RLlink TCP bridge listening on %s:%d%s",
            self._settings.tcp_bind_host, self.port, " (TLS)" if self._settings.tls_enabled else "",
        )

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self._settings.tls_enabled:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self._settings.tls_certfile, self._settings.tls_keyfile)
        return context

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if (peername := writer.get_extra_info("peername")) is None:  # gone before we got to it
            writer.close()
            return
        self._handlers.add(task := asyncio.current_task())
        host, port = peername[:2]
        transport = writer.transport
        _, high_water = transport.get_write_buffer_limits()

        async def send(data: bytes, _tag: None) -> None:
            if transport.is_closing():  # the client has gone (uvloop would raise RuntimeError)
                raise ConnectionResetError("the client closed the connection")
            writer.write(data)
            # drain() waits only above the high-water mark; below it, the call is pure
            # overhead on every reply (about 4% of a thin client's GET_ACTION in a profile).
            if transport.get_write_buffer_size() > high_water:
                await writer.drain()

        async def receive() -> tuple[bytes, None] | None:
            data = await reader.read(READ_SIZE)
            return (data, None) if data else None

        async def close() -> None:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

        try:
            await serve(
                self._connections,
                transport="tcp",
                peer=f"{host}:{port}",
                receive=receive,
                send=send,
                close=close,
                default_tag=None,
                authenticated=self._settings.auth_token is None,  # else: token in the first PING
            )
        finally:
            self._handlers.discard(task)
