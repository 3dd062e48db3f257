"""What server-side inference has done: actions served, forward passes, latency, episodes."""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

RATE_WINDOW_S = 10  # actions_per_s averages over this many recent seconds
LATENCY_WINDOW = 10_000  # latencies kept for the percentiles (the most recent)
BATCH_WINDOW = 1_000  # forward passes kept for the mean batch size


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class ServingMetrics:
    """Counters and recent windows of the thin-client service."""

    def __init__(self) -> None:
        self.actions_served_total = 0
        self.actions_logged_total = 0
        self.forward_passes_total = 0
        self.episodes_started_total = 0
        self.episodes_ended: Counter[str] = Counter()  # by how: terminated, truncated, timeout, disconnect
        self.open_episodes = 0
        self._created = time.monotonic()
        # Actions per whole monotonic second, the last RATE_WINDOW_S of them: bounded, and one
        # addition per request (a record per request grew by ~100 bytes each until read).
        self._served: deque[list[int]] = deque()  # [second, actions]
        self._latencies_s: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._batch_sizes: deque[int] = deque(maxlen=BATCH_WINDOW)

    def record_pass(self, observations: int) -> None:
        self.forward_passes_total += 1
        self._batch_sizes.append(observations)

    def record_served(self, actions: int, latency_s: float) -> None:
        """A GET_ACTION answered: its actions, and the time from reading it to its reply."""
        self.actions_served_total += actions
        second = int(time.monotonic())
        if self._served and self._served[-1][0] == second:
            self._served[-1][1] += actions
        else:
            self._served.append([second, actions])
            self._forget_before(second)
        self._latencies_s.append(latency_s)

    def actions_per_s(self) -> float:
        now = time.monotonic()
        self._forget_before(int(now))
        window_start = int(now) - RATE_WINDOW_S + 1  # the oldest second kept
        seconds = max(now - max(window_start, self._created), 1e-3)
        return sum(actions for _, actions in self._served) / seconds

    def _forget_before(self, second: int) -> None:
        """Drop the seconds that have left the rate window (the current one stays)."""
        while self._served and self._served[0][0] <= second - RATE_WINDOW_S:
            self._served.popleft()

    def snapshot(self) -> dict[str, Any]:
        latencies = sorted(self._latencies_s)
        batches = self._batch_sizes
        p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
        return {
            "actions_served_total": self.actions_served_total,
            "actions_logged_total": self.actions_logged_total,
            "actions_per_s": self.actions_per_s(),
            "forward_passes_total": self.forward_passes_total,
            "inference_batch_size_mean": sum(batches) / len(batches) if batches else None,
            "action_latency_p50_ms": None if p50 is None else 1000 * p50,
            "action_latency_p99_ms": None if p99 is None else 1000 * p99,
            "open_episodes": self.open_episodes,
            "episodes_started_total": self.episodes_started_total,
            "episodes_ended": dict(self.episodes_ended),
        }
