"""Several episode chunks as columns (app.sansio.chunk_columns) validate exactly as one by one.

The columns are a fast path: a message must come out the same as through EpisodeChunk's
validators, the reference (the same chunks, arrays and dtypes; or the same error), and
the fast path must really be taken for the common shape of message.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.sansio import chunk_columns
from app.sansio.chunk_columns import LISTS_MAX_BYTES_PER_CHUNK, ChunkColumns, loads_episodes, pack
from app.sansio.json_arrays import loads_with_arrays
from app.sansio.protocol import FrameRejected, RequestReceived, Session
from app.schemas import ARRAY_FIELDS, EpisodeChunk, checked_chunk
from app.settings.policies import Module, PolicySet, UnknownModule
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig

from .helpers import FUZZ

CART, PEND = (BoxSpace(shape=(4,)), DiscreteSpace(n=2)), (BoxSpace(shape=(3,)), BoxSpace(shape=(1,), low=-2.0, high=2.0))
POLICIES = PolicySet(
    [
        Module("cart", *CART, PPOConfig()),
        Module("pend", *PEND, PPOConfig()),
        Module("cart_opponent", *CART, opponent_of="cart"),  # frozen: its agents' chunks are refused
    ],
    {"cart_*": "cart", "pend_*": "pend", "rival_*": "cart_opponent"},
)


def scene_chunk(rng: np.random.Generator, agent: str, steps: int) -> dict[str, Any]:
    """A valid chunk of a cart_ or pend_ agent, as the multi-agent client sends it."""
    obs_dim, discrete = (4, True) if agent.startswith("cart") else (3, False)
    actions = rng.integers(0, 2, steps).tolist() if discrete else rng.uniform(-2, 2, (steps, 1)).tolist()
    done = bool(rng.integers(2))
    return {
        "obs": rng.normal(0, 1, (steps + 1, obs_dim)).astype(np.float32).tolist(),
        "actions": actions,
        "rewards": rng.normal(0, 1, steps).tolist(),
        "action_logp": rng.uniform(-2, 0, steps).tolist(),
        "is_terminated": done,
        "is_truncated": False,
        "episode_id": "scene-1",
        "agent_id": agent,
        "weights_seq_no": int(rng.integers(0, 5)),
    }


# Each corruption changes one chunk (or, with "all", every chunk) the way a client might.
CORRUPTIONS: dict[str, Any] = {
    "obs one wider": lambda c: c.update(obs=[row + [0.5] for row in c["obs"]]),
    "obs a string": lambda c: c["obs"][1].__setitem__(0, "x"),
    "obs starting with a boolean": lambda c: c["obs"][0].__setitem__(0, True),
    "obs huge": lambda c: c["obs"][-1].__setitem__(1, 1e300),
    "obs a nested list": lambda c: c["obs"][0].__setitem__(2, [1.0]),
    "obs a row short": lambda c: c.update(obs=c["obs"][:-1]),
    "obs empty": lambda c: c.update(obs=[]),
    "action out of range": lambda c: c["actions"].__setitem__(0, 2 if type(c["actions"][0]) is int else [2.5]),
    "action negative": lambda c: c["actions"].__setitem__(-1, -1 if type(c["actions"][0]) is int else [-1]),
    "action a float": lambda c: c["actions"].__setitem__(0, 1.0),
    "action a boolean first": lambda c: c["actions"].__setitem__(0, True),
    "actions all booleans": lambda c: c.update(actions=[True] * len(c["actions"])),
    "action rows too wide": lambda c: c.update(actions=[[0.1, 0.2]] * len(c["actions"])),
    "actions flat floats": lambda c: c.update(actions=[0.5] * len(c["actions"])),
    "actions as rows": lambda c: c.update(actions=[[1]] * len(c["actions"])),
    "actions empty": lambda c: c.update(actions=[], rewards=[], action_logp=[], obs=c["obs"][:1]),
    "rewards as rows": lambda c: c.update(rewards=[[1.0]] * len(c["rewards"])),
    "dist inputs flat": lambda c: c.update(action_dist_inputs=[0.1] * len(c["actions"])),
    "rewards ints": lambda c: c.update(rewards=[1] * len(c["rewards"])),
    "rewards booleans": lambda c: c.update(rewards=[True] * len(c["rewards"])),
    "rewards one short": lambda c: c.update(rewards=c["rewards"][:-1]),
    "rewards missing": lambda c: c.pop("rewards"),
    "action_logp missing": lambda c: c.pop("action_logp"),
    "action_logp nested": lambda c: c["action_logp"].__setitem__(0, [0.1]),
    "dist inputs": lambda c: c.update(action_dist_inputs=[[0.1, 0.2]] * len(c["actions"])),
    "dist inputs too wide": lambda c: c.update(action_dist_inputs=[[0.1, 0.2, 0.3]] * len(c["actions"])),
    "terminated 1": lambda c: c.update(is_terminated=1),
    "terminated by an alias": lambda c: c.update(terminated=c.pop("is_terminated")),
    "episode_id long": lambda c: c.update(episode_id="e" * 300),
    "episode_id a number": lambda c: c.update(episode_id=5),
    "agent unmapped": lambda c: c.update(agent_id="nobody"),
    "agent a frozen opponent": lambda c: c.update(agent_id="rival_1"),
    "agent_id long": lambda c: c.update(agent_id="cart_" + "x" * 300),
    "agent_id a number": lambda c: c.update(agent_id=7),
    "module named": lambda c: c.update(module_id="cart" if type(c["actions"][0]) is int else "pend"),
    "module unknown": lambda c: c.update(module_id="nope"),
    "module the wrong one": lambda c: c.update(module_id="pend" if type(c["actions"][0]) is int else "cart"),
    "version negative": lambda c: c.update(weights_seq_no=-1),
    "version a float": lambda c: c.update(weights_seq_no=2.0),
    "version a boolean": lambda c: c.update(weights_seq_no=True),
    "no version": lambda c: c.pop("weights_seq_no"),
    "outcome on a done chunk": lambda c: c.update(outcome="win", is_terminated=True),
    "outcome mid-episode": lambda c: c.update(outcome="loss", is_terminated=False, is_truncated=False),
    "outcome unknown": lambda c: c.update(outcome="tie", is_truncated=True),
    "evaluation": lambda c: c.update(evaluation=True),
    "evaluation 1": lambda c: c.update(evaluation=1),
    "evaluation a string": lambda c: c.update(evaluation="yes"),
    "an extra field": lambda c: c.update(infos={"a": 1}),
    "no agent_id": lambda c: c.pop("agent_id"),
}


@st.composite
def scenes(draw) -> list[dict[str, Any]]:
    """2-6 chunks of cart_ agents, of pend_ agents or of both; half of them corrupted once or twice."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kinds = draw(st.sampled_from([["cart"], ["pend"], ["cart", "pend"]]))
    agents = [f"{kinds[i % len(kinds)]}_{i}" for i in range(draw(st.integers(2, 6)))]
    chunks = [scene_chunk(rng, agent, draw(st.integers(1, 9))) for agent in agents]
    corruptions = st.lists(st.sampled_from(sorted(CORRUPTIONS)), min_size=1, max_size=2, unique=True)
    for name in draw(corruptions) if draw(st.booleans()) else []:
        targets = chunks if draw(st.booleans()) else [draw(st.sampled_from(chunks))]
        for chunk in targets:
            with contextlib.suppress(KeyError, IndexError):  # the first took away what the second changes
                CORRUPTIONS[name](chunk)
    return chunks


