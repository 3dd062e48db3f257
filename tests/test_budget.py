"""The training budget ends a run as a first Ctrl-C does: real `python -m app` processes
stop at `max_seconds` with nobody connected, or once every module has trained its own
`max_env_steps` from real EPISODES frames; they save, say so in one line, and exit 0.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import httpx
import pytest

from .gateway_process import ROOT, free_port, gateway_process
from .helpers import chunk, frame, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # gateways as their own processes, ~10 s each

CARTPOLE = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}}


def test_max_seconds_stops_a_run_nobody_connects_to_and_exits_0(tmp_path):
    command = [
        sys.executable,
        "-m",
        "app",
        "--http-port",
        str(free_port()),
        "--tcp-port",
        str(free_port()),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-id",
        "idle",
        "--decode-workers",
        "0",
        "--max-seconds",
        "3",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "budget spent (max_seconds 3 reached): stopping" in output
    summary = re.search(
        r"run ended \(max_seconds 3 reached\): env steps trained default_policy 0 \(weights_seq_no 0\) "
        r"in ([\d.]+) s; models in \S+/runs/idle/models/<module>/latest\.onnx",
        output,
    )
    assert summary is not None and float(summary[1]) >= 3, output[-3000:]
    assert (tmp_path / "runs" / "idle" / "checkpoints" / "default_policy" / "policy.pt").exists()  # saved as on Ctrl-C


def version_of(gateway, module_id: str) -> int:
    (policy,) = [p for p in httpx.get(f"{gateway.base_url}/api/policies").json() if p["module_id"] == module_id]
    return policy["weights_seq_no"]


def test_each_module_spends_its_own_env_steps_and_the_run_ends_when_all_have(tmp_path):
    run_dir = tmp_path / "runs" / "two"
    log_path = tmp_path / "gateway.log"
    flags = (
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-id",
        "two",
        "--decode-workers",
        "0",
        "--train-batch-size",
        "1000",
        "--policies",
        json.dumps({"a": CARTPOLE, "b": CARTPOLE}),
        "--max-env-steps",
        json.dumps({"a": 1000, "b": 3000}),
    )
    with gateway_process(run_dir / "checkpoints", log_path, *flags) as gateway:
        with socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=30) as sock:
            sock.sendall(frame({"type": "EPISODES", "episodes": [chunk(1000, seed=1, module_id="a"), chunk(1000, seed=2, module_id="b")]}))
            wait_until(
                lambda: "budget: a trained 1000 env steps of its 1000; waiting for b" in log_path.read_text(),
                timeout_s=120,
                what="module a's budget to be spent",
            )
            assert gateway.proc.poll() is None  # b has steps left: the run goes on
            # a trains no more: its steps are dropped (counted), its version stays; b trains on.
            version_a = version_of(gateway, "a")
            sock.sendall(frame({"type": "EPISODES", "episodes": [chunk(1000, seed=3, module_id="a"), chunk(1000, seed=4, module_id="b")]}))
            metrics = wait_until(
                lambda: (m := httpx.get(f"{gateway.base_url}/api/metrics").json())["policies"]["b"][
                    "num_env_steps_trained_lifetime"] == 2000 and m,
                timeout_s=120, what="b's second batch",
            )
            assert metrics["dropped_env_steps"].get("budget") == 1000, metrics["dropped_env_steps"]
            assert metrics["policies"]["a"]["num_env_steps_trained_lifetime"] == 1000
            assert version_of(gateway, "a") == version_a
            sock.sendall(frame({"type": "EPISODES", "episodes": [chunk(1000, seed=5, module_id="b")]}))
            assert gateway.proc.wait(timeout=300) == 0, gateway.log_tail()
    log = log_path.read_text()
    assert "a trains no more (budget): it keeps its version" in log
    assert "budget: b trained 3000 env steps of its 3000" in log and "budget spent (max_env_steps of every module reached)" in log
    assert re.search(
        r"run ended \(max_env_steps of every module reached\): env steps trained "
        r"a 1000 \(weights_seq_no \d+\), b 3000 \(weights_seq_no \d+\) in [\d.]+ s; models in ",
        log,
    ), log[-3000:]
    for module_id in ("a", "b"):
        assert (run_dir / "models" / module_id / "latest.onnx").stat().st_size > 0
