"""A front-end's pre-batched experience, packed for the hop to the learner actor
(app/cluster/packed_chunks.py), comes out as it went in: every chunk, in order, per client."""

from __future__ import annotations

import pickle

import numpy as np

from app.cluster.packed_chunks import pack
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


def test_packed_chunks_unpack_to_the_same_chunks_in_the_same_order_per_client():
    rng = np.random.default_rng(0)
    a, b = ClientInfo(id=1, transport="tcp", peer="a"), ClientInfo(id=2, transport="ws", peer="b")
    arm = dict(obs=rng.standard_normal((4, 3)).astype(np.float32), actions=rng.standard_normal((3, 1)).astype(np.float32))
    sent = [
        (a, [chunk(rng, 5, episode_id="x", weights_seq_no=3), chunk(rng, 1, agent_id="cart_0", action_logp=np.zeros(1))], True),
        (b, [chunk(rng, 3, **arm, rewards=np.ones(3), module_id=None, outcome="win", is_terminated=True)], False),
        (a, [], True),
        (b, [chunk(rng, 7, episode_id="y", action_dist_inputs=rng.standard_normal((7, 2)), evaluation=True),
             chunk(rng, 2, episode_id="x", weights_seq_no=4, is_truncated=True)], True),
    ]  # fmt: skip
    packed = pickle.loads(pickle.dumps(pack(sent), protocol=5))
    assert len(packed.groups) == 4  # by shape: CartPole plain, with log-probs, the arm's, with policy outputs
    unpacked = packed.unpack()
    # One entry per client and sampling flag, in order of first appearance, its chunks in their order.
    assert [(client.id, len(chunks), sampling) for client, chunks, sampling in unpacked] == [(1, 2, True), (2, 1, False), (2, 2, True)]
    originals = [chunk for entry in (sent[0], sent[2], sent[1], sent[3]) for chunk in entry[1]]
    for original, copy in zip(originals, [chunk for _, chunks, _ in unpacked for chunk in chunks], strict=True):
        assert copy.model_fields_set == original.model_fields_set
        assert set(vars(copy)) == set(vars(original))
        for name, value in vars(original).items():
            if name in ARRAY_FIELDS and value is not None:
                got = getattr(copy, name)
                assert got.dtype == value.dtype and np.array_equal(got, value) and got.flags.writeable, name
            else:
                assert getattr(copy, name) == value, name
    assert unpacked[2][1][0].num_steps == 7 and unpacked[2][1][1].is_truncated
