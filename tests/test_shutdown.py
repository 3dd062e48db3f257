"""Stopping a gateway that is training: Ctrl-C says what it waits for; a second one stops at once.

A real `python -m app` process gets a real SIGINT while a deliberately long training step
runs (wide layers, many epochs, one 6,000-step batch).
"""

from __future__ import annotations

import signal
import socket

import httpx

from .gateway_process import gateway_process
from .helpers import chunk, frame, wait_until


def _flags(epochs: int) -> tuple[str, ...]:
    """A 6,000-step batch through wide layers: `epochs` passes make the step as long as needed."""
    return (
        "--train-batch-size", "6000", "--ppo.update-epochs", str(epochs), "--ppo.hidden-sizes", "[512, 512]",
        "--decode-workers", "0", "--learner-threads", "1",
    )


LONG_STEP = _flags(100)


def _start_a_long_training_step(gateway) -> None:
    """One 6,000-step EPISODES: the batch is full, the step starts at once."""
    with socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=30) as sock:
        sock.sendall(frame({"type": "EPISODES", "episodes": [chunk(2000, seed=i) for i in range(3)]}))
    wait_until(
        lambda: httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).json()["training_in_progress"],
        timeout_s=60, what="the training step to start",
    )


def test_ctrl_c_says_it_waits_for_the_training_step_then_saves_and_exits_0(tmp_path):
    log = tmp_path / "gateway.log"
    with gateway_process(tmp_path / "checkpoints", log, *_flags(10)) as gateway:
        _start_a_long_training_step(gateway)
        gateway.proc.send_signal(signal.SIGINT)
        assert gateway.proc.wait(timeout=240) == 0, gateway.log_tail()
    text = log.read_text()
    assert "stopping: the training step under way finishes, then everything is saved (Ctrl-C again stops at once)" in text
    assert "stopping: waiting for the training step under way (6000 env steps" in text, text[-3000:]
    assert "weights_seq_no 1: 6000 steps" in text and "checkpoints saved in" in text and "(weights_seq_no 1)" in text


def test_a_second_ctrl_c_stops_at_once_and_the_checkpoint_on_disk_still_loads(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    with gateway_process(checkpoints, tmp_path / "first.log", *_flags(1)) as gateway:  # a short step: version 1 saved
        _start_a_long_training_step(gateway)
        gateway.proc.send_signal(signal.SIGINT)
        assert gateway.proc.wait(timeout=240) == 0, gateway.log_tail()
    cut_log = tmp_path / "cut.log"
    with gateway_process(checkpoints, cut_log, *LONG_STEP) as gateway:
        _start_a_long_training_step(gateway)
        gateway.proc.send_signal(signal.SIGINT)
        wait_until(lambda: "stopping: waiting for the training step" in cut_log.read_text(), timeout_s=60,
                   what="the first Ctrl-C's message")
        gateway.proc.send_signal(signal.SIGINT)
        assert gateway.proc.wait(timeout=30) == 130, gateway.log_tail()
        assert "SIGINT again: stopping at once, without saving" in cut_log.read_text()
        assert "checkpoints saved in" not in cut_log.read_text()
    last_log = tmp_path / "last.log"
    with gateway_process(checkpoints, last_log, *LONG_STEP) as gateway:
        assert httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).json()["weights_seq_no"] == 1
    assert "restored default_policy at weights_seq_no 1" in last_log.read_text(), last_log.read_text()[-3000:]