def outcome(event) -> tuple:
    """What the event says: the chunks' every field (arrays with their dtype), or the error."""
    if isinstance(event, FrameRejected):
        return ("error", event.error.code, event.error.message)
    assert isinstance(event, RequestReceived)
    return ("chunks", [
        {name: (value.dtype.str, value.tolist()) if isinstance(value, np.ndarray) else value
         for name, value in vars(chunk).items()}
        for chunk in event.request.episodes
    ])


def parse(body: bytes, decoded: dict[str, Any]):
    return Session(POLICIES, 1 << 24).parse(body, decoded)


def packed(body: bytes) -> list[dict[str, Any]]:
    """The body decoded each way a decode worker may (orjson's lists, app.sansio.json_arrays'
    arrays), its chunks packed as columns unless `pack` declines them; and as a decode
    worker decodes it (app/sansio/_columns.c's parse first)."""
    decodings = [orjson.loads(body), loads_with_arrays(body, ARRAY_FIELDS) or orjson.loads(body)]
    for data in decodings:
        if (columns := pack(data["episodes"])) is not None:
            data["episodes"] = columns
    return [*decodings, loads_episodes(body, ARRAY_FIELDS) or orjson.loads(body)]


def assert_as_chunk_by_chunk(body: bytes) -> None:
    reference = outcome(parse(body, orjson.loads(body)))  # EpisodeChunk's validators on plain lists
    for decoded in packed(body):
        assert outcome(parse(body, decoded)) == reference


