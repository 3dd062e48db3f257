"""Chunks as columns (app/experience.py): whatever a block does to its chunks at once, it
does as each chunk on its own would (the reference here works chunk by chunk)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from app.experience import ChunkBlock, ChunkBlocks, blocks_of, merged
from app.schemas import ARRAY_FIELDS, EpisodeChunk
from app.training.algorithms.sac.replay import ReplayBuffer

MODULE = "default_policy"


@st.composite
def chunk_lists(draw) -> list[EpisodeChunk]:
    """1-6 CartPole-like chunks of 1-9 steps, some with log-probs, some ending (with outcomes)."""
    seed = draw(st.integers(0, 2**16))
    with_logp = draw(st.booleans())
    rng = np.random.default_rng(seed)
    chunks = []
    for index in range(draw(st.integers(1, 6))):
        steps = draw(st.integers(1, 9))
        ends = draw(st.sampled_from(["no", "terminated", "truncated"]))
        values: dict[str, Any] = {
            "obs": rng.standard_normal((steps + 1, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, steps),
            "rewards": rng.standard_normal(steps).astype(np.float32),
            "is_terminated": ends == "terminated",
            "is_truncated": ends == "truncated",
            "episode_id": f"e{index % 2}",
            "agent_id": draw(st.sampled_from([None, "a", "b"])),
            "weights_seq_no": draw(st.sampled_from([None, 0, 3])),
            "outcome": draw(st.sampled_from([None, "win"])) if ends != "no" else None,
        }
        if with_logp:
            values["action_logp"] = rng.standard_normal(steps).astype(np.float32)
        chunks.append(EpisodeChunk.model_validate(values))
    return chunks


def fields(chunk: EpisodeChunk) -> dict[str, Any]:
    """A chunk's every field (arrays as dtype and values), its module the block's."""
    values = {name: (v.dtype.str, v.tolist()) if isinstance(v, np.ndarray) else v for name, v in vars(chunk).items()}
    return {**values, "module_id": values["module_id"] or MODULE}


def cut(chunk: EpisodeChunk, start: int, stop: int) -> EpisodeChunk:
    """Steps start..stop of a chunk, as the reference cuts it: a piece that does not reach
    its end is neither terminated nor truncated and has no outcome."""
    whole = stop == chunk.num_steps
    update = {name: getattr(chunk, name)[start:stop] for name in ARRAY_FIELDS - {"obs"} if getattr(chunk, name) is not None}
    update["obs"] = chunk.obs[start : stop + 1]
    if not whole:
        update.update(is_terminated=False, is_truncated=False, outcome=None)
    return chunk.model_copy(update=update)


def reference_split(chunks: list[EpisodeChunk], steps: int) -> tuple[list[EpisodeChunk], list[EpisodeChunk]]:
    head: list[EpisodeChunk] = []
    tail: list[EpisodeChunk] = []
    room = steps
    for chunk in chunks:
        if room >= chunk.num_steps:
            head.append(chunk)
            room -= chunk.num_steps
        elif room > 0:
            head.append(cut(chunk, 0, room))
            tail.append(cut(chunk, room, chunk.num_steps))
            room = 0
        else:
            tail.append(chunk)
    return head, tail


@settings(max_examples=150, deadline=None)
@given(chunk_lists(), st.data())
def test_a_block_splits_selects_and_reads_as_its_chunks_one_by_one(chunks, data):
    block = ChunkBlock.of(chunks, MODULE)
    assert [fields(c) for c in block.chunks()] == [fields(c) for c in chunks]
    assert block.num_steps == sum(c.num_steps for c in chunks) and block.num_chunks == len(chunks)
    assert np.allclose(block.chunk_returns(), [float(c.rewards.astype(np.float64).sum()) for c in chunks])
    assert np.array_equal(block.step_obs(), np.concatenate([c.obs[:-1] for c in chunks]))
    assert np.array_equal(block.next_obs(), np.concatenate([c.obs[1:] for c in chunks]))
    last_steps = np.cumsum([c.num_steps for c in chunks]) - 1
    assert list(block.ends) == (last_steps + 1).tolist()
    assert block.terminal_steps() == [int(step) for step, c in zip(last_steps, chunks) if c.is_terminated]
    # The replay buffer's transitions: only a terminated chunk's last one is terminal.
    buffer = ReplayBuffer(64, 4, 1)
    buffer.add(block)
    transitions = [(c.obs[t], c.obs[t + 1], t == c.num_steps - 1 and c.is_terminated) for c in chunks for t in range(c.num_steps)]
    assert np.array_equal(buffer.obs[: block.num_steps], [obs for obs, _, _ in transitions])
    assert np.array_equal(buffer.next_obs[: block.num_steps], [next_obs for _, next_obs, _ in transitions])
    assert buffer.dones[: block.num_steps].tolist() == [float(done) for _, _, done in transitions]
    if block.num_steps > 1:
        steps = data.draw(st.integers(1, block.num_steps - 1))
        head, tail = block.split(steps)
        expected_head, expected_tail = reference_split(chunks, steps)
        assert (head.num_steps, tail.num_steps) == (steps, block.num_steps - steps)
        assert [fields(c) for c in head.chunks()] == [fields(c) for c in expected_head]
        assert [fields(c) for c in tail.chunks()] == [fields(c) for c in expected_tail]
    keep = data.draw(st.lists(st.booleans(), min_size=len(chunks), max_size=len(chunks)))
    kept = block.select(keep)
    assert [fields(c) for c in kept.chunks()] == [fields(c) for c, k in zip(chunks, keep) if k]
    assert kept.num_steps == sum(c.num_steps for c, k in zip(chunks, keep) if k)


@settings(max_examples=50, deadline=None)
@given(chunk_lists(), chunk_lists())
def test_blocks_join_as_their_chunks_in_order(first, second):
    same_shape = (first[0].action_logp is None) == (second[0].action_logp is None)
    if same_shape:
        joined = ChunkBlock.concat([ChunkBlock.of(first, MODULE), ChunkBlock.of(second, MODULE)])
        assert [fields(c) for c in joined.chunks()] == [fields(c) for c in first + second]
    # Chunks of two shapes: a block each (merged keeps them apart), each in its order.
    blocks = merged([*blocks_of(first, MODULE), *blocks_of(second, MODULE)])
    assert sorted(c for b in blocks for c in b.lengths) == sorted(c.num_steps for c in first + second)
    assert len(blocks) == (1 if same_shape else 2)


def test_a_message_of_blocks_reads_as_its_chunks_in_message_order_and_copies_own_their_arrays():
    rng = np.random.default_rng(0)
    chunks = [
        EpisodeChunk.model_validate({
            "obs": rng.standard_normal((steps + 1, 4)).astype(np.float32), "actions": rng.integers(0, 2, steps),
            "rewards": np.ones(steps, np.float32), "is_terminated": False, "is_truncated": False, "agent_id": agent,
            **({"action_logp": np.zeros(steps, np.float32)} if agent == "b" else {}),
        })
        for steps, agent in [(3, "a"), (2, "b"), (4, "a"), (1, "b")]
    ]  # fmt: skip
    blocks = blocks_of(chunks, MODULE)
    assert [b.lengths for b in blocks] == [(3, 4), (2, 1)]  # a block per shape: without and with log-probs
    order = [(0, 0), (1, 0), (0, 1), (1, 1)]
    message = ChunkBlocks(blocks, order)
    assert len(message) == 4 and message.num_steps == 10
    assert [c.agent_id for c in message] == ["a", "b", "a", "b"] and message[2].num_steps == 4
    assert blocks_of(message, "other") is blocks  # no regrouping: the blocks are the message's
    shipped = pickle.loads(pickle.dumps(blocks[0], protocol=5))
    own = shipped.copy()
    assert own.obs.flags.writeable and not np.shares_memory(own.obs, shipped.obs)
    assert [fields(c) for c in own.chunks()] == [fields(c) for c in (chunks[0], chunks[2])]
