"""Faults against a real gateway: clients killed mid-frame, mid-message or while they wait
for SET_STATE, a client stalling mid-header, a flood of connections over the limit. (The
gateway itself SIGKILLed mid-training: test_gateway_crash.py.)

Through every client fault two trainers, one per transport, keep training, a watcher
checks every /api/metrics snapshot, and at the end every env step the gateway received
is accounted for: sampled = trained + dropped + pending (+ the batch in training).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from rllink.framing import Encoding
from rllink_clients.rllink_client import RLlinkClient

from .helpers import RunningGateway, TcpPeer, WsPeer, chunk, frame, gateway_settings, running_gateway, wait_until

# Only the barrier trains (every sampling client waits), and it times out after a minute:
# the trainers progress within seconds only if the gateway forgets a killed client at once.
FAULT_SETTINGS = dict(train_batch_size=100_000, barrier_timeout_s=60.0, frame_timeout_s=1.0)
PROGRESS_S = 20.0  # bound on "the trainers keep getting SET_STATE"
GONE_S = 10.0  # bound on the gateway noticing a dead connection
TRAINER_STEPS = 10


def kill(sock: socket.socket, how: str) -> None:
    """End a connection as a killed process would: FIN ("close") or RST ("reset")."""
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def local_peer(sock: socket.socket) -> str:
    """How the gateway names this connection's peer in /api/clients."""
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def unaccounted(metrics: dict) -> int:
    """Env steps sampled but neither trained, dropped, pending nor in training."""
    accounted = (
        metrics["num_env_steps_trained_lifetime"]
        + sum(metrics["dropped_env_steps"].values())
        + metrics["pending_env_steps"]
        + metrics["training_env_steps"]
    )
    return metrics["num_env_steps_sampled_lifetime"] - accounted


# -- The world the faults happen in ------------------------------------------------


class Trainer(threading.Thread):
    """A well-behaved client: GET_CONFIG, then EPISODES_AND_GET_STATE in lockstep."""

    def __init__(self, gateway: RunningGateway, transport: str) -> None:
        super().__init__(name=f"trainer-{transport}", daemon=True)
        self.gateway, self.transport = gateway, transport
        self.versions: list[int] = []
        self.steps_acknowledged = 0  # of messages answered with SET_STATE
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            with self.gateway.client(self.transport, timeout=PROGRESS_S + 30) as client:
                assert client.request({"type": "GET_CONFIG"})["type"] == "SET_CONFIG"
                while not self.halt.is_set():
                    reply = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(TRAINER_STEPS)]})
                    assert reply["type"] == "SET_STATE", reply
                    self.steps_acknowledged += TRAINER_STEPS
                    self.versions.append(reply["weights_seq_no"])
        except BaseException as exc:  # reported by World
            self.error = exc


class MetricsWatcher(threading.Thread):
    """Reads /api/metrics over and over; records every snapshot that does not add up."""

    def __init__(self, base_url: str) -> None:
        super().__init__(name="metrics-watcher", daemon=True)
        self.base_url = base_url
        self.snapshots = 0
        self.problems: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        previous: dict | None = None
        with httpx.Client(base_url=self.base_url, timeout=30) as http:
            while not self.halt.is_set():
                try:
                    metrics = http.get("/api/metrics").raise_for_status().json()
                except Exception as exc:
                    self.problems.append(f"GET /api/metrics failed: {exc!r}")
                    return
                self.snapshots += 1
                if (missing := unaccounted(metrics)) != 0:
                    self.problems.append(f"{missing} env steps unaccounted for in {metrics}")
                if min(metrics["clients"].values()) < 0 or metrics["pending_env_steps"] < 0:
                    self.problems.append(f"negative counts in {metrics}")
                if previous is not None:
                    for key in ("weights_seq_no", "num_env_steps_sampled_lifetime", "num_env_steps_trained_lifetime"):
                        if metrics[key] < previous[key]:
                            self.problems.append(f"{key} went back from {previous[key]} to {metrics[key]}")
                previous = metrics
                time.sleep(0.02)


