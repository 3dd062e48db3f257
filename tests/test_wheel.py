"""The package as a user gets it (issue 33): `python -m build` makes a wheel that holds the
code, the dashboard (static/) and the vendor files the pages load; installed (not
editable) into a fresh virtual environment, its `rllink-gateway` console script serves
/, /docs and everything they load from the package itself, and a reference client run
from that environment trains CartPole to a target.

- The wheel is built as `python -m build` builds it (an sdist, then the wheel from the
  sdist, so the sdist must carry static/ and the vendor files too), from a clean copy of
  the checkout, without build isolation: the test lock's setuptools builds it, offline.
- The fresh venv gets no copy of the third-party packages: a .pth file in its
  site-packages names the project's .venv site-packages, which puts that folder on
  sys.path as a plain path entry; the .pth files inside it (the checkout's editable
  install) are not run, so `app` is the wheel's (checked below). The wheel goes in
  before that .pth exists, so pip sees no other rllink-gateway to replace.
- Every process runs from a temporary folder, with no PYTHONPATH: nothing of the
  checkout is reachable, and the pages load nothing from other hosts.
- The wheel's metadata declares a distribution for every third-party module that the
  gateway's code imports (app/, less clients/python/rllink_clients/ and app/cluster/, whose packages are
  the `client` and `ray` extras).

Slow (a build, a venv, a gateway and a training run: about 30 s here); skipped when
node_modules is missing (`npm ci`), as the wheel would lack the vendor files.

A clone without node_modules (`pip install git+URL`) builds too (setup.py): a wheel without
the vendor files, whose gateway says what is missing on /vendor/ and /docs (a few seconds:
the wheel alone, straight from the tree, as pip builds it).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from contextlib import AbstractContextManager
from importlib.metadata import packages_distributions
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from app.http import web

from .gateway_process import GatewayProcess, gateway_process

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
WEB_FILES = "app/http/web_files"  # where pyproject.toml puts the browser side in the wheel
# Of each npm package, exactly the files the pages load (onnxruntime-web's dist is 139 MB).
WHEEL_VENDOR_FILES = {
    "ort": {"ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"},
    "uplot": {"uPlot.esm.js", "uPlot.min.css"},
    "swagger_ui": {"swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "LICENSE", "NOTICE"},
}
MAX_WHEEL_BYTES = 8_000_000  # about 4.5 MB: the ort wasm (14 MB) compresses to about 3.5 MB
# Loaded at run time by import(`${base}...`) (static/charts.js, static/onnx_policy.js and
# onnxruntime-web itself), so not found by following the pages' links and imports.
RUNTIME_VENDOR_FILES = {
    "/vendor/uplot/uPlot.esm.js": "text/javascript",
    "/vendor/uplot/uPlot.min.css": "text/css",
    "/vendor/ort/ort.wasm.min.mjs": "text/javascript",
    "/vendor/ort/ort-wasm-simd-threaded.mjs": "text/javascript",
    "/vendor/ort/ort-wasm-simd-threaded.wasm": "application/wasm",
}
TARGET_RETURN = 200  # CartPole: a random policy scores about 22; 200 takes about 11k env steps here
MAX_ENV_STEPS = 40_000
CLIENT_TIMEOUT_S = 150

# src="..." / href="..." in HTML; import ... from '...' and import('...') in our ES modules.
HTML_REFS = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")
JS_IMPORTS = re.compile(r"""(?:\bfrom|\bimport\s*\(?)\s*["']([^"']+)["']""")


def _clean_env() -> dict[str, str]:
    """This environment, less what could put the checkout on a child's sys.path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"$ {' '.join(cmd)}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def _clean_copy(dest: Path, node_modules: bool = True) -> None:
    """The checkout's files as git sees them (tracked, and untracked but not ignored), with
    npm's node_modules linked in (unless `node_modules` is False: a plain clone): what a
    fresh clone after `npm ci` holds. A build in the
    checkout itself would see what earlier builds left there (setuptools reuses the file
    list of a stale *.egg-info/SOURCES.txt), so a file could reach the wheel that
    pyproject.toml no longer asks for."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # not a tracked file deleted in the working tree
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    if node_modules:
        (dest / "node_modules").symlink_to(ROOT / "node_modules")


def _skip_unless_checkout() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the wheel is built from the checkout's files as git lists them: no git, or not a checkout")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if missing := web.missing_vendor_dirs():
        pytest.skip(f"{web.MISSING_VENDOR_HINT} (missing {', '.join(missing)})")
    _skip_unless_checkout()
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    _clean_copy(source)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)], cwd=out, timeout=240)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed, and the project's .venv packages on its path."""
    venv = tmp_path_factory.mktemp("venv")
    cwd = tmp_path_factory.mktemp("cwd")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=cwd, timeout=60)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "--quiet", str(wheel)], cwd=cwd, timeout=120)
    site_packages = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         cwd=cwd, timeout=30).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}  # this (the project's) .venv
    (Path(site_packages) / "rllink-test-deps.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return venv


def test_the_wheel_holds_the_code_the_dashboard_and_only_the_vendor_files_the_pages_load(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "app").rglob("*.py") if "__pycache__" not in path.parts}
    assert modules - names == set(), "modules missing from the wheel: a new subpackage goes in pyproject.toml's `packages`"
    static = {f"{WEB_FILES}/static/{path.relative_to(ROOT / 'static').as_posix()}"
              for path in (ROOT / "static").rglob("*") if path.is_file()}
    assert static and static - names == set(), "static/ files missing from the wheel"
    for folder, files in WHEEL_VENDOR_FILES.items():
        assert {n.rsplit("/", 1)[1] for n in names if n.startswith(f"{WEB_FILES}/{folder}/")} == files, folder
    assert wheel.stat().st_size < MAX_WHEEL_BYTES


