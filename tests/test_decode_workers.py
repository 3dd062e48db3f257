"""Decode worker processes: same results as decoding on the event loop, in order, and
nothing lost when a worker dies, hangs, or a client leaves with bodies still being decoded."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket

import httpx
import numpy as np
import pytest
import uvloop

from app.sansio.json_arrays import loads_with_arrays
from app.sansio.protocol import FrameRejected, RequestReceived, Session
from app.schemas import ARRAY_FIELDS
from app.settings.policies import PolicySet
from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE
from app.transport.decode_workers import OFFLOAD_MIN_BODY_BYTES, DecodeWorkers
from rllink.framing import FrameDecoder, encode_frame

from .helpers import chunk, frame, gateway_settings, running_gateway, wait_until

STEPS = 400
PING = frame({"type": "PING"})
HANG_BOUND_S = 1.0  # the reply bound in the hung-worker tests: short, so they are quick
NO_HANG_BOUND_S = 60.0  # where a worker is stopped on purpose and must not count as hung


def large_body(seed: int = 0, **changes) -> bytes:
    """An EPISODES body large enough to go to a worker: one 400-step chunk."""
    rng = np.random.default_rng(seed + 1000)
    episode = chunk(STEPS, seed=seed, action_logp=rng.uniform(-1, 0, STEPS).tolist(), episode_id=f"e{seed}")
    body = json.dumps({"type": "EPISODES", "episodes": [{**episode, **changes}]}).encode()
    assert len(body) >= OFFLOAD_MIN_BODY_BYTES
    return body


def assert_same(a, b) -> None:
    """Equal, arrays by dtype, shape and value."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert type(a) is type(b) and a == b


def tcp_socket(gateway, timeout_s: float = 60) -> socket.socket:
    """A TCP connection to the gateway's RLlink bridge; `timeout_s` guards against a hang."""
    sock = socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_frames(sock: socket.socket, count: int) -> list[dict]:
    """The next `count` frames from the gateway, as JSON."""
    decoder, frames = FrameDecoder(), []
    while len(frames) < count:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        decoder.feed(data)
        frames += [json.loads(body) for body in decoder.frames()]
    return frames


def env_steps_ingested(gateway) -> int:
    """Env steps the gateway has taken in, as GET /api/metrics reports them."""
    return httpx.get(f"{gateway.base_url}/api/metrics").json()["num_env_steps_sampled_lifetime"]


