"""Clients: 1,000 WebSocket and 100 TCP clients at once, each sending a small EPISODES
message and a PING every second, for a bounded time.

    python bench/clients.py [--ws 1000] [--tcp 100] [--seconds 30] [--deflate]

The gateway runs as a subprocess (`python -m app`, default settings, a temporary
checkpoint dir), so it trains on what the clients send while they send it. The
clients run in a few processes (asyncio), connect over a ramp-up, then each sends
EPISODES (one 10-step CartPole chunk) + PING once a second, with a random phase, and
waits for the PONG (which also proves the EPISODES before it was accepted). Counted:
connections that failed or dropped, ERROR replies, PINGs unanswered within 5 s
(dropped frames), and the PING round trips; the gateway's RSS is read from /proc
twice a second.

Targets: 1,100 concurrent clients with zero errors; gateway RSS < 1 GiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    HOST,
    PING_FRAME,
    PONG_BODY,
    cartpole_chunk,
    emit,
    percentile,
    proc_cpu_seconds,
    proc_peak_rss_bytes,
    proc_rss_bytes,
    raise_fd_limit,
    rounded,
    running_gateway,
)

from rllink.framing import FrameDecoder, encode_frame  # noqa: E402

STEPS = 10  # per EPISODES message
TRAINING_LINE = re.compile(r"weights_seq_no \d+: \d+ steps")
REPLY_TIMEOUT_S = 5.0
PROCESSES = 4


def small_episodes_frame(seed: int) -> bytes:
    chunk = cartpole_chunk(random.Random(seed), STEPS, terminated=False)
    del chunk["weights_seq_no"]  # dated by the gateway: fresh whatever version it is at
    return encode_frame(json.dumps({"type": "EPISODES", "episodes": [chunk], "timesteps": STEPS}).encode())


# -- Client processes ------------------------------------------------------------------------


class _Stats:
    def __init__(self) -> None:
        self.connected = {"tcp": 0, "ws": 0}
        self.connect_errors: list[str] = []
        self.errors: list[str] = []  # replies other than PONG, connections lost mid-run
        self.dropped = 0  # PINGs without a PONG within REPLY_TIMEOUT_S
        self.sent = 0
        self.acked = 0
        self.rtts: list[float] = []  # in the measurement window only

    def error(self, kind: list[str], text: str) -> None:
        if len(kind) < 1000:
            kind.append(text[:300])
        else:
            kind.append("...")  # counted, not kept


async def _tcp_client(i: int, port: int, frame: bytes, start: float, measure_from: float, stop: float, stats: _Stats) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start - loop.time()))
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 30)
    except Exception as exc:
        stats.error(stats.connect_errors, f"tcp connect: {type(exc).__name__}: {exc}")
        return
    stats.connected["tcp"] += 1
    decoder, pending = FrameDecoder(), []

    async def reply() -> bytes:
        while not pending:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("closed by the gateway")
            decoder.feed(data)
            pending.extend(decoder.frames())
        return pending.pop(0)

    try:
        await _client_loop(loop, lambda: writer.write(frame + PING_FRAME), reply, measure_from, stop, stats)
    finally:
        writer.close()


async def _ws_client(i: int, url: str, frame: bytes, deflate: bool, start: float, measure_from: float, stop: float, stats: _Stats) -> None:
    from websockets.asyncio.client import connect

    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start - loop.time()))
    try:
        ws = await connect(
            url, open_timeout=30, ping_interval=None, max_size=None, compression="deflate" if deflate else None
        )
    except Exception as exc:
        stats.error(stats.connect_errors, f"ws connect: {type(exc).__name__}: {exc}")
        return
    stats.connected["ws"] += 1

    async def send() -> None:
        await ws.send(frame)
        await ws.send(PING_FRAME)

    async def reply() -> bytes:
        message = await ws.recv()
        return (message if isinstance(message, bytes) else message.encode())[8:]

    try:
        await _client_loop(loop, send, reply, measure_from, stop, stats)
    finally:
        await ws.close()


async def _client_loop(loop, send, reply, measure_from: float, stop: float, stats: _Stats) -> None:
    """Once a second, with a random phase: EPISODES + PING, wait for the PONG."""
    next_at = loop.time() + random.random()
    while next_at < stop:
        await asyncio.sleep(max(0.0, next_at - loop.time()))
        next_at += 1.0
        sent = time.perf_counter()
        stats.sent += 1
        try:
            result = send()
            if asyncio.iscoroutine(result):
                await result
            body = await asyncio.wait_for(reply(), REPLY_TIMEOUT_S)
        except TimeoutError:
            stats.dropped += 1
            return  # the reply order is lost on this connection: stop it (counted)
        except Exception as exc:
            stats.error(stats.errors, f"{type(exc).__name__}: {exc}")
            return
        rtt = time.perf_counter() - sent
        if body != PONG_BODY:
            stats.error(stats.errors, f"reply: {body[:200].decode(errors='replace')}")
            continue
        stats.acked += 1
        if loop.time() >= measure_from:
            stats.rtts.append(rtt)


def _client_process(
    tcp: list[int], ws: list[int], tcp_port: int, ws_url: str, deflate: bool,
    t0: float, ramp_s: float, seconds: float, results,
) -> None:
    raise_fd_limit(8192)

    async def main() -> _Stats:
        # The parent's monotonic t0 is this loop's clock too (loop.time() is monotonic).
        measure_from, stop = t0 + ramp_s + 1.0, t0 + ramp_s + 1.0 + seconds
        stats = _Stats()
        frames = [small_episodes_frame(seed) for seed in range(16)]
        tasks = [
            _tcp_client(i, tcp_port, frames[i % 16], t0 + ramp_s * random.random(), measure_from, stop, stats)
            for i in tcp
        ] + [
            _ws_client(i, ws_url, frames[i % 16], deflate, t0 + ramp_s * random.random(), measure_from, stop, stats)
            for i in ws
        ]
        await asyncio.wait_for(asyncio.gather(*tasks), ramp_s + seconds + 60)
        return stats

    try:
        import uvloop

        stats = uvloop.run(main())
    except ImportError:  # pragma: no cover
        stats = asyncio.run(main())
    results.put(stats.__dict__)


# -- Main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ws", type=int, default=1000, help="WebSocket clients")
    parser.add_argument("--tcp", type=int, default=100, help="TCP clients")
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window, after the ramp-up")
    parser.add_argument("--ramp", type=float, default=10.0, help="seconds over which clients connect")
    parser.add_argument("--deflate", action="store_true", help="WebSocket clients negotiate permessage-deflate, as browsers do")
    parser.add_argument("--no-training", action="store_true", help="gateway with training paused (huge batch size)")
    parser.add_argument("--gateway-prelude", default=None, help=argparse.SUPPRESS)  # experiments only
    args = parser.parse_args()
    limit = raise_fd_limit(2 * (args.ws + args.tcp) + 1024)  # the gateway inherits it

    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    rss_samples: list[int] = []
    flags = ["--train-batch-size", str(10**12), "--barrier-timeout-s", str(10**9)] if args.no_training else []
    with running_gateway(*flags, log_level="info", prelude=args.gateway_prelude) as gateway:
        rss_idle = proc_rss_bytes(gateway.pid)
        t0 = time.monotonic() + 1.0
        procs = [
            ctx.Process(
                target=_client_process,
                args=(
                    list(range(p, args.tcp, PROCESSES)), list(range(p, args.ws, PROCESSES)),
                    gateway.tcp_port, gateway.ws_url, args.deflate, t0, args.ramp, args.seconds, results,
                ),
                daemon=True,
            )
            for p in range(PROCESSES)
        ]
        for proc in procs:
            proc.start()
        end = t0 + args.ramp + 1.0 + args.seconds + REPLY_TIMEOUT_S + 5
        measure_from = t0 + args.ramp + 1.0
        cpu_window = None
        while time.monotonic() < end and any(p.is_alive() for p in procs):
            rss_samples.append(proc_rss_bytes(gateway.pid))
            if cpu_window is None and time.monotonic() >= measure_from:
                cpu_window = (proc_cpu_seconds(gateway.pid), time.monotonic())
            time.sleep(0.5)
        collected = []
        for _ in procs:
            try:
                collected.append(results.get(timeout=60))
            except Exception:
                collected.append(None)
        cpu1, t1 = proc_cpu_seconds(gateway.pid), time.monotonic()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        peak_rss = proc_peak_rss_bytes(gateway.pid)
        log = gateway.log_path.read_text(errors="replace")
        log_tail = "\n".join(line for line in log.splitlines() if "connected" not in line)[-2000:]
        training_steps = len(TRAINING_LINE.findall(log))

    missing = sum(1 for c in collected if c is None)
    stats = [c for c in collected if c is not None]
    rtts = [x for s in stats for x in s["rtts"]]
    connected = {k: sum(s["connected"][k] for s in stats) for k in ("tcp", "ws")}
    connect_errors = [e for s in stats for e in s["connect_errors"]]
    errors = [e for s in stats for e in s["errors"]]
    dropped = sum(s["dropped"] for s in stats)
    sent, acked = sum(s["sent"] for s in stats), sum(s["acked"] for s in stats)
    total_errors = len(connect_errors) + len(errors) + dropped + missing
    gateway_cpu = (cpu1 - cpu_window[0]) / (t1 - cpu_window[1]) * 100 if cpu_window else float("nan")
    peak_sampled = max(rss_samples, default=0)
    ok_errors = total_errors == 0 and connected == {"tcp": args.tcp, "ws": args.ws}
    ok_rss = peak_rss < 2**30

    lines = [
        f"clients: {connected['ws']}/{args.ws} WebSocket{' (deflate)' if args.deflate else ''} + "
        f"{connected['tcp']}/{args.tcp} TCP connected; fd limit {limit}",
        f"messages: {sent:,} EPISODES+PING sent, {acked:,} PONGs; {STEPS} env steps each "
        f"(~{(args.ws + args.tcp) * STEPS:,} env steps/s offered)",
        f"errors: {len(connect_errors)} connect, {len(errors)} replies/connection, {dropped} dropped "
        f"(no PONG in {REPLY_TIMEOUT_S:g} s), {missing} client processes lost",
        f"PING round trip (EPISODES sent just before it), {len(rtts):,} samples: "
        f"p50 {percentile(rtts, 50) * 1e3:.2f} ms, p99 {percentile(rtts, 99) * 1e3:.2f} ms, "
        f"max {max(rtts, default=float('nan')) * 1e3:.1f} ms",
        f"training: {'paused' if args.no_training else f'{training_steps} steps during the run'}",
        f"gateway: RSS idle {rss_idle / 2**20:,.0f} MiB, peak {peak_rss / 2**20:,.0f} MiB (VmHWM; sampled peak "
        f"{peak_sampled / 2**20:,.0f} MiB), CPU {gateway_cpu:.0f}% during the window",
        f"target {args.ws + args.tcp:,} clients, zero errors: {'met' if ok_errors else 'MISSED'} ({total_errors} errors)",
        f"target gateway RSS < 1 GiB: {'met' if ok_rss else 'MISSED'} ({peak_rss / 2**30:.2f} GiB)",
    ]
    for text in (connect_errors + errors)[:5]:
        lines.append(f"  e.g. {text}")
    if total_errors:
        lines.append("gateway log tail:\n" + log_tail)
    emit(
        "clients",
        lines,
        {
            "ws_clients": args.ws,
            "tcp_clients": args.tcp,
            "deflate": args.deflate,
            "connected": connected,
            "seconds": args.seconds,
            "sent": sent,
            "acked": acked,
            "connect_errors": len(connect_errors),
            "errors": len(errors),
            "dropped": dropped,
            "lost_processes": missing,
            "rtt_p50_ms": rounded(percentile(rtts, 50) * 1e3),
            "rtt_p99_ms": rounded(percentile(rtts, 99) * 1e3),
            "rtt_max_ms": rounded(max(rtts, default=float("nan")) * 1e3),
            "gateway_rss_idle_bytes": rss_idle,
            "gateway_rss_peak_bytes": peak_rss,
            "gateway_cpu_pct": rounded(gateway_cpu, 1),
            "training_steps": None if args.no_training else training_steps,
            "targets": {f"{args.ws + args.tcp} clients, zero errors": ok_errors, "gateway RSS < 1 GiB": ok_rss},
        },
    )


if __name__ == "__main__":
    main()
