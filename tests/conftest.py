"""Fixtures only; what they are built on (and what tests import) is in tests/helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from .helpers import RunningGateway, gateway_settings, in_process, running_gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    """A real gateway (uvicorn + TCP bridge) on free ports, in a background thread."""
    with running_gateway(gateway_settings(tmp_path)) as running:
        yield running


@pytest.fixture
def rest(tmp_path: Path) -> Iterator[TestClient]:
    """The app in this process, lifespan running, for tests that only call REST routes."""
    with in_process(tmp_path) as client:
        yield client


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for a module of browser tests (mark the module with tests.browser.NEEDS_BROWSER)."""
    from .browser import launch_browser  # Playwright only where a browser is used

    with launch_browser() as launched:
        yield launched
