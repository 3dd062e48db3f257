"""What the benchmarks share: a gateway in a subprocess, CartPole-sized messages,
raw clients, percentiles, /proc readings and the output format.

Every benchmark prints a human summary and, last, one line of JSON. Only loopback
traffic; every loop is bounded in count and in time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The checkout whose gateway is measured: this one, or another (an older commit, to
# compare before/after) named by BENCH_GATEWAY_ROOT.
ROOT = Path(os.environ.get("BENCH_GATEWAY_ROOT") or Path(__file__).resolve().parent.parent).resolve()
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rllink.framing import FrameDecoder, encode_frame  # noqa: E402


def _own_module(name: str, relative_path: str):
    """A module of the benchmarks' own checkout, by its path: ROOT, first on sys.path,
    may be an older checkout without it. Only self-contained modules (no imports from
    `app` or `tests`), so they work against any gateway version."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / relative_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The launcher the tests use, and the thread-less WebSocket client the tests share.
_launcher = _own_module("gateway_process", "tests/gateway_process.py")
GatewayProcess, free_port, gateway_process = _launcher.GatewayProcess, _launcher.free_port, _launcher.gateway_process
BlockingWebSocket = _own_module("blocking_ws", "clients/python/rllink_clients/blocking_ws.py").BlockingWebSocket

HOST = "127.0.0.1"
PING_BODY = b'{"type": "PING"}'
PONG_BODY = b'{"type": "PONG"}'
PING_FRAME = encode_frame(PING_BODY)
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


# -- Messages ------------------------------------------------------------------------


def cartpole_chunk(rng: random.Random, steps: int = 500, *, terminated: bool = True, state_size: int = 0) -> dict[str, Any]:
    """One episode chunk shaped like CartPole-v1's, as the reference gym client sends it:
    T+1 observations of 4 float32 values, T discrete actions, T rewards of 1.0, T
    log-probs, the done flags, an episode id and the policy version; with `state_size`,
    the recurrent state fed with its first observation (`state_in`) too."""

    def f32(x: float) -> float:  # CartPole observations are float32 values, widened
        import struct

        return struct.unpack("f", struct.pack("f", x))[0]

    obs = [[f32(rng.gauss(0, 0.05 * (i + 1))) for i in range(4)] for _ in range(steps + 1)]
    state = {"state_in": [f32(rng.gauss(0, 0.3)) for _ in range(state_size)]} if state_size else {}
    return {
        **state,
        "obs": obs,
        "actions": [rng.randrange(2) for _ in range(steps)],
        "rewards": [1.0] * steps,
        "action_logp": [rng.uniform(-0.9, -0.5) for _ in range(steps)],
        "is_terminated": terminated,
        "is_truncated": False,
        "episode_id": f"{rng.getrandbits(128):032x}",
        "weights_seq_no": 0,
    }


def episodes_body(rng: random.Random, steps: int = 500, *, message_type: str = "EPISODES", state_size: int = 0) -> bytes:
    """An EPISODES body with one chunk, JSON-encoded as RLlib's client does (json.dumps)."""
    message = {"type": message_type, "episodes": [cartpole_chunk(rng, steps, state_size=state_size)], "timesteps": steps}
    return json.dumps(message).encode()


def episodes_bodies(
    count: int, steps: int = 500, *, seed: int = 0, message_type: str = "EPISODES", state_size: int = 0
) -> list[bytes]:
    """`count` different bodies (so nothing downstream can win by caching one)."""
    rng = random.Random(seed)
    return [episodes_body(rng, steps, message_type=message_type, state_size=state_size) for _ in range(count)]


# -- Measuring -----------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def best_rate(fn, units_per_call: float, *, seconds: float = 1.0, rounds: int = 5) -> float:
    """Best of `rounds` runs of `fn` in a loop, each about seconds/rounds long: units/s."""
    best = 0.0
    per_round = seconds / rounds
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < per_round and calls < 10_000_000:
            fn()
            calls += 1
        best = max(best, calls * units_per_call / elapsed)
    return best


def process_tree(pid: int) -> list[int]:
    """A process and its descendants (the gateway and its decode workers)."""
    pids = [pid]
    for parent in pids:
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                pids.extend(int(child) for child in task.read_text().split())
            except OSError:  # the task ended
                pass
    return pids


def proc_rss_bytes(pid: int) -> int:
    """Resident set size of a process and its descendants, from /proc/PID/statm."""
    return sum(_read_or_zero(f"/proc/{p}/statm", lambda text: int(text.split()[1]) * PAGE_SIZE) for p in process_tree(pid))


