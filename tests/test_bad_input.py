"""A catalogue of malformed frames and messages, each sent to a real gateway over TCP.

Every entry must get its documented ERROR code; fatal ones close the connection, the
others leave it open. After each, the gateway still serves everyone.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from app.protocol import ARRAYS_MIN_BODY_BYTES, FrameDecoder, decode_body, encode_frame

from .conftest import RunningGateway, gateway_settings, running_gateway

MAX_FRAME = 4096  # the catalogue's gateway runs with this limit


def jframe(obj) -> bytes:
    return encode_frame(json.dumps(obj).encode())


def chunk(steps: int = 2, **changes) -> dict:
    base = {
        "obs": [[0.0, 0.1, 0.2, 0.3] for _ in range(steps + 1)],
        "actions": [0] * steps,
        "rewards": [1.0] * steps,
        "is_terminated": True,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not _DROP}


_DROP = object()


def large_chunk(row: list | None = None, action: object = 0) -> dict:
    """A chunk whose message is large enough for the array path (app.json_arrays),
    with observation 7 replaced by `row` and action 3 by `action`."""
    steps = 80
    obs = [[0.0, 0.1, 0.2, 0.3] for _ in range(steps + 1)]
    if row is not None:
        obs[7] = row
    actions = [0] * steps
    actions[3] = action
    return chunk(steps, obs=obs, actions=actions, rewards=[1.0] * steps)


def episodes(*chunks, **fields) -> bytes:
    return jframe({"type": "EPISODES", "episodes": list(chunks), **fields})


FATAL = [
    ("letters in header", b"abcdefgh{}", "bad_header"),
    ("negative length", b"-0000001{", "bad_header"),
    ("plus sign", b"+0000016" + b'{"type": "PING"}', "bad_header"),
    ("space in header", b"0000 016" + b'{"type": "PING"}', "bad_header"),
    ("binary length", b"\x00\x00\x00\x00\x00\x00\x00\x10" + b"x" * 16, "bad_header"),
    ("hex length", b"0x000010" + b"x" * 16, "bad_header"),
    ("exponent", b"1e100000", "bad_header"),
    ("non-ASCII digits", "٠٠٠٠٠٠١٦".encode()[:8], "bad_header"),
    ("JSON without header", b'{"type": "PING"}', "bad_header"),
    ("huge length", b"99999999", "frame_too_large"),
    ("one byte over the limit", b"%08d" % (MAX_FRAME + 1), "frame_too_large"),
    ("huge extra field", jframe({"type": "PING", "padding": "x" * MAX_FRAME}), "frame_too_large"),
]

NON_FATAL = [
    ("empty body", encode_frame(b""), "bad_json"),
    ("whitespace body", encode_frame(b"   "), "bad_json"),
    ("null", encode_frame(b"null"), "bad_json"),
    ("array", encode_frame(b"[]"), "bad_json"),
    ("string", encode_frame(b'"PING"'), "bad_json"),
    ("number", encode_frame(b"42"), "bad_json"),
    ("truncated JSON", encode_frame(b'{"type": "PI'), "bad_json"),
    ("invalid UTF-8", encode_frame(b'{"type": "\xff\xfe"}'), "bad_json"),
    ("NaN", encode_frame(b'{"type": "EPISODES", "episodes": [], "env_steps": NaN}'), "bad_json"),
    ("Infinity", encode_frame(b'{"type": "PING", "x": Infinity}'), "bad_json"),
    ("deeply nested", encode_frame(b'{"type": "PING", "x": ' + b"[" * 1500 + b"]" * 1500 + b"}"), "bad_json"),
    ("trailing garbage", encode_frame(b'{"type": "PING"} x'), "bad_json"),
    ("two objects", encode_frame(b"{}{}"), "bad_json"),
    ("byte order mark", encode_frame(b'\xef\xbb\xbf{"type": "PING"}'), "bad_json"),
    ("truncated msgpack", encode_frame(b"\x81\xa4type"), "bad_msgpack"),
    ("msgpack map too long", encode_frame(b"\xdf\xff\xff\xff\xff"), "bad_msgpack"),
    ("no type", jframe({}), "unknown_type"),
    ("null type", jframe({"type": None}), "unknown_type"),
    ("number type", jframe({"type": 5}), "unknown_type"),
    ("list type", jframe({"type": ["PING"]}), "unknown_type"),
    ("lower-case type", jframe({"type": "ping"}), "unknown_type"),
    ("server message PONG", jframe({"type": "PONG"}), "unknown_type"),
    ("server message SET_STATE", jframe({"type": "SET_STATE", "onnx_file": "", "weights_seq_no": 0}), "unknown_type"),
    ("server message ERROR", jframe({"type": "ERROR", "code": "x", "message": "y"}), "unknown_type"),
    ("msgpack unknown type", encode_frame(msgpack.packb({"type": "HELLO"})), "unknown_type"),
    ("no episodes", jframe({"type": "EPISODES"}), "invalid_message"),
    ("empty episodes", episodes(), "invalid_message"),
    ("episodes not a list", jframe({"type": "EPISODES", "episodes": {}}), "invalid_message"),
    ("chunk not an object", jframe({"type": "EPISODES", "episodes": [1]}), "invalid_message"),
    ("no obs", episodes(chunk(obs=_DROP)), "invalid_message"),
    ("obs wrong shape", episodes(chunk(obs=[[0.0] * 3] * 3)), "invalid_message"),
    ("obs ragged", episodes(chunk(obs=[[0.0] * 4, [0.0] * 3, [0.0] * 4])), "invalid_message"),
    ("obs one too few", episodes(chunk(obs=[[0.0] * 4] * 2)), "invalid_message"),
    ("obs empty", episodes(chunk(obs=[], actions=[], rewards=[])), "invalid_message"),
    ("obs strings", episodes(chunk(obs=[["a"] * 4] * 3)), "invalid_message"),
    ("rewards too short", episodes(chunk(rewards=[1.0])), "invalid_message"),
    ("rewards null", episodes(chunk(rewards=[1.0, None])), "invalid_message"),
    ("rewards string", episodes(chunk(rewards="12")), "invalid_message"),
    ("action out of range", episodes(chunk(actions=[0, 2])), "invalid_message"),
    ("negative action", episodes(chunk(actions=[-1, 0])), "invalid_message"),
    ("fractional action", episodes(chunk(actions=[0.5, 0])), "invalid_message"),
    ("action as string", episodes(chunk(actions=["0", "1"])), "invalid_message"),
    ("nested action", episodes(chunk(actions=[[0], [1]])), "invalid_message"),
    ("action_logp wrong length", episodes(chunk(action_logp=[0.0])), "invalid_message"),
    ("is_terminated a list", episodes(chunk(is_terminated=[True])), "invalid_message"),
    ("negative env_steps", episodes(chunk(), env_steps=-5), "invalid_message"),
    ("env_steps a word", episodes(chunk(), env_steps="many"), "invalid_message"),
    ("episode_id too long", episodes(chunk(episode_id="x" * 300)), "invalid_message"),
    ("negative weights_seq_no", episodes(chunk(weights_seq_no=-1)), "invalid_message"),
    ("large: obs ragged", episodes(large_chunk(row=[0.0, 0.1, 0.2])), "invalid_message"),
    ("large: list in obs", episodes(large_chunk(row=[0.0, 0.1, 0.2, [0.3]])), "invalid_message"),
    ("large: float32 overflow", episodes(large_chunk(row=[1e39, 0.1, 0.2, 0.3])), "invalid_message"),
    ("large: action out of range", episodes(large_chunk(action=2)), "invalid_message"),
    (
        "NaN reward in msgpack",
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [chunk(rewards=[1.0, float("nan")])]})),
        "invalid_message",
    ),
    (
        "infinite obs in msgpack",
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [chunk(obs=[[float("inf")] * 4] * 3)]})),
        "invalid_message",
    ),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    settings = gateway_settings(Path(tmp_path_factory.mktemp("bad_input")), max_frame_bytes=MAX_FRAME)
    with running_gateway(settings) as running:
        yield running


class Peer:
    """A raw TCP peer that reads whole frames."""

    def __init__(self, gateway: RunningGateway) -> None:
        self.sock = socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=20)
        self.decoder = FrameDecoder()
        self.frames: list[bytes] = []

    def receive(self) -> dict:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.decoder.feed(data)
            self.frames += list(self.decoder.frames())
        return decode_body(self.frames.pop(0))[0]

    def is_closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def test_the_catalogue_is_large_and_distinct():
    names = [name for name, _, _ in FATAL + NON_FATAL]
    frames = [frame for _, frame, _ in FATAL + NON_FATAL]
    assert len(names) >= 40 and len(set(names)) == len(names) and len(set(frames)) == len(frames)
    large = [frame for name, frame, _ in NON_FATAL if name.startswith("large:")]
    assert large and all(ARRAYS_MIN_BODY_BYTES <= len(frame) - 8 <= MAX_FRAME for frame in large)


@pytest.mark.parametrize(("name", "frame", "code"), FATAL, ids=[case[0] for case in FATAL])
def test_fatal_frames_get_their_error_then_the_connection_closes(gateway, name, frame, code):
    peer = Peer(gateway)
    peer.sock.sendall(frame)
    error = peer.receive()
    assert error["type"] == "ERROR" and error["code"] == code, error
    assert error["message"]
    assert peer.is_closed()
    assert_still_healthy(gateway)


@pytest.mark.parametrize(("name", "frame", "code"), NON_FATAL, ids=[case[0] for case in NON_FATAL])
def test_invalid_messages_get_their_error_and_the_connection_stays_open(gateway, name, frame, code):
    peer = Peer(gateway)
    peer.sock.sendall(frame + b'00000016{"type": "PING"}')
    error = peer.receive()
    assert error["type"] == "ERROR" and error["code"] == code, error
    assert error["message"]
    assert peer.receive() == {"type": "PONG"}
    peer.sock.close()


def assert_still_healthy(gateway: RunningGateway) -> None:
    with gateway.client("ws") as other:
        assert other.request({"type": "PING"}) == {"type": "PONG"}
