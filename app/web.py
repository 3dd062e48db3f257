"""The browser side of the gateway: the dashboard at `/`, `static/`, and npm's vendor files.

    /                      static/index.html, the live dashboard
    /static/<file>         static/ (the RLlink ES module, the CartPole demo, styles)
    /vendor/ort/<file>     node_modules/onnxruntime-web/dist/ (the policy runs in the page)
    /vendor/uplot/<file>   node_modules/uplot/dist/ (the charts)

Everything is served from this machine: `npm ci` installs the pinned vendor packages
(package-lock.json) into node_modules/, and no page loads anything from elsewhere. If
node_modules is missing the gateway still starts and logs a warning; /vendor/ answers
404 with the fix, and the pages say which files are missing.

Media types are set here rather than guessed: a browser refuses an ES module (.mjs)
served with a non-JavaScript type, and compiles .wasm in streaming mode only when it
comes as application/wasm. Both depend on the machine's mime.types when guessed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import FileResponse

log = logging.getLogger("app.web")

ROOT = Path(__file__).resolve().parent.parent
STATIC_DIR = ROOT / "static"
NODE_MODULES = ROOT / "node_modules"
VENDOR_DIRS = {  # URL prefix under /vendor/ -> the npm package's folder of browser files
    "ort": NODE_MODULES / "onnxruntime-web" / "dist",
    "uplot": NODE_MODULES / "uplot" / "dist",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".wasm": "application/wasm",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
MISSING_VENDOR_HINT = "front-end packages are not installed: run `npm ci` in the repository root"


def missing_vendor_dirs() -> list[str]:
    """The vendor folders that are absent (all of them before `npm ci`)."""
    return [str(path) for path in VENDOR_DIRS.values() if not path.is_dir()]


@asynccontextmanager
async def _warn_if_vendor_missing(_app: FastAPI) -> AsyncIterator[None]:
    """At startup: say once, clearly, when the pages cannot work."""
    if missing := missing_vendor_dirs():
        log.warning("%s; missing %s. The dashboard and the demo will not work.", MISSING_VENDOR_HINT, ", ".join(missing))
    yield


router = APIRouter(lifespan=_warn_if_vendor_missing)


# Our own files change with the code, so browsers revalidate them; the vendor files are
# fixed by the pinned versions in package-lock.json, so browsers keep them for a day.
STATIC_CACHE = "no-cache"
VENDOR_CACHE = "public, max-age=86400"


def _file(root: Path, relative: str, cache_control: str, missing_detail: str = "not found") -> FileResponse:
    """A file below `root` with its media type; 404 for anything else (no `..` escapes)."""
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        raise HTTPException(404, missing_detail)
    media_type = MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream")
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": cache_control})


@router.get("/", include_in_schema=False)
async def dashboard() -> FileResponse:
    return _file(STATIC_DIR, "index.html", STATIC_CACHE)


@router.get("/static/{relative:path}", include_in_schema=False)
async def static_file(relative: str) -> FileResponse:
    return _file(STATIC_DIR, relative, STATIC_CACHE)


@router.get("/vendor/{package}/{relative:path}", include_in_schema=False)
async def vendor_file(package: str, relative: str) -> FileResponse:
    if package not in VENDOR_DIRS:
        raise HTTPException(404, f"no vendor package {package!r}; there are {sorted(VENDOR_DIRS)}")
    root = VENDOR_DIRS[package]
    return _file(root, relative, VENDOR_CACHE, "not found" if root.is_dir() else MISSING_VENDOR_HINT)
