"""One agent's trajectory as it is played, cut into episode chunks as it goes.

The multi-agent reference client builds its chunks from the steps it plays this way;
the gateway builds a thin client's the same way, as columns of all of a module's open
episodes at once (app/serving/step_table.py, checked against this class).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

INITIAL_ROWS = 16  # observations an agent's trajectory has room for before it first grows


class PlayedAction(NamedTuple):
    """An agent's action: what the env gets (clipped), what the chunk records (as sampled),
    the action mask it was chosen under (None: all allowed), for a recurrent module, the
    model's state after the step (`state_out`, to feed with the agent's next observation)
    and, for a module sampling pink noise, the agent's noise processes after the step
    (`noise_out`, to advance for its next action)."""

    env_action: Any
    chunk_action: Any
    logp: float
    weights_seq_no: int
    action_mask: Any = None
    state_out: Any = None
    noise_out: Any = None


class AgentTrajectory:
    """One agent's trajectory in one episode, as far as it is not sent yet.

    The observations always number one more than the complete steps: the last is the one
    the agent acts on next (or its final one). An action whose next observation has not
    come yet (the other player is moving) is "in flight": rewards add to it, and it stays
    behind when the complete steps are cut off into a chunk.

    Observations are rows of one float32 array, grown by doubling: a chunk's are then one
    slice, which the gateway validates several times faster than lists (a 500-step
    CartPole chunk: 23 vs 85 us), and no list per step lingers for the collector.

    A recurrent module's agent (RLLINK.md, "Recurrent policies"): `state` is the state to
    feed with the observation it acts on next (None: zeros, at the episode's start), and
    each chunk after the first carries the state fed with its first observation (`state_in`).
    A module sampling pink noise (SET_CONFIG's `action_noise`): `noise` holds the agent's
    noise processes after its last action (None: new ones, at the episode's start).
    """

    def __init__(self, episode_id: str, agent_id: str, obs: Any, module_id: str | None = None, *, evaluation: bool = False) -> None:
        self.episode_id, self.agent_id = episode_id, agent_id
        self.module_id = module_id  # named on its chunks (it wins over the gateway's policy_mapping)
        self.evaluation = evaluation  # an evaluation episode's: played with the mode, every chunk says so
        first = np.asarray(obs, dtype=np.float32)
        self._obs = np.empty((INITIAL_ROWS, *first.shape), np.float32)
        self._obs[0] = first
        self._num_obs = 1
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.logps: list[float] = []
        self.versions: list[int] = []
        self.masks: list[Any] = []  # each action's mask (None: all allowed)
        self.terminated = self.truncated = False
        self.outcome: str | None = None
        self.episode_return = 0.0
        self.num_steps = 0  # actions over the whole trajectory, sent or not
        self._states: list[Any] = []  # each action's state_out (None: not recurrent)
        self._chunk_state: Any = None  # the state fed with the next chunk's first observation (None: the episode's start)
        self.noise: Any = None  # a pink-noise module's processes, advanced one step per action (None: the episode's start)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def in_flight(self) -> bool:
        return len(self.actions) == self._num_obs

    @property
    def state(self) -> Any:
        """A recurrent module's state to feed with the next observation: the last action's
        state_out (None: zeros, the episode's start; a feed-forward module's always)."""
        return self._states[-1] if self._states else self._chunk_state

    @property
    def complete_steps(self) -> int:
        return self._num_obs - 1

    def act(self, played: PlayedAction) -> None:
        # done, or in flight: the properties inlined, as this runs for every thin-client action
        # (with them, 64-observation batches cost 5.1 instead of 4.7 us of CPU per action)
        if self.terminated or self.truncated or len(self.actions) == self._num_obs:
            raise RuntimeError(f"agent {self.agent_id!r} acts without a new observation")
        self.actions.append(played.chunk_action)
        self.rewards.append(0.0)
        self.logps.append(played.logp)
        self.versions.append(played.weights_seq_no)
        self.masks.append(played.action_mask)
        self._states.append(played.state_out)
        self.noise = played.noise_out
        self.num_steps += 1

    def reward(self, reward: float) -> None:
        """Add to the reward of the last action."""
        self.rewards[-1] += float(reward)
        self.episode_return += float(reward)

    def observe(self, obs: Any) -> None:
        """The observation after the last action: that step is complete."""
        if self.terminated or self.truncated or len(self.actions) != self._num_obs:  # done, or not in flight
            raise RuntimeError(f"agent {self.agent_id!r} observes twice without acting")
        if self._num_obs == len(self._obs):
            self._obs = np.concatenate([self._obs, np.empty_like(self._obs)])
        self._obs[self._num_obs] = obs
        self._num_obs += 1

    def end(self, terminated: bool, truncated: bool, outcome: str | None) -> None:
        self.terminated, self.truncated, self.outcome = terminated, truncated, outcome

    def take_chunk(self) -> dict[str, Any] | None:
        """The complete steps as an episode chunk (None if there are none); the latest
        observation, and an action in flight, stay for the next chunk."""
        steps = self.complete_steps
        if steps == 0:
            return None
        chunk = {
            "obs": self._obs[: steps + 1].copy(),  # float32 [steps + 1, *obs_shape]
            "actions": self.actions[:steps],
            "rewards": self.rewards[:steps],
            "action_logp": self.logps[:steps],
            "is_terminated": self.terminated,
            "is_truncated": self.truncated,
            "episode_id": self.episode_id,
            "agent_id": self.agent_id,
            # An action in flight at the last send was chosen by the version before: name the oldest.
            "weights_seq_no": min(self.versions[:steps]),
        }
        masks = self.masks[:steps]
        if any(mask is not None for mask in masks):  # a masked module's: each step's mask, as 0/1 ints
            width = len(next(mask for mask in masks if mask is not None))
            chunk["action_mask"] = [[1] * width if m is None else np.asarray(m, np.int8).tolist() for m in masks]
        if self.module_id is not None:
            chunk["module_id"] = self.module_id
        if self.evaluation:
            chunk["evaluation"] = True
        if self.done and self.outcome is not None:
            chunk["outcome"] = self.outcome
        if self._chunk_state is not None:  # a recurrent module's chunk that goes on with its episode
            chunk["state_in"] = np.asarray(self._chunk_state, np.float32).tolist()
        self._chunk_state = self._states[steps - 1]  # fed with the latest observation, which starts the next chunk
        self._obs[0] = self._obs[steps]
        self._num_obs = 1
        del self.actions[:steps], self.rewards[:steps], self.logps[:steps], self.versions[:steps], self.masks[:steps]
        del self._states[:steps]
        return chunk