class World:
    """A gateway, a trainer per transport, a metrics watcher, and the env steps that the
    gateway acknowledged to the faulty clients (added by each test)."""

    def __init__(self, gateway: RunningGateway) -> None:
        self.gateway = gateway
        self.http = httpx.Client(base_url=gateway.base_url, timeout=30)
        self.trainers = [Trainer(gateway, "tcp"), Trainer(gateway, "ws")]
        self.watcher = MetricsWatcher(gateway.base_url)
        self.acknowledged_steps = 0  # by the faulty clients: the gateway confirmed it has them

    def start(self) -> None:
        for thread in [*self.trainers, self.watcher]:
            thread.start()

    def metrics(self) -> dict:
        return self.http.get("/api/metrics").raise_for_status().json()

    def client_entry(self, peer: str) -> dict | None:
        entries = [c for c in self.http.get("/api/clients").raise_for_status().json() if c["peer"] == peer]
        return entries[0] if entries else None

    def wait_gone(self, peer: str) -> None:
        wait_until(lambda: self.client_entry(peer) is None, GONE_S, f"the gateway to forget {peer}")

    def blocked_by(self, peer: str) -> None:
        """Wait until training waits for `peer` alone: every other client waits for
        SET_STATE and no step runs. Only `peer` leaving (or timing out) can go on from here."""

        def blocked() -> bool:
            others = [c for c in self.http.get("/api/clients").raise_for_status().json() if c["peer"] != peer]
            metrics = self.metrics()
            return len(others) == 2 and all(c["waiting"] for c in others) and not metrics["training_in_progress"]

        wait_until(lambda: blocked() and blocked(), PROGRESS_S, f"training to wait for {peer}")

    def progress(self, count: int = 3) -> None:
        """Both trainers get `count` more SET_STATE replies, each a newer version."""
        targets = [(trainer, len(trainer.versions) + count) for trainer in self.trainers]
        for trainer, target in targets:
            wait_until(
                lambda trainer=trainer, target=target: len(trainer.versions) >= target or trainer.error is not None,
                PROGRESS_S,
                f"{trainer.name} to get {count} more SET_STATE",
            )
            assert trainer.error is None, f"{trainer.name}: {trainer.error!r}"

    def finish(self) -> dict:
        """Stop the trainers, train on whatever is pending, and check that every env step
        acknowledged was sampled and every one sampled is trained or dropped."""
        # The watcher has checked the metrics after the faults: a snapshot begun after now.
        seen = self.watcher.snapshots
        wait_until(
            lambda: self.watcher.snapshots >= seen + 2 or not self.watcher.is_alive(),
            PROGRESS_S,
            "the metrics watcher to check the metrics after the faults",
        )
        for thread in [*self.trainers, self.watcher]:
            thread.halt.set()
        for thread in [*self.trainers, self.watcher]:
            thread.join(timeout=PROGRESS_S + 30)
            assert not thread.is_alive(), f"{thread.name} hangs"
        for trainer in self.trainers:
            assert trainer.error is None, f"{trainer.name}: {trainer.error!r}"
            assert trainer.versions == sorted(set(trainer.versions)), f"{trainer.name}: versions not increasing"
        assert not self.watcher.problems, self.watcher.problems[:3]
        wait_until(lambda: sum(self.metrics()["clients"].values()) == 0, GONE_S, "every client to be gone")
        with self.gateway.client("tcp") as last:  # alone, so its wait trains everything pending
            assert last.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(1)]})["type"] == "SET_STATE"
        metrics = self.metrics()
        sent = sum(trainer.steps_acknowledged for trainer in self.trainers) + self.acknowledged_steps + 1
        assert metrics["num_env_steps_sampled_lifetime"] == sent
        assert metrics["pending_env_steps"] == 0 and metrics["training_env_steps"] == 0
        dropped = sum(metrics["dropped_env_steps"].values())
        assert metrics["num_env_steps_trained_lifetime"] + dropped == sent, metrics
        return metrics

    def close(self) -> None:
        for thread in [*self.trainers, self.watcher]:
            thread.halt.set()
        self.http.close()


