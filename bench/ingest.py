"""Ingest: env steps per second the gateway accepts and validates, TCP and WebSocket.

    python bench/ingest.py [--seconds 3] [--clients 1 8] [--frames-per-batch 16]

CartPole-sized EPISODES messages (one 500-step chunk each: obs 4 floats, discrete
actions, rewards, log-probs; ~55 kB of JSON) are pre-encoded; each client, in its own
process, sends batches of them followed by a PING and counts a batch as accepted when
its PONG comes back (replies are in order, so every EPISODES before it was validated
and ingested). Two batches are kept in flight. The gateway runs as a subprocess with
a train batch size and barrier timeout so large that no training step runs, and one
idle client that has sent experience stays connected throughout (so that the gateway
never sees "every client waiting", which would also start a training step).

The limit it is compared with, measured in the same run on the same bytes: decoding
the bodies with orjson in a loop, one core. The sans-I/O core (frame decoder, JSON decoding,
pydantic validation into numpy arrays) is measured in-process too, to split the cost.
Each run also reports the gateway's CPU use (its process and its decode worker
processes, whose share is also given alone), the system share and the minor page faults
per message (new memory touched: everything received is kept while paused).

Targets: TCP >= 50% of the orjson limit and >= 1,000,000 steps/s with one client;
WebSocket within 2x of TCP.

`--lstm`: the policy has memory (`--model.use-lstm`, cell 64) and every chunk carries its
`state_in` (128 values, checked against the module's state size). Target: within 1.5x of
the feed-forward run's gateway CPU per env step (two runs, compared by hand).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgpack  # noqa: E402
import orjson  # noqa: E402
from _common import (  # noqa: E402
    PING_FRAME,
    PONG_BODY,
    emit,
    episodes_bodies,
    proc_peak_rss_bytes,
    proc_usage,
    raise_fd_limit,
    read_frames,
    rounded,
    running_gateway,
    tcp_connect,
    ws_connect,
)

from app.sansio.protocol import RequestReceived, Session  # noqa: E402
from app.settings.hyperparameters import ModelConfig  # noqa: E402
from app.settings.policies import DEFAULT_MODULE_ID, Module, PolicySet  # noqa: E402
from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE  # noqa: E402
from app.training.algorithms import ALGORITHMS  # noqa: E402
from rllink.framing import FrameDecoder, encode_frame

STEPS = 500  # per EPISODES message
DISTINCT_MESSAGES = 8
LSTM_STATE_SIZE = 128  # --lstm: the default cell of 64, hidden and cell state
HARD_TIMEOUT_S = 60  # a client gives up this long after its sending window


# -- Clients (each in its own process) -----------------------------------------------


def _client(transport: str, address, frames: list[bytes], start_at: float, seconds: float, results) -> None:
    """Send batches of `frames` + PING until start_at + seconds, two batches in flight;
    report the batches whose PONG came back."""
    result = {"acked": 0, "errors": 0, "first_error": None, "t0": None, "t_last": None}
    try:
        if transport.startswith("tcp"):
            link = _TcpLink(address, frames)
        else:
            link = _WsLink(address, frames, transport)
        with link:
            while time.monotonic() < start_at:
                time.sleep(min(0.01, max(0.0, start_at - time.monotonic())))
            deadline = start_at + seconds
            hard_deadline = deadline + HARD_TIMEOUT_S
            usage0 = resource.getrusage(resource.RUSAGE_SELF)
            result["t0"] = time.monotonic()
            link.send_batch()
            outstanding = 1
            while outstanding and time.monotonic() < hard_deadline:
                if time.monotonic() < deadline:
                    link.send_batch()
                    outstanding += 1
                body = link.next_reply(hard_deadline)
                if body == PONG_BODY:
                    outstanding -= 1
                    result["acked"] += 1
                    result["t_last"] = time.monotonic()
                else:
                    result["errors"] += 1
                    result["first_error"] = result["first_error"] or body[:300].decode(errors="replace")
            usage1 = resource.getrusage(resource.RUSAGE_SELF)
            result["cpu_s"] = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
            if outstanding:
                result["errors"] += outstanding
                result["first_error"] = result["first_error"] or f"{outstanding} batches unanswered"
    except Exception as exc:  # reported, not raised: the parent counts it
        result["errors"] += 1
        result["first_error"] = result["first_error"] or f"{type(exc).__name__}: {exc}"
    results.put(result)


class _TcpLink:
    def __init__(self, port: int, frames: list[bytes]) -> None:
        self.sock = tcp_connect(port)
        self.batch = b"".join(frames) + PING_FRAME
        self.decoder = FrameDecoder()
        self.pending: list[bytes] = []

    def send_batch(self) -> None:
        self.sock.settimeout(HARD_TIMEOUT_S)
        self.sock.sendall(self.batch)

    def next_reply(self, deadline: float) -> bytes:
        while not self.pending:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the gateway closed the connection")
            self.decoder.feed(data)
            self.pending.extend(self.decoder.frames())
        return self.pending.pop(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


class _WsLink:
    """One RLlink frame per WebSocket message, binary or text, optionally deflated."""

    def __init__(self, url: str, frames: list[bytes], mode: str) -> None:
        self._connection = ws_connect(url, deflate=mode.endswith("deflate"))
        self.ws = self._connection.__enter__()
        text = "text" in mode
        self.messages = [f.decode() if text else f for f in frames] + [PING_FRAME.decode() if text else PING_FRAME]
        self.decoder = FrameDecoder()
        self.pending: list[bytes] = []

    def send_batch(self) -> None:
        for message in self.messages:
            self.ws.send(message)

    def next_reply(self, deadline: float) -> bytes:
        while not self.pending:
            message = self.ws.recv(timeout=max(0.001, deadline - time.monotonic()))
            self.decoder.feed(message if isinstance(message, bytes) else message.encode())
            self.pending.extend(self.decoder.frames())
        return self.pending.pop(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._connection.__exit__(*exc)


def run_clients(gateway, transport: str, n: int, frames: list[bytes], seconds: float) -> dict:
    """n client processes for `seconds`; aggregate env steps/s acknowledged, and the
    gateway's CPU time per env step (robust to other load on the machine)."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    address = gateway.tcp_port if transport.startswith("tcp") else gateway.ws_url
    start_at = time.monotonic() + 1.0 + 0.05 * n  # time to fork and connect
    procs = [
        ctx.Process(target=_client, args=(transport, address, frames, start_at, seconds, results), daemon=True)
        for _ in range(n)
    ]
    for proc in procs:
        proc.start()
    while time.monotonic() < start_at:
        time.sleep(0.005)
    usage0, wall0, own0 = proc_usage(gateway.pid), time.monotonic(), proc_usage(gateway.pid, descendants=False)
    collected = []
    for _ in procs:
        try:
            collected.append(results.get(timeout=seconds + HARD_TIMEOUT_S + 30))
        except Exception:
            collected.append({"acked": 0, "errors": 1, "first_error": "client process did not report"})
    usage1, wall1, own1 = proc_usage(gateway.pid), time.monotonic(), proc_usage(gateway.pid, descendants=False)
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    acked = sum(r["acked"] for r in collected)
    steps = acked * len(frames) * STEPS
    t0s = [r["t0"] for r in collected if r.get("t0") is not None]
    t_lasts = [r["t_last"] for r in collected if r.get("t_last") is not None]
    elapsed = (max(t_lasts) - min(t0s)) if t0s and t_lasts else float("nan")
    used = {key: usage1[key] - usage0[key] for key in usage0}
    gateway_cpu = used["user_s"] + used["system_s"]
    workers_cpu = max(0.0, gateway_cpu - (own1["user_s"] + own1["system_s"] - own0["user_s"] - own0["system_s"]))
    messages = acked * len(frames)
    return {
        "transport": transport,
        "clients": n,
        "env_steps": steps,
        "seconds": rounded(elapsed),
        "env_steps_per_s": rounded(steps / elapsed if elapsed > 0 else 0.0, 0),
        "env_steps_per_gateway_cpu_s": rounded(steps / gateway_cpu if gateway_cpu > 0 else 0.0, 0),
        "errors": sum(r["errors"] for r in collected),
        "first_error": next((r["first_error"] for r in collected if r.get("first_error")), None),
        "gateway_cpu_pct": rounded(100 * gateway_cpu / (wall1 - wall0), 1),
        "decode_workers_cpu_pct": rounded(100 * workers_cpu / (wall1 - wall0), 1),
        "gateway_system_cpu_pct": rounded(100 * used["system_s"] / (wall1 - wall0), 1),
        "gateway_minor_faults_per_message": rounded(used["minor_faults"] / messages if messages else 0.0, 1),
        "client_cpu_pct": rounded(100 * max((r.get("cpu_s") or 0.0) for r in collected) / seconds, 1),
    }


