"""The sans-I/O core: frame decoder, bodies and session, without any socket."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.sansio.protocol import FrameRejected, ReplyEncoder, RequestReceived, Session, decode_body, encode_message, error_reply
from app.schemas import EpisodesAndGetState, Ping, Pong, SetState
from app.settings.policies import PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace
from rllink.errors import ErrorCode, ProtocolError
from rllink.framing import Encoding, FrameDecoder, encode_frame

from .helpers import chunk, frame

CARTPOLE = PolicySet.single(BoxSpace(shape=(4,)), DiscreteSpace(n=2))


def decode_all(decoder: FrameDecoder, data: bytes) -> list[bytes]:
    decoder.feed(data)
    return list(decoder.frames())


def episode(steps: int = 3, **extra) -> dict:
    return chunk(steps, **{"obs": [[0.1 * i, 0.0, -0.1, 0.2] for i in range(steps + 1)], **extra})


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
    assert [reply for _, reply in session.send(event)] == [encode_message(error_reply(event.error), event.encoding)]


def test_episode_aliases_from_docs_and_reference_client_are_accepted():
    message = {
        "type": "EPISODES_AND_GET_STATE",
        "timesteps": 6,
        "episodes": [episode(), {**episode(), "is_terminated": False, "truncated": True, "id_": "ep-1"}],
    }
    first, second = message["episodes"]
    first["terminateds"], first["truncateds"] = first.pop("is_terminated"), first.pop("is_truncated")
    del second["is_truncated"]
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
    (event,) = Session(CARTPOLE, 10_000).receive_data(
        encode_frame(msgpack.packb({"type": "EPISODES", "episodes": [episode(rewards=[1.0, float("nan"), 1.0])]}))
    )
    assert event.error.code is ErrorCode.INVALID_MESSAGE and "finite" in event.error.message


def test_encode_message_round_trips_both_encodings():
    for encoding in Encoding:
        frame = encode_message(Pong(), encoding)
        assert int(frame[:8]) == len(frame) - 8
        assert decode_body(frame[8:]) == ({"type": "PONG"}, encoding)


# -- Reply order, the auth handshake, error replies --------------------------------

PING = frame({"type": "PING"})
STATE = SetState(onnx_file="b25ueA==", weights_seq_no=3)


def test_replies_leave_in_request_order_whatever_order_they_are_produced_in():
    session = Session(CARTPOLE, 10_000)
    waits, ping = session.receive_data(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [episode()]}) + PING)
    assert session.send(ping, Pong()) == []  # held: the SET_STATE before it is not out yet
    assert session.unanswered == 2
    released = session.send(waits, STATE)
    assert [answered.seq for answered, _ in released] == [waits.seq, ping.seq]
    assert [reply for _, reply in released] == [encode_message(STATE), encode_message(Pong())]
    assert session.unanswered == 0


def test_episodes_owe_no_reply_but_an_error_for_them_keeps_its_turn():
    session = Session(CARTPOLE, 10_000)
    episodes, ping = session.receive_data(frame({"type": "EPISODES", "episodes": [episode()]}) + PING)
    assert not episodes.expects_reply and session.unanswered == 2
    assert session.send(ping, Pong()) == []  # until the EPISODES before it is handled
    assert [reply for _, reply in session.send(episodes)] == [encode_message(Pong())]  # handled: nothing of its own
    refused, ping = session.receive_data(frame({"type": "EPISODES", "episodes": [episode()]}) + PING)
    assert session.send(ping, Pong()) == []
    error = ProtocolError(ErrorCode.INVALID_MESSAGE, "no such episode")
    released = session.send(refused, error_reply(error))  # a failure found while handling it: an ERROR, in its turn
    assert [json.loads(reply[8:])["type"] for _, reply in released] == ["ERROR", "PONG"]


def test_an_error_reply_takes_its_turn_between_requests():
    session = Session(CARTPOLE, 10_000)
    first, bad, last = session.receive_data(PING + frame({"type": "HELLO"}) + PING)
    assert bad.error.code is ErrorCode.UNKNOWN_TYPE
    assert session.send(last, Pong()) == [] and session.send(bad) == []
    codes = [json.loads(reply[8:])["type"] for _, reply in session.send(first, Pong())]
    assert codes == ["PONG", "ERROR", "PONG"]


def test_a_broken_stream_answers_the_frames_before_the_break_then_its_error_and_reads_no_more():
    session = Session(CARTPOLE, 1000)
    ping, broken = session.receive_data(PING + b"abcdefgh")
    assert broken.fatal and broken.seq > ping.seq and session.closed
    assert session.send(broken) == []  # the PING's reply comes first
    assert [json.loads(reply[8:])["type"] for _, reply in session.send(ping, Pong())] == ["PONG", "ERROR"]
    assert session.receive_data(PING) == []


@pytest.mark.parametrize(
    "first",
    [
        frame({"type": "GET_CONFIG"}),
        frame({"type": "PING"}),
        frame({"type": "PING", "token": "wrong"}),
        frame({"type": "EPISODES", "episodes": [episode()]}),
    ],
)
def test_with_auth_on_anything_but_a_ping_with_the_token_first_is_fatal_and_ends_the_session(first):
    session = Session(CARTPOLE, 10_000, check_token=lambda token: token == "s3cret")
    events = session.receive_data(first + PING + frame({"type": "PING", "token": "s3cret"}))
    assert len(events) == 1  # nothing after the refusal is read
    (refused,) = events
    assert refused.error.code is ErrorCode.UNAUTHORIZED and refused.fatal
    assert session.closed and not session.authenticated
    (_, reply), = session.send(refused)
    assert json.loads(reply[8:])["code"] == "unauthorized" and b"s3cret" not in reply


def test_with_auth_on_a_ping_with_the_token_opens_the_session():
    session = Session(CARTPOLE, 10_000, check_token=lambda token: token == "s3cret")
    hello, config = session.receive_data(frame({"type": "PING", "token": "s3cret"}) + frame({"type": "GET_CONFIG"}))
    assert isinstance(hello.request, Ping) and session.authenticated
    assert isinstance(config, RequestReceived) and not session.closed


def test_replies_many_clients_get_alike_are_encoded_once_per_version():
    encoder = ReplyEncoder()
    assert encoder.encode(Pong(), Encoding.JSON) is encoder.encode(Pong(), Encoding.JSON)
    state = encoder.encode(STATE, Encoding.MSGPACK)
    assert encoder.encode(SetState(onnx_file=STATE.onnx_file, weights_seq_no=3), Encoding.MSGPACK) is state
    newer = encoder.encode(SetState(onnx_file="bmV3", weights_seq_no=4), Encoding.MSGPACK)
    assert msgpack.unpackb(newer[8:]) == {"type": "SET_STATE", "onnx_file": "bmV3", "weights_seq_no": 4, "onnx_files": {}}
    both = SetState(onnx_file="bmV3", weights_seq_no=4, onnx_files={"a": "bmV3", "b": "b2xk"})
    assert msgpack.unpackb(encoder.encode(both, Encoding.MSGPACK)[8:])["onnx_files"] == both.onnx_files
    # A population's members: one message per member for a version, each encoded once.
    member_0, member_1 = (SetState(onnx_file=f, weights_seq_no=5, onnx_files={"p": f}) for f in ("bTA=", "bTE="))
    frames = [encoder.encode(message, Encoding.JSON) for message in (member_0, member_1)]
    assert frames[0] != frames[1]
    assert [encoder.encode(message, Encoding.JSON) for message in (member_1, member_0)] == frames[::-1]
    assert all(encoder.encode(m, Encoding.JSON) is f for m, f in zip((member_0, member_1), frames))


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
        for piece in data:
            for body in decode_all(decoder, piece):
                assert len(body) <= 64
    except ProtocolError as exc:
        assert exc.fatal and exc.code in (ErrorCode.BAD_HEADER, ErrorCode.FRAME_TOO_LARGE)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_session_turns_any_body_into_an_event(body):
    events = Session(CARTPOLE, 10_000).receive_data(encode_frame(body))
    assert len(events) == 1
    assert isinstance(events[0], (RequestReceived, FrameRejected))