@FUZZ
@given(scenes(), st.sampled_from(["EPISODES", "EPISODES_AND_GET_STATE"]))
def test_columns_validate_as_chunk_by_chunk(chunks, message_type):
    assert_as_chunk_by_chunk(json.dumps({"type": message_type, "episodes": chunks}).encode())


@pytest.mark.parametrize("kind", ["cart", "pend"])
@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_corruption_of_one_chunk_or_all_as_chunk_by_chunk(name, kind):
    for targets in (slice(1, 2), slice(None)):
        rng = np.random.default_rng(1)
        chunks = [scene_chunk(rng, f"{kind}_{i}", 3 + i) for i in range(3)]
        for chunk in chunks[targets]:
            CORRUPTIONS[name](chunk)
        assert_as_chunk_by_chunk(json.dumps({"type": "EPISODES", "episodes": chunks}).encode())


def test_a_scene_of_64_agents_takes_the_columns_path():
    rng = np.random.default_rng(0)
    chunks = [scene_chunk(rng, f"cart_{i}", 8) for i in range(63)] + [scene_chunk(rng, "pend_0", 8)]
    chunks[5].update(outcome="win", is_terminated=True)
    body = json.dumps({"type": "EPISODES", "episodes": chunks}).encode()
    decoded = loads_episodes(body, ARRAY_FIELDS)
    # Two kinds of agent (observations of 4 and 3 numbers, Discrete and Box actions): a group of columns each.
    assert type(decoded["episodes"]) is ChunkColumns and len(decoded["episodes"].groups) == 2
    validated = decoded["episodes"].blocks(POLICIES)
    assert validated is not None and len(validated) == 64
    # A block per module: the 63 CartPole agents' chunks are one, with their steps as one array.
    assert [(block.module_id, block.num_chunks, len(block.actions)) for block in validated.blocks] == [("cart", 63, 504), ("pend", 1, 8)]
    assert validated[5].outcome == "win" and [c.module_id for c in validated] == ["cart"] * 63 + ["pend"]
    assert outcome(parse(body, decoded)) == outcome(parse(body, orjson.loads(body)))
    # Long chunks are packed from app.sansio.json_arrays' arrays (simdjson parses them quicker).
    body = json.dumps({"type": "EPISODES", "episodes": [scene_chunk(rng, f"cart_{i}", 300) for i in range(4)]}).encode()
    assert len(body) > 4 * LISTS_MAX_BYTES_PER_CHUNK
    decoded = loads_episodes(body, ARRAY_FIELDS)
    assert type(decoded["episodes"]) is ChunkColumns and len(decoded["episodes"].blocks(POLICIES)) == 4
    assert outcome(parse(body, decoded)) == outcome(parse(body, orjson.loads(body)))


