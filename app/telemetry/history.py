"""The run's metrics over time, for a dashboard opened at any moment (GET /api/metrics/history).

A snapshot of /api/metrics is kept at every training step (and at start-up). Memory is
bounded: when `max_points` are kept, every other one is dropped and from then on only
every other new one is kept, so the history always spans the whole run, at a resolution
that halves each time it fills (as TensorBoard's reservoir keeps a run's span).
"""

from __future__ import annotations

from typing import Any

MAX_POINTS = 2000  # /api/metrics snapshots are 1-5 kB of JSON: a few MB at most


class MetricsHistory:
    """Snapshots in order, thinned to at most `max_points`."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points
        self.stride = 1  # keep one of every `stride` snapshots offered
        self._points: list[dict[str, Any]] = []
        self._offered = 0

    def record(self, snapshot: dict[str, Any]) -> None:
        """Keep `snapshot` if it falls on the stride; thin out when full."""
        self._offered += 1
        if (self._offered - 1) % self.stride:
            return
        self._points.append(snapshot)
        if len(self._points) >= self.max_points:
            self._points = self._points[::2]
            self.stride *= 2

    @property
    def points(self) -> list[dict[str, Any]]:
        return list(self._points)