def process_exists(pid: int) -> bool:
    """True while `pid` runs or is an unreaped zombie: False once killed and reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def stopped(pid: int):
    """SIGSTOP the process; SIGCONT it on the way out, should it still be there."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def hang_warnings(caplog, pid: int) -> list[str]:
    """The warnings logged about worker `pid`."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "app.transport.decode_workers"
        and record.levelno == logging.WARNING
        and f"decode worker {pid} " in record.getMessage()
    ]


async def started(workers: DecodeWorkers) -> None:
    """Start one worker: the first large body does (it is decoded here, while it imports)."""
    await workers.start()
    assert await workers.submit(large_body(99)) is None
    await asyncio.to_thread(wait_until, lambda: workers.ready == 1, what="the worker to start up")


def start_workers_of(gateway) -> int:
    """Send the gateway's first large body (it starts the decode workers) and wait for them
    to start up; the env steps it has ingested by then."""
    with tcp_socket(gateway) as sock:
        sock.sendall(encode_frame(large_body(99)) + PING)
        assert recv_frames(sock, 1) == [{"type": "PONG"}]
    wait_until(lambda: gateway.decoders.ready == gateway.settings.decode_workers, what="the workers to start up")
    return env_steps_ingested(gateway)


def test_workers_start_with_the_first_large_body_not_with_the_gateway(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="app.transport.decode_workers")
    with running_gateway(gateway_settings(tmp_path, decode_workers=2, train_batch_size=10**9)) as gateway:
        with tcp_socket(gateway) as sock:
            sock.sendall(frame({"type": "EPISODES", "episodes": [chunk(20)]}) + PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert gateway.decoders.pids == []  # small bodies start none
            sock.sendall(encode_frame(large_body()) + PING)  # decoded here while they start
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            wait_until(lambda: gateway.decoders.ready == 2, what="the workers to start up")
            sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(1, 5)) + PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
        assert env_steps_ingested(gateway) == 20 + 5 * STEPS
        assert gateway.decoders.decoded == 4
    started_lines = [r.getMessage() for r in caplog.records if "decode worker process(es) started" in r.getMessage()]
    assert started_lines == [f"2 decode worker process(es) started (the first body of {len(large_body())} bytes came in)"]


def test_workers_decode_large_bodies_as_the_event_loop_would():
    bodies = [
        large_body(),
        large_body(1, episode_id="a [bracket] in a string"),  # declined: the event loop's decoder says
        large_body(2, obs=[[0.5, 0.5]] + [[0.1, 0.2, 0.3, 0.4]] * STEPS),  # ragged rows: declined
        large_body(3, actions=[1.5] * STEPS),
        large_body(4)[:-1],  # invalid JSON
        b"[" + large_body(5) + b"]",  # not an object: left to the event loop
    ]

    async def decode_all() -> list:
        workers = DecodeWorkers(1, ARRAY_FIELDS)
        try:
            await started(workers)
            futures = [await workers.submit(body) for body in bodies]
            assert await workers.submit(b'{"type": "PING"}') is None  # small: decoded here
            assert futures[-1] is None  # not an object: decoded here
            results = [await future for future in futures[:-1]]
            assert workers.decoded == 2
            return results
        finally:
            await workers.stop()

    results = asyncio.run(decode_all())
    for body, result in zip(bodies, results):
        assert_same(result, loads_with_arrays(body, ARRAY_FIELDS))
    assert [result is None for result in results] == [False, True, True, False, True]

    # The events are the same whichever side decoded the body.
    session = Session(PolicySet.single(CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE), 1 << 24)
    for body, result in zip(bodies, results):
        here, there = session.parse(body), session.parse(body, result)
        assert type(here) is type(there)
        if isinstance(here, RequestReceived):
            assert_same(here.request.model_dump(), there.request.model_dump())
        else:
            assert isinstance(here, FrameRejected) and here.error.message == there.error.message


def test_a_body_for_a_worker_whose_socket_just_closed_is_decoded_here_not_an_error():
    """A worker dies: the event loop closes its socket at once, its reader notices a turn
    later. A body submitted in between (uvloop raises on writing to a closed transport)
    must come back as None, to be decoded by the caller, not as an exception that ends
    the client's connection. The socket is closed by hand here, at that very moment."""

    async def submit_after_close() -> None:
        workers = DecodeWorkers(1, ARRAY_FIELDS)
        try:
            await started(workers)
            (worker,) = workers._workers
            worker._writer.transport.close()  # what the loop does when the worker dies
            await asyncio.sleep(0)  # the socket is closed now; the reader wakes a turn later
            future = await workers.submit(large_body())
            assert future is not None and await asyncio.wait_for(future, 10) is None
        finally:
            await workers.stop()

    uvloop.run(submit_after_close())


def test_a_worker_still_starting_up_is_given_no_bodies():
    async def submit_before_ready() -> None:
        workers = DecodeWorkers(1, ARRAY_FIELDS)
        await workers.start()
        try:
            assert await workers.submit(large_body()) is None  # the first starts the worker
            await asyncio.to_thread(wait_until, lambda: workers.running == 1, what="the worker to be spawned")
            (pid,) = workers.pids
            with stopped(pid):  # it cannot have said it is ready: it gets nothing to hold
                assert workers.ready == 0
                assert await workers.submit(large_body()) is None
        finally:
            await workers.stop()

    asyncio.run(submit_before_ready())


def test_workers_stopped_while_still_starting_up_exit_without_a_word(capfd):
    """A gateway stopping (or failing to start) just after its first large body: the
    workers, still importing, see their input end and exit quietly (they once raised
    BrokenPipeError into the gateway's log)."""

    async def stop_at_once() -> None:
        workers = DecodeWorkers(2, ARRAY_FIELDS)
        await workers.start()
        assert await workers.submit(large_body()) is None
        await asyncio.to_thread(wait_until, lambda: workers.running == 2, what="the workers to be spawned")
        pids = workers.pids
        assert workers.ready == 0  # still importing
        await workers.stop()
        assert not any(process_exists(pid) for pid in pids)

    asyncio.run(stop_at_once())
    assert "Traceback" not in capfd.readouterr().err


def test_a_hung_worker_is_killed_its_bodies_come_back_as_none_and_another_decodes(caplog):
    bodies = [large_body(seed) for seed in range(4)]

    async def hang_one() -> None:
        workers = DecodeWorkers(1, ARRAY_FIELDS, reply_timeout_s=HANG_BOUND_S)
        try:
            await started(workers)
            (first,) = workers.pids
            assert_same(await (await workers.submit(bodies[0])), loads_with_arrays(bodies[0], ARRAY_FIELDS))
            with stopped(first):
                futures = [await workers.submit(body) for body in bodies[1:]]
                assert None not in futures  # the stopped worker took them
                assert not any(future.done() for future in futures)
                # They come back without the worker: None, decode them here. (60 s: a hang guard.)
                assert await asyncio.wait_for(asyncio.gather(*futures), 60) == [None] * 3
                await asyncio.to_thread(wait_until, lambda: not process_exists(first), what="the hung worker reaped")
            await asyncio.to_thread(
                wait_until, lambda: workers.ready == 1 and workers.pids != [first], what="a new worker"
            )
            (second,) = workers.pids
            assert second != first
            assert_same(await (await workers.submit(bodies[1])), loads_with_arrays(bodies[1], ARRAY_FIELDS))
            assert workers.decoded == 1  # the new one's
            (warning,) = hang_warnings(caplog, first)  # one line, not one more when it is reaped
            assert f"decode worker {first} answered nothing for {HANG_BOUND_S:g} s" in warning
            assert "3 body(ies) outstanding" in warning
        finally:
            await workers.stop()

    with caplog.at_level(logging.WARNING, logger="app.transport.decode_workers"):
        asyncio.run(hang_one())


