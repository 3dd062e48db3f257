"""Latency: PING -> PONG round trips over TCP and WebSocket, idle and while training.

    python bench/latency.py [--samples 2000] [--train-seconds 15] [--algorithm sac] [--learner-process]

One client sends a PING, waits for the PONG, and again, on a blocking socket (the
WebSocket client is websockets' sans-I/O protocol on that socket: no client thread).
The same client measures, in the same run and interleaved, bare echo servers on the
same transports in another process: an asyncio TCP echo (asyncio.Protocol) and a
websockets echo server, both on the event loop uvicorn uses (uvloop when installed).

Then a second client drives training: EPISODES_AND_GET_STATE with big batches
(--train-steps per message, the gateway's default PPO settings), sent again as soon
as SET_STATE comes back. PINGs are classified by the gateway's own log of each
training step (its duration): "during training" means sent while a step ran.

With `--algorithm sac` the gateway trains SAC instead (a Box action space, default
networks, `--sac-utd-ratio` gradient steps per env step, 8 by default: a high update
ratio), and the driver's chunks carry those actions. `--learner-process` runs the gateway
with its learners in a process of their own (setting `learner_process`).

Targets: p99 within 3x of the bare echo server; p99 < 5 ms while a training step runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import re
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    HOST,
    PING_FRAME,
    PONG_BODY,
    BlockingWebSocket,
    emit,
    episodes_bodies,
    free_port,
    percentile,
    read_frames,
    rounded,
    running_gateway,
    tcp_connect,
)

from rllink.framing import FrameDecoder, encode_frame  # noqa: E402

STEPS_PER_CHUNK = 500
TRAINING_LINE = re.compile(r"weights_seq_no (\d+): (\d+) steps .* in ([\d.]+)s")
# The same line with the gateway's log timestamp (local time, ms): when each step ended.
TIMED_TRAINING_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*weights_seq_no \d+: \d+ steps .* in ([\d.]+)s", re.MULTILINE
)


def training_windows(log_text: str) -> list[tuple[float, float]]:
    """(start, end) in Unix time of each training step, from the gateway's log."""
    windows = []
    for match in TIMED_TRAINING_LINE.finditer(log_text):
        end = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        windows.append((end - float(match.group(2)), end))
    return windows


# -- Bare echo servers (a subprocess) -----------------------------------------------------


