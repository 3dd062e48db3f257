"""Fixtures, and the order the files run in; what fixtures are built on (and what tests
import) is in tests/helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from .helpers import RunningGateway, gateway_settings, in_process, running_gateway

SLOW_MARKS = ("slow", "e2e", "browser")  # a test that starts processes, trains or drives a browser


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most slow tests first, each file's tests in their order: pytest-xdist
    hands out whole files in this order (`--dist loadfile`), so the long ones start at once and
    the short ones fill in at the end, instead of one worker finishing a long file alone."""
    slow_tests: dict[Path, int] = {}
    for item in items:
        slow = any(item.get_closest_marker(mark) for mark in SLOW_MARKS)
        slow_tests[item.path] = slow_tests.get(item.path, 0) + slow
    files = {path: place for place, path in enumerate(sorted(slow_tests, key=lambda path: -slow_tests[path]))}
    items.sort(key=lambda item: files[item.path])  # stable: a file's own order is kept


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
