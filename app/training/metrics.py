"""What the learner has seen and done: lifetime counters, a window of whole-episode
returns and lengths, the latest learner stats and the steps dropped, by reason; the
same per module, and returns per agent.

Chunks are joined into trajectories per client and agent: by `episode_id` when the
client sends one, else in order (a chunk that is not done continues in the client's
next chunk of that agent). In a multi-agent episode each agent's trajectory counts as
one episode of its module: `episode_return_mean` is the mean return of one agent.
A game (chunks with an `outcome`) counts once per module: when the same module played
two seats of one game (a shared policy against itself), the game counts in
`against_itself`, not as a win and a loss, and not in `win_rate`.
Evaluation episodes (chunks with `evaluation`) are counted apart: their steps are never
sampled for training, their returns go to `evaluation_return_mean` only.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import or_
from typing import Any

from app.experience import ChunkBlock
from app.settings.hyperparameters import DEFAULT_MODULE_ID

MAX_OPEN_EPISODES = 10_000  # unfinished episodes remembered; beyond, the least recently seen are forgotten (down to 90%)
MAX_AGENTS = 1_000  # agent ids whose returns are kept; the least recently seen are forgotten beyond
MAX_GAMES = 10_000  # games whose first reported outcome is remembered per module, to spot a module playing itself
OUTCOMES = ("win", "loss", "draw")
RATE_WINDOW_S = 10.0  # env_steps_per_s averages over this many recent seconds

EpisodeListener = Callable[[str, float, int], None]  # (module_id, return, length) of a training episode that ended
EvaluationListener = Callable[[str, int | None, float], None]  # (module_id, its last chunk's version, return) of an evaluation episode


@dataclass(slots=True)
class _OpenEpisode:
    episode_return: float = 0.0
    length: int = 0
    seen: int = 0  # the number of the last block that continued it (TrainingMetrics._blocks_seen)


def _window_stats(returns: deque[float], lengths: deque[int] | None = None) -> dict[str, Any]:
    """Mean, min and max of the episode window (None while it is empty)."""
    stats: dict[str, Any] = {
        "episodes_in_window": len(returns),
        "episode_return_mean": sum(returns) / len(returns) if returns else None,
        "episode_return_min": min(returns) if returns else None,
        "episode_return_max": max(returns) if returns else None,
    }
    if lengths is not None:
        stats["episode_len_mean"] = sum(lengths) / len(lengths) if lengths else None
        stats["episode_len_min"] = min(lengths) if lengths else None
        stats["episode_len_max"] = max(lengths) if lengths else None
    return stats


def _evaluation_stats(counts: ModuleMetrics | TrainingMetrics) -> dict[str, Any]:
    """The evaluation episodes' counters and the mean return of the window (None before any)."""
    returns = counts.evaluation_returns
    return {
        "num_env_steps_evaluated_lifetime": counts.num_env_steps_evaluated_lifetime,
        "num_evaluation_episodes_lifetime": counts.num_evaluation_episodes_lifetime,
        "evaluation_episodes_in_window": len(returns),
        "evaluation_return_mean": sum(returns) / len(returns) if returns else None,
    }


class ModuleMetrics:
    """What one module has seen and done."""

    def __init__(self, window: int) -> None:
        self.num_env_steps_sampled_lifetime = 0
        self.num_env_steps_trained_lifetime = 0
        self.num_episodes_lifetime = 0
        self.weights_seq_no = 0  # the gateway version in which its weights last changed
        self.last_batch_env_steps: int | None = None
        self.max_batch_env_steps = 0
        self.learner_stats: dict[str, float] = {}
        self.episode_returns: deque[float] = deque(maxlen=window)
        self.episode_lengths: deque[int] = deque(maxlen=window)
        self.outcomes: Counter[str] = Counter()  # games reported won, lost, drawn (lifetime)
        self.recent_outcomes: deque[str] = deque(maxlen=window)
        self.games_against_itself = 0
        self._games: OrderedDict[tuple[int, str], str] = OrderedDict()  # (client, episode) -> the first seat's outcome
        self.num_env_steps_evaluated_lifetime = 0
        self.num_evaluation_episodes_lifetime = 0
        self.evaluation_returns: deque[float] = deque(maxlen=window)

    @property
    def received_any(self) -> bool:
        """Whether experience of this module ever arrived (training or evaluation)."""
        return self.num_env_steps_sampled_lifetime > 0 or self.num_env_steps_evaluated_lifetime > 0

    def restart_window(self) -> None:
        """Empty the return window: its episodes were played by weights the module no longer has
        (a population's member that copied another)."""
        self.episode_returns.clear()
        self.episode_lengths.clear()

    def window_return(self, min_episodes: int) -> float | None:
        """The mean return of the window, if it holds at least `min_episodes` episodes."""
        returns = self.episode_returns
        return sum(returns) / len(returns) if len(returns) >= min_episodes else None

    def record_game(self, client_id: int, episode_id: str | None, outcome: str) -> None:
        """One seat's outcome; a second seat of the same game makes it a game against itself."""
        first = None if episode_id is None else self._games.pop((client_id, episode_id), None)
        if first is not None:  # it played both seats: take back the first seat's outcome
            self.outcomes[first] -= 1
            if first in self.recent_outcomes:  # else it has left the window already
                self.recent_outcomes.remove(first)
            self.games_against_itself += 1
            return
        self.outcomes[outcome] += 1
        self.recent_outcomes.append(outcome)
        if episode_id is not None:
            self._games[(client_id, episode_id)] = outcome
            if len(self._games) > MAX_GAMES:
                self._games.popitem(last=False)

    def snapshot(self) -> dict[str, Any]:
        recent = self.recent_outcomes
        return {
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
            "num_env_steps_trained_lifetime": self.num_env_steps_trained_lifetime,
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "weights_seq_no": self.weights_seq_no,
            "last_batch_env_steps": self.last_batch_env_steps,
            "max_batch_env_steps": self.max_batch_env_steps,
            **_window_stats(self.episode_returns, self.episode_lengths),
            "learner": dict(self.learner_stats),
            "games": {**{outcome: self.outcomes[outcome] for outcome in OUTCOMES}, "against_itself": self.games_against_itself},
            "win_rate": recent.count("win") / len(recent) if recent else None,
            **_evaluation_stats(self),
        }