def test_a_ping_after_large_episodes_is_answered_after_they_are_ingested(tmp_path):
    settings = gateway_settings(
        tmp_path, decode_workers=1, decode_timeout_s=NO_HANG_BOUND_S, train_batch_size=10**9
    )
    with running_gateway(settings) as gateway:
        decoders = gateway.decoders
        metrics = gateway.service.metrics
        base = start_workers_of(gateway)
        (worker,) = decoders.pids
        with tcp_socket(gateway) as sock:
            with stopped(worker):  # nothing comes back from the worker until SIGCONT
                sock.sendall(encode_frame(large_body()) + PING)
                sock.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    sock.recv(1)  # no PONG ahead of the EPISODES it follows
                assert metrics.num_env_steps_sampled_lifetime == base
            sock.settimeout(60)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert metrics.num_env_steps_sampled_lifetime == base + STEPS
            for round_ in range(1, 4):
                sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(8)) + PING)
                assert recv_frames(sock, 1) == [{"type": "PONG"}]
                assert metrics.num_env_steps_sampled_lifetime == base + (1 + round_ * 8) * STEPS
        assert decoders.pids == [worker]
        assert decoders.decoded == 1 + 3 * 8


def test_a_dead_worker_costs_no_data_and_is_replaced(tmp_path):
    settings = gateway_settings(tmp_path, decode_workers=1, train_batch_size=10**9)
    with running_gateway(settings) as gateway:
        decoders = gateway.decoders
        base = start_workers_of(gateway)
        (first,) = decoders.pids
        with tcp_socket(gateway) as sock:
            sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(40)))
            os.kill(first, signal.SIGKILL)  # while bodies are on their way to it or in it
            sock.sendall(PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert env_steps_ingested(gateway) == base + 40 * STEPS
            wait_until(lambda: decoders.ready == 1 and decoders.pids != [first], what="a new worker")
            (second,) = decoders.pids
            assert second != first
            sock.sendall(encode_frame(large_body()) + PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert env_steps_ingested(gateway) == base + 41 * STEPS
            assert decoders.decoded == 1  # the new worker did decode


def test_a_hung_worker_costs_no_data_and_is_replaced(tmp_path, caplog):
    settings = gateway_settings(
        tmp_path, decode_workers=1, decode_timeout_s=HANG_BOUND_S, train_batch_size=10**9
    )
    caplog.set_level(logging.WARNING, logger="app.transport.decode_workers")
    with running_gateway(settings) as gateway:
        decoders = gateway.decoders
        base = start_workers_of(gateway)
        (first,) = decoders.pids
        with tcp_socket(gateway) as sock, stopped(first):
            # The stopped worker takes these bodies and answers none of them: the PONG
            # behind them comes once they are decoded on the event loop instead.
            sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(6)) + PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert env_steps_ingested(gateway) == base + 6 * STEPS
            wait_until(lambda: not process_exists(first), what="the hung worker killed and reaped")
            wait_until(lambda: decoders.ready == 1 and decoders.pids != [first], what="a new worker")
            (second,) = decoders.pids
            assert second != first
            sock.sendall(encode_frame(large_body(6)) + PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert env_steps_ingested(gateway) == base + 7 * STEPS
            assert decoders.decoded == 1  # the new worker did decode
        (warning,) = hang_warnings(caplog, first)
        assert f"decode worker {first} answered nothing for {HANG_BOUND_S:g} s" in warning


@pytest.mark.parametrize("workers", [0, 1])
def test_episodes_still_being_decoded_when_the_client_leaves_are_kept(tmp_path, workers):
    settings = gateway_settings(tmp_path, decode_workers=workers, train_batch_size=10**9)
    with running_gateway(settings) as gateway:
        decoders = gateway.decoders
        base = start_workers_of(gateway) if workers else 0
        sock = socket.create_connection(("127.0.0.1", gateway.tcp_port))
        sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(20)))
        sock.close()
        wait_until(lambda: env_steps_ingested(gateway) == base + 20 * STEPS, what="every env step ingested")
        assert decoders.running == workers
