"""Runs by id (as ML-Agents' results/<run-id>): a folder per run holding its checkpoints
and a snapshot of the settings it ran with; a run is resumed by its id, never by accident."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from app.settings.config import Settings

log = logging.getLogger("app")

SNAPSHOT_FILE = "config.yaml"
SECRET_SETTINGS = {"auth_token"}  # never written to disk by the gateway
GAMES_DIR = "games"  # the output of the games the gateway launched, <index>.log each


class RunExists(ValueError):
    """A new run was asked for under the id of an existing one."""


def prepare_run(settings: Settings) -> None:
    """Create the run's folder and write its settings snapshot; refuse to start a new run
    over an existing one (`resume` continues it). Nothing happens without a run id."""
    run_dir = settings.run_dir
    if run_dir is None:
        return
    existing = (run_dir / SNAPSHOT_FILE).exists()
    if existing and not settings.resume:
        raise RunExists(
            f"run {settings.run_id!r} exists in {run_dir.resolve()}: start it with --resume to continue it, "
            "or give another --run-id"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    snapshot = settings.model_dump(mode="json", exclude=SECRET_SETTINGS | {"config", "resume"})
    (run_dir / SNAPSHOT_FILE).write_text(yaml.safe_dump(snapshot, sort_keys=False))
    log.info("run %s: %s in %s", settings.run_id, "resumed" if existing else "started", run_dir.resolve())


def games_dir(settings: Settings) -> Path:
    """Where the games the gateway launches write their output: the run's `games/`, or
    without a run id `games/` beside the checkpoint folder (as the models' default)."""
    run_dir = settings.run_dir
    return (run_dir if run_dir is not None else settings.checkpoint_dir.parent) / GAMES_DIR
