"""Runs by id and settings from a YAML file, as a user starts them.

- `--config run.yaml` sets what the flags set; RLLINK_ variables and flags override it;
  an unknown name in it is a clear one-line error, not a silent default.
- `--run-id` keeps a run's checkpoints and settings snapshot (no secrets) in
  runs/<id>/; the same id again is refused unless `--resume`, which continues the run
  at its version.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.gateway import Gateway, StartupError
from app.settings.config import Settings
from app.startup.cli import parse_command_line

from .helpers import TcpPeer, chunk, frame, running_gateway

ROOT = Path(__file__).resolve().parent.parent


def test_a_config_file_sets_what_flags_set_and_variables_and_flags_override_it(tmp_path, monkeypatch):
    config = tmp_path / "run.yaml"
    config.write_text(
        "env_steps_per_sample: 300\ntrain_batch_size: 999\nppo:\n  learning_rate: 0.001\n  gamma: 0.95\n"
        "action_space: {type: box, shape: [1], low: -2, high: 2}\n"
    )
    monkeypatch.setenv("RLLINK_TRAIN_BATCH_SIZE", "1234")
    settings = parse_command_line(["--config", str(config), "--ppo.gamma", "0.9"])
    assert settings.env_steps_per_sample == 300  # from the file
    assert settings.train_batch_size == 1234  # the variable beats the file
    assert (settings.ppo.learning_rate, settings.ppo.gamma) == (0.001, 0.9)  # the flag beats the file, key by key
    assert settings.action_space.high == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("ppo:\n  lerning_rate: 0.1\n", "unknown settings ppo.lerning_rate"),
        ("http_prot: 1\n", "unknown settings http_prot"),
        ("- a list\n", "must be a mapping"),
        ("ppo: [unclosed\n", "--config"),
        ("train_batch_size: -5\n", "train_batch_size"),
    ],
)
def test_a_bad_config_file_stops_the_gateway_with_one_clear_line(tmp_path, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "app", "--config", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def run_settings(tmp_path: Path, **overrides) -> Settings:
    return Settings(http_port=0, tcp_port=0, run_id="cartpole-1", runs_dir=tmp_path / "runs", **overrides)


def train_once(settings: Settings) -> int:
    """One training step through a real gateway; the version it made."""
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "PING", "token": "s3cret"}))
        assert peer.receive()["type"] == "PONG"
        peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(20, seed=1)]}))
        return peer.receive()["weights_seq_no"]


def test_a_run_keeps_its_checkpoints_and_settings_and_is_resumed_only_when_asked(tmp_path):
    settings = run_settings(tmp_path, auth_token="s3cret", env_steps_per_sample=321)
    assert train_once(settings) == 1
    run_dir = tmp_path / "runs" / "cartpole-1"
    snapshot = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert snapshot["run_id"] == "cartpole-1" and snapshot["env_steps_per_sample"] == 321
    assert "auth_token" not in snapshot and "s3cret" not in (run_dir / "config.yaml").read_text()
    assert (run_dir / "checkpoints" / "default_policy" / "policy.pt").is_file()

    with pytest.raises(StartupError, match="run 'cartpole-1' exists .*--resume"):
        asyncio.run(Gateway(run_settings(tmp_path, auth_token="s3cret")).start())

    assert train_once(run_settings(tmp_path, auth_token="s3cret", resume=True)) == 2  # it went on from version 1
