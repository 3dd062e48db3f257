"""Save and restore the learner (policy, optimizer, weights_seq_no) in one file.

Writes go to a temporary file that replaces the old checkpoint atomically, so a crash
never leaves half a checkpoint. A checkpoint made for other spaces or layer sizes is
refused with an error that says what differs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from app.training.policy import ActorCritic

CHECKPOINT_FILE = "policy.pt"


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
    path = directory / CHECKPOINT_FILE
    if not path.exists():
        return None
    data = torch.load(path, weights_only=True)
    expected = _architecture(policy)
    for key, value in expected.items():
        if data["architecture"].get(key) != value:
            raise CheckpointMismatch(
                f"checkpoint {path} was saved with {key}={data['architecture'].get(key)} "
                f"but the settings give {key}={value}; use another checkpoint_dir or remove the file"
            )
    policy.load_state_dict(data["policy"])
    optimizer.load_state_dict(data["optimizer"])
    return int(data["weights_seq_no"])
