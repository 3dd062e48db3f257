"""What many test modules need, once: a gateway to test, episode chunks and frames, raw
connections, waiting for a condition, the hypothesis strategies of near-valid messages,
and a TCP proxy that cuts a connection (for the engine kits' reconnect tests).

No test module imports another, nor conftest.py: what two of them share lives here
(fixtures, built on these, live in conftest.py).
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.util
import json
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from app.main import create_app
from app.sansio.protocol import decode_body
from app.schemas import REQUEST_TYPES, RESPONSE_TYPES
from app.serving.service import ServingService
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace, num_dist_inputs
from app.startup.server import uvicorn_options
from app.telemetry.traffic import TrafficStats
from app.training.service import LocalTrainingService
from app.transport.decode_workers import DecodeWorkers
from rllink.framing import FrameDecoder, encode_frame
from rllink_clients.blocking_ws import BlockingWebSocket
from rllink_clients.rllink_client import RLlinkClient

from .gateway_process import PING, PONG  # noqa: F401 -- the documented frames, re-exported for the tests

OBS_DIM = 4  # CartPole, the gateway's default spaces


# -- A gateway in this process ---------------------------------------------------------


def gateway_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for a test gateway: free ports, a private checkpoint dir."""
    values: dict[str, Any] = dict(http_port=0, tcp_port=0, checkpoint_dir=tmp_path / "checkpoints")
    values.update(overrides)
    return Settings(**values)


@dataclass
class RunningGateway:
    """A gateway served by uvicorn (and its TCP bridge) in a background thread.

    Tests reach the gateway's parts only through these properties, never through the
    app's state: how the app holds them is the app's business.
    """

    app: FastAPI
    settings: Settings
    http_port: int

    @property
    def service(self) -> LocalTrainingService:
        return self.app.state.gateway.service

    @property
    def serving(self) -> ServingService:
        return self.app.state.gateway.serving

    @property
    def traffic(self) -> TrafficStats:
        return self.app.state.gateway.traffic

    @property
    def decoders(self) -> DecodeWorkers:
        return self.app.state.gateway.decoders

    @property
    def tcp_port(self) -> int:
        """The TCP bridge's port (0 when the bridge is off)."""
        bridge = self.app.state.gateway.tcp_bridge
        return bridge.port if bridge is not None else 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.http_port}/rllink"

    def client(self, transport: str, **kwargs: Any) -> RLlinkClient:
        port = self.tcp_port if transport == "tcp" else self.http_port
        return RLlinkClient(transport, "127.0.0.1", port, **kwargs)


def waiting_transports(gateway: RunningGateway) -> list[str]:
    """The transport of each client waiting for SET_STATE (as GET /api/clients shows them)."""
    return [client.transport for client in gateway.service.status().clients if client.waiting]


@contextmanager
def running_gateway(settings: Settings) -> Iterator[RunningGateway]:
    """Start a gateway with these settings (use port 0 for both); stop it on exit."""
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.http_port,
        log_level="warning",
        lifespan="on",
        **uvicorn_options(settings),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="gateway", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 30, "the gateway to start")
        if not server.started:
            raise RuntimeError("the gateway did not start")
        yield RunningGateway(app, settings, server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def in_process(tmp_path: Path, **overrides: Any) -> Iterator[TestClient]:
    """The app in this process with its lifespan running, for tests of REST routes: no
    ports, no TCP bridge, no decode worker processes (unless `overrides` say otherwise)."""
    settings = gateway_settings(tmp_path, **{"tcp_enabled": False, "decode_workers": 0, **overrides})
    with TestClient(create_app(settings)) as client:
        yield client


# -- Episode chunks and frames ----------------------------------------------------------


def chunk(
    steps: int = 3,
    *,
    reward: float = 1.0,
    terminated: bool = True,
    truncated: bool = False,
    seed: int | None = None,
    obs_dim: int = OBS_DIM,
    **fields: Any,
) -> dict[str, Any]:
    """One JSON-ready episode chunk for the default (CartPole) spaces: `steps` actions,
    `steps + 1` observations, both done flags. With `seed`, random observations and
    actions; without, fixed ones. Extra `fields` are added or replace the defaults."""
    if seed is None:
        obs = [[0.0, 0.1, 0.2, 0.3][:obs_dim] + [0.0] * max(0, obs_dim - 4) for _ in range(steps + 1)]
        actions = [step % 2 for step in range(steps)]
    else:
        rng = np.random.default_rng(seed)
        obs = rng.uniform(-0.05, 0.05, (steps + 1, obs_dim)).tolist()
        actions = rng.integers(0, 2, steps).tolist()
    data: dict[str, Any] = {
        "obs": obs,
        "actions": actions,
        "rewards": [reward] * steps,
        "is_terminated": terminated,
        "is_truncated": truncated,
    }
    data.update(fields)
    return data


def frame(message: dict[str, Any]) -> bytes:
    """A JSON message as one RLlink frame."""
    return encode_frame(json.dumps(message).encode())


def learner_of(service: LocalTrainingService, module_id: str = "default_policy") -> Any:
    """A module's learner object, for tests that look at its weights or optimiser (the
    default learner host keeps it in this process, on the learner thread)."""
    return service._learners.learners.by_module[module_id]


# -- Waiting ------------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "the condition", interval_s: float = 0.01
) -> Any:
    """Poll `condition` until it returns something truthy (returned); fail after `timeout_s`.

    The timeout is a bound for a hung gateway, never a measure of speed: tests wait for
    what they need, however fast or slow the machine is.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


# -- Raw connections ------------------------------------------------------------------------


def tcp_socket(gateway: RunningGateway, timeout_s: float = 60) -> socket.socket:
    """A TCP connection to the gateway's RLlink bridge; `timeout_s` guards against a hang."""
    sock = socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """The next `size` bytes from the socket, as they come (no decoding)."""
    data = b""
    while len(data) < size:
        received = sock.recv(size - len(data))
        if not received:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += received
    return data