def echo_server_main(tcp_port: int, ws_port: int) -> None:
    """Serve a bare TCP echo and a bare websockets echo until stdin closes."""
    from websockets.asyncio.server import serve

    class Echo(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(data)

    async def ws_echo(websocket) -> None:
        async for message in websocket:
            await websocket.send(message)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        tcp = await loop.create_server(Echo, HOST, tcp_port)
        async with serve(ws_echo, HOST, ws_port, compression=None, max_size=None):
            print("ready", flush=True)
            await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
        tcp.close()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:  # pragma: no cover - uvicorn would use asyncio too
        asyncio.run(main())


class EchoServers:
    def __init__(self) -> None:
        self.tcp_port, self.ws_port = free_port(), free_port()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--echo-server", str(self.tcp_port), str(self.ws_port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError("the echo servers did not start")

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- Round trips -----------------------------------------------------------------------------


class TcpPinger:
    def __init__(self, port: int, expect: bytes) -> None:
        self.sock = tcp_connect(port)
        self.decoder = FrameDecoder()
        self.expect = expect

    def round_trip(self) -> float:
        start = time.perf_counter()
        self.sock.sendall(PING_FRAME)
        (body,) = read_frames(self.sock, 1, deadline=time.monotonic() + 10, decoder=self.decoder)
        elapsed = time.perf_counter() - start
        if body != self.expect:
            raise RuntimeError(f"unexpected reply {body[:200]!r}")
        return elapsed

    def close(self) -> None:
        self.sock.close()


class WsPinger:
    def __init__(self, url: str, expect: bytes) -> None:
        self.ws = BlockingWebSocket(url)
        self.expect = encode_frame(expect)

    def round_trip(self) -> float:
        start = time.perf_counter()
        self.ws.send(PING_FRAME)
        reply = self.ws.recv(time.monotonic() + 10)
        elapsed = time.perf_counter() - start
        if reply != self.expect:
            raise RuntimeError(f"unexpected reply {reply[:200]!r}")
        return elapsed

    def close(self) -> None:
        self.ws.close()


def measure_interleaved(pingers: dict, samples: int, rounds: int = 4, warmup: int = 100) -> dict[str, list[float]]:
    """`samples` round trips per pinger, in rounds that alternate between them (so that
    other load on the machine hits them alike)."""
    for pinger in pingers.values():
        for _ in range(warmup):
            pinger.round_trip()
    times: dict[str, list[float]] = {name: [] for name in pingers}
    per_round = max(1, samples // rounds)
    for _ in range(rounds):
        for name, pinger in pingers.items():
            times[name].extend(pinger.round_trip() for _ in range(per_round))
    return times


def summary(times: list[float]) -> dict:
    return {
        "samples": len(times),
        "p50_ms": rounded(percentile(times, 50) * 1e3, 4),
        "p99_ms": rounded(percentile(times, 99) * 1e3, 4),
        "max_ms": rounded(max(times) * 1e3, 4) if times else None,
    }


# -- Driving training ------------------------------------------------------------------------


def _trainer(port: int, body: bytes, stop_at: float, intervals) -> None:
    """Send EPISODES_AND_GET_STATE, wait for SET_STATE, again, until stop_at."""
    frame = encode_frame(body)
    sock = tcp_connect(port, timeout=120)
    decoder = FrameDecoder()
    try:
        while time.monotonic() < stop_at:
            sent = time.monotonic()
            sock.sendall(frame)
            (reply,) = read_frames(sock, 1, deadline=sent + 120, decoder=decoder)
            kind = json.loads(reply).get("type")
            intervals.put((sent, time.monotonic(), kind))
    finally:
        sock.close()
        intervals.put(None)


SAC_ACTION_SPACE = '{"type": "box", "shape": [1], "low": -1, "high": 1}'


def gateway_flags(algorithm: str, utd_ratio: float) -> list[str]:
    """The gateway's flags for the training algorithm measured."""
    if algorithm == "ppo":
        return []
    return ["--algorithm", "sac", "--action-space", SAC_ACTION_SPACE, "--sac.learning-starts", "1000",
            "--sac.utd-ratio", str(utd_ratio)]


def measure_during_training(gateway, pingers: dict, train_steps: int, seconds: float, algorithm: str = "ppo") -> dict:
    chunks = max(1, train_steps // STEPS_PER_CHUNK)
    rng_bodies = episodes_bodies(1, STEPS_PER_CHUNK, seed=7, message_type="EPISODES_AND_GET_STATE")
    message = json.loads(rng_bodies[0])
    # No weights_seq_no: the gateway dates the data by the last SET_STATE it sent, so it
    # stays fresh (max_policy_lag) and every request trains.
    del message["episodes"][0]["weights_seq_no"]
    if algorithm == "sac":  # in-box actions of one dimension
        episode = message["episodes"][0]
        episode["actions"] = [[2.0 * action - 1.0] for action in episode["actions"]]
        episode.pop("action_logp", None)
        episode.pop("action_dist_inputs", None)
    message["episodes"] = message["episodes"] * chunks
    message["timesteps"] = chunks * STEPS_PER_CHUNK
    body = json.dumps(message).encode()

    ctx = multiprocessing.get_context("fork")
    intervals = ctx.Queue()
    start = time.monotonic()
    stop_at = start + seconds
    trainer = ctx.Process(target=_trainer, args=(gateway.tcp_port, body, stop_at, intervals), daemon=True)
    log_offset = gateway.log_path.stat().st_size
    trainer.start()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in pingers}
    names = list(pingers)
    i = 0
    while time.monotonic() < stop_at + 2 and i < 1_000_000:  # PING on, a little past the last send
        name = names[i % len(names)]
        sent = time.time()  # compared with the gateway's log timestamps
        samples[name].append((sent, pingers[name].round_trip()))
        i += 1
        time.sleep(0.001)
    trainer.join(timeout=150)
    if trainer.is_alive():
        trainer.kill()
    cycles = []
    while True:
        try:
            item = intervals.get(timeout=5)
        except Exception:
            break
        if item is None:
            break
        cycles.append(item)
    # The gateway logs each training step when it ends, with its duration.
    with open(gateway.log_path, "rb") as f:
        f.seek(log_offset)
        log_text = f.read().decode(errors="replace")
    steps = [float(m.group(3)) for m in TRAINING_LINE.finditer(log_text)]
    windows = training_windows(log_text)

    def in_training(t: float) -> bool:
        return any(a <= t <= b for a, b in windows)

    result = {
        "training_steps": len(steps),
        "train_step_s": [round(s, 3) for s in steps[:20]],
        "env_steps_per_request": chunks * STEPS_PER_CHUNK,
    }
    for name, pairs in samples.items():
        during = [rtt for sent, rtt in pairs if in_training(sent)]
        outside = [rtt for sent, rtt in pairs if not in_training(sent)]
        result[name] = {"during_training": summary(during), "driver_active_not_training": summary(outside)}
    result["replies"] = sorted({kind for _, _, kind in cycles})
    return result


# -- Main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000, help="round trips per target, idle")
    parser.add_argument("--train-seconds", type=float, default=15.0, help="how long to drive training")
    parser.add_argument("--train-steps", type=int, default=None, help="env steps per EPISODES_AND_GET_STATE (ppo 8000, sac 1000)")
    parser.add_argument("--algorithm", choices=["ppo", "sac"], default="ppo", help="what the gateway trains")
    parser.add_argument("--sac-utd-ratio", type=float, default=8.0, help="SAC's gradient steps per env step")
    parser.add_argument("--learner-process", action="store_true", help="the gateway's learners in a process of their own")
    parser.add_argument("--gateway-prelude", default=None, help=argparse.SUPPRESS)  # experiments only
    parser.add_argument("--echo-server", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train_steps is None:
        args.train_steps = 8000 if args.algorithm == "ppo" else 1000
    if args.echo_server:
        echo_server_main(*args.echo_server)
        return

    echo = EchoServers()
    try:
        flags = gateway_flags(args.algorithm, args.sac_utd_ratio) + (["--learner-process"] if args.learner_process else [])
        with running_gateway(*flags, log_level="info", prelude=args.gateway_prelude) as gateway:
            pingers = {
                "echo_tcp": TcpPinger(echo.tcp_port, expect=b'{"type": "PING"}'),
                "echo_ws": WsPinger(f"ws://{HOST}:{echo.ws_port}/", expect=b'{"type": "PING"}'),
                "gateway_tcp": TcpPinger(gateway.tcp_port, expect=PONG_BODY),
                "gateway_ws": WsPinger(gateway.ws_url, expect=PONG_BODY),
            }
            idle = measure_interleaved(pingers, args.samples)
            training = measure_during_training(
                gateway, {k: v for k, v in pingers.items() if k.startswith("gateway")}, args.train_steps,
                args.train_seconds, args.algorithm,
            )
            for pinger in pingers.values():
                pinger.close()
    finally:
        echo.close()

    idle_summary = {name: summary(times) for name, times in idle.items()}
    ratios = {}
    for transport in ("tcp", "ws"):
        gw, bare = idle_summary[f"gateway_{transport}"], idle_summary[f"echo_{transport}"]
        ratios[transport] = {
            "p50_vs_echo": rounded(gw["p50_ms"] / bare["p50_ms"], 2),
            "p99_vs_echo": rounded(gw["p99_ms"] / bare["p99_ms"], 2),
        }
    targets = {}
    for transport in ("tcp", "ws"):
        value = ratios[transport]["p99_vs_echo"]
        targets[f"{transport} p99 <= 3 x echo"] = (value is not None and value <= 3, value)
        during = training[f"gateway_{transport}"]["during_training"]["p99_ms"]
        targets[f"{transport} p99 during training < 5 ms"] = (during is not None and during < 5, during)

    lines = [f"{'':24s}{'p50 ms':>10s}{'p99 ms':>10s}{'max ms':>10s}{'samples':>9s}"]
    for name, s in idle_summary.items():
        lines.append(f"idle {name:19s}{s['p50_ms']:>10.3f}{s['p99_ms']:>10.3f}{s['max_ms']:>10.3f}{s['samples']:>9d}")
    for transport in ("tcp", "ws"):
        for phase in ("during_training", "driver_active_not_training"):
            s = training[f"gateway_{transport}"][phase]
            if s["samples"]:
                lines.append(
                    f"{transport} {phase.replace('_', ' '):20s}{s['p50_ms']:>10.3f}{s['p99_ms']:>10.3f}"
                    f"{s['max_ms']:>10.3f}{s['samples']:>9d}"
                )
    lines.append(
        f"training ({args.algorithm}): {training['training_steps']} steps of {training['env_steps_per_request']} env steps, "
        f"durations (s) {training['train_step_s']}"
    )
    for transport, r in ratios.items():
        lines.append(f"{transport}: gateway / bare echo: p50 {r['p50_vs_echo']}x, p99 {r['p99_vs_echo']}x")
    for name, (ok, value) in targets.items():
        lines.append(f"target {name}: {'met' if ok else 'MISSED'} ({value})")
    emit(
        "latency",
        lines,
        {
            "idle": idle_summary,
            "ratios": ratios,
            "training": training,
            "learner_process": args.learner_process,
            "targets": {name: ok for name, (ok, _) in targets.items()},
        },
    )


if __name__ == "__main__":
    main()
