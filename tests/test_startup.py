"""`python -m app` as a person starts it: what it says when it starts, and when it cannot."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .gateway_process import ROOT, free_port, gateway_process

pytestmark = pytest.mark.e2e


def start_failing(tmp_path: Path, *flags: str) -> tuple[int, list[str]]:
    """Run `python -m app` expecting it to give up; its exit code and output lines."""
    cmd = [sys.executable, "-m", "app", "--checkpoint-dir", str(tmp_path / "checkpoints"), "--decode-workers", "0", *flags]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    return done.returncode, (done.stdout + done.stderr).splitlines()


def the_error_line(lines: list[str]) -> str:
    """The one line that explains the failure; nothing else in the output is an error or a traceback."""
    assert not any("Traceback" in line or line.startswith("  File ") for line in lines), "\n".join(lines)
    (line,) = [line for line in lines if " ERROR " in line]
    return line


@pytest.mark.parametrize("which", ["http", "tcp"])
def test_a_port_in_use_is_one_line_naming_the_flag_and_exit_2(tmp_path, which):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = free_port()
        ports = {"http": port, "tcp": other} if which == "http" else {"http": other, "tcp": port}
        code, lines = start_failing(tmp_path, "--http-port", str(ports["http"]), "--tcp-port", str(ports["tcp"]))
    assert code == 2
    line = the_error_line(lines)
    assert f"127.0.0.1:{port}" in line and "in use" in line and f"--{which}-port" in line


def test_a_checkpoint_of_other_spaces_is_one_line_naming_the_checkpoint_dir_and_exit_2(tmp_path):
    pendulum = ["--observation-space", '{"type": "box", "shape": [3]}']
    with gateway_process(tmp_path / "checkpoints", tmp_path / "first.log", *pendulum, "--decode-workers", "0"):
        pass  # stopped with SIGINT: it saves its checkpoint
    checkpoint = tmp_path / "checkpoints" / "default_policy" / "policy.pt"
    assert checkpoint.is_file()
    code, lines = start_failing(tmp_path, "--http-port", str(free_port()), "--tcp-port", str(free_port()))
    assert code == 2
    line = the_error_line(lines)
    assert str(checkpoint) in line and "--checkpoint-dir" in line


def test_the_log_says_whether_training_starts_fresh_or_from_which_checkpoint(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    with gateway_process(checkpoints, tmp_path / "first.log", "--decode-workers", "0"):
        pass
    first = (tmp_path / "first.log").read_text()
    assert "fresh" in first and str(checkpoints) in first
    assert "event loop: uvloop.Loop" in first  # installed with the gateway (its lock), so used: faster sockets
    with gateway_process(checkpoints, tmp_path / "second.log", "--decode-workers", "0"):
        pass
    restored = [line for line in (tmp_path / "second.log").read_text().splitlines() if "restored" in line]
    assert restored and str(checkpoints) in restored[0] and "restored default_policy at weights_seq_no 0" in restored[0]


@pytest.mark.parametrize("name", ["action_mask", "action_dist_inputs", "rllink/obs"])
def test_an_onnx_input_name_the_model_uses_itself_is_refused_saying_why(tmp_path, name):
    code, lines = start_failing(tmp_path, "--onnx-input-name", name)
    assert code == 2
    (line,) = [line for line in lines if line.startswith("cannot start")]
    assert f"onnx_input_name {name!r} is taken" in line and ("model's" in line), line