def proc_peak_rss_bytes(pid: int) -> int:
    """Peak resident set size (VmHWM) of a process, plus its descendants' peaks."""

    def peak(text: str) -> int:
        line = next((line for line in text.splitlines() if line.startswith("VmHWM:")), "VmHWM: 0 kB")
        return int(line.split()[1]) * 1024

    return sum(_read_or_zero(f"/proc/{p}/status", peak) for p in process_tree(pid))


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its descendants (all threads) so far."""
    usage = proc_usage(pid)
    return usage["user_s"] + usage["system_s"]


def proc_usage(pid: int, descendants: bool = True) -> dict[str, float]:
    """User and system CPU seconds and minor page faults so far of a process and (unless
    told not to) its descendants (/proc/PID/stat); one that exits takes its share along."""
    total = {"user_s": 0.0, "system_s": 0.0, "minor_faults": 0}
    for p in process_tree(pid) if descendants else [pid]:
        fields = _read_or_zero(f"/proc/{p}/stat", lambda text: text.rsplit(")", 1)[1].split())
        if fields:
            total["user_s"] += int(fields[11]) / CLK_TCK
            total["system_s"] += int(fields[12]) / CLK_TCK
            total["minor_faults"] += int(fields[7])
    return total


def _read_or_zero(path: str, parse):
    """parse(text of path), or 0 if the process is gone."""
    try:
        with open(path) as f:
            return parse(f.read())
    except (FileNotFoundError, ProcessLookupError):
        return 0


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards `wanted` (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def record_demos(out: Path, env: str, policy: str, episodes: int) -> dict[str, Any]:
    """The reference client's `record` command, as a user runs it: `episodes` of `policy` in
    `env` written to `out`; its one-line JSON summary."""
    done = subprocess.run(
        [sys.executable, "-m", "rllink_clients.demos", "record", "--env", env, "--policy", policy,
         "--episodes", str(episodes), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def variant_runs_parser(description: str, variants: tuple[str, ...]) -> argparse.ArgumentParser:
    """The flags of a benchmark that runs variants over seeds, each from recorded
    demonstrations and to a step budget (bench/demos.py, bench/curriculum.py)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=variants, default=list(variants))
    parser.add_argument("--max-env-steps", type=int, default=60_000, help="give up on a run after this many")
    parser.add_argument("--demo-episodes", type=int, default=20)
    return parser


def emit(name: str, lines: list[str], result: dict[str, Any]) -> None:
    """The human summary, then the one JSON line."""
    print()
    print(f"== {name} ==")
    for line in lines:
        print(line)
    print(json.dumps({"benchmark": name, **result}, sort_keys=True, default=str))


def rounded(value: float, digits: int = 3) -> float | None:
    return None if math.isnan(value) else round(value, digits)  # NaN -> null


# -- The gateway under test ------------------------------------------------------------


@contextmanager
def running_gateway(
    *args: str, log_level: str = "warning", startup_s: float = 90.0, prelude: str | None = None
) -> Iterator[GatewayProcess]:
    """Start a gateway (tests/gateway_process.py) with these extra command-line flags, a
    private checkpoint dir and log; stop it (SIGINT, then kill) on exit.

    `prelude` is Python run in the gateway process before the app (for experiments, e.g.
    `import sys; sys.setswitchinterval(0.001)`); the gateway itself is `python -m app`.
    """
    _stop_on_sigterm()
    launcher = ("-m", "app")
    if prelude:
        launcher = ("-c", f"{prelude}\nimport runpy\nrunpy.run_module('app', run_name='__main__', alter_sys=True)")
    with tempfile.TemporaryDirectory(prefix="rllink-bench-") as tmp:
        with gateway_process(
            Path(tmp) / "checkpoints", Path(tmp) / "gateway.log", *args,
            startup_s=startup_s, log_level=log_level, root=ROOT, launcher=launcher,
        ) as gateway:
            yield gateway


def _stop_on_sigterm() -> None:
    """Make SIGTERM (`kill`, a queue's timeout) leave the benchmark as Ctrl-C does, through
    `running_gateway`'s exit, so its gateway stops too rather than running on alone."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


# -- Raw clients -------------------------------------------------------------------------


def read_frames(sock: socket.socket, count: int, *, deadline: float, decoder: FrameDecoder | None = None) -> list[bytes]:
    """Read exactly `count` frame bodies from a TCP socket (bounded by `deadline`)."""
    decoder = decoder or FrameDecoder()
    bodies: list[bytes] = []
    while len(bodies) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"got {len(bodies)} of {count} replies in time")
        sock.settimeout(remaining)
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the gateway closed the connection")
        decoder.feed(data)
        bodies.extend(decoder.frames())
    return bodies


def tcp_connect(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def ws_connect(url: str, *, deflate: bool = False, timeout: float = 10.0):
    """A websockets sync client (use it with `with`); permessage-deflate only if asked
    (browsers ask for it)."""
    from websockets.sync.client import connect

    return connect(url, open_timeout=timeout, max_size=None, compression="deflate" if deflate else None)


def ws_payload(message: str | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.encode()
