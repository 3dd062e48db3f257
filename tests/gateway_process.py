"""A gateway as its own process (`python -m app`), for tests that must kill it.

The in-thread gateway of conftest.py cannot be SIGKILLed without killing the tests;
this one can. Free ports are picked here and handed to the process; the gateway is
ready once a PING over TCP gets its PONG and the HTTP port accepts connections.
The benchmarks (bench/_common.py) start their gateways with it too.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout under test: `python -m app` runs from here
PING = b'00000016{"type": "PING"}'
PONG = b'00000016{"type": "PONG"}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GatewayProcess:
    """A running `python -m app` process and where to reach it."""

    def __init__(self, proc: subprocess.Popen, http_port: int, tcp_port: int, log_path: Path) -> None:
        self.proc = proc
        self.http_port = http_port
        self.tcp_port = tcp_port
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.http_port}/rllink"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final checkpoint, sockets reset by the kernel."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


@contextmanager
def gateway_process(
    checkpoint_dir: Path,
    log_path: Path,
    *flags: str,
    startup_s: float = 90.0,
    log_level: str = "info",
    root: Path = ROOT,
    launcher: Sequence[str] = ("-m", "app"),
    auth_token: str | None = None,
    executable: str = sys.executable,
    env: dict[str, str] | None = None,
) -> Iterator[GatewayProcess]:
    """Run `python -m app` with these flags on free ports; stop it (SIGINT, then SIGKILL) on exit.

    `root` is the checkout whose gateway runs (its working directory); `launcher` replaces
    `-m app` (the benchmarks run code before the app that way); with `auth_token`, auth is
    on and the readiness PING carries the token. `executable` and `env`: another program
    (an installed `rllink-gateway`, with no launcher) and its environment.
    """
    http_port, tcp_port = free_port(), free_port()
    cmd = [
        executable, *launcher,
        "--http-port", str(http_port), "--tcp-port", str(tcp_port),
        "--checkpoint-dir", str(checkpoint_dir), "--log-level", log_level,
        *flags,
        *(["--auth-token", auth_token] if auth_token is not None else []),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    gateway = GatewayProcess(proc, http_port, tcp_port, log_path)
    try:
        _wait_until_ready(gateway, startup_s, _ping(auth_token))
        yield gateway
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                gateway.kill()


def _ping(token: str | None) -> bytes:
    if token is None:
        return PING
    body = json.dumps({"type": "PING", "token": token}).encode()
    return b"%08d" % len(body) + body


def _wait_until_ready(gateway: GatewayProcess, timeout_s: float, ping: bytes) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {gateway.proc.returncode}:\n{gateway.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=2) as sock:
                sock.settimeout(5)
                sock.sendall(ping)
                received = b""
                while len(received) < len(PONG) and (data := sock.recv(64)):
                    received += data
                if received == PONG:
                    with socket.create_connection(("127.0.0.1", gateway.http_port), timeout=2):
                        return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the gateway did not start within {timeout_s:g} s:\n{gateway.log_tail()}")
