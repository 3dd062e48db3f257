"""The run's metrics as TensorBoard event files (--tensorboard-dir; with --run-id, the run's).

At every training step, one event holds a scalar per module (returns, lengths, the
learner's losses, entropy, KL, ...), a few of the gateway's and each curriculum's lesson
index (`curriculum/<param>`), all at the same x: the
env steps trained, counted on from the largest step already in the directory: a resumed
run (whose counters start at 0 again), a front-end restarted on Ray (the learner's counters
go on) and a learner restarted on Ray (they start at 0 again) all continue the charts.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from tensorboardX import SummaryWriter
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.record_writer import masked_crc32c

log = logging.getLogger("app.tensorboard")

MODULE_STATS = ("episode_return_mean", "episode_len_mean", "evaluation_return_mean", "win_rate", "elo")
GATEWAY_STATS = ("env_steps_per_s", "weights_seq_no", "last_training_step_s")
FLUSH_SECS = 10  # the writer's thread flushes this often: a killed gateway loses at most this much
MAX_QUEUE = 1000  # events waiting for the writer's thread; one per training step, so record never blocks


class TensorBoardLog:
    """Scalars of /api/metrics snapshots, written to event files in `directory`."""

    def __init__(self, directory: Path, trained_now: int = 0) -> None:
        """`trained_now`: the env steps trained the gateway counts at this moment."""
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.last_step = max((event.step for event in _events_in(directory) if event.summary.value), default=0)
        self._base = (self.last_step, trained_now)  # (step, env steps trained) that later steps count from
        self._trained = trained_now
        # A suffix that sorts, so two writers opened within one second neither share a file nor lose their order.
        self._writer = SummaryWriter(
            str(directory), max_queue=MAX_QUEUE, flush_secs=FLUSH_SECS, filename_suffix=f".{time.time_ns()}"
        )
        self._closed = False
        if self.last_step:
            log.info("TensorBoard event files in %s, continuing from step %d", directory, self.last_step)
        else:
            log.info("TensorBoard event files in %s", directory)

    def record(self, snapshot: dict[str, Any]) -> None:
        """Queue one event of the snapshot's scalars (None ones skipped) at the env steps
        trained; cheap enough for the event loop (the writer's thread writes it)."""
        if self._closed:
            return
        values = [
            Summary.Value(tag=f"{module_id}/{name}", simple_value=value)
            for module_id, module in snapshot["policies"].items()
            for name, value in [*((name, module.get(name)) for name in MODULE_STATS), *module["learner"].items()]
            if value is not None
        ]
        values += [
            Summary.Value(tag=f"gateway/{name}", simple_value=snapshot[name])
            for name in GATEWAY_STATS
            if snapshot.get(name) is not None
        ]
        values += [
            Summary.Value(tag=f"curriculum/{param}", simple_value=status["lesson"])
            for param, status in snapshot.get("curriculum", {}).items()
        ]
        trained = snapshot["num_env_steps_trained_lifetime"]
        if trained < self._trained:  # the counters started again (a learner restarted on Ray)
            self._base = (self.last_step, 0)
        self._trained = trained
        step = self.last_step = self._base[0] + trained - self._base[1]
        self._writer.file_writer.add_summary(Summary(value=values), step)

    def close(self) -> None:
        """Write what is queued and close the file (again: nothing)."""
        if not self._closed:
            self._closed = True
            self._writer.close()


def read_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the directory's event files: tag -> [(step, value), ...] in the
    order written (files by name, which starts with their creation time)."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for event in _events_in(directory):
        for value in event.summary.value:
            if value.WhichOneof("value") == "simple_value":
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def _events_in(directory: Path) -> Iterator[Event]:
    for path in sorted(directory.glob("*tfevents*")):
        if path.is_file():
            yield from _events(path.read_bytes())


def _events(data: bytes) -> Iterator[Event]:
    """The events of one file's TFRecords: u64 length, u32 masked CRC of the length, the
    data, u32 masked CRC of the data (not checked: the reader would cost as much as the
    writer). Stops at a truncated or garbled record (a gateway killed while writing)."""
    position = 0
    while position + 12 <= len(data):
        header = data[position : position + 8]
        (length,) = struct.unpack("<Q", header)
        if struct.unpack("<I", data[position + 8 : position + 12])[0] != masked_crc32c(header):
            return
        start, position = position + 12, position + 12 + length + 4
        if position > len(data):
            return
        event = Event()
        try:
            event.ParseFromString(data[start : start + length])
        except DecodeError:
            return
        yield event
