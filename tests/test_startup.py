"""`python -m app` as a person starts it: what it says when it starts, and when it cannot."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from app.settings.config import Settings
from app.startup.server import where_to_connect

from .gateway_process import PING, PONG, ROOT, free_port, gateway_process
from .helpers import wait_until

pytestmark = pytest.mark.e2e


def start_failing(tmp_path: Path, *flags: str, workers: int = 0, launcher: tuple[str, ...] = ("-m", "app")) -> tuple[int, list[str]]:
    """Run `python -m app` (or `launcher`) expecting it to give up; its exit code and output lines."""
    cmd = [sys.executable, *launcher, "--checkpoint-dir", str(tmp_path / "checkpoints"), "--decode-workers", str(workers), *flags]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    return done.returncode, (done.stdout + done.stderr).splitlines()


def listening(port: int = 0) -> socket.socket:
    """Another program's socket, listening on 127.0.0.1 (on a free port by default)."""
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", port))
    taken.listen()
    return taken


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


def test_both_ports_in_use_are_named_in_one_line_before_anything_starts(tmp_path):
    with listening() as http, listening() as tcp:
        http_port, tcp_port = http.getsockname()[1], tcp.getsockname()[1]
        code, lines = start_failing(tmp_path, "--http-port", str(http_port), "--tcp-port", str(tcp_port), workers=2)
    assert code == 2
    line = the_error_line(lines)
    assert f"HTTP port 127.0.0.1:{http_port} and TCP port 127.0.0.1:{tcp_port} are already in use" in line, line
    assert "--http-port and --tcp-port (0 picks a free one; --no-tcp-enabled turns the bridge off)" in line, line
    # Checked first: nothing was restored, nor any worker started (and stopped again).
    assert not any("checkpoints in" in line or "decode worker" in line for line in lines), lines


def test_a_tcp_port_in_use_with_http_free_is_one_line_with_decode_workers_on(tmp_path):
    with listening() as tcp:
        tcp_port = tcp.getsockname()[1]
        code, lines = start_failing(tmp_path, "--http-port", "0", "--tcp-port", str(tcp_port), workers=2)
    assert code == 2
    line = the_error_line(lines)
    assert line.endswith(
        f"cannot start: TCP port 127.0.0.1:{tcp_port} is already in use: stop the program using it, or choose another "
        "port with --tcp-port (0 picks a free one; --no-tcp-enabled turns the bridge off)"
    ), line


def test_one_port_for_both_http_and_tcp_is_refused_as_such(tmp_path):
    port = free_port()
    code, lines = start_failing(tmp_path, "--http-port", str(port), "--tcp-port", str(port))
    assert code == 2
    line = the_error_line(lines)
    assert f"HTTP and TCP cannot both listen on port {port}" in line and "--http-port or --tcp-port" in line, line


# The TCP port is free when checked, then another program takes it before the bridge
# binds it: the bind gives the same one line. (Decode workers start with the first large
# body, so none runs yet; tests/test_decode_workers.py stops some still starting up.)
TAKEN_WHILE_STARTING = """
import socket
from app.transport.tcp import TcpBridge
from app.__main__ import main

bind = TcpBridge.start

async def start_after_another_program_took_the_port(self):
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", self._settings.tcp_port))
    taken.listen()
    await bind(self)

TcpBridge.start = start_after_another_program_took_the_port
main()
"""


def test_a_tcp_port_taken_after_the_check_gives_the_same_one_line(tmp_path):
    tcp_port = free_port()
    code, lines = start_failing(
        tmp_path, "--http-port", "0", "--tcp-port", str(tcp_port), workers=2, launcher=("-c", TAKEN_WHILE_STARTING)
    )
    assert code == 2
    assert not any("Traceback" in line for line in lines), lines
    line = the_error_line(lines)
    assert f"cannot start: TCP port 127.0.0.1:{tcp_port} is already in use" in line and "--tcp-port (0 picks" in line, line


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


