"""Scale-out on Ray: ingest and PING latency with 1, 2 and 4 front-ends against the
single-process gateway, and how long a new version takes to reach every front-end.

    python bench/scale_out.py [--seconds 3] [--frontends 1 2 4] [--clients 4]

- **Ingest**: `--clients` client processes send CartPole-sized EPISODES (500 steps each,
  bench/ingest.py's client: batches of messages then a PING, two batches in flight),
  spread evenly over the front-ends; env steps/s acknowledged. Nothing trains (train
  batch and barrier timeout too large), as in bench/ingest.py.
- **PING p99**: round trips to front-end 0 over TCP, idle, then while the clients send.
- **Version spread**: a client on front-end 0 sends EPISODES_AND_GET_STATE (one 500-step
  chunk: each request trains a version); as soon as its SET_STATE arrives, GET_STATE goes
  to every other front-end until it has that version: the time until the last one has it.
- **Costs per message** (for the estimate of a bigger cluster): the front-ends' and the
  learner actor's CPU seconds per env step during ingest, from /proc.

The local Ray cluster lives on this machine (2 cores here): every front-end, the learner
and the clients share them, so more front-ends cannot go faster here; the per-step costs
say what separate hosts would sustain. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    PONG_BODY,
    emit,
    episodes_bodies,
    proc_usage,
    read_frames,
    rounded,
    running_gateway,
    tcp_connect,
)
from ingest import DISTINCT_MESSAGES, HARD_TIMEOUT_S, STEPS, _client  # noqa: E402
from latency import TcpPinger, summary  # noqa: E402

from rllink.framing import FrameDecoder, encode_frame  # noqa: E402

NO_TRAINING = ["--train-batch-size", "1000000000", "--barrier-timeout-s", "3600", "--decode-workers", "0"]
PING_SAMPLES = 500
VERSIONS = 15  # version spreads measured per configuration


def ingest(ports: list[int], clients: int, frames: list[bytes], seconds: float, pids: list[int]) -> dict:
    """`clients` processes, round-robin over `ports`; env steps/s acknowledged and the
    CPU seconds of each process in `pids` over the run."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    start_at = time.monotonic() + 1.0 + 0.05 * clients
    procs = [
        ctx.Process(target=_client, args=("tcp", ports[i % len(ports)], frames, start_at, seconds, results), daemon=True)
        for i in range(clients)
    ]
    for proc in procs:
        proc.start()
    while time.monotonic() < start_at:
        time.sleep(0.005)
    before = [proc_usage(pid, descendants=False) for pid in pids]
    collected = [results.get(timeout=seconds + HARD_TIMEOUT_S + 30) for _ in procs]
    after = [proc_usage(pid, descendants=False) for pid in pids]
    for proc in procs:
        proc.join(timeout=10)
    steps = sum(r["acked"] for r in collected) * len(frames) * STEPS
    t0 = min(r["t0"] for r in collected if r.get("t0") is not None)
    t1 = max(r["t_last"] for r in collected if r.get("t_last") is not None)
    cpu = [(a["user_s"] + a["system_s"]) - (b["user_s"] + b["system_s"]) for a, b in zip(after, before)]
    return {
        "env_steps_per_s": rounded(steps / (t1 - t0), 0),
        "env_steps": steps,
        "errors": sum(r["errors"] for r in collected),
        "first_error": next((r["first_error"] for r in collected if r.get("first_error")), None),
        "cpu_s_per_million_steps": [rounded(1e6 * c / steps, 3) if steps else None for c in cpu],
    }


def pings(port: int, samples: int = PING_SAMPLES) -> dict:
    pinger = TcpPinger(port, PONG_BODY)
    try:
        for _ in range(50):
            pinger.round_trip()
        return summary([pinger.round_trip() for _ in range(samples)])
    finally:
        pinger.close()


def pings_under_load(port: int, ports: list[int], clients: int, frames: list[bytes], seconds: float) -> dict:
    """PING round trips to `port` while the ingest clients send (in this process, in between)."""
    ctx = multiprocessing.get_context("fork")
    loader = ctx.Process(target=ingest, args=(ports, clients, frames, seconds, []))  # not a daemon: it forks the clients
    loader.start()
    time.sleep(1.5 + 0.05 * clients)
    pinger = TcpPinger(port, PONG_BODY)
    times = []
    try:
        deadline = time.monotonic() + seconds * 0.8
        while time.monotonic() < deadline and len(times) < 5000:
            times.append(pinger.round_trip())
    finally:
        pinger.close()
        loader.join(timeout=seconds + HARD_TIMEOUT_S + 60)
    return summary(times)