def _third_party_imports(first_party: set[str]) -> dict[str, set[str]]:
    """Top-level third-party module -> the files of the gateway's code that import it
    (`first_party`: the wheel's own packages)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "app").rglob("*.py"):
        if path.relative_to(ROOT / "app").parts[0] in ("clients", "cluster") or "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in first_party and top != "__future__":
                    found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_the_wheel_declares_every_third_party_package_the_gateway_imports(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
        first_party = {name.split("/")[0] for name in archive.namelist() if "/" in name and ".dist-info/" not in name}
    assert first_party == {"app", "rllink", "rllink_clients"}  # the wire format and the clients ship with the gateway
    requirements = [Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")]
    declared = {canonicalize_name(r.name) for r in requirements if r.marker is None or "extra" not in str(r.marker)}
    providers = packages_distributions()  # module -> the installed distributions that provide it
    imports = _third_party_imports(first_party)
    assert {"torch", "fastapi", "onnxruntime", "yaml"} <= imports.keys()  # the scan finds imports at all
    undeclared = {
        module: sorted(files) for module, files in imports.items()
        if not {canonicalize_name(d) for d in providers.get(module, [module])} & declared
    }
    assert undeclared == {}, "imported by the gateway, not in pyproject.toml's [project] dependencies"


def _console_script_gateway(venv: Path, cwd: Path) -> AbstractContextManager[GatewayProcess]:
    """The wheel's `rllink-gateway` on free ports, from `cwd`; SIGINT (then SIGKILL) on exit."""
    return gateway_process(
        cwd / "checkpoints", cwd / "gateway.log", root=cwd, launcher=(),
        executable=str(venv / "bin" / "rllink-gateway"), env=_clean_env(),
    )


def _crawl(http: httpx.Client, base_url: str, start: list[str]) -> dict[str, httpx.Response]:
    """GET the pages and all they reference on this gateway, following HTML's src/href and
    our ES modules' imports; fail on a reference to another host."""
    seen: dict[str, httpx.Response] = {}
    todo = list(start)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        response = seen[path] = http.get(path)
        media_type = response.headers.get("content-type", "").split(";")[0]
        if media_type == "text/html":
            refs = HTML_REFS.findall(response.text)
        elif media_type == "text/javascript" and path.startswith("/static/"):
            refs = JS_IMPORTS.findall(response.text)
        else:
            continue
        for ref in refs:
            if ref.startswith(("data:", "#")):
                continue
            url = urlsplit(urljoin(base_url + path, ref))
            assert url.netloc == urlsplit(base_url).netloc, f"{path} loads {ref} from another host"
            todo.append(url.path)
    return seen


