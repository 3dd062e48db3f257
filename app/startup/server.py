"""Serving the gateway in this process: the HTTP socket, the gateway's start, uvicorn, the
games it launches (`env_path`) and the budget that ends a run (`max_env_steps`, `max_seconds`).

Start-up problems a person can fix end in a `StartupError` whose text says what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from functools import partial

import uvicorn

from app.gateway import Gateway, PortsInUse, StartupError
from app.main import create_app
from app.settings.config import Settings
from app.settings.runs import games_dir
from app.startup.budget import Budget
from app.startup.launcher import GameLauncher, LaunchError, build_command, game_arguments

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


HTTP_BACKLOG = 2048  # uvicorn's own backlog
EVERY_INTERFACE = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}  # such a host -> the loopback address shown for it


def bind_http(settings: Settings) -> socket.socket:
    """The listening socket for HTTP and WebSocket, or a StartupError saying what to change
    (`PortsInUse` when the port is taken).

    It listens from now on, so the port is the gateway's while the rest starts: a
    connection made meanwhile waits in the backlog until uvicorn serves it, none is
    refused."""
    where = f"{settings.host}:{settings.http_port}"
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise StartupError(f"cannot listen for HTTP on {where}: {exc.strerror or exc}; check --host and --http-port") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.http_port))
        sock.listen(HTTP_BACKLOG)  # not just bound: a port only bound is still another program's to listen on first
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortsInUse(("HTTP", where)) from None
        raise StartupError(f"cannot listen for HTTP on {where}: {exc.strerror or exc}; check --host and --http-port") from None
    sock.set_inheritable(True)
    return sock


def take_ports(settings: Settings, gateway: Gateway) -> socket.socket:
    """Before anything starts: the HTTP socket (listening), and the TCP bridge's port
    tried (`Gateway.start` binds it). Every port in use is named in one `PortsInUse`,
    so that one try tells a person all there is to change; one port given to both is
    refused as such (the second would find the first "in use")."""
    shared = settings.http_port == settings.tcp_port != 0 and (
        settings.host == settings.tcp_bind_host or {settings.host, settings.tcp_bind_host} & set(EVERY_INTERFACE)
    )
    if gateway.tcp_bridge is not None and shared:
        raise StartupError(
            f"HTTP and TCP cannot both listen on port {settings.http_port}: choose another port for one "
            "with --http-port or --tcp-port (0 picks a free one)"
        )
    in_use: list[PortsInUse] = []
    sock = None
    try:
        sock = bind_http(settings)
    except PortsInUse as exc:
        in_use.append(exc)
    try:
        gateway.check_tcp_port()
    except PortsInUse as exc:
        in_use.append(exc)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    if in_use:
        if sock is not None:
            sock.close()
        raise PortsInUse.joined(in_use)
    assert sock is not None
    return sock


GC_GEN0_THRESHOLD = 50_000  # allocations between young collections (CPython's default: 700)


async def serve(settings: Settings) -> None:
    """Take the ports, start the gateway (restore, workers, TCP), then serve until stopped: by a
    signal or by the budget. Launched games start once it serves and stop before it does."""
    loop = type(asyncio.get_running_loop())
    log.info("event loop: %s.%s", loop.__module__, loop.__qualname__)
    build = launch_build(settings)
    app = create_app(settings)
    gateway = app.state.gateway
    sock = take_ports(settings, gateway)
    games: GameLauncher | None = None
    launch_failed: LaunchError | None = None
    budget = Budget(settings, gateway.service)
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
        tcp_port = gateway.tcp_bridge.port if gateway.tcp_bridge is not None else None
        addresses = where_to_connect(settings, sock.getsockname()[1], tcp_port)

        async def on_started() -> None:
            nonlocal games, launch_failed
            log_addresses(addresses)
            budget.watch(on_spent=lambda: setattr(server, "should_exit", True))
            if build is not None and tcp_port is not None:
                games = GameLauncher(
                    launch_commands(settings, build, tcp_port), games_dir(settings), settings.env_max_restarts,
                    settings.env_stop_grace_s,
                )
                try:
                    await games.start()
                except LaunchError as exc:
                    launch_failed, server.should_exit = exc, True

        server = _Server(config, on_started=on_started)
        await server.serve(sockets=[sock])
    finally:
        budget.close()
        with _second_signal_stops_at_once(games):
            if games is not None:
                await games.stop()
            await gateway.stop()
        sock.close()
    if launch_failed is not None:
        raise StartupError(str(launch_failed))
    log.info("%s", budget.summary())


def launch_build(settings: Settings) -> list[str] | None:
    """The command of the game build to launch, checked before anything starts (None: no --env-path)."""
    if settings.env_path is None:
        return None
    try:
        return build_command(settings.env_path)
    except LaunchError as exc:
        raise StartupError(str(exc)) from None


def launch_commands(settings: Settings, build: list[str], tcp_port: int) -> list[list[str]]:
    """The command line of each of the `num_envs` games: the build, the engine's no-window
    arguments (`headless`), the `--rllink-*` arguments, then the game's own (`env_args`)."""
    host = EVERY_INTERFACE.get(settings.tcp_bind_host, settings.tcp_bind_host)
    token = settings.auth_token.get_secret_value() if settings.auth_token is not None else None
    headless = settings.headless_args if settings.headless else []
    return [
        [*build, *headless, *game_arguments(host, tcp_port, index, settings.time_scale, token), *settings.env_args]
        for index in range(settings.num_envs)
    ]