def recv_frames(sock: socket.socket, count: int) -> list[dict]:
    """The next `count` messages from the gateway, on a socket whose earlier replies
    were all read (bytes past the `count`th frame are not kept: use a TcpPeer for a
    conversation)."""
    return TcpPeer(sock).receive_many(count)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the peer still sends before it closes the connection (EOF or reset).
    A peer that keeps the connection open fails the test at the socket's timeout."""
    received = b""
    try:
        while data := sock.recv(65536):
            received += data
    except ConnectionResetError:
        pass
    return received


class _FramePeer:
    """Reads whole RLlink messages (JSON or msgpack) from a byte stream."""

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._bodies: list[bytes] = []

    def _read(self) -> bytes:
        raise NotImplementedError

    def receive(self) -> dict:
        """The next message from the gateway; ConnectionError if it closes first."""
        while not self._bodies:
            self._decoder.feed(self._read())
            self._bodies += list(self._decoder.frames())
        return decode_body(self._bodies.pop(0))[0]

    def receive_many(self, count: int) -> list[dict]:
        return [self.receive() for _ in range(count)]


class TcpPeer(_FramePeer):
    """A raw TCP connection to the gateway that sends bytes and reads whole messages."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock

    @classmethod
    def connect(cls, gateway: RunningGateway, timeout_s: float = 30) -> TcpPeer:
        return cls(tcp_socket(gateway, timeout_s))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        return data

    def is_closed(self) -> bool:
        """No message left unread, and the gateway closes the connection without another
        byte (the socket's timeout bounds the wait)."""
        return not self._bodies and self._decoder.buffered == 0 and read_until_closed(self.sock) == b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> TcpPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WsPeer(_FramePeer):
    """A raw WebSocket connection to `/rllink` (rllink_clients.blocking_ws): sends payloads
    as binary messages, reads whole messages, and exposes the socket to cut."""

    def __init__(self, gateway: RunningGateway, timeout_s: float = 30) -> None:
        super().__init__()
        self.ws = BlockingWebSocket(gateway.ws_url, timeout=timeout_s)
        self.sock = self.ws.sock

    def wire_bytes(self, payload: bytes) -> bytes:
        """The bytes of one binary WebSocket message carrying `payload` (not sent)."""
        return self.ws.wire_bytes(payload)

    def send(self, payload: bytes) -> None:
        self.ws.send(payload)

    def _read(self) -> bytes:
        return self.ws.recv()

    def close(self) -> None:
        self.ws.close()

    def __enter__(self) -> WsPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- Hypothesis: near-valid messages -------------------------------------------------------

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CARTPOLE = PolicySet.single(BoxSpace(shape=(4,)), DiscreteSpace(n=2))
PENDULUM = PolicySet.single(BoxSpace(shape=(3,)), BoxSpace(shape=(1,), low=-2.0, high=2.0))
GRID = PolicySet.single(BoxSpace(shape=(2, 2)), DiscreteSpace(n=3))
SPACES = {"cartpole": CARTPOLE, "pendulum": PENDULUM, "grid": GRID}

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=10,
)
# Numbers as they arrive: mostly plain ones; sometimes floats of any size (float32
# overflow included), int64 limits, booleans; NaN and infinities only in msgpack.
plain_numbers = st.integers(min_value=-3, max_value=3) | st.floats(min_value=-10, max_value=10)
numbers = st.one_of(
    plain_numbers,
    plain_numbers,
    plain_numbers,
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e39, -1e39, 2.0**53, 2**63, -(2**63) - 1, True, False]),
)
odd_numbers = st.one_of(numbers, numbers, numbers, st.sampled_from([float("nan"), float("inf"), float("-inf")]))
CORRUPTIONS = [
    "odd numbers",
    "obs length",
    "observation size",
    "rewards length",
    "replace a field",
    "drop a field",
    "action range",
    "done flag",
    "dist inputs width",
]
TERMINATED_KEYS = ["is_terminated", "terminated", "terminateds"]
TRUNCATED_KEYS = ["is_truncated", "truncated", "truncateds"]
NOT_BOOLEANS = st.sampled_from([0, 1, "yes", "true", None, [True], 1.0])