def test_the_installed_wheel_serves_the_pages_offline_and_trains_cartpole(venv: Path, tmp_path: Path) -> None:
    python = str(venv / "bin" / "python")
    where = json.loads(_run([python, "-c", (
        "import json, app, app.http.web as web; "
        "print(json.dumps([app.__file__, str(web.STATIC_DIR), *map(str, web.VENDOR_DIRS.values())]))"
    )], cwd=tmp_path, timeout=60).stdout)
    for path in where:  # the wheel's code and files, not the checkout's (editable) ones
        assert Path(path).is_relative_to(venv), path

    with _console_script_gateway(venv, tmp_path) as gateway:
        with httpx.Client(base_url=gateway.base_url, timeout=30) as http:
            served = _crawl(http, gateway.base_url, ["/", "/docs", "/openapi.json"])
            for path, media_type in RUNTIME_VENDOR_FILES.items():
                served[path] = response = http.get(path)
                assert response.headers["content-type"].split(";")[0] == media_type, path
        print("served:", " ".join(sorted(served)))
        failed = {path: response.status_code for path, response in served.items() if response.status_code != 200}
        assert failed == {}, gateway.log_tail()
        for expected in ("/static/cartpole.html", "/static/dashboard.js", "/static/charts.js", "/static/rllink.js",
                         "/static/style.css", "/vendor/swagger-ui/swagger-ui-bundle.js",
                         "/vendor/swagger-ui/swagger-ui.css"):
            assert expected in served, f"no page references {expected}"
        assert served["/static/dashboard.js"].content == (ROOT / "static" / "dashboard.js").read_bytes()

        client = subprocess.run(
            [python, "-m", "rllink_clients.cartpole", "--transport", "tcp", "--port", str(gateway.tcp_port),
             "--target-return", str(TARGET_RETURN), "--max-env-steps", str(MAX_ENV_STEPS)],
            cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
        )
    print(client.stdout[-2000:], client.stderr[-2000:])
    assert client.stdout.strip(), f"the client exited with {client.returncode}:\n{client.stderr[-4000:]}"
    summary = json.loads(client.stdout.strip().splitlines()[-1])
    assert summary["reached_target"] and client.returncode == 0, summary
    assert summary["mean_return_last_20"] >= TARGET_RETURN


# In the wheel's code (PYTHONPATH: the unpacked wheel, ahead of the checkout's editable
# install): the pages' routes, in process, answer for the missing vendor files.
WITHOUT_VENDOR_FILES = """
import json, app, fastapi, fastapi.testclient, app.http.web as web
server = fastapi.FastAPI(docs_url=None, redoc_url=None)  # as the gateway makes its app: /docs is web.py's
web.mount_web(server)
http = fastapi.testclient.TestClient(server)
vendor, docs, page = (http.get(path) for path in ("/vendor/ort/ort.wasm.min.mjs", "/docs", "/"))
print(json.dumps({"app": app.__file__, "vendor": [vendor.status_code, vendor.text], "docs": [docs.status_code, docs.text],
                  "page": page.status_code}))
"""


def test_a_clone_without_node_modules_builds_a_wheel_whose_pages_say_what_is_missing(tmp_path: Path) -> None:
    _skip_unless_checkout()
    source, out, unpacked = tmp_path / "source", tmp_path / "dist", tmp_path / "unpacked"
    _clean_copy(source, node_modules=False)
    built = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(source)], cwd=tmp_path,
                 timeout=240)  # fmt: skip
    assert "run `npm ci` first" in built.stdout + built.stderr  # the build says what it leaves out
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(unpacked)
    assert f"{WEB_FILES}/static/index.html" in names and "app/http/web.py" in names
    assert not any(n.startswith(f"{WEB_FILES}/{folder}/") for n in names for folder in WHEEL_VENDOR_FILES)

    env = {**_clean_env(), "PYTHONPATH": str(unpacked)}
    done = subprocess.run([sys.executable, "-c", WITHOUT_VENDOR_FILES], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(answers["app"]).is_relative_to(unpacked), answers["app"]  # the wheel's code, not the checkout's
    assert answers["vendor"][0] == 404 and "npm ci" in answers["vendor"][1]
    assert answers["docs"][0] == 200 and "npm ci" in answers["docs"][1] and "swagger-ui-bundle.js" not in answers["docs"][1]
    assert answers["page"] == 200