@contextmanager
def training_under_faults(tmp_path: Path, **overrides) -> Iterator[World]:
    settings = gateway_settings(tmp_path, **{**FAULT_SETTINGS, **overrides})
    with running_gateway(settings) as gateway:
        world = World(gateway)
        world.start()
        try:
            world.progress()
            yield world
        finally:
            world.close()


def episodes_then_ping(victim_send: Callable[[bytes], None], receive: Callable[[], dict], steps: int) -> None:
    """Send EPISODES and a PING; the PONG proves the episodes are in (replies keep order)."""
    victim_send(frame({"type": "EPISODES", "episodes": [chunk(steps)]}) + frame({"type": "PING"}))
    assert receive() == {"type": "PONG"}


# -- (a) TCP: killed mid-frame ----------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_tcp_client_killed_mid_frame_harms_no_one(tmp_path, how):
    with training_under_faults(tmp_path) as world:
        victim = TcpPeer.connect(world.gateway, timeout_s=20)
        peer = local_peer(victim.sock)
        episodes_then_ping(victim.send, victim.receive, 7)  # it samples now: the barrier waits for it
        world.acknowledged_steps += 7
        half = frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(9)]})
        victim.send(half[: len(half) // 2])
        assert world.client_entry(peer)["env_steps_sent"] == 7
        world.blocked_by(peer)
        kill(victim.sock, how)
        world.wait_gone(peer)
        world.progress()
        world.finish()  # the half message counts nowhere; the 7 steps before it are trained


# -- (b) WebSocket: killed mid-message -------------------------------------------------


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("cut", ["inside a websocket frame", "inside an rllink frame"])
def test_a_websocket_client_killed_mid_message_harms_no_one(tmp_path, cut, how):
    with training_under_faults(tmp_path) as world:
        victim = WsPeer(world.gateway)
        peer = local_peer(victim.sock)
        episodes_then_ping(victim.send, victim.receive, 5)
        world.acknowledged_steps += 5
        rllink = frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(9)]})
        if cut == "inside a websocket frame":
            wire = victim.wire_bytes(rllink)
            victim.sock.sendall(wire[: len(wire) // 2])
        else:  # a whole WebSocket message holding half an RLlink frame
            victim.send(rllink[: len(rllink) // 2])
        world.blocked_by(peer)
        kill(victim.sock, how)
        world.wait_gone(peer)
        world.progress()
        world.finish()


# -- (c) Killed while waiting for SET_STATE ----------------------------------------------

BIG = 6000  # env steps: a training step on them takes long enough to kill the client during it


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_a_client_killed_while_its_batch_trains_harms_no_one_and_its_data_is_trained(tmp_path, transport):
    with training_under_faults(tmp_path) as world:
        victim = TcpPeer.connect(world.gateway, timeout_s=20) if transport == "tcp" else WsPeer(world.gateway)
        peer = local_peer(victim.sock)
        victim.send(frame({"type": "GET_CONFIG"}))
        assert victim.receive()["type"] == "SET_CONFIG"
        victim.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(BIG)]}))

        def its_batch_trains() -> bool:
            entry, metrics = world.client_entry(peer), world.metrics()
            return bool(entry and entry["waiting"] and metrics["training_env_steps"] >= BIG)

        wait_until(its_batch_trains, PROGRESS_S, "the victim's batch to train while it waits")
        kill(victim.sock, "reset")
        world.acknowledged_steps += BIG  # /api/clients showed it waiting: the gateway has its data
        world.wait_gone(peer)
        world.progress()
        metrics = world.finish()
        assert metrics["num_env_steps_trained_lifetime"] >= BIG and not metrics["dropped_env_steps"].get("stale")


# -- (d) A sampling client stalling mid-header ---------------------------------------------
# (A client that only stalls is in test_hardening; here it samples, so it holds the barrier.)


def test_a_sampling_client_stalling_mid_header_holds_training_back_only_until_frame_timeout(tmp_path):
    with training_under_faults(tmp_path) as world:
        staller = TcpPeer.connect(world.gateway, timeout_s=20)
        episodes_then_ping(staller.send, staller.receive, 4)  # samples: the barrier waits for it
        world.acknowledged_steps += 4
        staller.send(b"0000")
        world.blocked_by(local_peer(staller.sock))
        assert staller.receive()["code"] == "frame_timeout"  # after frame_timeout_s (1 s)
        assert staller.is_closed()
        world.progress()
        metrics = world.finish()
        assert metrics["errors"] == {"frame_timeout": 1}


