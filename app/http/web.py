"""The browser side of the gateway: the dashboard, `static/`, npm's vendor files and /docs.

    /                           static/index.html, the live dashboard
    /static/<file>              static/ (the RLlink ES module, the CartPole demo, styles)
    /vendor/ort/<file>          node_modules/onnxruntime-web/dist/ (the policy runs in the page)
    /vendor/uplot/<file>        node_modules/uplot/dist/ (the charts)
    /vendor/swagger-ui/<file>   node_modules/swagger-ui-dist/ (the API docs page)
    /docs                       Swagger UI on /openapi.json, with the files above

Everything is served from this machine: `npm ci` installs the pinned vendor packages
(package-lock.json) into node_modules/, and no page loads anything from elsewhere. If
node_modules is missing the gateway still starts and logs a warning; /vendor/ answers
404 with the fix, and the pages say which files are missing.

Installed from a wheel, the same files come from inside the package: the build copies
static/ and the vendor files the pages load into app/http/web_files/, one folder per
URL prefix above (pyproject.toml's [tool.setuptools] tables). A checkout has no such
folder, so there (an editable install too) they come from the repository root as above.

These routes stay open when auth is on: they serve the project's own code and the API's
description, never data; the pages ask for the token and send it on every API call.
"""

from __future__ import annotations

import logging
import mimetypes
import os
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

log = logging.getLogger("app.http.web")

WEB_FILES = Path(__file__).resolve().parent / "web_files"  # only in an installed wheel
if WEB_FILES.is_dir():
    STATIC_DIR = WEB_FILES / "static"
    VENDOR_DIRS = {  # URL prefix under /vendor/ -> the wheel's copy of the npm package's browser files
        "ort": WEB_FILES / "ort",
        "uplot": WEB_FILES / "uplot",
        "swagger-ui": WEB_FILES / "swagger_ui",
    }
    MISSING_VENDOR_HINT = "the wheel was built without the front-end packages: run `npm ci` before building it"
else:
    ROOT = Path(__file__).resolve().parents[2]  # the checkout: app/http/web.py
    STATIC_DIR = ROOT / "static"
    NODE_MODULES = ROOT / "node_modules"
    VENDOR_DIRS = {  # URL prefix under /vendor/ -> the npm package's folder of browser files
        "ort": NODE_MODULES / "onnxruntime-web" / "dist",
        "uplot": NODE_MODULES / "uplot" / "dist",
        "swagger-ui": NODE_MODULES / "swagger-ui-dist",
    }
    MISSING_VENDOR_HINT = "front-end packages are not installed: run `npm ci` in the repository root"

# A browser refuses an ES module (.mjs) served with a non-JavaScript type, and compiles
# .wasm in streaming mode only when it comes as application/wasm; the machine's
# mime.types may know neither, so they are set here.
for _media_type, _suffix in [
    ("text/javascript", ".js"),
    ("text/javascript", ".mjs"),
    ("application/wasm", ".wasm"),
    ("application/json", ".map"),
    ("text/css", ".css"),
    ("image/svg+xml", ".svg"),
]:
    mimetypes.add_type(_media_type, _suffix)

# Our own files change with the code, so browsers revalidate them; the vendor files are
# fixed by the pinned versions in package-lock.json, so browsers keep them for a day.
STATIC_CACHE = "no-cache"
VENDOR_CACHE = "public, max-age=86400"


class _Files(StaticFiles):
    """Starlette's static files with a Cache-Control header and a 404 that says what is missing."""

    def __init__(self, directory: Path, cache_control: str, missing_detail: str = "Not Found") -> None:
        super().__init__(directory=directory, check_dir=False)
        self.cache_control = cache_control
        self.missing_detail = missing_detail

    async def check_config(self) -> None:
        """Starlette fails every request when the folder is missing; get_response says why instead."""

    async def get_response(self, path: str, scope: Scope):
        # One stat, microseconds: cheaper on the event loop than a hop to the thread pool.
        if not os.path.isdir(self.directory):  # noqa: ASYNC240
            raise HTTPException(404, self.missing_detail)
        response = await super().get_response(path, scope)
        response.headers["Cache-Control"] = self.cache_control
        return response


def missing_vendor_dirs() -> list[str]:
    """The vendor folders that are absent (all of them before `npm ci`)."""
    return [str(path) for path in VENDOR_DIRS.values() if not path.is_dir()]


def warn_if_vendor_missing() -> None:
    """At startup: say once, clearly, when the pages cannot work."""
    if missing := missing_vendor_dirs():
        log.warning("%s; missing %s. The dashboard, the demo and /docs will not work.", MISSING_VENDOR_HINT, ", ".join(missing))


def mount_web(app: FastAPI) -> None:
    """Add the dashboard, the static and vendor files, and /docs to the app."""

    # HEAD too, as the static files answer it: a load balancer's or a script's check that the page is there.
    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": STATIC_CACHE})

    @app.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
    async def docs() -> HTMLResponse:
        # One stat, as _Files does. Without Swagger UI's files the page would stay blank: say why instead.
        if not os.path.isdir(VENDOR_DIRS["swagger-ui"]):  # noqa: ASYNC240
            return HTMLResponse(
                f"<!doctype html><title>API docs unavailable</title><p>The API docs page needs Swagger UI, which is "
                f"missing: {MISSING_VENDOR_HINT}. The API's description is at <a href=\"{app.openapi_url}\">"
                f"{app.openapi_url}</a>.</p>",
                headers={"Cache-Control": STATIC_CACHE},
            )
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{app.title} - API docs",
            swagger_js_url="/vendor/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/vendor/swagger-ui/swagger-ui.css",
            swagger_favicon_url="/vendor/swagger-ui/favicon-32x32.png",
        )

    app.mount("/static", _Files(STATIC_DIR, STATIC_CACHE), name="static")
    for package, directory in VENDOR_DIRS.items():
        app.mount(f"/vendor/{package}", _Files(directory, VENDOR_CACHE, MISSING_VENDOR_HINT), name=f"vendor-{package}")
