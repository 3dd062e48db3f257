"""A thin client stepping 8 CartPoles flat out (one batched GET_ACTION per step), against
one stepping a single CartPole: env steps to a mean return of 400, then minutes of
flat-out play while the gateway's memory, its batches and another client's PING are watched.

    .venv/bin/python bench/flat_out.py [--seconds 300] [--envs 8] [--target 400]

Targets (issue #34): no batch over train_batch_size; 400 within 2x the env steps of one
env; gateway RSS (with its decode workers) under 1 GiB throughout; PING p99 under 10 ms.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    PING_FRAME,
    emit,
    percentile,
    proc_rss_bytes,
    read_frames,
    rounded,
    running_gateway,
    tcp_connect,
)

from rllink_clients.rllink_client import RLlinkClient  # noqa: E402
from rllink_clients.thin_client import run_thin, run_thin_envs  # noqa: E402

BATCH = 2000


class Watcher:
    """Pings over its own connection, reads the gateway's RSS and metrics, until stopped."""

    def __init__(self, gateway) -> None:
        self.gateway = gateway
        self.stop = threading.Event()
        self.ping_ms: list[float] = []
        self.rss: list[int] = []
        self.max_batch = 0
        self.most_pending = 0
        self._threads = [threading.Thread(target=self._ping), threading.Thread(target=self._sample)]

    def __enter__(self) -> Watcher:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _ping(self) -> None:
        sock = tcp_connect(self.gateway.tcp_port)
        with sock:
            while not self.stop.wait(0.02):
                started = time.perf_counter()
                sock.sendall(PING_FRAME)
                read_frames(sock, 1, deadline=time.monotonic() + 30)
                self.ping_ms.append((time.perf_counter() - started) * 1000)

    def _sample(self) -> None:
        with httpx.Client(base_url=self.gateway.base_url, timeout=30) as rest:
            while not self.stop.wait(0.5):
                self.rss.append(proc_rss_bytes(self.gateway.pid))
                metrics = rest.get("/api/metrics").json()
                self.max_batch = max(self.max_batch, metrics["policies"]["default_policy"]["max_batch_env_steps"])
                self.most_pending = max(self.most_pending, metrics["pending_env_steps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="flat-out play of the many-env client, in all")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--target", type=float, default=400.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    flags = ("--train-batch-size", str(BATCH), "--seed", str(args.seed))

    with running_gateway(*flags) as gateway, RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
        one = run_thin(client, target_return=args.target, max_env_steps=2_000_000, seed=args.seed)
    with running_gateway(*flags) as gateway, Watcher(gateway) as watcher:
        started = time.monotonic()
        with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
            many = run_thin_envs(client, num_envs=args.envs, target_return=args.target, max_env_steps=20_000_000,
                                 max_seconds=args.seconds, seed=args.seed)
            rest_s = max(0.0, args.seconds - (time.monotonic() - started))
            after = run_thin_envs(client, num_envs=args.envs, target_return=None, max_seconds=rest_s, seed=args.seed + 1)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).json()
        flat_out_s = time.monotonic() - started
    ratio = many.env_steps / one.env_steps if one.reached_target and many.reached_target else float("nan")
    peak_rss_mib = max(watcher.rss, default=0) / 2**20
    ping_p99 = percentile(watcher.ping_ms, 99)
    steps = many.env_steps + after.env_steps
    lines = [
        f"1 env:   mean return {args.target:g} {'reached' if one.reached_target else 'NOT reached'} in "
        f"{one.env_steps:,} env steps, {one.seconds:.1f} s",
        f"{args.envs} envs:  {'reached' if many.reached_target else 'NOT reached'} in {many.env_steps:,} env steps, "
        f"{many.seconds:.1f} s: {ratio:.2f}x the env steps of 1 env (target <= 2x)",
        f"flat out {flat_out_s:.0f} s: {steps:,} env steps ({steps / flat_out_s:,.0f}/s), "
        f"{metrics['num_training_steps']} training steps, mean return (last 20) {after.mean_return:.1f}",
        f"largest batch {watcher.max_batch:,} env steps (train_batch_size {BATCH:,}); most pending {watcher.most_pending:,}",
        f"gateway RSS (with workers) at most {peak_rss_mib:,.0f} MiB (target < 1,024)",
        f"PING over another connection: p50 {percentile(watcher.ping_ms, 50):.2f} ms, p99 {ping_p99:.2f} ms "
        f"over {len(watcher.ping_ms):,} pings (target p99 < 10 ms)",
    ]
    emit("flat_out", lines, {
        "one_env_steps": one.env_steps, "many_env_steps": many.env_steps, "envs": args.envs,
        "ratio_to_one_env": rounded(ratio), "flat_out_env_steps_per_s": round(steps / flat_out_s),
        "max_batch_env_steps": watcher.max_batch, "train_batch_size": BATCH, "most_pending": watcher.most_pending,
        "peak_rss_mib": round(peak_rss_mib), "ping_p50_ms": rounded(percentile(watcher.ping_ms, 50)),
        "ping_p99_ms": rounded(ping_p99), "mean_return_after": rounded(after.mean_return, 1),
    })


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    main()