def test_the_log_says_where_every_address_is_at_the_ports_bound(tmp_path):
    """Started on port 0 for both: the block of addresses names the ports picked, and each works."""
    log_path = tmp_path / "gateway.log"
    cmd = [sys.executable, "-m", "app", "--http-port", "0", "--tcp-port", "0", "--decode-workers", "0",
           "--checkpoint-dir", str(tmp_path / "checkpoints")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        def block() -> dict[str, str] | None:
            """The block's lines (`INFO app:   dashboard  http://...`) as {what: address}, once all are out."""
            assert proc.poll() is None, log_path.read_text()
            lines = log_path.read_text().splitlines()
            starts = [i for i, line in enumerate(lines) if line.endswith("INFO app: the gateway is serving:")]
            if not starts or len(lines) < starts[0] + 5:
                return None
            entries = [re.search(r"INFO app:   (\S.*?)\s{2,}(\S.*)$", line) for line in lines[starts[0] + 1:starts[0] + 5]]
            assert all(entries), lines[starts[0]:]
            return {entry[1]: entry[2] for entry in entries if entry}

        wait_until(lambda: block() is not None, timeout_s=90, what="the block of addresses in the log")
        addresses = block()
        assert addresses is not None
        http_port = int(addresses["dashboard"].rsplit(":", 1)[1].rstrip("/"))
        tcp_host, tcp_port = addresses["TCP"].rsplit(":", 1)
        assert http_port != 0 and int(tcp_port) != 0
        assert addresses == {
            "dashboard": f"http://127.0.0.1:{http_port}/",
            "API docs": f"http://127.0.0.1:{http_port}/docs",
            "WebSocket": f"ws://127.0.0.1:{http_port}/rllink",
            "TCP": f"127.0.0.1:{tcp_port}",
        }
        for page in ("dashboard", "API docs"):
            assert httpx.get(addresses[page], timeout=30).status_code == 200, page
        with connect(addresses["WebSocket"]) as ws:
            ws.send(PING)
            assert ws.recv(timeout=30) == PONG
        with socket.create_connection((tcp_host, int(tcp_port)), timeout=30) as sock:
            sock.sendall(PING)
            received = b""
            while len(received) < len(PONG) and (data := sock.recv(64)):
                received += data
            assert received == PONG
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log_path.read_text()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (  # every interface: this machine's loopback to use, and a line that says so
            {"host": "0.0.0.0"},
            [("dashboard", "http://127.0.0.1:8000/"), ("API docs", "http://127.0.0.1:8000/docs"),
             ("WebSocket", "ws://127.0.0.1:8000/rllink"), ("TCP", "127.0.0.1:5555"),
             ("", "(listening on every interface: HTTP on 0.0.0.0, TCP on 0.0.0.0; "
                  "from another machine, use this machine's name or address)")],
        ),
        (  # IPv6 in brackets; TCP on an interface of its own
            {"host": "::", "tcp_host": "::1"},
            [("dashboard", "http://[::1]:8000/"), ("API docs", "http://[::1]:8000/docs"),
             ("WebSocket", "ws://[::1]:8000/rllink"), ("TCP", "[::1]:5555"),
             ("", "(listening on every interface: HTTP on ::; from another machine, use this machine's name or address)")],
        ),
        (  # TLS: https, wss, and the bridge says so
            {"tls_certfile": "cert.pem", "tls_keyfile": "key.pem"},
            [("dashboard", "https://127.0.0.1:8000/"), ("API docs", "https://127.0.0.1:8000/docs"),
             ("WebSocket", "wss://127.0.0.1:8000/rllink"), ("TCP", "127.0.0.1:5555 (TLS)")],
        ),
        (
            {"tcp_enabled": False},
            [("dashboard", "http://127.0.0.1:8000/"), ("API docs", "http://127.0.0.1:8000/docs"),
             ("WebSocket", "ws://127.0.0.1:8000/rllink"), ("TCP", "off (--no-tcp-enabled)")],
        ),
    ],
)
def test_the_addresses_name_a_usable_host_and_the_scheme(overrides, expected):
    settings = Settings(**overrides)
    tcp_port = 5555 if settings.tcp_enabled else None
    assert where_to_connect(settings, 8000, tcp_port) == expected


@pytest.mark.parametrize("name", ["action_mask", "action_dist_inputs", "rllink/obs"])
def test_an_onnx_input_name_the_model_uses_itself_is_refused_saying_why(tmp_path, name):
    code, lines = start_failing(tmp_path, "--onnx-input-name", name)
    assert code == 2
    (line,) = [line for line in lines if line.startswith("cannot start")]
    assert f"onnx_input_name {name!r} is taken" in line and ("model's" in line), line