@st.composite
def near_valid_chunks(draw, spaces: PolicySet, allow_non_finite: bool) -> dict:
    """A chunk that is valid but for at most one thing (numbers of any size, sizes off
    by one, a field of the wrong kind or missing, an action out of range, a done flag
    that is not a boolean, action_dist_inputs of the wrong width), with aliases and
    extra keys."""
    corruption = draw(st.sampled_from([None, None, None, *CORRUPTIONS]))
    num = plain_numbers if corruption != "odd numbers" else odd_numbers if allow_non_finite else numbers
    steps = draw(st.integers(min_value=1, max_value=5))
    obs_shape = list(spaces.default.observation_space.shape)
    obs_len = steps + 1 + (draw(st.sampled_from([-1, 1, -steps - 1])) if corruption == "obs length" else 0)

    def observation():
        if len(obs_shape) == 1:
            size = obs_shape[0] + (draw(st.sampled_from([-1, 1])) if corruption == "observation size" else 0)
            return draw(st.lists(num, min_size=size, max_size=size))
        return [[draw(num) for _ in range(obs_shape[1])] for _ in range(obs_shape[0])]

    if isinstance(spaces.default.action_space, DiscreteSpace):
        n = spaces.default.action_space.n
        action = st.sampled_from([-1, n, 0.5]) if corruption == "action range" else st.integers(0, n - 1)
    else:
        action = st.lists(num, min_size=1, max_size=2 if corruption == "action range" else 1)
    rewards_len = steps + (draw(st.sampled_from([-1, 1])) if corruption == "rewards length" else 0)
    chunk: dict = {
        "obs": [observation() for _ in range(obs_len)],
        "actions": draw(st.lists(action, min_size=steps, max_size=steps)),
        "rewards": draw(st.lists(num, min_size=rewards_len, max_size=rewards_len)),
    }
    # Both done flags, each under any of its names.
    for keys in (TERMINATED_KEYS, TRUNCATED_KEYS):
        chunk[draw(st.sampled_from(keys))] = draw(st.booleans())
    if corruption == "done flag":
        flag = draw(st.sampled_from([key for key in chunk if key in TERMINATED_KEYS + TRUNCATED_KEYS]))
        chunk[flag] = draw(NOT_BOOLEANS)
    if draw(st.booleans()):
        chunk["action_logp"] = draw(st.lists(num, min_size=steps, max_size=steps))
    width = num_dist_inputs(spaces.default.action_space)
    if corruption == "dist inputs width":
        width = draw(st.sampled_from([width - 1, width + 1]))
    if corruption == "dist inputs width" or draw(st.booleans()):
        row = st.lists(num, min_size=width, max_size=width)
        chunk["action_dist_inputs"] = draw(st.lists(row, min_size=steps, max_size=steps))
    if draw(st.booleans()):
        chunk[draw(st.sampled_from(["episode_id", "id_"]))] = draw(st.text(max_size=300))
    if draw(st.booleans()):
        chunk["weights_seq_no"] = draw(st.integers(min_value=-1, max_value=2**70))
    if corruption == "replace a field":
        chunk[draw(st.sampled_from(sorted(chunk)))] = draw(json_values)
    if corruption == "drop a field":
        del chunk[draw(st.sampled_from(sorted(chunk)))]
    if draw(st.booleans()):
        chunk[draw(st.text(max_size=6))] = draw(json_values)  # unknown keys are ignored
    return chunk


