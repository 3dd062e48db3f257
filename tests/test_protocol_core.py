"""The sans-I/O core: frame decoder, bodies and session, without any socket."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.protocol import (
    Encoding,
    ErrorCode,
    FrameDecoder,
    FrameRejected,
    ProtocolError,
    RequestReceived,
    Session,
    decode_body,
    encode_frame,
    encode_message,
)
from app.schemas import EpisodesAndGetState, Ping, Pong, SpacesContext
from app.spaces import BoxSpace, DiscreteSpace

CARTPOLE = SpacesContext(BoxSpace(shape=(4,)), DiscreteSpace(n=2))


def decode_all(decoder: FrameDecoder, data: bytes) -> list[bytes]:
    decoder.feed(data)
    return list(decoder.frames())


def episode(steps: int = 3, **extra) -> dict:
    chunk = {
        "obs": [[0.1 * i, 0.0, -0.1, 0.2] for i in range(steps + 1)],
        "actions": [i % 2 for i in range(steps)],
        "rewards": [1.0] * steps,
        "is_terminated": True,
    }
    chunk.update(extra)
    return chunk


def test_docs_ping_frame_is_answered_by_the_docs_pong_frame():
    session = Session(CARTPOLE, 1000)
    (event,) = session.receive_data(b'00000016{"type": "PING"}')
    assert isinstance(event, RequestReceived) and isinstance(event.request, Ping)
    assert session.reply(Pong(), event.encoding) == b'00000016{"type": "PONG"}'


def test_msgpack_request_is_detected_and_answered_in_msgpack():
    session = Session(CARTPOLE, 1000)
    (event,) = session.receive_data(encode_frame(msgpack.packb({"type": "PING"})))
    assert event.encoding is Encoding.MSGPACK
    body = session.reply(Pong(), event.encoding)[8:]
    assert msgpack.unpackb(body) == {"type": "PONG"}


def test_decoder_handles_byte_by_byte_and_coalesced_frames():
    stream = b"".join(encode_frame(json.dumps({"type": "PING", "n": i}).encode()) for i in range(3))
    decoder = FrameDecoder()
    one_by_one = [body for i in range(len(stream)) for body in decode_all(decoder, stream[i : i + 1])]
    assert [json.loads(b)["n"] for b in one_by_one] == [0, 1, 2]
    assert [json.loads(b)["n"] for b in decode_all(FrameDecoder(), stream)] == [0, 1, 2]
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    ("header", "code"),
    [(b"0000001x", ErrorCode.BAD_HEADER), (b"-0000001", ErrorCode.BAD_HEADER), (b"99999999", ErrorCode.FRAME_TOO_LARGE)],
)
def test_bad_headers_are_fatal_and_frames_before_them_survive(header, code):
    session = Session(CARTPOLE, 1000)
    events = session.receive_data(b'00000016{"type": "PING"}' + header + b"{}")
    assert isinstance(events[0], RequestReceived)
    assert isinstance(events[1], FrameRejected) and events[1].error.code is code and events[1].fatal
    assert session.closed and session.receive_data(b'00000016{"type": "PING"}') == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[1, 2]", ErrorCode.BAD_JSON),
        (b'{"type": "PING"', ErrorCode.BAD_JSON),
        (b'{"type": NaN}', ErrorCode.BAD_JSON),
        (b"\xde\x00", ErrorCode.BAD_MSGPACK),
        (b"{}", ErrorCode.UNKNOWN_TYPE),
        (b'{"type": "PONG"}', ErrorCode.UNKNOWN_TYPE),
        (b'{"type": "HELLO"}', ErrorCode.UNKNOWN_TYPE),
        (b'{"type": "EPISODES", "episodes": []}', ErrorCode.INVALID_MESSAGE),
    ],
)
def test_well_framed_bad_bodies_get_a_non_fatal_error(body, code):
    session = Session(CARTPOLE, 1000)
    (event,) = session.receive_data(encode_frame(body))
    assert isinstance(event, FrameRejected) and event.error.code is code and not event.fatal
    (after,) = session.receive_data(b'00000016{"type": "PING"}')
    assert isinstance(after, RequestReceived)


def test_episode_aliases_from_docs_and_reference_client_are_accepted():
    message = {
        "type": "EPISODES_AND_GET_STATE",
        "timesteps": 6,
        "episodes": [
            episode(is_terminated=False, terminateds=True),
            {**episode(), "is_terminated": False, "truncated": True, "id_": "ep-1"},
        ],
    }
    del message["episodes"][0]["is_terminated"]
    (event,) = Session(CARTPOLE, 10_000).receive_data(encode_frame(json.dumps(message).encode()))
    request = event.request
    assert isinstance(request, EpisodesAndGetState) and request.env_steps == 6
    assert request.episodes[0].is_terminated and request.episodes[1].is_truncated
    assert request.episodes[1].episode_id == "ep-1"


@pytest.mark.parametrize(
    ("chunk", "field"),
    [
        (episode(obs=[[0.0] * 4] * 3), "obs"),  # T+1 = 4 expected
        (episode(obs=[[0.0] * 3] * 4), "obs"),  # wrong observation shape
        (episode(actions=[0, 1, 2]), "actions"),  # out of Discrete(2)
        (episode(actions=[0, 1.5, 1]), "actions"),
        (episode(rewards=[1.0, 1.0]), "rewards"),
        (episode(rewards=[1.0, "a", 1.0]), "rewards"),
        (episode(action_logp=[0.0]), "action_logp"),
    ],
)
def test_invalid_episodes_name_the_wrong_field(chunk, field):
    body = json.dumps({"type": "EPISODES", "episodes": [chunk]}).encode()
    (event,) = Session(CARTPOLE, 10_000).receive_data(encode_frame(body))
    assert event.error.code is ErrorCode.INVALID_MESSAGE
    assert field in event.error.message
    assert any(field in problem["field"] or field in problem["problem"] for problem in event.error.details)


def test_non_finite_numbers_in_msgpack_are_refused():
    chunk = episode(rewards=[1.0, float("nan"), 1.0])
    (event,) = Session(CARTPOLE, 10_000).receive_data(
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [chunk]}))
    )
    assert event.error.code is ErrorCode.INVALID_MESSAGE and "finite" in event.error.message


def test_encode_message_round_trips_both_encodings():
    for encoding in Encoding:
        frame = encode_message(Pong(), encoding)
        assert int(frame[:8]) == len(frame) - 8
        assert decode_body(frame[8:]) == ({"type": "PONG"}, encoding)


# -- Properties --------------------------------------------------------------------

bodies = st.lists(st.binary(max_size=64), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(bodies=bodies, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_any_split_of_a_valid_stream_decodes_to_the_same_frames(bodies, cuts):
    stream = b"".join(encode_frame(body) for body in bodies)
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    decoder = FrameDecoder()
    decoded = [b for start, end in zip(points, points[1:]) for b in decode_all(decoder, stream[start:end])]
    assert decoded == bodies
    assert decoder.buffered == 0


@settings(max_examples=500, deadline=None)
@given(data=st.lists(st.binary(max_size=40), max_size=10))
def test_arbitrary_bytes_raise_nothing_but_the_decoders_own_error(data):
    decoder = FrameDecoder(max_frame_bytes=64)
    try:
        for chunk in data:
            for body in decode_all(decoder, chunk):
                assert len(body) <= 64
    except ProtocolError as exc:
        assert exc.fatal and exc.code in (ErrorCode.BAD_HEADER, ErrorCode.FRAME_TOO_LARGE)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_session_turns_any_body_into_an_event(body):
    events = Session(CARTPOLE, 10_000).receive_data(encode_frame(body))
    assert len(events) == 1
    assert isinstance(events[0], (RequestReceived, FrameRejected))
