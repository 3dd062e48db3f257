"""What the learner has seen and done: lifetime counters, a window of whole-episode
returns and lengths, the latest learner stats and the steps dropped, by reason.

Chunks are joined into episodes per client: by `episode_id` when the client sends
one, else in order (a chunk that is not done continues in the client's next chunk).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from app.schemas import EpisodeChunk

MAX_OPEN_EPISODES = 10_000  # unfinished episodes remembered; the oldest are forgotten beyond
RATE_WINDOW_S = 10.0  # env_steps_per_s averages over this many recent seconds


@dataclass
class _OpenEpisode:
    episode_return: float = 0.0
    length: int = 0


class TrainingMetrics:
    """Counters and episode statistics of one TrainingService."""

    def __init__(self, window: int = 100) -> None:
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
        self._open: dict[tuple[int, str | None], _OpenEpisode] = {}
        self._created = time.monotonic()
        self._arrivals: deque[tuple[float, int]] = deque()  # (monotonic time, env steps) in the rate window

    def record_chunk(self, client_id: int, chunk: EpisodeChunk) -> None:
        """Count the chunk's steps and add them to its episode; a done chunk ends it."""
        self.num_env_steps_sampled_lifetime += chunk.num_steps
        self._arrivals.append((time.monotonic(), chunk.num_steps))
        key = (client_id, chunk.episode_id)
        episode = self._open.pop(key, None) or _OpenEpisode()
        episode.episode_return += float(chunk.rewards.sum())
        episode.length += chunk.num_steps
        if chunk.is_terminated or chunk.is_truncated:
            self.num_episodes_lifetime += 1
            self.episode_returns.append(episode.episode_return)
            self.episode_lengths.append(episode.length)
            return
        self._open[key] = episode  # re-inserted last: dicts keep insertion order
        if len(self._open) > MAX_OPEN_EPISODES:
            del self._open[next(iter(self._open))]

    def env_steps_per_s(self) -> float:
        """Env steps received per second over the last RATE_WINDOW_S seconds."""
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
        self, weights_seq_no: int, env_steps: int, stats: dict[str, float], seconds: float
    ) -> None:
        self.num_training_steps += 1
        self.num_env_steps_trained_lifetime += env_steps
        self.weights_seq_no = weights_seq_no
        self.learner_stats = dict(stats)
        self.last_training_step_s = seconds

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy of everything, with mean/min/max over the episode window."""
        returns, lengths = list(self.episode_returns), list(self.episode_lengths)
        return {
            "num_env_steps_sampled_lifetime": self.num_env_steps_sampled_lifetime,
            "num_env_steps_trained_lifetime": self.num_env_steps_trained_lifetime,
            "num_episodes_lifetime": self.num_episodes_lifetime,
            "num_training_steps": self.num_training_steps,
            "weights_seq_no": self.weights_seq_no,
            "episodes_in_window": len(returns),
            "episode_return_mean": sum(returns) / len(returns) if returns else None,
            "episode_return_min": min(returns) if returns else None,
            "episode_return_max": max(returns) if returns else None,
            "episode_len_mean": sum(lengths) / len(lengths) if lengths else None,
            "episode_len_min": min(lengths) if lengths else None,
            "episode_len_max": max(lengths) if lengths else None,
            "learner": dict(self.learner_stats),
            "last_training_step_s": self.last_training_step_s,
            "dropped_env_steps": dict(self.dropped_env_steps),
        }