THIN_TYPES = ["START_EPISODE", "GET_ACTION", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE"]


@st.composite
def thin_client_fields(draw, allow_non_finite: bool) -> dict:
    """Some of the thin-client requests' fields, mostly well-formed, sometimes odd."""
    num = odd_numbers if allow_non_finite else numbers
    obs = st.lists(num, min_size=0, max_size=5) | json_values
    episode_id = st.text(min_size=0, max_size=8) | json_values
    item = st.fixed_dictionaries({"episode_id": episode_id, "obs": obs}, optional={"explore": st.booleans() | json_values})
    fields = {
        "episode_id": episode_id,
        "obs": obs,
        "explore": st.booleans() | json_values,
        "batch": st.lists(item, max_size=4) | json_values,
        "reward": num | json_values,
        "action": st.integers(-2, 3) | st.lists(num, max_size=2) | json_values,
        "is_terminated": st.booleans() | json_values,
        "is_truncated": st.booleans() | json_values,
        "training_enabled": st.booleans() | json_values,
        "agent_id": st.text(max_size=8) | json_values,
        "module_id": st.text(max_size=8) | json_values,
    }
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), max_size=6, unique=True))
    return {name: draw(fields[name]) for name in chosen}


@st.composite
def structured_messages(draw, spaces: PolicySet, allow_non_finite: bool) -> dict:
    """A message of any type (mostly EPISODES* and the thin clients') with near-valid
    chunks and odd fields."""
    message_type = draw(
        st.one_of(
            st.sampled_from(["EPISODES", "EPISODES_AND_GET_STATE"]),
            st.sampled_from(["EPISODES", "EPISODES_AND_GET_STATE"]),
            st.sampled_from(THIN_TYPES),
            st.sampled_from(sorted(REQUEST_TYPES | RESPONSE_TYPES)),
            st.sampled_from(["ping", "", "EPISODES "]) | json_values,
        )
    )
    message: dict = {} if draw(st.integers(0, 19)) == 0 else {"type": message_type}
    chunks = st.lists(near_valid_chunks(spaces, allow_non_finite), min_size=1, max_size=5)
    message["episodes"] = draw(st.one_of(chunks, chunks, chunks, json_values))
    if draw(st.booleans()):
        message[draw(st.sampled_from(["env_steps", "timesteps"]))] = draw(st.integers(-1, 2**70) | json_values)
    if message_type in THIN_TYPES or draw(st.integers(0, 9)) == 0:
        message.update(draw(thin_client_fields(allow_non_finite)))
    if draw(st.booleans()):
        message["token"] = draw(st.text(max_size=10) | json_values)
    if draw(st.booleans()):
        message[draw(st.text(max_size=6))] = draw(json_values)
    return message


class TcpProxy:
    """A TCP proxy to the gateway that keeps every byte clients send through it (`sent`,
    `messages()`) and, given `cut_after`, cuts its first connection once the client has
    sent that many bytes (both sides closed at once, as a dropped network would)."""

    def __init__(self, target_port: int, cut_after: int | None = None) -> None:
        self.target_port, self.cut_after = target_port, cut_after
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.sent = bytearray()
        self.cut = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for sock in (client, upstream):  # without it, Nagle and delayed ACKs cost 40 ms per request
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections += 1
            first = self.connections == 1
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True, first), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool, may_cut: bool) -> None:
        sent = 0
        try:
            while data := source.recv(65536):
                if from_client:
                    self.sent += data
                sink.sendall(data)
                sent += len(data)
                if may_cut and self.cut_after is not None and sent >= self.cut_after and not self.cut.is_set():
                    self.cut.set()
                    for sock in (source, sink):
                        sock.shutdown(socket.SHUT_RDWR)
                    return
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.close()
                except OSError:
                    pass

    def messages(self) -> list[dict]:
        """Every JSON message clients sent through the proxy, in order, as plain lists and dicts."""
        decoder = FrameDecoder()
        decoder.feed(bytes(self.sent))
        found = [json.loads(body) for body in decoder.frames()]
        assert decoder.buffered == 0, "a frame cut short"
        return found

    def close(self) -> None:
        self.server.close()
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass


def load_script(path: Path, name: str) -> ModuleType:
    """A Python file that is no package's module (a MkDocs hook, a kit's tool), imported by its path."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- A client that keeps what it sent -------------------------------------------------


class RecordingClient(RLlinkClient):
    """A real client that also keeps every EPISODES_AND_GET_STATE it sent, and the models of
    every SET_STATE it got (`models[weights_seq_no][module_id]`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[dict] = []
        self.models: dict[int, dict[str, str]] = {}

    def request(self, message: dict) -> dict:
        if message["type"] == "EPISODES_AND_GET_STATE":
            self.sent.append(json.loads(json.dumps(message)))  # as the wire carries it
        reply = super().request(message)
        if reply.get("type") == "SET_STATE":
            self.models[reply["weights_seq_no"]] = reply["onnx_files"]
        return reply

    def modes(self, chunk: dict, version: int) -> np.ndarray:
        """The mode of each step's action distribution under the module's model of `version`:
        the largest (masked) logit of a discrete module, the mean of a Box one."""
        session = self._session(version, chunk["module_id"])
        inputs = session.get_inputs()
        feed = {inputs[0].name: np.asarray(chunk["obs"][:-1], np.float32)}
        if "action_mask" in chunk:
            feed[inputs[1].name] = np.asarray(chunk["action_mask"], np.float32)
        (dist_inputs,) = session.run([session.get_outputs()[0].name], feed)
        if isinstance(chunk["actions"][0], int):
            return np.argmax(dist_inputs, axis=1)
        return dist_inputs[:, : dist_inputs.shape[1] // 2].astype(np.float64)

    def evaluation_returns(self, module_id: str) -> list[float]:
        """The module's evaluation episodes' returns in the order the gateway saw them end (the
        client records them as they end, which, across agents, is another order)."""
        returns: dict[tuple, float] = defaultdict(float)
        ended = []
        for chunk in (c for m in self.sent for c in m["episodes"] if c.get("evaluation") and c["module_id"] == module_id):
            returns[chunk["agent_id"], chunk["episode_id"]] += sum(chunk["rewards"])
            if chunk["is_terminated"] or chunk["is_truncated"]:
                ended.append(returns[chunk["agent_id"], chunk["episode_id"]])
        return ended

    @functools.cache  # noqa: B019 (a client lives for one test)
    def _session(self, version: int, module_id: str) -> ort.InferenceSession:
        onnx_file = gzip.decompress(base64.b64decode(self.models[version][module_id]))
        return ort.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])

    def mode_steps(self, chunk: dict) -> list[bool]:
        """Whether each action of the chunk is its distribution's mode, under the model of the
        chunk's version or (a move in flight at a send came before the chunk's others) the next."""
        versions = sorted(self.models)
        later = versions[versions.index(chunk["weights_seq_no"]) + 1 :][:1]
        actions = np.asarray(chunk["actions"], np.float64).reshape(len(chunk["actions"]), -1)
        modes = [self.modes(chunk, version).reshape(actions.shape) for version in [chunk["weights_seq_no"], *later]]
        return np.logical_or.reduce([np.isclose(actions, mode, rtol=1e-6, atol=1e-7).all(axis=1) for mode in modes]).tolist()

    def played_the_mode(self, chunk: dict) -> bool:
        return all(self.mode_steps(chunk))


def recording_client(gateway: RunningGateway, transport: str = "tcp") -> RecordingClient:
    port = gateway.tcp_port if transport == "tcp" else gateway.http_port
    return RecordingClient(transport, "127.0.0.1", port)


def one_version_many_requests_settings(tmp_path: Path) -> Settings:
    """A SAC gateway whose versions outlast many requests of 50 env steps (none before
    learning_starts 1,000): for tests that a kit loads a SET_STATE's model only when it is new."""
    sac = {"hidden_sizes": [32, 32], "learning_starts": 1000}
    return gateway_settings(tmp_path, algorithm="sac", env_steps_per_sample=50, evaluation_interval=0, sac=sac)


def models_loaded_line(stdout: str) -> tuple[int, int]:
    """The example games' last "models loaded N, the last version V" line: (N, V)."""
    line = [line for line in stdout.splitlines() if line.startswith("models loaded ")][-1]
    loaded, last_version = (int(word.strip(",")) for word in line.split() if word.strip(",").isdigit())
    return loaded, last_version