@contextmanager
def _holder(gateway, frame: bytes) -> Iterator[None]:
    """A client that has sent experience and stays connected without waiting for
    weights: while it is there, the gateway never finds "every client waiting" (so a
    run's clients leaving does not start a training step on everything received). Its
    message, a large body, starts the decode workers: they have started up (the gateway's
    processes have stopped using CPU) before the runs begin."""
    sock = tcp_connect(gateway.tcp_port)
    try:
        sock.sendall(frame + PING_FRAME)
        if read_frames(sock, 1, deadline=time.monotonic() + 30) != [PONG_BODY]:
            raise RuntimeError("the gateway refused the benchmark message")
        _wait_until_idle(gateway.pid)
        yield
    finally:
        sock.close()


def _wait_until_idle(pid: int, quiet_s: float = 0.5, timeout_s: float = 30.0) -> None:
    """Until the process and its children use under 5% of a core over `quiet_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = proc_usage(pid)
        time.sleep(quiet_s)
        after = proc_usage(pid)
        if after["user_s"] + after["system_s"] - before["user_s"] - before["system_s"] < 0.05 * quiet_s:
            return


# -- Limits measured in-process ---------------------------------------------------------


def measure_limits(bodies: list[bytes], seconds: float, lstm: bool = False) -> dict[str, float]:
    """Env steps/s (wall clock, and per CPU second) of orjson.loads on the bodies, and
    of the gateway's sans-I/O core on the same frames (for a module with memory: `lstm`),
    one core, best of 5 rounds."""
    model = ModelConfig(use_lstm=lstm)
    module = Module(DEFAULT_MODULE_ID, CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE, ALGORITHMS["ppo"].config(), model=model)
    session = Session(PolicySet([module]), 8 << 20)
    frames = [encode_frame(body) for body in bodies]

    def parse(frame: bytes) -> None:
        (event,) = session.receive_data(frame)
        if not isinstance(event, RequestReceived):
            raise RuntimeError(f"the core refused the benchmark message: {event}")

    orjson_wall, orjson_cpu = _best_rates(orjson.loads, bodies, seconds)
    core_wall, core_cpu = _best_rates(parse, frames, seconds)
    return {"orjson": orjson_wall, "orjson_cpu": orjson_cpu, "core": core_wall, "core_cpu": core_cpu}


def _best_rates(fn, items: list, seconds: float, rounds: int = 5) -> tuple[float, float]:
    best_wall = best_cpu = 0.0
    for _ in range(rounds):
        calls, start, cpu_start = 0, time.perf_counter(), time.thread_time()
        while (elapsed := time.perf_counter() - start) < seconds / rounds and calls < 1_000_000:
            fn(items[calls % len(items)])
            calls += 1
        cpu = time.thread_time() - cpu_start
        best_wall = max(best_wall, calls * STEPS / elapsed)
        best_cpu = max(best_cpu, calls * STEPS / cpu if cpu > 0 else 0.0)
    return best_wall, best_cpu


# -- Main ---------------------------------------------------------------------------------

ONE_CLIENT_ONLY = ("ws-text", "ws-deflate", "tcp-msgpack")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="sending window per configuration")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8], help="client counts to run")
    parser.add_argument("--frames-per-batch", type=int, default=16, help="EPISODES messages per PING")
    parser.add_argument(
        "--transports", nargs="+", default=["tcp", "ws", "ws-text", "ws-deflate", "tcp-msgpack"],
        help="tcp, ws (binary messages), ws-text, ws-deflate (permessage-deflate, as browsers "
        "negotiate it), tcp-msgpack (msgpack bodies); the last three with one client only",
    )
    parser.add_argument("--lstm", action="store_true", help="a policy with memory, chunks with state_in")
    parser.add_argument("--gateway-prelude", default=None, help=argparse.SUPPRESS)  # experiments only
    args = parser.parse_args()
    raise_fd_limit(4096)

    bodies = episodes_bodies(DISTINCT_MESSAGES, STEPS, state_size=LSTM_STATE_SIZE if args.lstm else 0)
    frames = [encode_frame(body) for body in bodies]
    msgpack_frames = [encode_frame(msgpack.packb(orjson.loads(body))) for body in bodies]
    bytes_per_step = sum(len(f) for f in frames) / len(frames) / STEPS

    def batch(of: list[bytes]) -> list[bytes]:
        return [of[i % len(of)] for i in range(args.frames_per_batch)]

    limits = [measure_limits(bodies, 1.0, args.lstm)]
    runs = []
    gateway_flags = ["--train-batch-size", str(10**12), "--barrier-timeout-s", str(10**9), *(["--model.use-lstm"] if args.lstm else [])]
    with running_gateway(*gateway_flags, prelude=args.gateway_prelude) as gateway, _holder(gateway, frames[0]):
        for transport in args.transports:
            for n in args.clients:
                if n > 1 and transport in ONE_CLIENT_ONLY:
                    continue
                run = run_clients(gateway, transport, n, batch(msgpack_frames if "msgpack" in transport else frames), args.seconds)
                runs.append(run)
                print(
                    f"  {transport:11s} x{n:<2d}: {run['env_steps_per_s']:>12,.0f} env steps/s, "
                    f"{run['env_steps_per_gateway_cpu_s']:>12,.0f} per gateway CPU-s "
                    f"(gateway CPU {run['gateway_cpu_pct']}%, busiest client CPU {run['client_cpu_pct']}%, "
                    f"errors {run['errors']})",
                    flush=True,
                )
        rss = proc_peak_rss_bytes(gateway.pid)
    limits.append(measure_limits(bodies, 1.0, args.lstm))

    # The best orjson did in either measurement: the harshest reference.
    orjson_rate = max(x["orjson"] for x in limits)
    orjson_cpu = max(x["orjson_cpu"] for x in limits)
    core_rate = max(x["core"] for x in limits)
    core_cpu = max(x["core_cpu"] for x in limits)
    by_key = {(r["transport"], r["clients"]): r for r in runs}

    def rate(transport: str, n: int, key: str = "env_steps_per_s") -> float:
        run = by_key.get((transport, n))
        return run[key] if run else float("nan")

    n_max = max(args.clients)
    tcp1, ws1, tcp_n, ws_n = rate("tcp", 1), rate("ws", 1), rate("tcp", n_max), rate("ws", n_max)
    tcp1_cpu = rate("tcp", 1, "env_steps_per_gateway_cpu_s")
    targets = {
        "tcp 1 client >= 0.5 x orjson": _check(tcp1 / orjson_rate, 0.5),
        "tcp 1 client >= 1,000,000 env steps/s": _check(tcp1, 1e6),
        "ws >= 0.5 x tcp, 1 client": _check(ws1 / tcp1, 0.5),
        f"ws >= 0.5 x tcp, {n_max} clients": _check(ws_n / tcp_n, 0.5),
    }
    lines = [
        f"message: {len(frames[0]):,} bytes of JSON ({len(msgpack_frames[0]):,} as msgpack), {STEPS} env steps "
        f"({bytes_per_step:.0f} bytes/step); {args.frames_per_batch} messages per PING; {args.seconds:g} s per run",
        f"limit, orjson.loads alone:       {orjson_rate:>12,.0f} env steps/s, {orjson_cpu:>12,.0f} per CPU-s",
        f"sans-I/O core (decode+validate): {core_rate:>12,.0f} env steps/s, {core_cpu:>12,.0f} per CPU-s"
        f" = {core_cpu / orjson_cpu:.2f} x orjson",
    ]
    for run in runs:
        r, c = run["env_steps_per_s"], run["env_steps_per_gateway_cpu_s"]
        lines.append(
            f"{run['transport']:>11s} x{run['clients']:<2d}: {r:>12,.0f} env steps/s = {r / orjson_rate:.2f} x orjson; "
            f"{c:>12,.0f} per gateway CPU-s = {c / orjson_cpu:.2f} x orjson; gateway CPU {run['gateway_cpu_pct']}% "
            f"(decode workers {run['decode_workers_cpu_pct']}%, system {run['gateway_system_cpu_pct']}%, "
            f"{run['gateway_minor_faults_per_message']} page faults/message); "
            f"errors {run['errors']}" + (f" ({run['first_error']})" if run["first_error"] else "")
        )
    lines.append(f"gateway peak RSS {rss / 2**20:,.0f} MiB (everything received is kept: training paused)")
    for name, (ok, value) in targets.items():
        lines.append(f"target {name}: {'met' if ok else 'MISSED'} ({value:,.2f})")
    emit(
        "ingest_lstm" if args.lstm else "ingest",
        lines,
        {
            "lstm": args.lstm,
            "bytes_per_message": len(frames[0]),
            "steps_per_message": STEPS,
            "orjson_limit_steps_per_s": rounded(orjson_rate, 0),
            "orjson_limit_steps_per_cpu_s": rounded(orjson_cpu, 0),
            "core_steps_per_s": rounded(core_rate, 0),
            "core_steps_per_cpu_s": rounded(core_cpu, 0),
            "core_vs_orjson_cpu": rounded(core_cpu / orjson_cpu),
            "runs": [
                {
                    **run,
                    "vs_orjson": rounded(run["env_steps_per_s"] / orjson_rate),
                    "cpu_vs_orjson": rounded(run["env_steps_per_gateway_cpu_s"] / orjson_cpu),
                }
                for run in runs
            ],
            "tcp_1_vs_orjson": rounded(tcp1 / orjson_rate),
            "tcp_1_cpu_vs_orjson": rounded(tcp1_cpu / orjson_cpu),
            "ws_vs_tcp_1": rounded(ws1 / tcp1),
            f"ws_vs_tcp_{n_max}": rounded(ws_n / tcp_n),
            "gateway_peak_rss_bytes": rss,
            "targets": {name: ok for name, (ok, _) in targets.items()},
            "errors": sum(r["errors"] for r in runs),
        },
    )


def _check(value: float, at_least: float) -> tuple[bool, float]:
    return (not math.isnan(value) and value >= at_least), value


if __name__ == "__main__":
    main()
