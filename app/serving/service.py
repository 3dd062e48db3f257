"""Thin clients: the gateway acts for them and builds their episodes (RLlib's remote inference).

A thin client opens an episode (START_EPISODE), asks for each action with the current
observation (GET_ACTION), reports rewards (LOG_RETURNS), may act on its own
(LOG_ACTION), and ends the episode (END_EPISODE). The gateway records each step as the
multi-agent client does (app/trajectory.py): the observation, the action sampled (or
logged) with its log-prob under the version that chose it, the rewards, the final
observation and flags. Complete steps go to the training service as episode chunks, so
they train exactly as `EPISODES` do: when an episode ends, when `env_steps_per_sample`
steps are complete, and before acting with a newer version than its first unsent step
was chosen by (a chunk is never older than it must be). Thin clients never hold the
barrier: they do not wait for training.

Episodes belong to their connection (ids are per connection). One idle for
`episode_timeout_s`, or left open by a client that disconnects, ends as truncated: its
complete steps are trained on; an action whose next observation never came is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

import numpy as np

from app.config import Settings
from app.policies import Module, PolicySet, UnknownModule
from app.protocol import ErrorCode, ProtocolError
from app.schemas import (
    Action, EndEpisode, EpisodeChunk, EpisodeStarted, GetAction, LogAction, LogReturns, StartEpisode, check_action_mask,
    check_image_values, mask_allows,
)
from app.serving.batcher import ActionBatcher
from app.serving.metrics import ServingMetrics
from app.spaces import DiscreteSpace, MultiDiscreteSpace, num_logits
from app.trajectory import AgentTrajectory, PlayedAction
from app.training.registry import ClientInfo
from app.training.service import TrainingService

log = logging.getLogger("app.serving")


@dataclass
class ServedEpisode:
    """An open thin-client episode."""

    module: Module
    trajectory: AgentTrajectory | None  # None until its first observation
    training_enabled: bool
    agent_id: str | None
    last_seen: float  # monotonic


def _refuse(message: str, code: ErrorCode = ErrorCode.INVALID_MESSAGE) -> ProtocolError:
    return ProtocolError(code, message)


class ServingService:
    """Open episodes of every thin client, the action batcher, and what goes to training."""

    def __init__(self, settings: Settings, policies: PolicySet, training: TrainingService, seed: int = 0) -> None:
        self.settings = settings
        self.policies = policies
        self.training = training
        self.metrics = ServingMetrics()
        self.batcher = ActionBatcher(
            training.current_state,
            max_batch=settings.inference_max_batch,
            max_wait_s=settings.inference_max_wait_ms / 1000,
            rng=np.random.default_rng(seed),
            on_pass=self.metrics.record_pass,
        )
        self._episodes: dict[int, dict[str, ServedEpisode]] = {}  # client id -> episode id -> episode
        self._clients: dict[int, ClientInfo] = {}
        self._sweeper: asyncio.Task[None] | None = None

    # -- Lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle(), name="episode timeouts")

    async def stop(self) -> None:
        """End every open episode as truncated (its complete steps go to training first)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        for client_id in list(self._episodes):
            self.disconnect(self._clients[client_id], reason="shutdown")

    # -- Requests -------------------------------------------------------------------

    def start_episode(self, client: ClientInfo, request: StartEpisode) -> EpisodeStarted:
        episodes = self._episodes.setdefault(client.id, {})
        self._clients[client.id] = client
        try:
            module = self.policies.module_to_play(request.agent_id, request.module_id)
        except UnknownModule as exc:
            raise _refuse(str(exc)) from None
        if request.episode_id is not None and request.episode_id in episodes:
            raise _refuse(f"episode {request.episode_id!r} is already open on this connection")
        if len(episodes) >= self.settings.max_open_episodes_per_connection:
            raise _refuse(
                f"this connection has {len(episodes)} episodes open, the limit (max_open_episodes_per_connection); "
                "end some first",
                ErrorCode.TOO_MANY_EPISODES,
            )
        if self.metrics.open_episodes >= self.settings.max_open_episodes:
            raise _refuse(
                f"the gateway has {self.metrics.open_episodes} thin-client episodes open, its limit "
                "(max_open_episodes); retry later",
                ErrorCode.TOO_MANY_EPISODES,
            )
        episode_id = request.episode_id or uuid.uuid4().hex
        training = request.training_enabled and module.trainable
        episodes[episode_id] = ServedEpisode(module, None, training, request.agent_id, time.monotonic())
        self.metrics.episodes_started_total += 1
        self.metrics.open_episodes += 1
        return EpisodeStarted(episode_id=episode_id)

    async def get_action(self, client: ClientInfo, request: GetAction, received_at: float) -> Action:
        items = request.requests
        episodes = [self._episode(client, item.episode_id) for item in items]
        if len(items) > 1 and len({item.episode_id for item in items}) < len(items):
            raise _refuse("a GET_ACTION batch names an episode more than once (one action per episode at a time)")
        for i, (item, episode) in enumerate(zip(items, episodes)):
            field = "" if request.batch is None else f"batch[{i}]."
            self._check_obs(episode, item.obs, f"{field}obs")
            self._check_mask(episode.module, item.action_mask, f"{field}action_mask")
        # One batcher request per module in the message (a batch may mix modules).
        by_module: dict[str, list[int]] = {}
        for i, episode in enumerate(episodes):
            by_module.setdefault(episode.module.module_id, []).append(i)
        actions: list = [None] * len(items)
        version = 0
        for indices in by_module.values():
            module = episodes[indices[0]].module
            explore = np.array([items[i].explore for i in indices])
            masks = self._masks(module, [items[i].action_mask for i in indices])
            obs = items[indices[0]].obs[None] if len(indices) == 1 else np.stack([items[i].obs for i in indices])
            chosen = await self.batcher.act(module, obs, explore, masks)
            version = chosen.weights_seq_no
            for row, i in enumerate(indices):
                sampled = chosen.actions[row]
                mask = None if masks is None else masks[row].tolist()
                played = PlayedAction(
                    self._env_action(module, sampled), _chunk_action(sampled), float(chosen.logp[row]), version, mask
                )
                self._record(client, items[i].episode_id, episodes[i], items[i].obs, played)
                actions[i] = played.env_action
        self.metrics.record_served(len(items), time.perf_counter() - received_at)
        if request.batch is not None:
            return Action(actions=actions, weights_seq_no=version)
        return Action(episode_id=items[0].episode_id, action=actions[0], weights_seq_no=version)

    async def log_action(self, client: ClientInfo, request: LogAction) -> None:
        episode = self._episode(client, request.episode_id)
        self._check_obs(episode, request.obs)
        self._check_mask(episode.module, request.action_mask, "action_mask")
        action = self._logged_action(episode.module, request.action)
        masks = self._masks(episode.module, [request.action_mask])
        if masks is not None and not mask_allows(masks, action[None], episode.module.action_space)[0]:
            raise _refuse(f"action {request.action!r} is one its action_mask forbids")
        logged = await self.batcher.log_prob(episode.module, request.obs[None], action[None], masks)
        mask = None if masks is None else masks[0].tolist()
        played = PlayedAction(_chunk_action(action), _chunk_action(action), float(logged.logp[0]), logged.weights_seq_no, mask)
        self._record(client, request.episode_id, episode, request.obs, played)
        self.metrics.actions_logged_total += 1

    def log_returns(self, client: ClientInfo, request: LogReturns) -> None:
        episode = self._episode(client, request.episode_id)
        if episode.trajectory is None or not episode.trajectory.actions:
            raise _refuse(f"LOG_RETURNS for episode {request.episode_id!r}, which has no action yet to reward")
        episode.trajectory.reward(request.reward)

    def end_episode(self, client: ClientInfo, request: EndEpisode) -> None:
        episode = self._episode(client, request.episode_id)
        if not (request.is_terminated or request.is_truncated):
            raise _refuse("END_EPISODE needs is_terminated or is_truncated true (an episode that goes on is not ended)")
        self._check_obs(episode, request.obs)
        trajectory = episode.trajectory
        if trajectory is not None and trajectory.in_flight:
            trajectory.observe(request.obs)
        self._end(client, request.episode_id, request.is_terminated, request.is_truncated,
                  "terminated" if request.is_terminated else "truncated")

    def disconnect(self, client: ClientInfo, reason: str = "disconnect") -> None:
        """The client left: its episodes end as truncated, their complete steps trained on."""
        for episode_id in list(self._episodes.get(client.id, {})):
            self._end(client, episode_id, False, True, reason)
        self._episodes.pop(client.id, None)
        self._clients.pop(client.id, None)

    @property
    def open_episode_steps(self) -> int:
        """Complete steps recorded in open episodes, not yet sent to training."""
        return sum(
            episode.trajectory.complete_steps
            for episodes in self._episodes.values()
            for episode in episodes.values()
            if episode.trajectory is not None and episode.training_enabled
        )

    # -- Steps and chunks -----------------------------------------------------------

    def _episode(self, client: ClientInfo, episode_id: str) -> ServedEpisode:
        episode = self._episodes.get(client.id, {}).get(episode_id)
        if episode is None:
            raise _refuse(
                f"episode {episode_id!r} is not open on this connection (never started, ended, or timed out); "
                "start one with START_EPISODE",
                ErrorCode.UNKNOWN_EPISODE,
            )
        episode.last_seen = time.monotonic()
        return episode

    @staticmethod
    def _check_obs(episode: ServedEpisode, obs: np.ndarray, what: str = "obs") -> None:
        space = episode.module.observation_space
        if obs.shape != space.shape:
            raise _refuse(
                f"{what} must have shape {list(space.shape)} for module {episode.module.module_id!r}, got {list(obs.shape)}"
            )
        try:
            check_image_values(obs[None], space, what, f" (module {episode.module.module_id!r})")
        except ValueError as exc:
            raise _refuse(str(exc)) from None

    @staticmethod
    def _check_mask(module: Module, mask: np.ndarray | None, what: str) -> None:
        if mask is not None:
            try:
                check_action_mask(mask[None], module, what, per_step=False)
            except ValueError as exc:
                raise _refuse(str(exc)) from None

    @staticmethod
    def _masks(module: Module, masks: list[np.ndarray | None]) -> np.ndarray | None:
        """The requests' masks [n, k] (all allowed where one gave none); None for a module without masking."""
        if not module.action_masking:
            return None
        width = num_logits(module.action_space)
        return np.stack([np.ones(width, np.float32) if mask is None else mask for mask in masks])

    def _record(self, client: ClientInfo, episode_id: str, episode: ServedEpisode, obs: np.ndarray, played: PlayedAction) -> None:
        """The observation completes the last step (or starts the episode); then the action."""
        trajectory = episode.trajectory
        if trajectory is None:
            trajectory = episode.trajectory = AgentTrajectory(episode_id, episode.agent_id or "", obs)
        else:
            trajectory.observe(obs)
            if trajectory.complete_steps >= self.settings.env_steps_per_sample or (
                trajectory.versions and trajectory.versions[0] < played.weights_seq_no
            ):
                self._send(client, episode)
        trajectory.act(played)

    def _end(self, client: ClientInfo, episode_id: str, terminated: bool, truncated: bool, how: str) -> None:
        episode = self._episodes[client.id].pop(episode_id)
        if episode.trajectory is not None:
            episode.trajectory.end(terminated, truncated, None)
            self._send(client, episode)
        self.metrics.open_episodes -= 1
        self.metrics.episodes_ended[how] += 1

    def _send(self, client: ClientInfo, episode: ServedEpisode) -> None:
        """The episode's complete steps, as a chunk, to training (if it trains)."""
        data = episode.trajectory.take_chunk()
        if data is None or not episode.training_enabled:
            return
        data["module_id"] = episode.module.module_id
        if episode.agent_id is None:
            del data["agent_id"]
        chunk = EpisodeChunk.model_validate(data, context={"policies": self.policies})
        self.training.ingest(client, [chunk], sampling=False)

    # -- Actions --------------------------------------------------------------------

    @staticmethod
    def _env_action(module: Module, action: np.ndarray):
        """What the client applies: the index, or the sample clipped to the box's bounds."""
        space = module.action_space
        if isinstance(space, DiscreteSpace):
            return int(action)
        if isinstance(space, MultiDiscreteSpace):
            return action.tolist()
        low = -np.inf if space.low is None else space.low
        high = np.inf if space.high is None else space.high
        return np.clip(action, low, high).tolist()

    @staticmethod
    def _logged_action(module: Module, action) -> np.ndarray:
        """A LOG_ACTION's action as an array, checked against the module's action space."""
        space = module.action_space
        if isinstance(space, DiscreteSpace):
            if isinstance(action, bool) or not isinstance(action, int) or not 0 <= action < space.n:
                raise _refuse(f"action must be an integer in 0..{space.n - 1} for module {module.module_id!r}, got {action!r}")
            return np.asarray(action, dtype=np.int64)
        if isinstance(space, MultiDiscreteSpace):
            if (
                not isinstance(action, list)
                or len(action) != len(space.nvec)
                or not all(type(a) is int and 0 <= a < n for a, n in zip(action, space.nvec))
            ):
                raise _refuse(
                    f"action must be a list of {len(space.nvec)} integers, each in 0..nvec[i]-1 for "
                    f"MultiDiscrete({list(space.nvec)}) (module {module.module_id!r}), got {action!r}"
                )
            return np.asarray(action, dtype=np.int64)
        array = np.asarray(action, dtype=np.float32)
        if array.shape != space.shape or not np.isfinite(array).all():
            raise _refuse(
                f"action must be finite numbers of shape {list(space.shape)} for module {module.module_id!r}, "
                f"got {action!r}"
            )
        return array

    # -- Timeouts -------------------------------------------------------------------

    async def _sweep_idle(self) -> None:
        """End episodes idle for episode_timeout_s, as truncated."""
        timeout = self.settings.episode_timeout_s
        while True:
            await asyncio.sleep(min(timeout / 4, 5.0))
            deadline = time.monotonic() - timeout
            for client_id, episodes in list(self._episodes.items()):
                for episode_id, episode in list(episodes.items()):
                    if episode.last_seen < deadline:
                        log.info("thin-client episode %r of client #%d idle for %gs: ended as truncated", episode_id, client_id, timeout)
                        self._end(self._clients[client_id], episode_id, False, True, "timeout")


def _chunk_action(action: np.ndarray):
    """As a chunk carries it: an int, or (nested) lists of floats."""
    return int(action) if action.ndim == 0 else action.tolist()