def test_a_chunk_built_from_checked_values_equals_model_construct():
    values = {
        "obs": np.zeros((3, 4), np.float32), "actions": np.array([0, 1]), "rewards": np.ones(2, np.float32),
        "is_terminated": True, "is_truncated": False, "agent_id": "cart_0", "module_id": "cart",
        "episode_id": None, "weights_seq_no": 2, "outcome": None, "evaluation": False,
    }
    unset = {"action_logp": None, "action_dist_inputs": None, "action_mask": None, "state_in": None}
    built, constructed = checked_chunk({**values, **unset}, set(values)), EpisodeChunk.model_construct(**values)
    assert vars(built) == vars(constructed) and built.model_fields_set == constructed.model_fields_set
    assert built.__pydantic_extra__ == constructed.__pydantic_extra__
    assert built.__pydantic_private__ == constructed.__pydantic_private__
    assert set(vars(built)) == set(EpisodeChunk.model_fields)


def columns_as_values(columns: ChunkColumns | None) -> Any:
    """Everything the columns hold (arrays with their dtype and shape), comparable with ==."""
    if columns is None:
        return None
    return [
        (group.positions, {name: (a.dtype.str, a.shape, a.tolist()) for name, a in group.arrays.items()}, group.lengths, group.scalars)
        for group in columns.groups
    ]


def test_the_compiled_columns_are_built():
    # scripts/setup.sh compiles app/sansio/_columns.c (setup.py); this fails where it was not built.
    assert chunk_columns.compiled is not None, "app/sansio/_columns.c is not built: pip install -e . with a C compiler"
    assert chunk_columns.compiled.FIELDS == chunk_columns._ARRAYS + chunk_columns._SCALARS


def python_path(body: bytes) -> dict[str, Any] | None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunk_columns, "compiled", None)
        return loads_episodes(body, ARRAY_FIELDS)


def decoded_as_values(decoded: dict[str, Any] | None) -> Any:
    if decoded is None:
        return None
    episodes = decoded["episodes"]
    return {**decoded, "episodes": columns_as_values(episodes) if type(episodes) is ChunkColumns else episodes}


@FUZZ
@given(
    scenes(),
    st.fixed_dictionaries({"indent": st.sampled_from([None, 1]), "sort_keys": st.booleans(), "ensure_ascii": st.booleans()}),
    st.sampled_from(["cart_", "pend_", "k\u00e4fer_", 'q"uote_']),
)
def test_the_parsed_columns_are_those_of_the_python_path(chunks, layout, prefix):
    """app/sansio/_columns.c takes a subset of what orjson and pack take, each exactly as they do."""
    for chunk in chunks:
        if isinstance(chunk.get("agent_id"), str) and chunk["agent_id"].startswith("cart_"):
            chunk["agent_id"] = prefix.encode().decode("unicode_escape") + chunk["agent_id"][5:]
    body = json.dumps({"type": "EPISODES", "episodes": chunks, "timesteps": 7}, **layout).encode()
    parsed = chunk_columns._parsed(body)
    python = python_path(body)
    if parsed is not None:
        assert decoded_as_values(parsed) == decoded_as_values(python)
    one_shape = python is not None and type(python["episodes"]) is ChunkColumns and len(python["episodes"].groups) == 1
    plain = all(c not in body.decode() for c in "\\\"")  # no escapes: they take the Python path
    if one_shape and plain and python["episodes"].groups[0].arrays["actions"].dtype == np.int64:
        assert parsed is not None  # chunks of one shape with Discrete actions (pend_'s may start with an int) take it