class TrainingMetrics:
    """Counters and episode statistics of one TrainingService, in total and per module."""

    def __init__(self, module_ids: list[str] | None = None, window: int = 100) -> None:
        self.window = window
        self.modules = {module_id: ModuleMetrics(window) for module_id in module_ids or [DEFAULT_MODULE_ID]}
        self.default_module_id = next(iter(self.modules))
        self.agent_returns: OrderedDict[str, deque[float]] = OrderedDict()
        self.num_env_steps_sampled_lifetime = 0
        self.num_env_steps_trained_lifetime = 0
        self.num_episodes_lifetime = 0
        self.num_training_steps = 0
        self.weights_seq_no = 0
        self.dropped_env_steps: Counter[str] = Counter()
        self.learner_stats: dict[str, float] = {}
        self.last_training_step_s: float | None = None
        self.episode_returns: deque[float] = deque(maxlen=window)
        self.episode_lengths: deque[int] = deque(maxlen=window)
        self.num_env_steps_evaluated_lifetime = 0
        self.num_evaluation_episodes_lifetime = 0
        self.evaluation_returns: deque[float] = deque(maxlen=window)
        self.episode_listeners: list[EpisodeListener] = []
        self.evaluation_listeners: list[EvaluationListener] = []
        self._open: defaultdict[tuple[object, ...], _OpenEpisode] = defaultdict(_OpenEpisode)
        self._blocks_seen = 0
        self._created = time.monotonic()
        self._arrivals: deque[tuple[float, int]] = deque()  # (monotonic time, env steps) in the rate window

    def add_episode_listener(self, listener: EpisodeListener) -> None:
        """Call `listener` with each training episode that ends (not evaluation ones)."""
        self.episode_listeners.append(listener)

    def add_evaluation_listener(self, listener: EvaluationListener) -> None:
        """Call `listener` with each evaluation episode that ends: its module, the version of
        its last chunk (None where the chunk had none) and its return."""
        self.evaluation_listeners.append(listener)

    def continues_episode(self, client_id: int, block: ChunkBlock, index: int) -> bool:
        """Whether chunk `index` of the block goes on with an episode this client has sent steps of."""
        key = (client_id, block.episode_id[index], block.agent_id[index], block.evaluation[index])
        return key in self._open

    def record_chunks(self, client_id: int, block: ChunkBlock) -> None:
        """Count the chunks' steps and add each to its agent's episode; a done chunk ends it.
        Evaluation chunks count apart, their episodes' returns too."""
        module = self.modules[block.module_id]
        evaluated = block.evaluation_steps
        sampled = block.num_steps - evaluated
        for counts in (self, module):
            counts.num_env_steps_sampled_lifetime += sampled
            counts.num_env_steps_evaluated_lifetime += evaluated
        if sampled:
            self._arrivals.append((time.monotonic(), sampled))
        self._blocks_seen += 1
        seen = self._blocks_seen
        open_episodes = self._open
        keys = zip(repeat(client_id), block.episode_id, block.agent_id, block.evaluation)
        ends = map(or_, block.is_terminated, block.is_truncated)
        for index, (key, chunk_return, length, ended) in enumerate(zip(keys, block.chunk_returns(), block.lengths, ends)):
            episode = open_episodes[key]  # a new one if none is open
            episode.episode_return += chunk_return
            episode.length += length
            episode.seen = seen
            if not ended:
                continue
            del open_episodes[key]
            if key[3]:  # an evaluation episode
                for counts in (self, module):
                    counts.num_evaluation_episodes_lifetime += 1
                    counts.evaluation_returns.append(episode.episode_return)
                for evaluated in self.evaluation_listeners:
                    evaluated(block.module_id, block.weights_seq_no[index], episode.episode_return)
            else:
                self._end_episode(client_id, block, index, episode, module)
        if len(open_episodes) > MAX_OPEN_EPISODES:
            self._forget_open_episodes()

    def _forget_open_episodes(self) -> None:
        """Forget the least recently continued unfinished episodes, down to 90% of the
        limit: a sort per thousand new episodes, not a move per chunk to keep them in order."""
        by_seen = sorted(self._open.items(), key=lambda item: item[1].seen)
        for key, _ in by_seen[: len(by_seen) - MAX_OPEN_EPISODES * 9 // 10]:
            del self._open[key]

    def _end_episode(self, client_id: int, block: ChunkBlock, index: int, episode: _OpenEpisode, module: ModuleMetrics) -> None:
        """A training episode ended with the block's chunk `index`."""
        for counts in (self, module):
            counts.num_episodes_lifetime += 1
            counts.episode_returns.append(episode.episode_return)
            counts.episode_lengths.append(episode.length)
        for listener in self.episode_listeners:
            listener(block.module_id, episode.episode_return, episode.length)
        if (outcome := block.outcome[index]) is not None:
            module.record_game(client_id, block.episode_id[index], outcome)
        if (agent_id := block.agent_id[index]) is not None:
            self._record_agent_return(agent_id, episode.episode_return)

    def _record_agent_return(self, agent_id: str, episode_return: float) -> None:
        returns = self.agent_returns.pop(agent_id, None) or deque(maxlen=self.window)
        returns.append(episode_return)
        self.agent_returns[agent_id] = returns  # most recently seen last
        if len(self.agent_returns) > MAX_AGENTS:
            self.agent_returns.popitem(last=False)

    def __getstate__(self) -> dict[str, Any]:
        """A copy sent to another process (a front-end's mirror on Ray) keeps the rate
        measured when it was taken: monotonic clocks do not travel between hosts; and it calls
        no one back (no listeners)."""
        return {**self.__dict__, "episode_listeners": [], "evaluation_listeners": [], "_frozen_rate": self.env_steps_per_s()}

    def env_steps_per_s(self) -> float:
        """Env steps received per second over the last RATE_WINDOW_S seconds."""
        if (frozen := self.__dict__.get("_frozen_rate")) is not None:
            return frozen
        now = time.monotonic()
        while self._arrivals and self._arrivals[0][0] < now - RATE_WINDOW_S:
            self._arrivals.popleft()
        seconds = max(min(RATE_WINDOW_S, now - self._created), 1e-3)
        return sum(steps for _, steps in self._arrivals) / seconds

    def forget_client(self, client_id: int) -> None:
        """Drop the unfinished episodes of a client that has gone."""
        for key in [key for key in self._open if key[0] == client_id]:
            del self._open[key]

    def record_training_step(
        self, weights_seq_no: int, trained: dict[str, tuple[int, dict[str, float]]], seconds: float
    ) -> None:
        """One training step: `trained` gives each module trained its env steps and learner stats."""
        self.num_training_steps += 1
        self.weights_seq_no = weights_seq_no
        self.last_training_step_s = seconds
        for module_id, (env_steps, stats) in trained.items():
            module = self.modules[module_id]
            module.num_env_steps_trained_lifetime += env_steps
            module.last_batch_env_steps = env_steps
            module.max_batch_env_steps = max(module.max_batch_env_steps, env_steps)
            module.weights_seq_no = weights_seq_no
            module.learner_stats = dict(stats)
            self.num_env_steps_trained_lifetime += env_steps
        if self.default_module_id in trained:
            self.learner_stats = dict(self.modules[self.default_module_id].learner_stats)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy of everything, with mean/min/max over the episode window."""
        return {
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
            "num_env_steps_trained_lifetime": self.num_env_steps_trained_lifetime,
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "num_training_steps": self.num_training_steps,
            "weights_seq_no": self.weights_seq_no,
            **_window_stats(self.episode_returns, self.episode_lengths),
            **_evaluation_stats(self),
            "learner": dict(self.learner_stats),
            "last_training_step_s": self.last_training_step_s,
            "dropped_env_steps": dict(self.dropped_env_steps),
            "policies": {module_id: module.snapshot() for module_id, module in self.modules.items()},
            "agents": {agent_id: _window_stats(returns) for agent_id, returns in self.agent_returns.items()},
        }
