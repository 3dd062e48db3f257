"""MetricsHistory keeps the whole run in bounded memory: thinned to every other point
each time it fills, never losing the run's start, and keeping up with its end."""

from __future__ import annotations

from app.telemetry.history import MetricsHistory


def test_it_keeps_every_point_until_full_then_thins_to_span_the_whole_run():
    history = MetricsHistory(max_points=8)
    for step in range(1, 8):
        history.record({"num_training_steps": step})
    assert [p["num_training_steps"] for p in history.points] == list(range(1, 8)) and history.stride == 1

    for step in range(8, 101):
        history.record({"num_training_steps": step})
    steps = [p["num_training_steps"] for p in history.points]
    assert len(steps) < 8 and steps[0] == 1 and steps == sorted(steps)
    assert 100 - steps[-1] < history.stride  # the newest kept is at most one stride behind
    assert all(b - a == history.stride for a, b in zip(steps, steps[1:]))  # evenly spaced over the run
