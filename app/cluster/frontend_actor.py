"""A gateway front-end on Ray: TCP bridge, HTTP, WebSocket and the REST API in one actor,
training through the learner actor (remote_service.py)."""

from __future__ import annotations

import logging
import os
import socket

import uvicorn

from app.cluster.remote_service import RemoteTrainingService
from app.main import create_app
from app.settings.config import Settings
from app.settings.logs import configure_logging
from app.startup.server import bind_http, uvicorn_options

log = logging.getLogger("app.cluster")

HTTP_BACKLOG = 2048


class FrontendActor:
    """One front-end: `start` binds and starts it, `serve` runs it until the actor ends."""

    def __init__(self, settings: Settings, learner, index: int) -> None:
        configure_logging(settings.log_level)
        self.settings = settings
        self.index = index
        self.app = create_app(settings, RemoteTrainingService(settings, learner, index))
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None

    async def start(self) -> dict[str, object]:
        """Bind, start the gateway's parts; where it listens: host, http_port, tcp_port."""
        self._sock = bind_http(self.settings)
        self._sock.listen(HTTP_BACKLOG)  # connections wait in the backlog until serve() accepts them, none refused
        gateway = self.app.state.gateway
        try:
            await gateway.start()
        except BaseException:
            self._sock.close()  # free the port for the next try
            raise
        bridge = gateway.tcp_bridge
        where = {
            "frontend": self.index,
            "host": socket.gethostbyname(socket.gethostname()),
            "http_port": self._sock.getsockname()[1],
            "tcp_port": bridge.port if bridge is not None else 0,
        }
        log.info("front-end %d listening: HTTP %s, TCP %s", self.index, where["http_port"], where["tcp_port"])
        return where

    async def serve(self) -> None:
        """Serve until the actor is killed (or the server stops)."""
        config = uvicorn.Config(self.app, log_level=self.settings.log_level.lower(), lifespan="on", **uvicorn_options(self.settings))
        self._server = uvicorn.Server(config)
        await self._server.serve(sockets=[self._sock])

    async def stop(self) -> None:
        """Stop serving: close every connection, keep what they sent, close the event files."""
        if self._server is not None:
            self._server.should_exit = True  # serve() returns; the app's lifespan stops the gateway

    def pid(self) -> int:
        """The actor's process id (benchmarks read its CPU time from /proc)."""
        return os.getpid()
