"""Thin clients: the gateway acts for them and builds their episodes (RLlib's remote inference).

A thin client opens an episode (START_EPISODE), asks for each action with the current
observation (GET_ACTION), reports rewards (LOG_RETURNS), may act on its own
(LOG_ACTION), and ends the episode (END_EPISODE). The gateway records each step as the
multi-agent client does (clients/python/rllink_clients/trajectory.py; here a module's open episodes are the
slots of one StepTable, app/serving/step_table.py): the observation, the action sampled (or
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

from app.numeric_checks import FLOAT32_MAX, mask_allows
from app.schemas import (
    Action,
    EndEpisode,
    EpisodeChunk,
    EpisodeStarted,
    GetAction,
    LogAction,
    LogReturns,
    StartEpisode,
)
from app.serving.batcher import ActionBatcher
from app.serving.checks import (
    check_mask,
    check_obs,
    check_playable,
    env_actions,
    group_masks,
    group_obs,
    logged_action,
    refusal,
    stack_masks,
)
from app.serving.metrics import ServingMetrics
from app.serving.step_table import StepTable
from app.settings.config import Settings
from app.settings.policies import Module, PolicySet, UnknownModule, indices_by_module
from app.spaces.models import BoxSpace
from app.training.interface import TrainingService
from app.training.registry import ClientInfo
from rllink.errors import ErrorCode

log = logging.getLogger("app.serving")


@dataclass
class ServedEpisode:
    """An open thin-client episode."""

    episode_id: str
    module: Module
    steps: StepTable  # the module's; this episode's unsent steps are its row `slot`
    slot: int | None  # None once ended (the slot may then hold another episode)
    training_enabled: bool
    agent_id: str | None
    last_seen: float  # monotonic
    evaluation: bool = False  # acts with the mode; its chunks reach training for the metrics only
    evaluation_turn: bool = False  # the gateway chose it as an evaluation episode (evaluation_interval)


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
        self._noise_rng = np.random.default_rng([seed, 2])  # pink noise's draws, apart from the batcher's
        self._episodes: dict[int, dict[str, ServedEpisode]] = {}  # client id -> episode id -> episode
        self._tables: dict[str, StepTable] = {}  # module id -> its open episodes' steps
        self._clients: dict[int, ClientInfo] = {}
        self._trained_starts: dict[int, int] = {}  # client id -> its episodes started for training, for evaluation_interval
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

    @property
    def modules_played(self) -> frozenset[str]:
        """The modules thin clients have started episodes of (their steps' shapes are set)."""
        return frozenset(self._tables)

    # -- Requests -------------------------------------------------------------------

    def start_episode(self, client: ClientInfo, request: StartEpisode) -> EpisodeStarted:
        episodes = self._episodes.setdefault(client.id, {})
        self._clients[client.id] = client
        try:
            named = self.policies.module_to_play(request.agent_id, request.module_id)
        except UnknownModule as exc:
            raise refusal(str(exc)) from None
        check_playable(self.policies, named)
        # A population's: the member the client plays; a self-play learner's on an exploiter's slot, the
        # exploiter, and its opponent's there, the learner's latest weights (played, never trained on here).
        module = self.policies.member_for(named, client.slot)
        if request.episode_id is not None and request.episode_id in episodes:
            raise refusal(f"episode {request.episode_id!r} is already open on this connection")
        if len(episodes) >= self.settings.max_open_episodes_per_connection:
            raise refusal(
                f"this connection has {len(episodes)} episodes open, the limit (max_open_episodes_per_connection); "
                "end some first",
                ErrorCode.TOO_MANY_EPISODES,
            )
        if self.metrics.open_episodes >= self.settings.max_open_episodes:
            raise refusal(
                f"the gateway has {self.metrics.open_episodes} thin-client episodes open, its limit "
                "(max_open_episodes); retry later",
                ErrorCode.TOO_MANY_EPISODES,
            )
        episode_id = request.episode_id or uuid.uuid4().hex
        turn = named.trainable and not request.evaluation and self._evaluation_turn(client, request)
        evaluation = named.trainable and (request.evaluation or turn)
        training = request.training_enabled and named.trainable and not evaluation
        if (steps := self._tables.get(module.module_id)) is None:  # made once: not at every episode's start
            steps = self._tables[module.module_id] = step_table(module, self._noise_rng)
        episodes[episode_id] = ServedEpisode(
            episode_id, module, steps, steps.open(), training, request.agent_id, time.monotonic(), evaluation, turn
        )
        self.metrics.episodes_started_total += 1
        self.metrics.open_episodes += 1
        return EpisodeStarted(episode_id=episode_id, evaluation=True if evaluation else None)

    def _evaluation_turn(self, client: ClientInfo, request: StartEpisode) -> bool:
        """Whether the gateway plays this episode as an evaluation one: every
        evaluation_interval-th of the connection's episodes started for training (as a
        client playing its own model follows SET_CONFIG's evaluation_interval)."""
        interval = self.settings.evaluation_interval
        if not interval or not request.training_enabled:
            return False
        started = self._trained_starts[client.id] = self._trained_starts.get(client.id, 0) + 1
        return started % interval == 0

    async def get_action(self, client: ClientInfo, request: GetAction, received_at: float) -> Action:
        requests = request.requests
        ids = requests.episode_ids
        episodes = self._open_episodes(client, ids)
        if len(ids) > 1 and len(set(ids)) < len(ids):
            raise refusal("a GET_ACTION batch names an episode more than once (one action per episode at a time)")
        # One batcher request per module in the message (a batch may mix modules); every
        # group is checked before any acts, so a bad item costs no episode a step.
        explore = np.array(requests.explore) & ~np.array([episode.evaluation for episode in episodes])  # evaluation: the mode
        groups = []
        for indices in indices_by_module([episode.module for episode in episodes]):
            module = episodes[indices[0]].module
            obs = group_obs(module, requests, indices, request.batch is not None)
            masks = group_masks(module, requests, indices, request.batch is not None)
            groups.append((module, indices, obs, explore[indices], masks))
        actions: list = [None] * len(ids)
        version = 0
        for module, indices, obs, group_explore, masks in groups:
            group = [episodes[i] for i in indices]
            steps = group[0].steps
            states = noise = None
            if steps.state is not None or steps.noise is not None:  # a recurrent module's, one exploring with pink noise
                slots = [episode.slot for episode in group]
                states = None if steps.state is None else steps.state[slots]
                noise = None if steps.noise is None else steps.pink_noise(slots)
            chosen = await self.batcher.act(module, obs, group_explore, masks, states, noise)
            version = chosen.weights_seq_no
            # the chunks record the actions as sampled; the client gets them clipped to a box
            self._record(client, group, obs, chosen.actions, chosen.logp, version, masks, chosen.state_out)
            for i, action in zip(indices, env_actions(module, chosen.actions)):
                actions[i] = action
        self.metrics.record_served(len(ids), time.perf_counter() - received_at)
        if request.batch is not None:
            return Action(actions=actions, weights_seq_no=version)
        return Action(episode_id=ids[0], action=actions[0], weights_seq_no=version)

    async def log_action(self, client: ClientInfo, request: LogAction) -> None:
        episode = self._episode(client, request.episode_id)
        if episode.evaluation_turn and episode.steps.num_actions[episode.slot] == 0:
            # The client plays this one itself (a heuristic, a human): not the policy's evaluation, but experience.
            episode.evaluation = episode.evaluation_turn = False
            episode.training_enabled = True
        check_obs(episode.module, request.obs)
        check_mask(episode.module, request.action_mask, "action_mask")
        action = logged_action(episode.module, request.action)
        masks = stack_masks(episode.module, [request.action_mask])
        if masks is not None and not mask_allows(masks, action[None], episode.module.action_space)[0]:
            raise refusal(f"action {request.action!r} is one its action_mask forbids")
        steps = episode.steps
        states = None if steps.state is None else steps.state[[episode.slot]]  # a recurrent module's
        logged = await self.batcher.log_prob(episode.module, request.obs[None], action[None], masks, states)
        if not abs(float(logged.logp[0])) <= FLOAT32_MAX:  # the chunk holds it as a float32
            raise refusal(
                f"action {request.action!r} has log-prob {float(logged.logp[0])} under the current policy "
                "(too far from its distribution for float32); not recorded"
            )
        self._record(client, [episode], request.obs[None], action[None], logged.logp, logged.weights_seq_no, masks, logged.state_out)
        self.metrics.actions_logged_total += 1

    def log_returns(self, client: ClientInfo, request: LogReturns) -> None:
        episode = self._episode(client, request.episode_id)
        if episode.steps.num_actions[episode.slot] == 0:
            raise refusal(f"LOG_RETURNS for episode {request.episode_id!r}, which has no action yet to reward")
        if not episode.steps.reward(episode.slot, float(request.reward)):
            raise refusal(
                f"LOG_RETURNS reward {request.reward!r} would make the last action's reward leave float32's range "
                "(rewards are trained as float32); not added"
            )

    def end_episode(self, client: ClientInfo, request: EndEpisode) -> None:
        episode = self._episode(client, request.episode_id)
        if not (request.is_terminated or request.is_truncated):
            raise refusal("END_EPISODE needs is_terminated or is_truncated true (an episode that goes on is not ended)")
        check_obs(episode.module, request.obs)
        if episode.steps.in_flight(episode.slot):  # its final observation (no chunk is cut before it)
            episode.steps.observe(episode.slot, request.obs, limit=np.iinfo(np.int64).max, version=0)
        self._end(client, request.episode_id, request.is_terminated, request.is_truncated,
                  "terminated" if request.is_terminated else "truncated")

    def disconnect(self, client: ClientInfo, reason: str = "disconnect") -> None:
        """The client left: its episodes end as truncated, their complete steps trained on."""
        for episode_id in list(self._episodes.get(client.id, {})):
            self._end(client, episode_id, False, True, reason)
        self._episodes.pop(client.id, None)
        self._clients.pop(client.id, None)
        self._trained_starts.pop(client.id, None)

    @property
    def open_episode_steps(self) -> int:
        """Complete steps recorded in open episodes, not yet sent to training."""
        return sum(
            episode.steps.complete_steps(episode.slot)
            for episodes in self._episodes.values()
            for episode in episodes.values()
            if episode.training_enabled
        )

    # -- Steps and chunks -----------------------------------------------------------

    def _open_episodes(self, client: ClientInfo, episode_ids: list[str]) -> list[ServedEpisode]:
        """The episodes a GET_ACTION names, seen now (an error names the first not open)."""
        open_episodes = self._episodes.get(client.id, {})
        try:
            episodes = [open_episodes[episode_id] for episode_id in episode_ids]
        except KeyError:
            for episode_id in episode_ids:
                self._episode(client, episode_id)  # raises for the first not open
            raise
        now = time.monotonic()
        for episode in episodes:
            episode.last_seen = now
        return episodes

    def _episode(self, client: ClientInfo, episode_id: str) -> ServedEpisode:
        episode = self._episodes.get(client.id, {}).get(episode_id)
        if episode is None:
            raise refusal(
                f"episode {episode_id!r} is not open on this connection (never started, ended, or timed out); "
                "start one with START_EPISODE",
                ErrorCode.UNKNOWN_EPISODE,
            )
        episode.last_seen = time.monotonic()
        return episode

    def _record(
        self,
        client: ClientInfo,
        episodes: list[ServedEpisode],
        obs: np.ndarray,
        actions: np.ndarray,
        logp: np.ndarray,
        version: int,
        masks: np.ndarray | None,
        state_out: np.ndarray | None = None,
    ) -> None:
        """A step of each episode (all of one module): the observation completes its last
        step (or starts it); the complete steps go to training if due; then the action, and
        a recurrent module's state after it."""
        if len(episodes) == 1:  # one slot: its values without the batch axis
            slots = episodes[0].slot
            if slots is None:
                return  # ended while its action was chosen (the client left)
            obs, actions, logp, masks = obs[0], actions[0], logp[0], None if masks is None else masks[0]
            state_out = None if state_out is None else state_out[0]
        else:
            listed = [episode.slot for episode in episodes]
            if None in listed:  # some ended while their actions were chosen (the client left)
                if keep := [row for row, slot in enumerate(listed) if slot is not None]:
                    masks = None if masks is None else masks[keep]
                    states = None if state_out is None else state_out[keep]
                    self._record(client, [episodes[r] for r in keep], obs[keep], actions[keep], logp[keep], version, masks, states)
                return
            slots = np.array(listed)
        steps = episodes[0].steps
        due = steps.observe(slots, obs, self.settings.env_steps_per_sample, version)
        chunks = [(episodes[row], steps.take_chunk(episodes[row].slot)) for row in due]
        steps.act(slots, actions, logp, version, masks, state_out)
        for episode, data in chunks:  # last: the table has its steps, whatever happens here
            self._send(client, episode, data)

    def _end(self, client: ClientInfo, episode_id: str, terminated: bool, truncated: bool, how: str) -> None:
        episode = self._episodes[client.id].pop(episode_id)
        self._send(client, episode, episode.steps.close(episode.slot), terminated, truncated)
        episode.slot = None
        self.metrics.open_episodes -= 1
        self.metrics.episodes_ended[how] += 1

    def _send(
        self, client: ClientInfo, episode: ServedEpisode, data: dict | None, terminated: bool = False, truncated: bool = False
    ) -> None:
        """An episode's complete steps (StepTable's chunk), to training if it trains (or
        evaluates: then the training service records its return and trains on none of it)."""
        if data is None or not (episode.training_enabled or episode.evaluation):
            return
        data.update(
            is_terminated=terminated, is_truncated=truncated, episode_id=episode.episode_id, module_id=episode.module.module_id,
            evaluation=episode.evaluation,
        )
        if episode.agent_id is not None:
            data["agent_id"] = episode.agent_id
        try:
            chunk = EpisodeChunk.model_validate(data, context={"policies": self.policies})
        except ValueError as exc:  # requests are checked so that this never happens: a bug of ours
            log.error("thin-client episode %r: a chunk of %d steps is invalid, not trained on: %s",
                      episode.episode_id, len(data["actions"]), exc)
            return
        self.training.ingest(client, [chunk], sampling=False)

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


def step_table(module: Module, rng: np.random.Generator) -> StepTable:
    """A table for a module's thin-client episodes: with its recurrent state, and its pink noise
    processes where its clients explore so (SET_CONFIG's action_noise)."""
    space = module.action_space
    pink_dim = int(np.prod(space.shape)) if module.action_noise == "pink" and isinstance(space, BoxSpace) else 0
    return StepTable(module.state_size, pink_dim, rng)
