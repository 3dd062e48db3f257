"""The gateway's thin-client step table cuts the same chunks as the client's AgentTrajectory.

app.serving.step_table records a module's open episodes as rows of shared arrays;
rllink_clients.trajectory.AgentTrajectory (the multi-agent client's) records one episode at a time
and is the reference: for any sequence of batched steps, rewards and episode ends, with
versions changing between steps, both must give the same chunks, in the same order,
that validate to the same EpisodeChunks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.schemas import EpisodeChunk
from app.serving.step_table import INITIAL_SLOTS, INITIAL_STEPS, StepTable
from app.settings.policies import Module, PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace, MultiDiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from rllink_clients.trajectory import AgentTrajectory, PlayedAction

OBS = BoxSpace(shape=(3,))
ACTION_SPACES = {
    "discrete": DiscreteSpace(n=3),
    "box": BoxSpace(shape=(2,), low=-1.0, high=1.0),
    "multi": MultiDiscreteSpace(nvec=(2, 3)),
}


def _actions(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """As the policy gives them: int64 indices, float32 samples (beyond the box too), int64 rows."""
    if kind == "discrete":
        return rng.integers(0, 3, n)
    if kind == "box":
        return rng.normal(0, 2, (n, 2)).astype(np.float32)
    return np.stack([rng.integers(0, 2, n), rng.integers(0, 3, n)], axis=1)


class _Reference:
    """The episodes as the gateway recorded them before the table: an AgentTrajectory each,
    and beside it the masks of its unsent actions (a masked module's)."""

    def __init__(self) -> None:
        self.trajectories: dict[int, AgentTrajectory | None] = {}
        self.masks: dict[int, list] = {}

    def open(self, episode: int) -> None:
        self.trajectories[episode], self.masks[episode] = None, []

    def step(self, episode: int, obs, action, logp: float, version: int, mask, limit: int) -> list[dict]:
        trajectory, chunks = self.trajectories[episode], []
        if trajectory is None:
            self.trajectories[episode] = trajectory = AgentTrajectory(f"e{episode}", "", obs)
        else:
            trajectory.observe(obs)
            if trajectory.complete_steps >= limit or (trajectory.versions and trajectory.versions[0] < version):
                chunks.append(self.take_chunk(episode))
        chunk_action = action.tolist()
        trajectory.act(PlayedAction(chunk_action, chunk_action, logp, version))
        self.masks[episode].append(mask)
        return [chunk for chunk in chunks if chunk is not None]

    def take_chunk(self, episode: int) -> dict | None:
        chunk = self.trajectories[episode].take_chunk()
        if chunk is not None:
            masks, steps = self.masks[episode], len(chunk["actions"])
            if masks[0] is not None:
                chunk["action_mask"] = [mask.tolist() for mask in masks[:steps]]
            del masks[:steps]
        return chunk


def _validated(data: dict, episode: int, policies: PolicySet) -> EpisodeChunk:
    fields = {key: value for key, value in data.items() if key not in ("episode_id", "agent_id", "is_terminated", "is_truncated")}
    fields.update(episode_id=f"e{episode}", is_terminated=False, is_truncated=True, module_id="m")
    return EpisodeChunk.model_validate(fields, context={"policies": policies})


def _assert_same(ours: EpisodeChunk, reference: EpisodeChunk) -> None:
    for name in ("obs", "actions", "rewards", "action_logp", "action_mask"):
        a, b = getattr(ours, name), getattr(reference, name)
        if b is None:
            assert a is None, name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert ours.weights_seq_no == reference.weights_seq_no


@settings(max_examples=60, deadline=None)
@example(kind="discrete", masked=True, limit=40, seed=0, operations=["open"] * 3 + ["step"] * 40)  # rows grow, surely
@given(
    kind=st.sampled_from(sorted(ACTION_SPACES)),
    masked=st.booleans(),
    limit=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    operations=st.lists(st.sampled_from(["open", "step", "step", "step", "step", "reward", "end", "leave", "version"]), max_size=120),
)
def test_the_table_cuts_the_chunks_an_agent_trajectory_cuts(kind, masked, limit, seed, operations):
    masked = masked and kind != "box"
    action_space = ACTION_SPACES[kind]
    policies = PolicySet([Module("m", OBS, action_space, PPOConfig(), action_masking=masked)], {})
    mask_width = 3 if kind == "discrete" else 5
    rng = np.random.default_rng(seed)
    table, reference = StepTable(), _Reference()
    slots: dict[int, int] = {}  # open episode -> its slot
    version, next_episode = 0, 0
    ours: list[tuple[int, dict]] = []
    theirs: list[tuple[int, dict]] = []
    def end(episode: int, final_observation: bool = True) -> None:
        trajectory = reference.trajectories[episode]
        if final_observation and table.in_flight(slots[episode]):
            assert trajectory is not None and trajectory.in_flight
            final = rng.normal(size=3).astype(np.float32)
            assert table.observe(slots[episode], final, limit=2**62, version=0) == []
            trajectory.observe(final)
        data = table.close(slots.pop(episode))
        if data is not None:
            ours.append((episode, data))
        if trajectory is not None and (chunk := reference.take_chunk(episode)) is not None:
            theirs.append((episode, chunk))

    # then more episodes than the table first has slots, living longer than its first rows
    tail = ["open"] * (INITIAL_SLOTS + 1) + ["step", "reward"] * 2 * (INITIAL_STEPS + 2)
    for operation in operations + tail:
        if operation == "open":
            slots[next_episode] = table.open()
            reference.open(next_episode)
            next_episode += 1
        elif operation == "version":
            version += 1
        elif operation == "step" and slots:
            # a batch of distinct open episodes (or one: the table's one-slot path)
            episodes = sorted(rng.choice(list(slots), size=int(rng.integers(1, len(slots) + 1)), replace=False).tolist())
            n = len(episodes)
            obs = rng.normal(size=(n, 3)).astype(np.float32)
            actions = _actions(kind, rng, n)
            logp = rng.normal(size=n).astype(np.float32)
            masks = None
            if masked:  # random, but allowing the action taken
                masks = (rng.random((n, mask_width)) < 0.7).astype(np.float32)
                allowed = actions[:, None] if kind == "discrete" else actions + np.array([0, 2])
                np.put_along_axis(masks, allowed, 1.0, axis=1)
            if n == 1:
                batch, values = slots[episodes[0]], (obs[0], actions[0], logp[0], None if masks is None else masks[0])
            else:
                batch, values = np.array([slots[e] for e in episodes]), (obs, actions, logp, masks)
            for row in table.observe(batch, values[0], limit, version):
                ours.append((episodes[row], table.take_chunk(slots[episodes[row]])))
            table.act(batch, values[1], values[2], version, values[3])
            for row, episode in enumerate(episodes):
                mask = None if masks is None else masks[row]
                for chunk in reference.step(episode, obs[row], actions[row], float(logp[row]), version, mask, limit):
                    theirs.append((episode, chunk))
        elif operation in ("reward", "end", "leave") and slots:
            episode = int(rng.choice(list(slots)))
            trajectory = reference.trajectories[episode]
            if operation == "reward":
                has_action = trajectory is not None and bool(trajectory.actions)
                assert (table.num_actions[slots[episode]] > 0) == has_action
                if has_action:
                    reward = float(rng.normal())
                    table.reward(slots[episode], reward)
                    trajectory.reward(reward)
                continue
            end(episode, final_observation=operation == "end")  # "leave": the client is gone
    for episode in list(slots):
        end(episode)
    assert [episode for episode, _ in ours] == [episode for episode, _ in theirs]
    for (episode, data), (_, reference_data) in zip(ours, theirs):
        _assert_same(_validated(data, episode, policies), _validated(reference_data, episode, policies))


def test_a_closed_slot_starts_empty_for_the_next_episode():
    table = StepTable()
    slot = table.open()
    table.observe(slot, np.zeros(3, np.float32), 10, 0)
    table.act(slot, np.int64(1), np.float32(-0.5), 0, None)
    table.observe(slot, np.ones(3, np.float32), 10, 0)
    table.act(slot, np.int64(0), np.float32(-0.7), 0, None)
    chunk = table.close(slot)  # the client left: the action in flight is lost
    assert chunk["actions"].tolist() == [1] and chunk["obs"].tolist() == [[0, 0, 0], [1, 1, 1]]
    again = table.open()
    assert again == slot and table.complete_steps(again) == 0 and not table.in_flight(again)
    assert table.take_chunk(again) is None


def test_a_chunk_is_never_taken_with_an_action_in_flight():
    table = StepTable()
    slot = table.open()
    for _ in range(2):
        table.observe(slot, np.zeros(3, np.float32), 10, 0)
        table.act(slot, np.int64(1), np.float32(-0.5), 0, None)
    with pytest.raises(RuntimeError, match="in flight|waits"):
        table.take_chunk(slot)
