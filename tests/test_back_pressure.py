"""Clients faster than the learner: held back, with bounded batches and backlog, nothing lost.

A real gateway (uvicorn and its TCP bridge in a thread) and real sockets: a client floods
fire-and-forget `EPISODES` without ever reading, while another client pings and REST is
polled; a thin client steps several CartPoles flat out with one batched `GET_ACTION`.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from rllink_clients.thin_client import run_thin_envs

from .helpers import TcpPeer, WsPeer, chunk, frame, gateway_settings, running_gateway, wait_until

STEPS = 500  # per message
MESSAGES = 100
BATCH = 1000
BACKLOG = 2000


def _accounted(metrics: dict) -> int:
    return (
        metrics["num_env_steps_trained_lifetime"] + sum(metrics["dropped_env_steps"].values())
        + metrics["pending_env_steps"] + metrics["training_env_steps"]
    )


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_an_episodes_flood_is_held_back_with_a_bounded_backlog_and_every_step_accounted_for(tmp_path, transport):
    settings = gateway_settings(
        tmp_path, train_batch_size=BATCH, max_backlog_env_steps=BACKLOG, ppo={"update_epochs": 10}
    )
    with running_gateway(settings) as gateway:
        flood = TcpPeer.connect(gateway) if transport == "tcp" else WsPeer(gateway)
        messages = [frame({"type": "EPISODES", "episodes": [chunk(STEPS, seed=i)]}) for i in range(MESSAGES)]
        sent, pinging = threading.Event(), threading.Event()

        def send_all() -> None:
            pinging.wait(30)  # the other client is connected and answered: the flood cannot end before it pings
            for message in messages:  # never reads: only flow control can slow it down
                flood.send(message)
            sent.set()

        pongs = 0

        def ping() -> None:
            nonlocal pongs
            with TcpPeer.connect(gateway) as peer:
                while not sent.is_set():
                    peer.send(frame({"type": "PING"}))
                    assert peer.receive()["type"] == "PONG"
                    pongs += 1
                    pinging.set()
                    time.sleep(0.01)  # answered throughout, without a busy loop's CPU

        threads = [threading.Thread(target=send_all), threading.Thread(target=ping)]
        for thread in threads:
            thread.start()
        most_pending = 0
        with httpx.Client(base_url=gateway.base_url, timeout=30) as rest:
            while not sent.is_set():
                metrics = rest.get("/api/metrics").json()
                assert metrics["num_env_steps_sampled_lifetime"] == _accounted(metrics), metrics
                most_pending = max(most_pending, metrics["pending_env_steps"])
            for thread in threads:
                thread.join(timeout=120)
            most_pending = max(most_pending, rest.get("/api/metrics").json()["pending_env_steps"])  # all sent now
            flood.close()  # what it sent and the gateway has not read yet is still taken in
            total = MESSAGES * STEPS
            wait_until(lambda: rest.get("/api/metrics").json()["num_env_steps_sampled_lifetime"] == total, 120,
                       "every step sent to be received")
            metrics = rest.get("/api/metrics").json()
    assert _accounted(metrics) == total and metrics["dropped_env_steps"].get("stale", 0) < total / 2, metrics
    assert most_pending <= BACKLOG + STEPS, most_pending  # the backlog, and the message that filled it
    assert 0 < metrics["policies"]["default_policy"]["max_batch_env_steps"] <= BATCH
    assert pongs > 0


def test_a_thin_client_stepping_eight_carts_flat_out_trains_on_bounded_batches_and_learns(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=2000)
    with running_gateway(settings) as gateway:
        with gateway.client("tcp") as client:
            result = run_thin_envs(client, "CartPole-v1", 8, target_return=400, max_env_steps=400_000)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).json()
    assert result.reached_target, (result.env_steps, result.mean_return)
    policy = metrics["policies"]["default_policy"]
    # The backlog (2 x 2,000), and what one GET_ACTION may add beyond it: its 8 episodes' steps
    # (each up to env_steps_per_sample, 500) should all of them end at once.
    assert policy["max_batch_env_steps"] <= 2000 and metrics["pending_env_steps"] <= 2 * 2000 + 8 * 500
