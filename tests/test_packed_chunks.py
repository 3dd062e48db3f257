"""A front-end's pre-batched experience, packed for the hop to the learner actor
(app/cluster/packed_chunks.py), comes out as it went in: every chunk, per client, its
blocks merged per module and shape, with arrays of their own."""

from __future__ import annotations

import pickle

import numpy as np

from app.cluster.packed_chunks import pack
from app.experience import blocks_of
from app.schemas import ARRAY_FIELDS, EpisodeChunk
from app.training.registry import ClientInfo


def chunk(rng: np.random.Generator, steps: int, **fields) -> EpisodeChunk:
    values = {
        "obs": rng.standard_normal((steps + 1, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, steps),
        "rewards": rng.standard_normal(steps),
        "is_terminated": False,
        "is_truncated": False,
        **fields,
    }
    return EpisodeChunk.model_validate(values)


def test_packed_chunks_unpack_to_the_same_chunks_per_client_merged_per_shape():
    rng = np.random.default_rng(0)
    a, b = ClientInfo(id=1, transport="tcp", peer="a"), ClientInfo(id=2, transport="ws", peer="b")
    arm = dict(obs=rng.standard_normal((4, 3)).astype(np.float32), actions=rng.standard_normal((3, 1)).astype(np.float32))
    chunks = [
        chunk(rng, 5, episode_id="x", weights_seq_no=3),
        chunk(rng, 1, agent_id="cart_0", action_logp=np.zeros(1)),
        chunk(rng, 3, **arm, rewards=np.ones(3), outcome="win", is_terminated=True),
        chunk(rng, 7, episode_id="y", action_dist_inputs=rng.standard_normal((7, 2)), evaluation=True),
        chunk(rng, 2, episode_id="x", weights_seq_no=4, is_truncated=True),
        chunk(rng, 4, episode_id="z"),
    ]
    sent = [
        (client, blocks_of(message, "default_policy"), sampling)
        for client, message, sampling in [
            (a, chunks[0:2], True), (b, chunks[2:3], False), (a, [], True), (b, chunks[3:5], True), (a, chunks[5:6], True)
        ]
    ]  # fmt: skip
    packed = pickle.loads(pickle.dumps(pack(sent), protocol=5))
    # One entry per client and sampling flag, in order of first appearance; a block per shape:
    # a's plain CartPole chunks of two messages are one block.
    assert [(client.id, [block.num_chunks for block in blocks], sampling) for client, blocks, sampling in packed.entries] == [
        (1, [2, 1], True), (2, [1], False), (2, [1, 1], True)
    ]  # fmt: skip
    unpacked = packed.unpack()
    expected = [[chunks[0], chunks[5], chunks[1]], [chunks[2]], [chunks[3], chunks[4]]]
    for (_, copies, _), originals in zip(unpacked, expected, strict=True):
        for original, copy in zip(originals, copies, strict=True):
            assert set(vars(copy)) == set(vars(original))
            for name, value in vars(original).items():
                if name in ARRAY_FIELDS and value is not None:
                    got = getattr(copy, name)
                    assert got.dtype == value.dtype and np.array_equal(got, value) and got.flags.writeable, name
                elif name == "module_id":
                    assert getattr(copy, name) == "default_policy"  # validated without modules: the default one
                else:
                    assert getattr(copy, name) == value, name
    assert unpacked[2][1][0].num_steps == 7 and unpacked[2][1][1].is_truncated
