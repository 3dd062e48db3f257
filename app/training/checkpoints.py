"""Save and restore the learner (policy, optimizer, weights_seq_no) in one file.

Writes go to a temporary file that replaces the old checkpoint atomically, so a crash
never leaves half a checkpoint (a temporary file it leaves behind is removed at the next
load). A checkpoint made for other spaces or layer sizes is refused with an error that
says what differs.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

import torch

from app.training.policy import ActorCritic

CHECKPOINT_FILE = "policy.pt"
TEMPORARY_FILES = CHECKPOINT_FILE + "*.tmp"  # save_checkpoint's, until it replaces the checkpoint
ORPHAN_AGE_S = 60.0  # a save takes milliseconds: a temporary file this old was left by a crash

log = logging.getLogger("app.training.checkpoints")


class CheckpointMismatch(ValueError):
    """The checkpoint on disk was made for a different policy shape than configured."""


def _architecture(policy: ActorCritic) -> dict[str, object]:
    """What a checkpoint must agree on to be loaded into `policy`."""
    return {
        "observation_space": policy.observation_space.model_dump(mode="json"),
        "action_space": policy.action_space.model_dump(mode="json"),
        "hidden_sizes": list(policy.hidden_sizes),
    }


def save_checkpoint(
    directory: Path, policy: ActorCritic, optimizer: torch.optim.Optimizer, weights_seq_no: int
) -> Path:
    """Write the checkpoint atomically; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT_FILE
    data = {
        "weights_seq_no": weights_seq_no,
        "architecture": _architecture(policy),
        "policy": policy.state_dict(),
        "optimizer": optimizer.state_dict(),
    }
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=CHECKPOINT_FILE, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(directory: Path, policy: ActorCritic, optimizer: torch.optim.Optimizer) -> int | None:
    """Restore policy and optimizer from `directory`; returns the saved weights_seq_no,
    or None when there is no checkpoint yet."""
    remove_orphaned_temporaries(directory)
    path = directory / CHECKPOINT_FILE
    if not path.exists():
        return None
    data = torch.load(path, weights_only=True)
    expected = _architecture(policy)
    for key, value in expected.items():
        if data["architecture"].get(key) != value:
            raise CheckpointMismatch(
                f"checkpoint {path} was saved with {key}={data['architecture'].get(key)} "
                f"but the settings give {key}={value}: start with another --checkpoint-dir, "
                f"or move {path.name} out of {directory} to start afresh"
            )
    policy.load_state_dict(data["policy"])
    optimizer.load_state_dict(data["optimizer"])
    return int(data["weights_seq_no"])


def remove_orphaned_temporaries(directory: Path, older_than_s: float = ORPHAN_AGE_S) -> list[Path]:
    """Delete the temporary files of saves that a crash interrupted (SIGKILL, power loss);
    a fresh one may belong to another process saving right now, and is left alone."""
    removed = []
    now = time.time()
    for path in sorted(directory.glob(TEMPORARY_FILES)):
        try:
            if now - path.stat().st_mtime >= older_than_s:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:  # its saver finished (or removed it) meanwhile
            continue
    if removed:
        log.warning("removed %d temporary checkpoint file(s) left by an interrupted save: %s",
                    len(removed), ", ".join(p.name for p in removed))
    return removed
