"""Fixtures: a real gateway (uvicorn + TCP bridge) on free ports, in a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from app.__main__ import uvicorn_options
from app.clients.rllink_client import RLlinkClient
from app.config import Settings
from app.main import create_app


@dataclass
class RunningGateway:
    app: FastAPI
    settings: Settings
    http_port: int
    tcp_port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def client(self, transport: str, **kwargs) -> RLlinkClient:
        port = self.tcp_port if transport == "tcp" else self.http_port
        return RLlinkClient(transport, "127.0.0.1", port, **kwargs)


@contextmanager
def running_gateway(settings: Settings) -> Iterator[RunningGateway]:
    """Start a gateway with these settings (use port 0 for both); stop it on exit."""
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.http_port,
        log_level="warning",
        lifespan="on",
        **uvicorn_options(settings),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.01)
    http_port = server.servers[0].sockets[0].getsockname()[1]
    bridge = app.state.gateway.tcp_bridge
    try:
        yield RunningGateway(app, settings, http_port, bridge.port if bridge else 0)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def gateway_settings(tmp_path: Path, **overrides) -> Settings:
    """Settings for a test gateway: free ports, a private checkpoint dir."""
    values = dict(http_port=0, tcp_port=0, checkpoint_dir=tmp_path / "checkpoints")
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    with running_gateway(gateway_settings(tmp_path)) as running:
        yield running


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for a module of browser tests (mark the module with tests.browser.NEEDS_BROWSER)."""
    from .browser import launch_browser  # Playwright only where a browser is used

    with launch_browser() as launched:
        yield launched
