"""Serving the gateway in this process: the HTTP socket, the gateway's start, uvicorn.

Start-up problems a person can fix end in a `StartupError` whose text says what to do.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import socket
from collections.abc import Callable

import uvicorn

from app.gateway import StartupError
from app.main import create_app
from app.settings.config import Settings

log = logging.getLogger("app")

WS_HEADER_ROOM = 1024  # a WebSocket message holds a frame header besides the body


def uvicorn_options(settings: Settings) -> dict:
    """What uvicorn must know of the settings besides where to listen."""
    options = {
        "ws_max_size": settings.max_frame_bytes + WS_HEADER_ROOM,
        "ws_per_message_deflate": settings.ws_per_message_deflate,
    }
    if settings.tls_enabled:
        options.update(ssl_certfile=str(settings.tls_certfile), ssl_keyfile=str(settings.tls_keyfile))
    return options


def bind_http(settings: Settings) -> socket.socket:
    """The listening socket for HTTP and WebSocket, or a StartupError saying what to change."""
    try:
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.http_port))
    except OSError as exc:
        where = f"{settings.host}:{settings.http_port}"
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"HTTP port {where} is already in use: stop the program using it, or choose another port "
                "with --http-port (0 picks a free one)"
            ) from None
        raise StartupError(f"cannot listen for HTTP on {where}: {exc.strerror or exc}; check --host and --http-port") from None
    sock.set_inheritable(True)
    return sock


GC_GEN0_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)


async def serve(settings: Settings) -> None:
    """Bind HTTP, start the gateway (restore, workers, TCP), then serve until stopped."""
    loop = type(asyncio.get_running_loop())
    log.info("event loop: %s.%s", loop.__module__, loop.__qualname__)
    app = create_app(settings)
    gateway = app.state.gateway
    sock = bind_http(settings)
    try:
        await gateway.start()
        # The ~200k objects the imports made (torch's mostly) live as long as the process:
        # out of the collector's way, each full collection no longer walks them (~85 ms of
        # the event loop, every few seconds while experience streams in).
        gc.collect()
        gc.freeze()
        # Pending episode chunks are many small containers that live until their batch
        # trains; at the default thresholds the collector walks them again and again
        # (a multi-agent message of 64 short chunks took twice as long to take in while
        # many were pending). Rarer young collections keep that walk rare; the gateway's
        # own objects seldom form cycles.
        gc.set_threshold(GC_GEN0_THRESHOLD, 20, 100)
        config = uvicorn.Config(app, log_level=settings.log_level.lower(), lifespan="on", **uvicorn_options(settings))
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        await gateway.stop()
        sock.close()


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (as uvicorn.run would pick), else asyncio's
    (None): its sockets' reads and writes cost a fraction of asyncio's own."""
    try:
        import uvloop
    except ImportError:
        log.info("uvloop is not installed: the gateway runs on asyncio's own event loop")
        return None
    return uvloop.new_event_loop
