"""The thin-client service's metrics: bounded however long nobody reads them."""

import tracemalloc

from app.serving.metrics import ServingMetrics


def test_counting_actions_served_takes_no_memory_per_request():
    # A gateway nobody scrapes serves for days: its rate window must not keep a record per
    # request (it did, ~100 bytes each, until /api/metrics or /metrics trimmed it).
    metrics = ServingMetrics()
    for _ in range(10_000):  # the latency window's size: it is full from here on
        metrics.record_served(1, 0.001)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200_000):
            metrics.record_served(1, 0.001)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 50_000, f"200,000 actions served grew the metrics by {grown:,} bytes"
    snapshot = metrics.snapshot()
    assert snapshot["actions_served_total"] == 210_000
    assert snapshot["actions_per_s"] > 0