# -- (e) A flood of connections over the limit ---------------------------------------------

FLOOD = 40


def test_a_flood_of_connections_over_the_limit_is_refused_and_training_goes_on(tmp_path):
    limits = dict(max_connections=6, max_tcp_connections=4, max_ws_connections=4)
    with training_under_faults(tmp_path, **limits) as world:
        # 2 trainers are connected: room for 4 more in all. Every flooder holds on to its
        # connection until each has its answer, so exactly 4 get in.
        outcomes: list[str] = []
        lock = threading.Lock()
        answered = threading.Barrier(FLOOD)

        def flood(index: int) -> None:
            outcome = "no answer"
            try:
                with world.gateway.client(("tcp", "ws")[index % 2], timeout=PROGRESS_S) as client:
                    try:
                        client.send({"type": "PING"})
                    except Exception:  # a refused connection may be closed already; its ERROR is still there to read
                        pass
                    reply = client.receive()
                    outcome = reply["type"] if reply["type"] == "PONG" else reply.get("code", str(reply))
                    answered.wait(timeout=PROGRESS_S)
                    if outcome != "PONG":  # refused connections are closed by the gateway
                        with pytest.raises(ConnectionError):
                            client.receive()
            except BaseException as exc:
                outcome = f"{outcome}, then {exc!r}"
                answered.abort()  # fail now, not when the others' waits time out
            finally:
                with lock:
                    outcomes.append(outcome)

        threads = [threading.Thread(target=flood, args=(i,)) for i in range(FLOOD)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=PROGRESS_S + 10)
        assert sorted(outcomes) == sorted(["PONG"] * 4 + ["too_many_connections"] * (FLOOD - 4)), outcomes
        world.progress()

        # Then a storm of connections reset at once, without a byte sent.
        for _ in range(100):
            kill(socket.create_connection(("127.0.0.1", world.gateway.tcp_port), timeout=10), "reset")
        wait_until(lambda: sum(world.metrics()["clients"].values()) == 2, GONE_S, "only the trainers to remain")
        world.progress()
        metrics = world.finish()
        assert metrics["errors"]["too_many_connections"] >= FLOOD - 4


# -- Nothing lost: a mix of clients, killed and not ----------------------------------------


def test_every_env_step_acknowledged_is_trained_or_dropped_with_a_reason(tmp_path):
    with training_under_faults(tmp_path, max_policy_lag=1) as world:
        # A client that got version 0, then sends data stamped with it once training has
        # moved on: dropped as stale, and counted.
        late = world.gateway.client("ws")
        assert late.request({"type": "GET_STATE"})["weights_seq_no"] >= 0
        world.progress()
        late.send({"type": "EPISODES", "episodes": [chunk(6, weights_seq_no=0)]})
        assert late.request({"type": "PING"}) == {"type": "PONG"}
        world.acknowledged_steps += 6
        late.close()

        # Clients that send EPISODES and leave, politely or not, over both transports.
        for index, how in enumerate(["close", "reset", "close", "reset"]):
            if index % 2:
                ws = WsPeer(world.gateway)
                episodes_then_ping(ws.send, ws.receive, 3 + index)
                kill(ws.sock, how)
            else:
                tcp = TcpPeer.connect(world.gateway, timeout_s=20)
                episodes_then_ping(tcp.send, tcp.receive, 3 + index)
                tcp.send(frame({"type": "EPISODES", "episodes": [chunk(50)]})[:100])  # and half more
                kill(tcp.sock, how)
            world.acknowledged_steps += 3 + index

        # A msgpack client that waits for SET_STATE and gets it.
        with RLlinkClient("tcp", port=world.gateway.tcp_port, encoding=Encoding.MSGPACK) as packed:
            reply = packed.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(8)]})
            assert reply["type"] == "SET_STATE"
            world.acknowledged_steps += 8
        world.progress()
        metrics = world.finish()
        assert metrics["dropped_env_steps"] == {"stale": 6}