EXIT_STOPPED_AT_ONCE = 130  # as a shell reports a process ended by Ctrl-C
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _second_signal_stops_at_once(games: GameLauncher | None = None) -> Iterator[None]:
    """While the gateway stops (it waits for the training step under way, then saves), a
    second Ctrl-C or SIGTERM ends the process at once, its launched `games` killed first.
    Checkpoints and model files are written whole under a temporary name and renamed, so
    none is left half-written: the ones on disk are those of the last step saved."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, partial(_stop_at_once, sig, games))
    log.info("stopping: the training step under way finishes, then everything is saved (Ctrl-C again stops at once)")
    try:
        yield
    finally:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def _stop_at_once(sig: signal.Signals, games: GameLauncher | None = None) -> None:
    if games is not None:
        games.kill_now()
    log.warning("%s again: stopping at once, without saving; checkpoints and models on disk are those of the last step "
                "saved", sig.name)
    logging.shutdown()
    os._exit(EXIT_STOPPED_AT_ONCE)


class _Server(uvicorn.Server):
    """uvicorn's server, awaiting `on_started` once it serves (uvicorn logs no address
    for sockets it was handed; the games are launched then)."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], Awaitable[None]]) -> None:
        super().__init__(config)
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, but without raising the signal again once uvicorn has stopped: the
        gateway stops next, and a second signal meanwhile is its own (see serve)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            await self._on_started()


def _host_port(host: str, port: int) -> str:
    """host:port as a URL names it (IPv6 in brackets), a host of every interface as this machine's loopback."""
    host = EVERY_INTERFACE.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def where_to_connect(settings: Settings, http_port: int, tcp_port: int | None) -> list[tuple[str, str]]:
    """(what, address) for every way in, at the ports actually bound (`tcp_port` None: the
    bridge is off). A host of every interface is shown by this machine's loopback
    address, and a last line says that it listens on every interface."""
    http, ws = ("https", "wss") if settings.tls_enabled else ("http", "ws")
    web = _host_port(settings.host, http_port)
    lines = [
        ("dashboard", f"{http}://{web}/"),
        ("API docs", f"{http}://{web}/docs"),
        ("WebSocket", f"{ws}://{web}/rllink"),
        ("TCP", "off (--no-tcp-enabled)" if tcp_port is None
         else _host_port(settings.tcp_bind_host, tcp_port) + (" (TLS)" if settings.tls_enabled else "")),
    ]
    listening = [("HTTP", settings.host)] + ([("TCP", settings.tcp_bind_host)] if tcp_port is not None else [])
    if everywhere := [f"{what} on {host or 'every address'}" for what, host in listening if host in EVERY_INTERFACE]:
        lines.append(("", f"(listening on every interface: {', '.join(everywhere)}; "
                          "from another machine, use this machine's name or address)"))
    return lines


def log_addresses(addresses: list[tuple[str, str]]) -> None:
    """The block of addresses, once the gateway serves."""
    log.info("the gateway is serving:")
    for what, address in addresses:
        log.info("  %-10s %s", what, address)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (as uvicorn.run would pick), else asyncio's
    (None): its sockets' reads and writes cost a fraction of asyncio's own."""
    try:
        import uvloop
    except ImportError:
        log.info("uvloop is not installed: the gateway runs on asyncio's own event loop")
        return None
    return uvloop.new_event_loop