@pytest.mark.parametrize("body", [
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK]} x',  # trailing bytes
    b'{"type": "EPISODES", "type": "EPISODES", "episodes": [CHUNK, CHUNK]}',  # a field twice
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK], "episodes": []}',
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK], "timesteps": 01}',
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK], "extra": [1, {"a": "]"}, "\\""]}',
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK], "extra": tru}',
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK,]}',
    b'{"type": "EPISODES", "episodes": [CHUNK]}',  # one chunk: app.sansio.json_arrays' path
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK]',
    b'{"type": "EPISODES", "episodes": [CHUNK, CHUNK], "id": "\xff"}',  # not UTF-8
])
def test_what_the_parser_declines_or_takes_is_what_orjson_reads(body):
    chunk = json.dumps(scene_chunk(np.random.default_rng(0), "cart_0", 3)).encode()
    body = body.replace(b"CHUNK", chunk)
    try:
        reference = decoded_as_values(python_path(body)) or orjson.loads(body)
    except orjson.JSONDecodeError:
        reference = "invalid JSON"
    parsed = chunk_columns._parsed(body)
    assert parsed is None or decoded_as_values(parsed) == reference
    if reference == "invalid JSON":
        assert parsed is None


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["{!r}", "{:.17g}", "{:.19e}", "{:.25g}", "{:.3e}"]))
def test_the_parser_reads_numbers_as_python_does(value, form):
    """Correctly rounded, as orjson and float(): Eisel-Lemire's product, Clinger's fast path, CPython's fallback."""
    text = form.format(value).replace("inf", "1e999")
    parsed = chunk_columns.compiled.number(text.encode())
    if "." not in text and "e" not in text:  # an integer
        assert parsed is None or parsed == int(text)
    else:
        assert parsed is not None and struct.pack("<d", parsed) == struct.pack("<d", float(text))


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("-0", 0), ("-0.0", -0.0), ("1E5", 100000.0), ("2.5e-3", 0.0025), ("123456789012345678", 123456789012345678),
    ("9007199254740993.0", 9007199254740992.0), ("1e400", float("inf")), ("4.9e-324", 5e-324),
    ("1234567890123456789", None), ("01", None), ("1.", None), (".5", None), ("-", None), ("1e", None), ("+1", None), ("0x10", None),
])
def test_the_parser_s_number_grammar_is_json_s(text, value):
    parsed = chunk_columns.compiled.number(text.encode())
    assert parsed == value and type(parsed) is type(value) and (value != 0 or str(parsed) == str(value))


def test_the_powers_of_five_are_the_generator_s():
    generator = Path(__file__).resolve().parent.parent / "scripts" / "powers_of_five.py"
    spec = importlib.util.spec_from_file_location("powers_of_five", generator)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.HEADER.read_text() == module.header()
    assert module.power_of_five_128(0) == 1 << 127 and module.power_of_five_128(-1) == 2**130 // 5 + 1  # 1.6 * 2**127


def test_the_modules_a_message_s_agents_play_are_remembered_until_a_module_is_replaced():
    policies = PolicySet([Module("cart", *CART, PPOConfig()), Module("pend", *PEND, PPOConfig())], {"cart_*": "cart", "pend_*": "pend"})
    agents, named = ["cart_0", "pend_1", "cart_0", None], [None, None, None, "pend"]
    for module_ids in (named, [None] * 3):  # a chunk names its module; none does
        modules = policies.modules_for(agents[: len(module_ids)], module_ids)
        assert [m.module_id for m in modules] == ["cart", "pend", "cart", "pend"][: len(module_ids)]
    with pytest.raises(UnknownModule, match="nobody"):
        policies.modules_for(["cart_0", "nobody"], [None, None])
    with pytest.raises(UnknownModule, match="'nothing' is not a module"):
        policies.modules_for(["cart_0", None], [None, "nothing"])
    adopted = Module("cart", BoxSpace(shape=(5,)), DiscreteSpace(n=2), PPOConfig())  # a game declared other spaces
    policies.replace(adopted)
    assert policies.modules_for(agents, named)[0] is adopted and policies.modules_for(agents[:3], [None] * 3)[2] is adopted
