"""How the gateway serves the browser side (app/http/web.py); no browser needed.

The media types are what browsers insist on (an ES module must come as JavaScript, a
wasm module as application/wasm), nothing outside static/ and the vendor folders can
be reached, and without node_modules the gateway still starts, warns, and says why.
In-process, except the paths that must not reach outside the served folders: they go
over real HTTP to uvicorn exactly as written (an HTTP client would normalise the dots).
"""

from __future__ import annotations

import http.client
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.http import web

from .helpers import RunningGateway, gateway_settings, in_process, running_gateway

VENDOR_FILES = {  # what the pages load, with the type each must have
    "/vendor/ort/ort.wasm.min.mjs": "text/javascript",
    "/vendor/ort/ort-wasm-simd-threaded.mjs": "text/javascript",
    "/vendor/ort/ort-wasm-simd-threaded.wasm": "application/wasm",
    "/vendor/uplot/uPlot.esm.js": "text/javascript",
    "/vendor/uplot/uPlot.min.css": "text/css",
}
STATIC_FILES = {
    "/": "text/html",
    "/static/cartpole.html": "text/html",
    "/static/rllink.js": "text/javascript",
    "/static/style.css": "text/css",
}


def _get_raw(port: int, path: str) -> int:
    """GET a path exactly as written (httpx would normalise the dots away)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_pages_and_vendor_files_are_served_with_the_types_browsers_require(rest):
    if web.missing_vendor_dirs():
        pytest.skip(web.MISSING_VENDOR_HINT)
    for path, media_type in {**STATIC_FILES, **VENDOR_FILES}.items():
        response = rest.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].split(";")[0] == media_type, path


def test_the_pages_answer_head_with_their_headers_and_no_body(rest):
    for path in ("/", "/docs"):
        got, head = rest.get(path), rest.head(path)
        assert head.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"], path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with running_gateway(gateway_settings(Path(tmp_path_factory.mktemp("serving")))) as gateway:
        yield gateway


@pytest.mark.parametrize(
    "path",
    [
        "/static/../app/http/web.py",
        "/static/%2e%2e/app/http/web.py",
        "/static/..%2fapp%2fweb.py",
        "/vendor/ort/../../../package.json",
        "/vendor/ort/%2e%2e%2f%2e%2e%2f%2e%2e%2fpackage.json",
        "/vendor/nope/x.js",
        "/static/",
        "/static/missing.js",
    ],
)
def test_nothing_outside_the_served_folders_can_be_reached(served, path):
    assert _get_raw(served.http_port, path) == 404


def test_without_node_modules_the_gateway_starts_warns_and_explains(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(web, "VENDOR_DIRS", {name: tmp_path / "node_modules" / name for name in web.VENDOR_DIRS})
    with caplog.at_level(logging.WARNING, logger="app.http.web"):
        with in_process(tmp_path) as rest:
            vendor = rest.get("/vendor/ort/ort.wasm.min.mjs")
            page = rest.get("/static/cartpole.html")
    assert vendor.status_code == 404 and "npm ci" in vendor.json()["detail"]
    assert page.status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.name == "app.http.web" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "npm ci" in warnings[0]
