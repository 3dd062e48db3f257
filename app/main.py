"""Wiring: the FastAPI app, its routers, and the lifespan that runs the gateway.

`create_app(settings)` builds one `Gateway` (app/gateway.py) and an app that serves
it: REST, the RLlink WebSocket, the pages. The lifespan starts the gateway unless it
was started already (`python -m app` starts it first, to report start-up errors in
one line) and stops it on the way out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, WebSocket
from fastapi.middleware.cors import CORSMiddleware

from app.gateway import Gateway
from app.http import api, web
from app.settings.config import Settings
from app.training.interface import TrainingService
from app.transport.websocket import serve_websocket

log = logging.getLogger("app.main")


def record_step(gateway: Gateway) -> None:
    """A snapshot of /api/metrics after every training step: the dashboard's history, and
    the TensorBoard event files when they are on."""
    snapshot = api.collect_metrics(gateway).model_dump(mode="json")
    gateway.history.record(snapshot)
    if gateway.board is not None:
        gateway.board.record(snapshot)


def create_app(settings: Settings | None = None, service: TrainingService | None = None) -> FastAPI:
    """A gateway app; nothing listens or trains until its lifespan (or `app.state.gateway.start()`) runs.
    `service`: see `Gateway`."""
    gateway = Gateway(settings or Settings(), service)
    gateway.service.add_step_listener(lambda: record_step(gateway))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started_here = not gateway.started  # else its starter (app/startup/server.py) stops it too
        if started_here:
            await gateway.start()
        web.warn_if_vendor_missing()
        try:
            yield
        finally:
            if started_here:
                await gateway.stop()

    app = FastAPI(
        title="RLlink gateway",
        summary="Train policies (PPO, SAC; one or several) from many external simulators over RLlink (TCP and WebSocket).",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by app/http/web.py from local files, not a CDN
        redoc_url=None,
    )
    app.state.gateway = gateway
    if gateway.settings.cors_origins:
        # Browser clients on other origins (a game page, a Unity WebGL build) may call the REST API.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=gateway.settings.cors_origins,
            allow_methods=["GET", "HEAD", "PATCH"],
            allow_headers=["Authorization", "Content-Type", "If-None-Match"],
            expose_headers=["ETag", "X-Weights-Seq-No"],
        )
    app.add_exception_handler(405, api.method_not_allowed)

    @app.websocket("/rllink")
    async def rllink_websocket(websocket: WebSocket) -> None:
        """RLlink over WebSocket: the same frames as on TCP, in text or binary messages."""
        await serve_websocket(websocket, gateway.connections, gateway.settings)

    app.include_router(api.health_router)
    app.include_router(api.router)
    app.include_router(api.metrics_router)
    web.mount_web(app)
    return app
