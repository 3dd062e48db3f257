"""Inference: thin clients' GET_ACTION, actions/s and round-trip latency, against onnxruntime's own limit.

    python bench/inference.py [--seconds 5] [--quick] [--lstm]

One gateway (its embedded defaults: CartPole's policy), thin clients over TCP in client
processes, each connection a coroutine that opens its episodes (START_EPISODE) and then
asks for actions in a loop:
  single    one episode per connection, GET_ACTION {episode_id, obs}, the next as soon as
            the ACTION is back (closed loop): 1, 64 and 1,000 connections;
  batch64   64 episodes per connection, GET_ACTION {batch: 64 observations}: 1 and 16
            connections (64 and 1,024 episodes);
  open loop 1,000 single-request connections sending at a fixed total rate, half the
            closed-loop rate just measured; latency from each request's scheduled time
            (no coordinated omission);
  training  64 single-request connections while a driver keeps the gateway training
            (EPISODES_AND_GET_STATE of 8,000 steps, again as soon as SET_STATE comes, as
            bench/latency.py does); requests sent while a training step ran (from the
            gateway's log of each step's duration) are "during training". Twice: the
            learner in a thread of the gateway (the default), then in a process of its
            own (`--learner-process`), each with its training steps' mean and max seconds.
Single, batch64 and open loop also give the gateway process's CPU (cores, and us per
action served; its threads, not its decode workers), and run with training paused (huge
train_batch_size and barrier timeout); the steps the thin clients make are recorded and
kept as they would be. The limit: the same
policy (GET /api/model.onnx) run by onnxruntime in this process on batches of 64 and
1,024 observations, one thread.

Targets: with 64-observation batches at least 200,000 actions/s; with 1,000 single-request
clients at least 20,000 actions/s and p99 under 10 ms at half that rate; during training
p99 under 10 ms and max under 50 ms.

`--lstm`: the policy has memory (`--model.use-lstm`, cell 64): the gateway keeps each
episode's state, feeds a request's states with its observations and keeps each `state_out`;
the limit feeds zero states. Only the served-action measurements and the limit (no
training part). Target: with 64-observation batches at least 100,000 actions/s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import random
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from _common import HOST, emit, episodes_bodies, percentile, proc_usage, raise_fd_limit, rounded, running_gateway  # noqa: E402
from latency import _trainer, training_windows  # noqa: E402

from rllink.framing import encode_frame  # noqa: E402

OBS = [0.01, -0.02, 0.03, 0.04]
PAUSED = ("--train-batch-size", "1000000000", "--barrier-timeout-s", "1000000")
LINGER_S = 1.0  # connections stay open this long after the measurement ends, so none closes during another's


def frame(message: dict) -> bytes:
    return encode_frame(json.dumps(message).encode())


async def _read(reader: asyncio.StreamReader) -> dict:
    header = await reader.readexactly(8)
    return json.loads(await reader.readexactly(int(header)))


async def _connection(port: int, episodes: int, start_at: float, stop_at: float, interval_s: float | None) -> tuple[int, list]:
    """One thin client: open its episodes, then GET_ACTION until stop_at; (actions, [(sent, latency)])."""
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ids = []
    for _ in range(episodes):
        writer.write(frame({"type": "START_EPISODE"}))
        ids.append((await _read(reader))["episode_id"])
    if episodes == 1:
        request = frame({"type": "GET_ACTION", "episode_id": ids[0], "obs": OBS})
    else:
        request = frame({"type": "GET_ACTION", "batch": [{"episode_id": i, "obs": OBS} for i in ids]})
    await asyncio.sleep(max(0.0, start_at - time.time()))
    actions, samples = 0, []
    # Open loop: each client's schedule starts at a random phase, so the clients' requests
    # spread over the interval instead of arriving together.
    scheduled = time.time() + (random.uniform(0, interval_s) if interval_s is not None else 0.0) - (interval_s or 0.0)
    while (now := time.time()) < stop_at:
        if interval_s is not None:  # open loop: send at the scheduled time, measure from it
            scheduled += interval_s
            if scheduled > now:
                await asyncio.sleep(scheduled - now)
            sent = scheduled
        else:
            sent = now
        writer.write(request)
        reply = await _read(reader)
        if reply.get("type") != "ACTION":
            raise RuntimeError(f"the gateway answered {reply}")
        samples.append((sent, time.time() - sent))
        actions += episodes
    # Closing is not measured, and must not be measured for others: a thousand connections
    # closing at once cost the gateway tens of ms (each one's episode goes to training),
    # which the requests still in flight would wait for. Each closes once all have stopped.
    await asyncio.sleep(max(0.0, stop_at + LINGER_S - time.time()))
    writer.close()
    return actions, samples


def _client_process(port: int, connections: int, episodes: int, start_at: float, stop_at: float, interval_s, queue) -> None:
    async def main():
        return await asyncio.gather(*(_connection(port, episodes, start_at, stop_at, interval_s) for _ in range(connections)))

    raise_fd_limit(connections + 64)
    # No collections in a client: forked from this process, it shares its heap, and each
    # full collection would walk it and the samples so far (tens of ms, counted as the
    # gateway's latency). The measurement is seconds long; its garbage is small.
    gc.freeze()
    gc.disable()
    try:
        results = asyncio.run(main())
        queue.put(("ok", sum(a for a, _ in results), [s for _, samples in results for s in samples]))
    except Exception as exc:  # reported, not hidden
        queue.put(("error", repr(exc), []))


def run_clients(
    port: int, connections: int, episodes: int, seconds: float, rate: float | None = None, processes: int = 1,
    gateway_pid: int | None = None,
) -> dict:
    """`connections` thin clients (split over client processes) for `seconds`; `rate`: total
    requests per second (open loop), else closed loop. With `gateway_pid`, also the gateway
    process's CPU (its threads, not its worker processes) over the measurement."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    processes = min(processes, connections)
    start_at = time.time() + 1.0 + connections / 500  # after every connection has opened its episodes
    stop_at = start_at + seconds
    interval = None if rate is None else connections / rate
    shares = [connections // processes + (i < connections % processes) for i in range(processes)]
    workers = [ctx.Process(target=_client_process, args=(port, n, episodes, start_at, stop_at, interval, queue)) for n in shares]
    for worker in workers:
        worker.start()
    cores = _cpu_cores(gateway_pid, start_at, stop_at) if gateway_pid is not None else None
    results = [queue.get(timeout=seconds + 120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    errors = [detail for status, detail, _ in results if status == "error"]
    if errors:
        raise RuntimeError(f"clients failed: {errors[0]}")
    samples = [s for _, _, samples in results for s in samples]
    actions = sum(a for _, a, _ in results)
    result = {"actions_per_s": actions / seconds, "samples": samples, **latency_summary([lat for _, lat in samples])}
    if cores is not None:
        result["gateway_cpu_cores"] = rounded(cores, 2)
        result["gateway_cpu_us_per_action"] = rounded(1e6 * cores / result["actions_per_s"], 1) if actions else None
    return result


def _cpu_cores(pid: int, start_at: float, stop_at: float) -> float:
    """The cores a process (its threads, not its children) uses while the clients measure,
    read at two moments as they pass (the window's first and last quarter, at most half a
    second, left out: clients starting, stopping)."""
    margin = min(0.5, (stop_at - start_at) / 4)
    readings = []
    for moment in (start_at + margin, stop_at - margin):
        time.sleep(max(0.0, moment - time.time()))
        used = proc_usage(pid, descendants=False)
        readings.append((time.time(), used["user_s"] + used["system_s"]))
    (t0, cpu0), (t1, cpu1) = readings
    return (cpu1 - cpu0) / (t1 - t0)


def _cpu_text(result: dict) -> str:
    return f"gateway {result['gateway_cpu_cores']} cores, {result['gateway_cpu_us_per_action']} us of CPU per action"


def latency_summary(latencies: list[float]) -> dict:
    ms = sorted(1000 * x for x in latencies)
    if not ms:
        return {"requests": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {"requests": len(ms), "p50_ms": rounded(percentile(ms, 50)), "p99_ms": rounded(percentile(ms, 99)), "max_ms": rounded(ms[-1])}


def onnxruntime_limit(http_port: int, seconds: float) -> dict[int, float]:
    """Observations/s of the gateway's model in this process, one thread, on batches."""
    model = httpx.get(f"http://{HOST}:{http_port}/api/model.onnx", timeout=30).content
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    obs_input, *state_input = session.get_inputs()  # a recurrent model's second input: state_in
    rates = {}
    for batch in (64, 1024):
        feed = {obs_input.name: np.tile(np.asarray(OBS, np.float32), (batch, 1))}
        if state_input:
            feed[state_input[0].name] = np.zeros((batch, state_input[0].shape[1]), np.float32)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            session.run(None, feed)
            done += batch
        rates[batch] = done / (time.perf_counter() - started)
    return rates


def during_training(gateway, seconds: float, connections: int) -> dict:
    """Closed-loop thin clients while a driver keeps the gateway training."""
    message = json.loads(episodes_bodies(1, 500, seed=7, message_type="EPISODES_AND_GET_STATE")[0])
    del message["episodes"][0]["weights_seq_no"]  # dated by the last SET_STATE: always fresh, always trained
    message["episodes"] = message["episodes"] * 16
    message["timesteps"] = 16 * 500
    body = json.dumps(message).encode()
    ctx = multiprocessing.get_context("fork")
    intervals = ctx.Queue()
    log_offset = gateway.log_path.stat().st_size
    trainer = ctx.Process(target=_trainer, args=(gateway.tcp_port, body, time.monotonic() + seconds + 2, intervals), daemon=True)
    trainer.start()
    result = run_clients(gateway.tcp_port, connections, 1, seconds, processes=2)
    trainer.join(timeout=150)
    while intervals.get(timeout=30) is not None:  # the trainer's cycles: drained so it can exit
        pass
    with open(gateway.log_path, "rb") as f:
        f.seek(log_offset)
        windows = training_windows(f.read().decode(errors="replace"))  # in time.time(), as the samples
    during = [lat for sent, lat in result["samples"] if any(a <= sent <= b for a, b in windows)]
    seconds_per_step = [b - a for a, b in windows]
    return {
        "training_steps": len(windows),
        "step_s_mean": rounded(sum(seconds_per_step) / len(windows), 2) if windows else None,
        "step_s_max": rounded(max(seconds_per_step), 2) if windows else None,
        "actions_per_s": result["actions_per_s"],
        **latency_summary(during),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--quick", action="store_true", help="1 s per measurement: a smoke run, not the figures")
    parser.add_argument("--lstm", action="store_true", help="a policy with memory; served actions only")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    raise_fd_limit(4096)

    runs: dict[str, dict] = {}
    with running_gateway(*PAUSED, *(("--model.use-lstm",) if args.lstm else ())) as gateway:
        limit = onnxruntime_limit(gateway.http_port, seconds)
        for name, connections, episodes in (
            ("single x1", 1, 1), ("single x64", 64, 1), ("single x1000", 1000, 1),
            ("batch64 x1", 1, 64), ("batch64 x16", 16, 64),
        ):
            result = run_clients(gateway.tcp_port, connections, episodes, seconds, processes=1 if connections < 64 else 2,
                                 gateway_pid=gateway.pid)
            result.pop("samples")
            runs[name] = result
            print(f"{name:>14}: {result['actions_per_s']:>10,.0f} actions/s, p50 {result['p50_ms']} ms, "
                  f"p99 {result['p99_ms']} ms, max {result['max_ms']} ms; {_cpu_text(result)}", flush=True)
        half = runs["single x1000"]["actions_per_s"] / 2
        result = run_clients(gateway.tcp_port, 1000, 1, seconds, rate=half, processes=2, gateway_pid=gateway.pid)
        result.pop("samples")
        runs["open loop x1000 at half"] = {**result, "offered_per_s": half}
        print(f"open loop x1000 at {half:,.0f}/s: {result['actions_per_s']:,.0f} actions/s, p50 {result['p50_ms']} ms, "
              f"p99 {result['p99_ms']} ms, max {result['max_ms']} ms; {_cpu_text(result)}", flush=True)
        serving = httpx.get(f"http://{HOST}:{gateway.http_port}/api/metrics", timeout=10).json()["serving"]
    trainings = {}
    for host, flags in () if args.lstm else (("learner thread", ()), ("learner process", ("--learner-process",))):
        with running_gateway(*flags, log_level="info") as gateway:  # the log dates each training step
            trainings[host] = training = during_training(gateway, max(seconds, 5.0) * 2, 64)
        print(f"during training, {host} ({training['training_steps']} steps, mean {training['step_s_mean']} s, "
              f"max {training['step_s_max']} s): {training['requests']} requests, {training['actions_per_s']:,.0f} actions/s, "
              f"p50 {training['p50_ms']} ms, p99 {training['p99_ms']} ms, max {training['max_ms']} ms", flush=True)

    batch_rate = max(runs["batch64 x1"]["actions_per_s"], runs["batch64 x16"]["actions_per_s"])
    open_loop = runs["open loop x1000 at half"]
    batch_target = 100_000 if args.lstm else 200_000
    targets = {
        f"batch64 >= {batch_target:,} actions/s{' (with memory)' if args.lstm else ''}": batch_rate >= batch_target,
        "single x1000 >= 20,000 actions/s": runs["single x1000"]["actions_per_s"] >= 20_000,
        "single x1000 p99 < 10 ms at half rate": open_loop["p99_ms"] is not None and open_loop["p99_ms"] < 10,
    }
    for host, training in trainings.items():
        targets[f"during training ({host}) p99 < 10 ms"] = training["p99_ms"] is not None and training["p99_ms"] < 10
        targets[f"during training ({host}) max < 50 ms"] = training["max_ms"] is not None and training["max_ms"] < 50
    lines = [
        f"onnxruntime in-process limit: {limit[64]:,.0f} obs/s in batches of 64, {limit[1024]:,.0f} in batches of 1,024",
        f"batch64: {batch_rate:,.0f} actions/s = {batch_rate / limit[64]:.2f}x the limit at 64",
        f"gateway's own view: mean forward-pass batch {serving['inference_batch_size_mean']}, "
        f"handling p50 {serving['action_latency_p50_ms']} ms, p99 {serving['action_latency_p99_ms']} ms",
        *(f"target {name}: {'met' if ok else 'MISSED'}" for name, ok in targets.items()),
    ]
    if args.quick:
        lines.insert(0, "--quick: 1 s per measurement, a smoke run: NOT the benchmark's figures")
    emit("inference_lstm" if args.lstm else "inference", lines, {
        "lstm": args.lstm, "limit_obs_per_s": {str(k): round(v) for k, v in limit.items()}, "runs": runs,
        "during_training": trainings, "serving": serving, "targets": targets, "quick": args.quick,
    })


if __name__ == "__main__":
    main()
