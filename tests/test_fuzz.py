"""Fuzzing the sans-I/O core with hypothesis (and, if installed, atheris).

test_protocol_core.py already checks that any split of a valid stream decodes alike,
that arbitrary bytes raise nothing but the decoder's own error, and that any one body
gives one event. Here the inputs are nastier and the properties stronger:
- whole streams (valid frames, random bodies, raw garbage) fed to a `Session` in any
  split give the same events as fed at once; never an exception, never
  `internal_error` (which means a bug of ours was caught), at most one fatal event, last;
- messages that are structured but wrong (known types, near-valid episode chunks with
  one field off: a done flag missing or not a boolean, action_dist_inputs of the wrong
  width..., JSON and msgpack; strategies in tests/helpers.py) get `invalid_message`/`unknown_type`/`bad_*`, and
  whatever is accepted is what the training code may rely on: shapes, lengths, ranges,
  finite numbers;
- every refusal's ERROR reply encodes in the client's encoding;
- the fast number parsers agree with numpy's general path whenever they answer;
- the C parser of EPISODES bodies (app/sansio/_columns.c), built with AddressSanitizer and
  UBSan, neither crashes nor reads or writes out of bounds on mutated bodies
  (tests/fuzz_columns.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.numeric_checks import fast_floats, fast_indices
from app.sansio.protocol import FrameRejected, RequestReceived, Session, decode_body, error_reply
from app.schemas import Episodes
from app.settings.policies import PolicySet
from app.spaces.models import DiscreteSpace, num_dist_inputs
from rllink.errors import ErrorCode
from rllink.framing import Encoding, encode_frame

from .helpers import CARTPOLE, FUZZ, SPACES, numbers, odd_numbers, structured_messages

MAX_FRAME = 2048


def new_session(spaces: PolicySet = CARTPOLE) -> Session:
    return Session(spaces, MAX_FRAME, max_episodes_per_message=4, max_steps_per_message=40)


def summary(event) -> tuple:
    """What a client would see of an event: the request type or the error code."""
    if isinstance(event, RequestReceived):
        return ("request", event.request.type, event.encoding)
    assert isinstance(event, FrameRejected), event
    return ("error", event.error.code, event.fatal, event.encoding)


def check_events(session: Session, events: list) -> None:
    """The properties every sequence of events must have."""
    for index, event in enumerate(events):
        assert isinstance(event, (RequestReceived, FrameRejected)), event
        if isinstance(event, FrameRejected):
            assert event.error.code is not ErrorCode.INTERNAL_ERROR, event.error.message
            assert event.error.message
            # The ERROR reply encodes, in the client's encoding, and reads back.
            reply = session.reply(error_reply(event.error), event.encoding)
            body, encoding = decode_body(reply[8:])
            assert int(reply[:8]) == len(reply) - 8 and encoding is event.encoding
            assert body["type"] == "ERROR" and body["code"] == event.error.code.value
            if event.fatal:
                assert index == len(events) - 1 and session.closed
        else:
            check_accepted(event.request, session)


def check_accepted(request, session: Session) -> None:
    """What the training code relies on in every accepted chunk."""
    if not isinstance(request, Episodes):
        return
    spaces = session._contexts[Encoding.JSON]["policies"]
    assert 1 <= len(request.episodes) <= 4 and request.num_steps <= 40
    for chunk in request.episodes:
        steps = chunk.num_steps
        assert steps >= 1
        assert chunk.obs.dtype == np.float32 and chunk.obs.shape == (steps + 1, *spaces.default.observation_space.shape)
        assert chunk.rewards.dtype == np.float32 and chunk.rewards.shape == (steps,)
        assert np.isfinite(chunk.obs).all() and np.isfinite(chunk.rewards).all()
        if isinstance(spaces.default.action_space, DiscreteSpace):
            assert chunk.actions.dtype == np.int64 and chunk.actions.shape == (steps,)
            assert ((0 <= chunk.actions) & (chunk.actions < spaces.default.action_space.n)).all()
        else:
            assert chunk.actions.shape == (steps, *spaces.default.action_space.shape)
            assert np.isfinite(chunk.actions).all()
        assert type(chunk.is_terminated) is bool and type(chunk.is_truncated) is bool
        assert chunk.action_logp is None or (chunk.action_logp.shape == (steps,) and np.isfinite(chunk.action_logp).all())
        if chunk.action_dist_inputs is not None:
            assert chunk.action_dist_inputs.shape == (steps, num_dist_inputs(spaces.default.action_space))
            assert np.isfinite(chunk.action_dist_inputs).all()
        assert chunk.weights_seq_no is None or chunk.weights_seq_no >= 0


def frames_of(messages: list[bytes]) -> bytes:
    return b"".join(encode_frame(body) for body in messages)


# -- Structured but wrong ---------------------------------------------------------------


def _json_body(message: dict) -> bytes:
    return json.dumps(message).encode()


# How each encoding carries a message, whether NaN and infinities can be in it (msgpack
# only), and the error a body that does not decode gets.
STRUCTURED_ENCODINGS = {
    Encoding.JSON: (_json_body, False, ErrorCode.BAD_JSON),
    Encoding.MSGPACK: (msgpack.packb, True, ErrorCode.BAD_MSGPACK),
}


@pytest.mark.parametrize("encoding", list(STRUCTURED_ENCODINGS), ids=lambda encoding: encoding.value)
@FUZZ
@given(data=st.data(), space=st.sampled_from(sorted(SPACES)))
def test_structured_messages_get_a_request_or_a_documented_error(data, space, encoding):
    spaces = SPACES[space]
    pack, allow_non_finite, bad_body = STRUCTURED_ENCODINGS[encoding]
    message = data.draw(structured_messages(spaces, allow_non_finite=allow_non_finite))
    try:
        body = pack(message)
    except (OverflowError, ValueError, TypeError):  # ints beyond 64 bits: msgpack cannot carry them
        return
    if len(body) > MAX_FRAME:
        return  # frame_too_large is fatal; covered by the stream test
    session = new_session(spaces)
    events = session.receive_data(encode_frame(body))
    assert len(events) == 1 and not getattr(events[0], "fatal", False)
    check_events(session, events)
    if isinstance(events[0], FrameRejected):
        assert events[0].error.code in (ErrorCode.INVALID_MESSAGE, ErrorCode.UNKNOWN_TYPE, bad_body)
        assert events[0].encoding is encoding


msgpack_oddities = st.sampled_from(
    [
        b"\x81\xa4type\xa4PING",  # a valid PING
        b"\x81\xa4type\xc4\x04PING",  # type as bytes
        b"\x82\xa4type\xa4PING\x01\x02",  # an int key
        b"\x81\xa4type\xd4\x01\x00",  # an ext type
        b"\x81\xa4type\xc0",  # nil type
        b"\x82\xa4type\xa8EPISODES\xa8episodes\x91\x81\xa3obs\xc4\x00",  # obs as bytes
        b"\x82\xa4type\xa8EPISODES\xa8episodes\x91\x81\xa3obs\x92\x81\x01\x02\x81\x03\x04",  # obs rows are maps
        b"\x81\xa4type\xa4PING\xff",  # trailing byte
        b"\xdf\x00\x00\x00\x01\xa4type\xa4PING",  # map32
        b"\xde\x00\x01\xa4type\xa4PING",  # map16
    ]
)


@FUZZ
@given(prefix=msgpack_oddities, tail=st.binary(max_size=16))
def test_odd_msgpack_bodies_never_crash_the_session(prefix, tail):
    session = new_session()
    events = session.receive_data(encode_frame(prefix + tail))
    assert len(events) == 1
    check_events(session, events)


# -- Whole streams in any split ---------------------------------------------------------

VALID_BODIES = [
    b'{"type": "PING"}',
    b'{"type": "GET_CONFIG"}',
    msgpack.packb({"type": "GET_STATE"}),
    json.dumps(
        {
            "type": "EPISODES",
            "episodes": [{"obs": [[0.0] * 4] * 3, "actions": [0, 1], "rewards": [1, 1], "terminated": True, "truncated": False}],
        }
    ).encode(),
]

pieces = st.one_of(
    st.sampled_from(VALID_BODIES).map(encode_frame),
    st.binary(max_size=40).map(encode_frame),  # well framed, any body
    st.sampled_from([b"{", b"}", b"\x81", b"\x00", b"[]", b'{"type": "PI'])
    .flatmap(lambda start: st.binary(max_size=20).map(lambda rest: encode_frame(start + rest))),
    st.binary(max_size=12),  # raw bytes: most are a bad header sooner or later
    st.sampled_from([b"%08d" % (MAX_FRAME + 1), b"99999999", b"0000", b"-0000001"]),
)


@FUZZ
@given(stream=st.lists(pieces, max_size=10).map(b"".join), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_any_stream_in_any_split_gives_the_same_well_formed_events(stream, cuts):
    whole = new_session()
    expected = whole.receive_data(stream)
    check_events(whole, expected)

    session = new_session()
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    events = []
    for start, end in zip(points, points[1:]):
        events += session.receive_data(stream[start:end])
    check_events(session, events)
    assert [summary(e) for e in events] == [summary(e) for e in expected]
    assert session.closed == whole.closed
    if session.closed:
        assert session.receive_data(b'00000016{"type": "PING"}') == []


# -- The fast number parsers against numpy ------------------------------------------------

rows_of_numbers = st.integers(min_value=1, max_value=4).flatmap(
    lambda width: st.lists(st.lists(odd_numbers, min_size=width, max_size=width), min_size=1, max_size=6)
)


@FUZZ
@given(value=st.lists(odd_numbers, min_size=1, max_size=8) | rows_of_numbers, dtype=st.sampled_from([np.float32, np.float64]))
def test_fast_float_parser_agrees_with_numpy_whenever_it_answers(value, dtype):
    row_size = len(value[0]) if isinstance(value[0], list) else None
    fast = fast_floats(value, dtype, row_size)
    if fast is None:
        return  # declined: numpy's general path decides
    with np.errstate(over="ignore"):
        reference = np.asarray(value).astype(dtype)
    assert fast.dtype == reference.dtype and fast.shape == reference.shape
    assert np.array_equal(fast, reference) and np.isfinite(fast).all()


@FUZZ
@given(value=st.lists(numbers | st.integers(min_value=-(2**70), max_value=2**70), min_size=1, max_size=8), n=st.integers(1, 5))
def test_fast_index_parser_agrees_with_numpy_whenever_it_answers(value, n):
    fast = fast_indices(value, n)
    if fast is None:
        return
    reference = np.asarray(value)
    assert reference.dtype.kind in "iu" and np.array_equal(fast, reference)
    assert ((0 <= fast) & (fast < n)).all()


# -- atheris (coverage-guided), a few seconds, if installed -------------------------------

ATHERIS_TARGET = Path(__file__).with_name("fuzz_session_atheris.py")


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_atheris_finds_no_crash_in_the_session_within_a_few_seconds(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ATHERIS_TARGET), "-max_total_time=3", "-seed=1", "-rss_limit_mb=2048", f"-artifact_prefix={tmp_path}/"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "Done" in output, output[-3000:]


COLUMNS_C = Path(__file__).resolve().parent.parent / "app" / "sansio" / "_columns.c"
COLUMNS_FUZZER = Path(__file__).with_name("fuzz_columns.py")


def test_mutated_bodies_never_crash_the_c_parser_or_leave_its_bounds(tmp_path):
    """20,000 mutated EPISODES bodies into _columns.c built with -fsanitize=address,undefined:
    an out-of-bounds read or write, undefined behaviour or a crash fails the test with the
    sanitizer's report. (PYTHONMALLOC=malloc: each body its own allocation, with red zones
    around it, rather than a slice of one of Python's pools, which ASan cannot see into.)"""
    include = sysconfig.get_paths()["include"]
    if shutil.which("gcc") is None or not Path(include, "Python.h").exists():
        pytest.skip("no gcc or no Python headers: apt-get install gcc python3-dev (as .ci/run does)")
    built = tmp_path / f"_columns{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=undefined", f"-I{include}", f"-I{COLUMNS_C.parent}", str(COLUMNS_C), "-o", str(built)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0", "PYTHONMALLOC": "malloc"}
    result = subprocess.run(
        [sys.executable, str(COLUMNS_FUZZER), str(tmp_path), "--iterations", "20000", "--seed", "1"],
        capture_output=True, text=True, timeout=180, env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "no crash" in output, output[-4000:]
