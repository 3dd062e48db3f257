"""Wiring: the FastAPI app, its routers, and the lifespan that runs the shared service.

`create_app(settings)` builds one gateway: a training service shared by the
WebSocket endpoint and the TCP bridge, both started and stopped with the app.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app import api, web, ws_rllink
from app.config import Settings
from app.decode_workers import DecodeWorkers
from app.schemas import ARRAY_FIELDS
from app.tcp_bridge import TcpBridge
from app.traffic import TrafficStats
from app.training.service import TrainingService

log = logging.getLogger("app.main")


def create_app(settings: Settings | None = None) -> FastAPI:
    """A gateway app; nothing listens or trains until its lifespan starts."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = TrainingService(settings)
        traffic = TrafficStats()
        decoders = DecodeWorkers(settings.decode_workers, ARRAY_FIELDS)
        app.state.settings, app.state.service, app.state.traffic = settings, service, traffic
        app.state.decoders = decoders
        await service.start()
        await decoders.start()
        bridge = TcpBridge(settings, service, traffic, decoders) if settings.tcp_enabled else None
        if bridge is not None:
            await bridge.start()
        app.state.tcp_bridge = bridge
        try:
            yield
        finally:
            if bridge is not None:
                await bridge.stop()
            await decoders.stop()
            await service.stop()
            log.info("gateway stopped")

    app = FastAPI(
        title="RLlink gateway",
        summary="Train one PPO policy from many external simulators over RLlink (TCP and WebSocket).",
        version="0.1.0",
        lifespan=lifespan,
    )
    if settings.cors_origins:
        # Browser clients on other origins (a game page, a Unity WebGL build) may call the REST API.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "PATCH"],
            allow_headers=["Authorization", "Content-Type", "If-None-Match"],
            expose_headers=["ETag", "X-Weights-Seq-No"],
        )
    app.add_exception_handler(405, api.method_not_allowed)
    app.include_router(ws_rllink.router)
    app.include_router(api.health_router)
    app.include_router(api.router)
    app.include_router(api.metrics_router)
    app.include_router(web.router)  # dashboard, demo, vendor files (app/web.py)
    return app
