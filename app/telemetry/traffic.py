"""Counters of what crossed the wire, kept by the transports for metrics."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class TrafficStats:
    """Frames by message type, errors by code, bytes, connections by transport."""

    frames_received: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    bytes_received: int = 0
    bytes_sent: int = 0
    connections_total: Counter[str] = field(default_factory=Counter)
    started_at: float = field(default_factory=time.monotonic)
