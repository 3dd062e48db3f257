"""Decode worker processes: same results as decoding on the event loop, in order, and
nothing lost when a worker dies or a client leaves with bodies still being decoded."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import time

import numpy as np
import pytest

from app.decode_workers import OFFLOAD_MIN_BODY_BYTES, DecodeWorkers
from app.json_arrays import loads_with_arrays
from app.protocol import FrameRejected, RequestReceived, Session, encode_frame
from app.schemas import ARRAY_FIELDS, SpacesContext
from app.spaces import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE

from .conftest import gateway_settings, running_gateway
from .test_transports import PING, recv_frames, tcp_socket

STEPS = 400


def chunk(steps: int = STEPS, seed: int = 0) -> dict:
    rng = random.Random(seed)
    return {
        "obs": [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(steps + 1)],
        "actions": [rng.randrange(2) for _ in range(steps)],
        "rewards": [1.0] * steps,
        "action_logp": [rng.uniform(-1, 0) for _ in range(steps)],
        "is_terminated": True,
        "episode_id": f"e{seed}",
    }


def large_body(seed: int = 0, **changes) -> bytes:
    body = json.dumps({"type": "EPISODES", "episodes": [{**chunk(seed=seed), **changes}]}).encode()
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
        await workers.start()
        try:
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
    session = Session(SpacesContext(CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE), 1 << 24)
    for body, result in zip(bodies, results):
        here, there = session.parse(body), session.parse(body, result)
        assert type(here) is type(there)
        if isinstance(here, RequestReceived):
            assert_same(here.request.model_dump(), there.request.model_dump())
        else:
            assert isinstance(here, FrameRejected) and here.error.message == there.error.message


def test_a_ping_after_large_episodes_is_answered_after_they_are_ingested(tmp_path):
    settings = gateway_settings(tmp_path, decode_workers=1, train_batch_size=10**9)
    with running_gateway(settings) as gateway:
        metrics, (worker,) = gateway.app.state.service.metrics, gateway.app.state.decoders.pids
        with tcp_socket(gateway) as sock:
            os.kill(worker, signal.SIGSTOP)  # nothing comes back from the worker until SIGCONT
            try:
                sock.sendall(encode_frame(large_body()))
                time.sleep(0.3)  # nothing else is queued now: the body is with the worker
                sock.sendall(PING)
                sock.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    sock.recv(1)  # no PONG ahead of the EPISODES it follows
                assert metrics.num_env_steps_sampled_lifetime == 0
            finally:
                os.kill(worker, signal.SIGCONT)
            sock.settimeout(30)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert metrics.num_env_steps_sampled_lifetime == STEPS
            for round_ in range(1, 4):
                sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(8)) + PING)
                assert recv_frames(sock, 1) == [{"type": "PONG"}]
                assert metrics.num_env_steps_sampled_lifetime == (1 + round_ * 8) * STEPS
        assert gateway.app.state.decoders.pids == [worker]


def test_a_dead_worker_costs_no_data_and_is_replaced(tmp_path):
    settings = gateway_settings(tmp_path, decode_workers=1, train_batch_size=10**9)
    with running_gateway(settings) as gateway:
        metrics, decoders = gateway.app.state.service.metrics, gateway.app.state.decoders
        (first,) = decoders.pids
        with tcp_socket(gateway) as sock:
            sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(40)))
            os.kill(first, signal.SIGKILL)  # while bodies are on their way to it or in it
            sock.sendall(PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert metrics.num_env_steps_sampled_lifetime == 40 * STEPS
            deadline = time.monotonic() + 30
            while decoders.pids in ([], [first]) and time.monotonic() < deadline:
                time.sleep(0.05)
            (second,) = decoders.pids
            assert second != first
            sock.sendall(encode_frame(large_body()) + PING)
            assert recv_frames(sock, 1) == [{"type": "PONG"}]
            assert metrics.num_env_steps_sampled_lifetime == 41 * STEPS
            assert decoders.decoded >= 1  # the new worker did decode


@pytest.mark.parametrize("workers", [0, 1])
def test_episodes_still_being_decoded_when_the_client_leaves_are_kept(tmp_path, workers):
    settings = gateway_settings(tmp_path, decode_workers=workers, train_batch_size=10**9)
    with running_gateway(settings) as gateway:
        metrics = gateway.app.state.service.metrics
        sock = socket.create_connection(("127.0.0.1", gateway.tcp_port))
        sock.sendall(b"".join(encode_frame(large_body(seed)) for seed in range(20)))
        sock.close()
        deadline = time.monotonic() + 30
        while metrics.num_env_steps_sampled_lifetime < 20 * STEPS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metrics.num_env_steps_sampled_lifetime == 20 * STEPS
        assert gateway.app.state.decoders.running == workers
