"""The Python client side is a package of its own: it trains through a gateway with the
gateway's code and its heavy dependencies out of reach, and builds as a wheel that asks
for none of them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from .helpers import gateway_settings, running_gateway

ROOT = Path(__file__).resolve().parent.parent
CLIENT_PROJECT = ROOT / "clients" / "python"
SERVER_ONLY = ["app", "torch", "fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core", "pydantic_settings"]

# Imports of the server's packages fail (a None in sys.modules makes `import` raise), then
# the client's command line runs as `python -m rllink_clients.cartpole` would.
BLOCKED_RUN = f"""
import runpy, sys
for name in {SERVER_ONLY!r}:
    sys.modules[name] = None
sys.argv = ["rllink_clients.cartpole", *sys.argv[1:]]
runpy.run_module("rllink_clients.cartpole", run_name="__main__", alter_sys=True)
"""


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_the_reference_client_trains_without_the_gateways_packages(tmp_path, transport):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        port = gateway.tcp_port if transport == "tcp" else gateway.http_port
        done = subprocess.run(
            [sys.executable, "-c", BLOCKED_RUN, "--transport", transport, "--port", str(port),
             "--target-return", "200", "--max-env-steps", "60000"],
            capture_output=True, text=True, timeout=240, cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["reached_target"], result


def test_blocking_works_so_the_test_above_can_fail():
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN.replace("rllink_clients.cartpole", "app.startup.cli")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "ImportError" in done.stderr


@pytest.mark.slow
def test_the_client_wheel_holds_the_two_packages_and_asks_for_no_server_dependency(tmp_path):
    # Built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    sources = [p for p in CLIENT_PROJECT.rglob("*") if p.is_file() and not {"__pycache__", "build"} & set(p.parts)]
    project = tmp_path / "project"
    for path in sources:
        (project / path.relative_to(CLIENT_PROJECT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, project / path.relative_to(CLIENT_PROJECT))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path), str(project)],
        capture_output=True, text=True, timeout=240,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("rllink_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(archive.read(next(n for n in names if n.endswith("/METADATA"))).decode())
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"rllink", "rllink_clients"}
    expected = {p.relative_to(CLIENT_PROJECT).as_posix() for p in sources if p.suffix == ".py"}
    assert expected <= set(names)
    required = {line.split(";")[0].split(">")[0].split("=")[0].strip().lower() for line in metadata.get_all("Requires-Dist") or []}
    assert required == {"numpy", "orjson", "msgpack", "websockets", "gymnasium", "onnxruntime"}
    assert not required & {"torch", "fastapi", "pydantic", "uvicorn", "starlette"}
