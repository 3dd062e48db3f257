"""A catalogue of malformed frames and messages, each sent to a real gateway over TCP.

Every entry must get its documented ERROR code; fatal ones close the connection, the
others leave it open. After each, the gateway still serves everyone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from app.sansio.protocol import ARRAYS_MIN_BODY_BYTES
from app.spaces.models import BoxSpace
from rllink.framing import encode_frame

from .helpers import PING, RunningGateway, TcpPeer, chunk, frame, gateway_settings, running_gateway

MAX_FRAME = 4096  # the catalogue's gateway runs with this limit


def omit(data: dict, *keys: str) -> dict:
    return {key: value for key, value in data.items() if key not in keys}


def large_chunk(row: list | None = None, action: object = 0) -> dict:
    """A chunk whose message is large enough for the array path (app.sansio.json_arrays),
    with observation 7 replaced by `row` and action 3 by `action`."""
    data = chunk(80)
    if row is not None:
        data["obs"][7] = row
    data["actions"][3] = action
    return data


def episodes(*chunks, **fields) -> bytes:
    return frame({"type": "EPISODES", "episodes": list(chunks), **fields})


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
    ("huge extra field", frame({"type": "PING", "padding": "x" * MAX_FRAME}), "frame_too_large"),
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
    ("no type", frame({}), "unknown_type"),
    ("null type", frame({"type": None}), "unknown_type"),
    ("number type", frame({"type": 5}), "unknown_type"),
    ("list type", frame({"type": ["PING"]}), "unknown_type"),
    ("lower-case type", frame({"type": "ping"}), "unknown_type"),
    ("server message PONG", frame({"type": "PONG"}), "unknown_type"),
    ("server message SET_STATE", frame({"type": "SET_STATE", "onnx_file": "", "weights_seq_no": 0}), "unknown_type"),
    ("server message ERROR", frame({"type": "ERROR", "code": "x", "message": "y"}), "unknown_type"),
    ("msgpack unknown type", encode_frame(msgpack.packb({"type": "HELLO"})), "unknown_type"),
    ("no episodes", frame({"type": "EPISODES"}), "invalid_message"),
    ("empty episodes", episodes(), "invalid_message"),
    ("episodes not a list", frame({"type": "EPISODES", "episodes": {}}), "invalid_message"),
    ("chunk not an object", frame({"type": "EPISODES", "episodes": [1]}), "invalid_message"),
    ("no obs", episodes(omit(chunk(2), "obs")), "invalid_message"),
    ("obs wrong shape", episodes(chunk(2, obs=[[0.0] * 3] * 3)), "invalid_message"),
    ("obs ragged", episodes(chunk(2, obs=[[0.0] * 4, [0.0] * 3, [0.0] * 4])), "invalid_message"),
    ("obs one too few", episodes(chunk(2, obs=[[0.0] * 4] * 2)), "invalid_message"),
    ("obs empty", episodes(chunk(2, obs=[], actions=[], rewards=[])), "invalid_message"),
    ("obs strings", episodes(chunk(2, obs=[["a"] * 4] * 3)), "invalid_message"),
    ("rewards too short", episodes(chunk(2, rewards=[1.0])), "invalid_message"),
    ("rewards null", episodes(chunk(2, rewards=[1.0, None])), "invalid_message"),
    ("rewards string", episodes(chunk(2, rewards="12")), "invalid_message"),
    ("action out of range", episodes(chunk(2, actions=[0, 2])), "invalid_message"),
    ("negative action", episodes(chunk(2, actions=[-1, 0])), "invalid_message"),
    ("fractional action", episodes(chunk(2, actions=[0.5, 0])), "invalid_message"),
    ("action as string", episodes(chunk(2, actions=["0", "1"])), "invalid_message"),
    ("nested action", episodes(chunk(2, actions=[[0], [1]])), "invalid_message"),
    ("action_logp wrong length", episodes(chunk(2, action_logp=[0.0])), "invalid_message"),
    ("is_terminated a list", episodes(chunk(2, is_terminated=[True])), "invalid_message"),
    ("no is_terminated", episodes(omit(chunk(2), "is_terminated")), "invalid_message"),
    ("no is_truncated", episodes(omit(chunk(2), "is_truncated")), "invalid_message"),
    ("no done flags", episodes(omit(chunk(2), "is_terminated", "is_truncated")), "invalid_message"),
    ("is_terminated a word", episodes(chunk(2, is_terminated="yes")), "invalid_message"),
    ("is_truncated a number", episodes(chunk(2, is_truncated=0)), "invalid_message"),
    ("is_truncated null", episodes(chunk(2, is_truncated=None)), "invalid_message"),
    ("action_dist_inputs too narrow", episodes(chunk(2, action_dist_inputs=[[0.0], [0.0]])), "invalid_message"),
    ("action_dist_inputs too wide", episodes(chunk(2, action_dist_inputs=[[0.0] * 3] * 2)), "invalid_message"),
    ("negative env_steps", episodes(chunk(2), env_steps=-5), "invalid_message"),
    ("env_steps a word", episodes(chunk(2), env_steps="many"), "invalid_message"),
    ("episode_id too long", episodes(chunk(2, episode_id="x" * 300)), "invalid_message"),
    ("negative weights_seq_no", episodes(chunk(2, weights_seq_no=-1)), "invalid_message"),
    ("large: obs ragged", episodes(large_chunk(row=[0.0, 0.1, 0.2])), "invalid_message"),
    ("large: list in obs", episodes(large_chunk(row=[0.0, 0.1, 0.2, [0.3]])), "invalid_message"),
    ("large: float32 overflow", episodes(large_chunk(row=[1e39, 0.1, 0.2, 0.3])), "invalid_message"),
    ("large: action out of range", episodes(large_chunk(action=2)), "invalid_message"),
    (
        "is_terminated 1 in msgpack",
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [chunk(2, is_terminated=1)]})),
        "invalid_message",
    ),
    (
        "NaN reward in msgpack",
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [chunk(2, rewards=[1.0, float("nan")])]})),
        "invalid_message",
    ),
    (
        "infinite obs in msgpack",
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [chunk(2, obs=[[float("inf")] * 4] * 3)]})),
        "invalid_message",
    ),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    settings = gateway_settings(Path(tmp_path_factory.mktemp("bad_input")), max_frame_bytes=MAX_FRAME)
    with running_gateway(settings) as running:
        yield running


def test_the_catalogue_is_large_and_distinct():
    names = [name for name, _, _ in FATAL + NON_FATAL]
    frames = [frame for _, frame, _ in FATAL + NON_FATAL]
    assert len(names) >= 40 and len(set(names)) == len(names) and len(set(frames)) == len(frames)
    large = [frame for name, frame, _ in NON_FATAL if name.startswith("large:")]
    assert large and all(ARRAYS_MIN_BODY_BYTES <= len(frame) - 8 <= MAX_FRAME for frame in large)


@pytest.mark.parametrize(("name", "frame", "code"), FATAL, ids=[case[0] for case in FATAL])
def test_fatal_frames_get_their_error_then_the_connection_closes(gateway, name, frame, code):
    peer = TcpPeer.connect(gateway, timeout_s=20)
    peer.send(frame)
    error = peer.receive()
    assert error["type"] == "ERROR" and error["code"] == code, error
    assert error["message"]
    assert peer.is_closed()
    assert_still_healthy(gateway)


@pytest.mark.parametrize(("name", "frame", "code"), NON_FATAL, ids=[case[0] for case in NON_FATAL])
def test_invalid_messages_get_their_error_and_the_connection_stays_open(gateway, name, frame, code):
    peer = TcpPeer.connect(gateway, timeout_s=20)
    peer.send(frame + PING)
    error = peer.receive()
    assert error["type"] == "ERROR" and error["code"] == code, error
    assert error["message"]
    assert peer.receive() == {"type": "PONG"}
    peer.sock.close()


def assert_still_healthy(gateway: RunningGateway) -> None:
    with gateway.client("ws") as other:
        assert other.request({"type": "PING"}) == {"type": "PONG"}


# -- Episode chunks the RLlink docs call invalid: each refusal names the field --------------

BOX_ACTIONS = dict(observation_space=BoxSpace(shape=(3,)), action_space=BoxSpace(shape=(2,), low=-1.0, high=1.0))


def box_chunk(steps: int = 2, **fields) -> dict:
    """A chunk for BOX_ACTIONS: 3 numbers per observation, 2 per action."""
    return chunk(steps, obs_dim=3, actions=[[0.5, -0.5]] * steps, **fields)


@pytest.fixture(scope="module")
def box_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with running_gateway(gateway_settings(Path(tmp_path_factory.mktemp("box")), **BOX_ACTIONS)) as running:
        yield running


# (name, chunk, the field as the error names it, Box action space?)
NAMED_FIELD_CASES = [
    ("no is_terminated", omit(chunk(2), "is_terminated"), "is_terminated", False),
    ("no is_truncated", omit(chunk(2), "is_truncated"), "is_truncated", False),
    (
        "only the reference client's terminateds",
        omit(chunk(2, terminateds=True), "is_terminated", "is_truncated"),
        "is_truncated",
        False,
    ),
    ("is_terminated 'yes'", chunk(2, is_terminated="yes"), "is_terminated", False),
    ("terminated 1", {**omit(chunk(2), "is_terminated"), "terminated": 1}, "terminated", False),
    ("truncateds 'false'", {**omit(chunk(2), "is_truncated"), "truncateds": "false"}, "truncateds", False),
    ("1 logit for Discrete(2)", chunk(2, action_dist_inputs=[[0.0], [0.0]]), "action_dist_inputs", False),
    ("2 values for a 2-dimensional Box", box_chunk(action_dist_inputs=[[0.0, 0.0]] * 2), "action_dist_inputs", True),
]


@pytest.mark.parametrize(
    ("name", "data", "field", "box"), NAMED_FIELD_CASES, ids=[case[0] for case in NAMED_FIELD_CASES]
)
def test_invalid_chunks_get_an_error_naming_the_field(gateway, box_gateway, name, data, field, box):
    with TcpPeer.connect(box_gateway if box else gateway, timeout_s=20) as peer:
        peer.send(episodes(data) + PING)
        error = peer.receive()
        assert error["type"] == "ERROR" and error["code"] == "invalid_message", error
        assert f"episodes.0.{field}" in error["message"], error
        assert [problem["field"] for problem in error["details"]] == [f"episodes.0.{field}"], error
        assert peer.receive() == {"type": "PONG"}


@pytest.mark.parametrize(
    ("terminated_key", "truncated_key"),
    [("is_terminated", "is_truncated"), ("terminated", "truncated"), ("terminateds", "truncateds")],
)
def test_done_flags_under_every_alias_and_dist_inputs_of_the_right_width_are_accepted(
    gateway, box_gateway, terminated_key, truncated_key
):
    """n logits for Discrete(n); a mean and a log_std per dimension for a Box."""
    flags = {terminated_key: False, truncated_key: True}
    discrete = {**omit(chunk(2), "is_terminated", "is_truncated"), **flags, "action_dist_inputs": [[0.1, -0.1]] * 2}
    box = {
        **omit(box_chunk(), "is_terminated", "is_truncated"),
        **flags,
        "action_dist_inputs": [[0.0, 0.0, -0.5, -0.5]] * 2,
    }
    for target, data in ((gateway, discrete), (box_gateway, box)):
        with TcpPeer.connect(target, timeout_s=20) as peer:
            peer.send(episodes(data) + PING)
            assert peer.receive() == {"type": "PONG"}  # no ERROR first