def version_spread(ports: list[int], versions: int = VERSIONS) -> dict:
    """Per version: from SET_STATE on front-end 0 to the last other front-end's GET_STATE with it."""
    body = json.loads(episodes_bodies(1, STEPS, seed=3, message_type="EPISODES_AND_GET_STATE")[0])
    del body["episodes"][0]["weights_seq_no"]  # dated by the last SET_STATE: always fresh
    frame = encode_frame(json.dumps(body).encode())
    trainer = tcp_connect(ports[0], timeout=120)
    decoder = FrameDecoder()
    watchers = [(tcp_connect(port), FrameDecoder()) for port in ports[1:]]
    get_state = encode_frame(b'{"type": "GET_STATE"}')
    spreads = []
    try:
        for _ in range(versions):
            trainer.sendall(frame)
            (reply,) = read_frames(trainer, 1, deadline=time.monotonic() + 120, decoder=decoder)
            got = time.perf_counter()
            version = json.loads(reply)["weights_seq_no"]
            for sock, watcher_decoder in watchers:
                while True:
                    sock.sendall(get_state)
                    (state,) = read_frames(sock, 1, deadline=time.monotonic() + 30, decoder=watcher_decoder)
                    if json.loads(state)["weights_seq_no"] >= version:
                        break
            spreads.append(time.perf_counter() - got)
    finally:
        trainer.close()
        for sock, _ in watchers:
            sock.close()
    return summary(spreads) if watchers else {}


def single_process(frames: list[bytes], args) -> dict:
    with running_gateway(*NO_TRAINING) as gateway:
        result = {"ingest": ingest([gateway.tcp_port], args.clients, frames, args.seconds, [gateway.pid])}
        result["ping_idle"] = pings(gateway.tcp_port)
        result["ping_loaded"] = pings_under_load(gateway.tcp_port, [gateway.tcp_port], args.clients, frames, args.seconds)
    return result


def on_ray(count: int, frames: list[bytes], args) -> dict:
    import ray

    from app.cluster.launch import start_cluster
    from app.settings.config import Settings

    with tempfile.TemporaryDirectory(prefix="rllink-scale-") as tmp:
        base = dict(http_port=0, tcp_port=0, frontends=count, decode_workers=0, log_level="warning")
        settings = Settings(checkpoint_dir=Path(tmp) / "a", train_batch_size=10**9, barrier_timeout_s=3600, **base)
        cluster = start_cluster(settings)
        try:
            ports = [address["tcp_port"] for address in cluster.addresses]
            pids = ray.get([frontend.pid.remote() for frontend in cluster.frontends]) + [ray.get(cluster.learner.pid.remote())]
            result = {"ingest": ingest(ports, args.clients, frames, args.seconds, pids)}
            result["ping_idle"] = pings(ports[0])
            result["ping_loaded"] = pings_under_load(ports[0], ports, args.clients, frames, args.seconds)
        finally:
            cluster.stop()
        if count > 1:  # a fresh cluster that trains at every request
            cluster = start_cluster(Settings(checkpoint_dir=Path(tmp) / "b", **base))
            try:
                result["version_spread"] = version_spread([address["tcp_port"] for address in cluster.addresses])
            finally:
                cluster.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--frontends", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()

    import ray

    frames = [encode_frame(body) for body in episodes_bodies(DISTINCT_MESSAGES, STEPS)]
    results = {"single_process": single_process(frames, args)}
    ray.init(address="local", num_cpus=max(4, max(args.frontends) + 1), include_dashboard=False, logging_level="warning",
             object_store_memory=200 * 1024**2)
    try:
        for count in args.frontends:
            results[f"ray_{count}"] = on_ray(count, frames, args)
    finally:
        ray.shutdown()

    single = results["single_process"]["ingest"]["env_steps_per_s"]
    lines = []
    for name, result in results.items():
        rate = result["ingest"]["env_steps_per_s"]
        line = (
            f"{name:15s} ingest {rate:>11,.0f} env steps/s ({rate / single:.2f}x single)  "
            f"PING p99 idle {result['ping_idle']['p99_ms']:.2f} ms, loaded {result['ping_loaded']['p99_ms']:.2f} ms"
        )
        if "version_spread" in result:
            spread = result["version_spread"]
            line += f"  version to every front-end: p50 {spread['p50_ms']:.1f} ms, max {spread['max_ms']:.1f} ms"
        lines.append(line)
        lines.append(f"{'':15s} CPU s per million env steps (front-ends..., learner): {result['ingest']['cpu_s_per_million_steps']}")
    one = results.get("ray_1")
    if one:
        frontend_cost, learner_cost = one["ingest"]["cpu_s_per_million_steps"]
        frontend_rate, learner_rate = 1e6 / frontend_cost, 1e6 / learner_cost
        lines.append(
            f"Estimate: a front-end host's core takes {frontend_rate:,.0f} env steps/s; the learner's ingest core "
            f"{learner_rate:,.0f}: 8 hosts (one core each) offer {8 * frontend_rate:,.0f}, so the learner's ingest "
            f"bounds the cluster from {learner_rate / frontend_rate:.1f} front-end cores on."
        )
        results["estimate"] = {
            "frontend_core_env_steps_per_s": rounded(frontend_rate, 0),
            "learner_ingest_env_steps_per_s": rounded(learner_rate, 0),
            "eight_hosts_env_steps_per_s": rounded(8 * frontend_rate, 0),
            "learner_bound_from_frontends": rounded(learner_rate / frontend_rate, 1),
        }
    emit("scale_out", lines, results)


if __name__ == "__main__":
    main()
