"""A module's open thin-client episodes as rows of shared arrays: a batch of actions recorded in a few array operations.

Recorded one by one, each step of a 64-observation GET_ACTION batch cost 1.6-1.9 of
the 4.0-4.3 us of CPU per action (an AgentTrajectory per episode: a row copied, five
lists appended, a tuple made). Here every open episode of a module is a slot, a row of
each column, and a batch's observations, actions and log-probs each go in with one
assignment.

The steps are those of rllink_clients.trajectory.AgentTrajectory, which the multi-agent client
records with (tests/test_step_table.py compares the two): a slot's observations number
one more than its complete steps, the last being the one its episode acts on next; an
action waiting for its next observation is "in flight", and rewards add to it. The
gateway's requests always observe, then act: chunks are taken after an observation,
when nothing is in flight.

A recurrent module's table also holds each slot's state (RLLINK.md "Recurrent policies"):
`state`, the one to feed with the slot's latest observation (zeros when its episode
opens; the caller puts each step's state_out there after it acts), and the state its
unsent chunk began from, which the chunk carries as `state_in`.

A module whose clients sample with pink noise (SET_CONFIG's `action_noise`) also holds
each slot's noise processes (rllink.action_dists.PinkNoise), new when its episode opens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.numeric_checks import FLOAT32_MAX
from rllink.action_dists import PinkNoise

INITIAL_SLOTS = 8
INITIAL_STEPS = 16  # actions a slot has room for before the table grows (doubling)

# One slot (an int; its values without the batch axis) or several (an int64 array; one row
# of values each): plain indexing costs a one-episode request 0.3 instead of 2 us an assignment.
Slots = int | np.ndarray


class StepTable:
    """The unsent steps of one module's open episodes, a slot (a row of every column) each.

    Columns are made at the first step, with that step's shapes and dtypes: observations
    float32, actions as the policy chose them (int64 or float32), rewards and log-probs
    float64 (summed as Python floats would be), action masks float32 (for a masked
    module, every step has one). Columns are indexed [slot, step]. One version chose all
    of a slot's unsent actions (a newer one cuts them off as a chunk before it acts, see
    `observe`): `version` holds it, per slot.
    """

    def __init__(self, state_size: int = 0, pink_noise_dim: int = 0, rng: np.random.Generator | None = None) -> None:
        self._columns: dict[str, np.ndarray] = {}
        self._slots, self._steps = INITIAL_SLOTS, INITIAL_STEPS
        self.num_obs = np.zeros(self._slots, np.int64)
        self.num_actions = np.zeros(self._slots, np.int64)
        self.version = np.zeros(self._slots, np.int64)
        self._free = list(range(self._slots - 1, -1, -1))
        # A recurrent module's: each slot's state now, and at its unsent chunk's first observation.
        self.state = np.zeros((self._slots, state_size), np.float32) if state_size else None
        self._chunk_state = np.zeros((self._slots, state_size), np.float32) if state_size else None
        # Pink noise's: each slot's processes [slots, 6, d], drawn from `rng`.
        self.noise = np.zeros((self._slots, len(PinkNoise.TIME_CONSTANTS), pink_noise_dim)) if pink_noise_dim else None
        self._rng = rng if rng is not None else np.random.default_rng()

    # -- Slots ----------------------------------------------------------------------

    def open(self) -> int:
        """A slot for a new episode, with no steps."""
        if not self._free:
            self._grow(slots=2 * self._slots)
        slot = self._free.pop()
        self.num_obs[slot] = self.num_actions[slot] = 0
        if self.state is not None and self._chunk_state is not None:
            self.state[slot] = self._chunk_state[slot] = 0.0  # a new episode starts with no memory
        if self.noise is not None:
            self.noise[slot] = PinkNoise.start(self._rng, 1, self.noise.shape[2])[0]
        return slot

    def pink_noise(self, slots: list[int]) -> np.ndarray:
        """The next pink N(0, 1) draws [len(slots), d] of those slots' episodes (a module with action_noise pink)."""
        assert self.noise is not None
        processes = self.noise[slots]
        draws = PinkNoise.step(processes, self._rng)
        self.noise[slots] = processes
        return draws

    def close(self, slot: int) -> dict[str, Any] | None:
        """The episode ended: its complete steps as a chunk (as `take_chunk`; an action still
        waiting for its next observation, the client gone, is lost), and its slot freed."""
        self.num_actions[slot] = min(self.num_actions[slot], self.complete_steps(slot))
        chunk = self.take_chunk(slot)
        self.num_obs[slot] = self.num_actions[slot] = 0
        self._free.append(slot)
        return chunk

    def complete_steps(self, slot: int) -> int:
        return max(int(self.num_obs[slot]) - 1, 0)

    def in_flight(self, slot: int) -> bool:
        return self.num_obs[slot] > 0 and self.num_actions[slot] == self.num_obs[slot]

    # -- Steps ----------------------------------------------------------------------

    def observe(self, slots: Slots, obs: np.ndarray, limit: int, version: int) -> list[int]:
        """Each slot's next observation: its first, or the one after its action in flight
        (the caller alternates observe and act). Returns which slots (positions in `slots`)
        must now have their complete steps taken as a chunk, before they act with
        `version`: `limit` steps complete, or their unsent actions chosen by an older
        version."""
        many, count = type(slots) is not int, self.num_obs[slots]
        if (count.max() if many else count) > self._steps:
            self._make_room(count)
        columns = self._columns
        if "obs" not in columns:
            self._add_columns(slots, obs=(obs, np.float32))
        columns["obs"][slots, count] = obs
        self.num_obs[slots] = count + 1
        due = (count >= limit) | ((count > 0) & (self.version[slots] < version))
        if many:
            return np.flatnonzero(due).tolist() if due.any() else []
        return [0] if due else []

    def act(
        self, slots: Slots, actions: np.ndarray, logp: np.ndarray, version: int, masks: np.ndarray | None,
        state_out: np.ndarray | None = None,
    ) -> None:
        """Each slot's action on its latest observation (then in flight), and a recurrent
        module's state after it."""
        count = self.num_actions[slots]  # one less than their observations: observe made the room
        columns = self._columns
        if "actions" not in columns:
            self._add_columns(
                slots, actions=(actions, actions.dtype), logp=(logp, np.float64), rewards=(logp, np.float64),
                **({} if masks is None else {"masks": (masks, np.float32)}),
            )
        columns["actions"][slots, count] = actions
        columns["logp"][slots, count] = logp
        columns["rewards"][slots, count] = 0.0
        self.version[slots] = version
        if masks is not None:
            columns["masks"][slots, count] = masks
        if self.state is not None and state_out is not None:
            self.state[slots] = state_out
        self.num_actions[slots] = count + 1

    def reward(self, slot: int, reward: float) -> bool:
        """Add to the reward of the slot's last action (it has one), unless the sum would
        leave float32's range (a chunk's rewards are float32): False then, nothing added."""
        step = (slot, self.num_actions[slot] - 1)
        total = self._columns["rewards"][step] + reward
        if not abs(total) <= FLOAT32_MAX:
            return False
        self._columns["rewards"][step] = total
        return True

    def take_chunk(self, slot: int) -> dict[str, Any] | None:
        """The slot's complete steps as an episode chunk's number fields (None if there are
        none); its latest observation stays, to start the next chunk. Taken right after an
        observation: no action is in flight."""
        steps = int(self.num_obs[slot]) - 1
        if steps <= 0:
            return None
        if self.num_actions[slot] != steps:
            raise RuntimeError("a chunk is taken while an action waits for its next observation")
        columns = self._columns
        chunk = {
            "obs": columns["obs"][slot, : steps + 1].copy(),
            "actions": columns["actions"][slot, :steps].copy(),
            "rewards": columns["rewards"][slot, :steps].copy(),
            "action_logp": columns["logp"][slot, :steps].copy(),
            "weights_seq_no": int(self.version[slot]),
        }
        if "masks" in columns:
            chunk["action_mask"] = columns["masks"][slot, :steps].copy()
        if self.state is not None and self._chunk_state is not None:
            chunk["state_in"] = self._chunk_state[slot].copy()
            self._chunk_state[slot] = self.state[slot]  # the next chunk begins at the latest observation, not yet acted on
        columns["obs"][slot, 0] = columns["obs"][slot, steps]
        self.num_obs[slot], self.num_actions[slot] = 1, 0
        return chunk

    # -- Storage --------------------------------------------------------------------

    def _add_columns(self, slots: Slots, **likes: tuple[np.ndarray, Any]) -> None:
        """Columns made at their first use: a row per step, each (like, dtype) shaped as
        `like`'s values per slot."""
        for name, (like, dtype) in likes.items():
            shape = like.shape[np.ndim(slots) :]
            self._columns[name] = np.empty((self._slots, self._steps + 1, *shape), dtype)

    def _make_room(self, rows: np.integer | np.ndarray) -> None:
        """Room for these rows of each slot (columns have `_steps + 1` rows: one more
        observation than actions), by doubling."""
        steps, row = self._steps, int(np.max(rows))
        while steps < row:
            steps *= 2
        self._grow(steps=steps)

    def _grow(self, slots: int | None = None, steps: int | None = None) -> None:
        """Larger columns, each slot's rows in use copied (only those: the rest of a new
        column is never written, so its memory is never touched; one long episode does not
        make every slot's rows resident)."""
        old_slots = self._slots
        self._slots, self._steps = slots or self._slots, steps or self._steps
        used = [(slot, rows) for slot, rows in enumerate(self.num_obs.tolist()) if rows]  # no slot has more of anything
        for name, column in self._columns.items():
            grown = np.empty((self._slots, self._steps + 1, *column.shape[2:]), column.dtype)
            for slot, rows in used:
                grown[slot, :rows] = column[slot, :rows]
            self._columns[name] = grown
        if self._slots > old_slots:
            self.num_obs = np.concatenate([self.num_obs, np.zeros(self._slots - old_slots, np.int64)])
            self.num_actions = np.concatenate([self.num_actions, np.zeros(self._slots - old_slots, np.int64)])
            self.version = np.concatenate([self.version, np.zeros(self._slots - old_slots, np.int64)])
            if self.state is not None and self._chunk_state is not None:
                more = np.zeros((self._slots - old_slots, self.state.shape[1]), np.float32)
                self.state, self._chunk_state = np.concatenate([self.state, more]), np.concatenate([self._chunk_state, more])
            if self.noise is not None:
                self.noise = np.concatenate([self.noise, np.zeros((self._slots - old_slots, *self.noise.shape[1:]))])
            self._free.extend(range(self._slots - 1, old_slots - 1, -1))

