"""simdjson's path for large JSON bodies (app.sansio.json_arrays) against orjson's.

The promise: whenever `loads_with_arrays` answers, it is orjson's result with the
number lists under the given keys as arrays equal to `np.asarray` of them; a Session
gives the same events, the same error messages and the same validated arrays whichever
path a body takes; and CartPole-sized chunks, the common case, do take the fast path.
"""

from __future__ import annotations

import functools
import json
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.sansio import protocol
from app.sansio.json_arrays import loads_with_arrays
from app.sansio.protocol import FrameRejected, RequestReceived, Session
from app.schemas import ARRAY_FIELDS, Episodes
from rllink.framing import encode_frame

from .helpers import FUZZ, SPACES, chunk, json_values, structured_messages

KEYS = frozenset({"obs", "rewards"})

# -- loads_with_arrays against orjson ---------------------------------------------------

numbers = st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([2**53 + 1, 2**63 - 1, -(2**63)])


@st.composite
def number_lists(draw) -> list:
    """Rectangular lists of numbers (1 to 3 dimensions), and ones spoiled in one place:
    a list or a boolean or a string where a number should be, a ragged or empty row, an
    integer beyond int64, a number where a row should be."""
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    ints_only = draw(st.booleans())
    item = st.integers(-(2**63), 2**63 - 1) if ints_only else numbers

    def build(depth: int) -> list:
        if depth == len(shape) - 1:
            return draw(st.lists(item, min_size=shape[depth], max_size=shape[depth]))
        return [build(depth + 1) for _ in range(shape[depth])]

    value = build(0)
    spoil = draw(st.sampled_from([None, None, "list", "bool", "string", "ragged", "empty", "big int", "number row"]))
    if spoil is None:
        return value
    parent = value
    while isinstance(parent[0], list) and (spoil != "number row" or isinstance(parent[0][0], list)):
        parent = parent[draw(st.integers(0, len(parent) - 1))]
    index = draw(st.integers(0, len(parent) - 1))
    if spoil == "number row":
        parent[index] = draw(numbers)
    elif spoil in ("ragged", "empty") and isinstance(parent[index], list):
        parent[index] = parent[index][:-1] if spoil == "ragged" else []
    else:
        parent[index] = {"list": [parent[index]], "bool": True, "string": "[1]", "big int": 2**64 + 5}.get(spoil, 0)
    return value


documents = st.dictionaries(
    st.sampled_from(["obs", "rewards", "other", "x["]) | st.text(max_size=4),
    number_lists() | json_values | st.lists(st.fixed_dictionaries({"obs": number_lists()}), max_size=2),
    max_size=4,
)


def assert_same(fast, reference, under_key: bool = False) -> None:
    """`fast` is `reference` with number lists under KEYS as np.asarray of them."""
    if isinstance(fast, np.ndarray):
        assert under_key, "an array where no key asked for one"
        expected = np.asarray(reference)
        assert fast.dtype == expected.dtype and fast.dtype in (np.int64, np.float64)
        assert fast.shape == expected.shape and np.array_equal(fast, expected)
    elif isinstance(fast, dict):
        assert isinstance(reference, dict) and list(fast) == list(reference)
        for key in fast:
            assert_same(fast[key], reference[key], key in KEYS)
    elif isinstance(fast, list):
        assert isinstance(reference, list) and len(fast) == len(reference)
        for a, b in zip(fast, reference):
            assert_same(a, b)
    else:
        assert type(fast) is type(reference) and fast == reference


@FUZZ
@given(document=documents, indent=st.sampled_from([None, 1]))
def test_whenever_it_answers_it_is_orjson_with_arrays(document, indent):
    body = json.dumps(document, indent=indent).encode()
    fast = loads_with_arrays(body, KEYS)
    if fast is not None:
        assert_same(fast, orjson.loads(body))


@FUZZ
@given(data=st.data())
def test_rectangular_number_lists_are_not_declined(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    values = np.asarray(data.draw(st.lists(numbers, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))))
    document = {"type": "EPISODES", "obs": values.reshape(shape).tolist(), "other": [[1, "a"]], "text": "no brackets"}
    body = json.dumps(document).encode()
    fast = loads_with_arrays(body, KEYS)
    assert fast is not None
    assert_same(fast, orjson.loads(body))


@pytest.mark.parametrize(
    "body",
    [
        b'{"obs": [1, [2]]}',  # flattens like [1, 2]: the '[' count gives it away
        b'{"obs": [[1, 2], [3, [4]]]}',
        b'{"obs": [[1, 2], 3, [4, [5, 6]]]}',
        b'{"obs": [[1, 2], [3]]}',
        b'{"obs": [[], [1]]}',
        b'{"obs": [1, true]}',
        b'{"obs": [1, 18446744073709551615]}',  # numpy: uint64
        b'{"obs": [1], "id": "a[b"}',  # a '[' in a string: declined, to be safe
        b'{"obs": [1], "obs": [2]}',  # a key twice: orjson keeps the last
        b'{"obs": {"": false, "\\u0000": null}}',  # simdjson looks a key up only to its NUL
        b'\xef\xbb\xbf{"obs": [1]}',  # orjson refuses a byte-order mark
        b'{"obs": [1, 2]',
        b"[1, 2]",
    ],
)
def test_what_it_cannot_decide_exactly_it_declines(body):
    assert loads_with_arrays(body, KEYS) is None


# -- The same events through a Session, whichever path --------------------------------


