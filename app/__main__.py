"""`python -m app`: start the gateway (HTTP + WebSocket, and the TCP bridge) from settings.

Start-up problems a person can fix (a port in use, a checkpoint of other spaces, TLS
files that cannot be read) end the process with one line saying what to do, exit 2.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import socket
import sys
from collections.abc import Callable

import uvicorn
from pydantic import ValidationError

from app.cli import ConfigFileError, parse_command_line
from app.config import Settings
from app.gateway import StartupError
from app.log_redaction import configure_logging
from app.main import create_app

log = logging.getLogger("app")

WS_HEADER_ROOM = 1024  # a WebSocket message holds a frame header besides the body
EXIT_STARTUP_ERROR = 2


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


def main() -> None:
    try:
        settings = parse_command_line()
    except ConfigFileError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        sys.exit(EXIT_STARTUP_ERROR)
    except ValidationError as exc:  # a bad flag or RLLINK_ variable: say which and why, no traceback
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        print(f"cannot start: invalid settings: {problems}", file=sys.stderr)
        sys.exit(EXIT_STARTUP_ERROR)
    configure_logging(settings.log_level)
    if settings.ray_address is not None:
        run_on_ray(settings)
        return
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve(settings))
    except StartupError as exc:
        log.error("cannot start: %s", exc)
        sys.exit(EXIT_STARTUP_ERROR)
    except KeyboardInterrupt:
        pass


def run_on_ray(settings: Settings) -> None:
    """The learner and --frontends front-ends as Ray actors (the optional extra `[ray]`)."""
    try:
        from app.cluster import launch
    except ImportError:
        log.error("cannot start: --ray-address needs Ray: pip install 'rllink-gateway[ray]'")
        sys.exit(EXIT_STARTUP_ERROR)
    try:
        launch.run(settings)
    except StartupError as exc:  # also as raised in an actor (Ray's error is a subclass): its own words
        log.error("cannot start: %s", getattr(exc, "cause", exc))
        sys.exit(EXIT_STARTUP_ERROR)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
