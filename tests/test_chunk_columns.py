"""Several episode chunks as columns (app.rllink.chunk_columns) validate exactly as one by one.

The columns are a fast path: a message must come out the same as through EpisodeChunk's
validators, the reference (the same chunks, arrays and dtypes; or the same error), and
the fast path must really be taken for the common shape of message.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.rllink import chunk_columns
from app.rllink.chunk_columns import LISTS_MAX_BYTES_PER_CHUNK, ChunkColumns, loads_episodes, pack
from app.rllink.json_arrays import loads_with_arrays
from app.rllink.protocol import FrameRejected, RequestReceived, Session
from app.schemas import ARRAY_FIELDS, EpisodeChunk, checked_chunk
from app.settings.hyperparameters import PPOConfig
from app.settings.policies import Module, PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace

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
    """The body decoded both ways a decode worker may (orjson's lists, app.rllink.json_arrays'
    arrays), its chunks packed as columns unless `pack` declines them."""
    decodings = [orjson.loads(body), loads_with_arrays(body, ARRAY_FIELDS) or orjson.loads(body)]
    for data in decodings:
        if (columns := pack(data["episodes"])) is not None:
            data["episodes"] = columns
    return decodings


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
    # Long chunks are packed from app.rllink.json_arrays' arrays (simdjson parses them quicker).
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
    unset = {"action_logp": None, "action_dist_inputs": None, "action_mask": None}
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
    # scripts/setup.sh compiles app/rllink/_columns.c (setup.py); this fails where it was not built.
    assert chunk_columns.compiled is not None, "app/rllink/_columns.c is not built: pip install -e . with a C compiler"
    assert chunk_columns.compiled.FIELDS == chunk_columns._ARRAYS + chunk_columns._SCALARS


@FUZZ
@given(scenes())
def test_the_compiled_columns_are_those_of_pack_s_python_path(chunks):
    """app/rllink/_columns.c takes a subset of what pack takes, each exactly as pack's Python path does."""
    episodes = orjson.loads(json.dumps(chunks))
    compiled = chunk_columns._compiled_columns(episodes)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunk_columns, "compiled", None)
        python = pack(episodes)
    if compiled is not None:
        assert columns_as_values(compiled) == columns_as_values(python)
    if python is not None and len(python.groups) == 1 and python.groups[0].arrays["actions"].dtype == np.int64:
        assert compiled is not None  # chunks of one shape with Discrete actions (pend_'s may start with an int) take it