def both_paths(spaces, body: bytes) -> tuple[list, list]:
    """The events of a body through simdjson's path if it answers, and orjson's."""
    events = []
    for threshold in (0, 1 << 40):
        with mock.patch.object(protocol, "ARRAYS_MIN_BODY_BYTES", threshold):
            events.append(Session(spaces, 1 << 20, max_episodes_per_message=4).receive_data(encode_frame(body)))
    return events[0], events[1]


def assert_same_events(fast: list, reference: list) -> None:
    assert len(fast) == len(reference) == 1
    (a,), (b,) = fast, reference
    assert type(a) is type(b)
    if isinstance(a, FrameRejected):
        assert (a.error.code, a.error.message, a.error.details) == (b.error.code, b.error.message, b.error.details)
        return
    assert a.request.type == b.request.type
    if isinstance(a.request, Episodes):
        assert len(a.request.episodes) == len(b.request.episodes)
        for x, y in zip(a.request.episodes, b.request.episodes):
            for name in sorted(ARRAY_FIELDS):
                u, v = getattr(x, name), getattr(y, name)
                assert (u is None) == (v is None)
                if u is not None:
                    assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)
            assert x.model_dump(exclude=ARRAY_FIELDS) == y.model_dump(exclude=ARRAY_FIELDS)


@FUZZ
@given(data=st.data(), space=st.sampled_from(sorted(SPACES)))
def test_a_session_gives_the_same_events_and_messages_on_either_path(data, space):
    message = data.draw(structured_messages(SPACES[space], allow_non_finite=False))
    fast, reference = both_paths(SPACES[space], json.dumps(message).encode())
    assert_same_events(fast, reference)


CARTPOLE_STEPS = 500  # a whole CartPole-v1 episode, as the ingest benchmark sends it


def cartpole_sized_body() -> bytes:
    """One 500-step CartPole chunk with log-probs, an id and a version: ~60 kB of JSON."""
    return cartpole_sized_bodies(1)[0]


@functools.cache
def cartpole_sized_bodies(count: int) -> list[bytes]:
    """`count` different such EPISODES bodies."""
    bodies = []
    for seed in range(count):
        rng = np.random.default_rng(seed + 1000)
        episode = chunk(
            CARTPOLE_STEPS,
            seed=seed,
            action_logp=rng.uniform(-0.9, -0.5, CARTPOLE_STEPS).tolist(),
            episode_id=f"{seed:032x}",
            weights_seq_no=0,
        )
        bodies.append(json.dumps({"type": "EPISODES", "episodes": [episode], "timesteps": CARTPOLE_STEPS}).encode())
    return bodies


@pytest.mark.parametrize(
    ("change", "declined", "accepted"),
    [
        ({}, False, True),
        ({"obs_row": [1, 2, 3, 4]}, False, True),  # integers among floats
        ({"action": 1.0}, False, True),  # a float among integers: a whole number
        ({"reward": True}, True, True),  # numpy reads a boolean among numbers as 0 or 1
        ({"obs_row": [0.1, 0.2, 0.3]}, True, False),
        ({"obs_row": [0.1, 0.2, 0.3, [0.4]]}, True, False),
        ({"obs_row": [1e39, 0.0, 0.0, 0.0]}, False, False),  # float32 overflow
        ({"action": 2}, False, False),
        ({"action": 0.5}, False, False),
    ],
    ids=repr,
)
def test_cartpole_sized_chunks_take_the_fast_path_and_read_the_same(change, declined, accepted):
    message = orjson.loads(cartpole_sized_body())
    episode = message["episodes"][0]
    if "obs_row" in change:
        episode["obs"][7] = change["obs_row"]
    if "action" in change:
        episode["actions"][3] = change["action"]
    if "reward" in change:
        episode["rewards"][5] = change["reward"]
    body = json.dumps(message).encode()
    assert len(body) >= protocol.ARRAYS_MIN_BODY_BYTES
    assert (loads_with_arrays(body, ARRAY_FIELDS) is None) == declined
    fast, reference = both_paths(SPACES["cartpole"], body)
    assert_same_events(fast, reference)
    assert isinstance(fast[0], RequestReceived) == accepted, fast[0]


# -- The parser kept per thread --------------------------------------------------------


def test_arrays_outlive_the_next_bodies_parsed_with_the_kept_parser():
    """Each body's arrays are its own: parsing the next ones, with the same kept parser
    or a fresh one for a body over the size limit, changes nothing already returned."""
    large = json.dumps({"obs": [[float(i)] * 4 for i in range(100)], "other": "x" * 8000}).encode()
    bodies = [*cartpole_sized_bodies(3), large, cartpole_sized_bodies(1)[0]]
    with mock.patch("app.sansio.json_arrays.REUSED_PARSER_MAX_BODY_BYTES", len(large) - 1):
        results = [loads_with_arrays(body, KEYS) for body in bodies]
    for body, result in zip(bodies, results):
        assert result is not None
        assert_same(result, orjson.loads(body))


def test_threads_parsing_at_once_each_read_their_own_bodies():
    bodies = cartpole_sized_bodies(8)
    expected = [orjson.loads(body) for body in bodies]

    def parse_all(offset: int) -> None:
        for i in range(40):
            index = (i + offset) % len(bodies)
            result = loads_with_arrays(bodies[index], KEYS)
            assert result is not None
            assert_same(result, expected[index])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(parse_all, range(4)))  # re-raises a thread's failed assertion
