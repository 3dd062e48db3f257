"""Save and restore a learner (its networks, optimizers, weights_seq_no) in one file.

Writes go to a temporary file that replaces the old checkpoint atomically, so a crash
never leaves half a checkpoint (a temporary file it leaves behind is removed at the next
load); other files of the module's folder (its self-play league) are written the same way.
A checkpoint made for other spaces or layer sizes is refused with an error that says what
differs.
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol

import orjson
import torch
from pydantic import TypeAdapter, ValidationError

from app.settings.config import Settings

CHECKPOINT_FILE = "policy.pt"
ADOPTED_SPACES_FILE = "adopted_spaces.json"  # the spaces a game gave the default module
TEMPORARY_FILES = "*.tmp"  # write_atomically's, until each replaces its file
ORPHAN_AGE_S = 60.0  # a save takes milliseconds: a temporary file this old was left by a crash

log = logging.getLogger("app.training.checkpoints")


class CheckpointMismatch(ValueError):
    """The checkpoint on disk was made for a different policy shape than configured."""


class Stateful(Protocol):
    """A network or an optimizer: what a checkpoint holds of it."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


class Checkpointed:
    """A learner's `restore` and `save`: what its `_parts()` returns (networks, optimizers)
    and its version, in `checkpoint_dir`, made for its `architecture`."""

    checkpoint_dir: Path
    weights_seq_no: int
    architecture: dict[str, Any]
    # What to do to go on with a checkpoint that differs in an architecture key no setting
    # names (CheckpointMismatch's first remedy; for the others: set the key as it was saved).
    architecture_remedies: ClassVar[dict[str, str]] = {}

    def _parts(self) -> dict[str, Stateful]:
        raise NotImplementedError

    def restore(self) -> bool:
        """Load the checkpoint from checkpoint_dir, if there is one."""
        saved = load_checkpoint(self.checkpoint_dir, self.architecture, self._parts(), self.architecture_remedies)
        if saved is None:
            return False
        self.weights_seq_no = saved
        return True

    def save(self) -> None:
        save_checkpoint(self.checkpoint_dir, self.architecture, self._parts(), self.weights_seq_no)

    def copy_from(self, other: Checkpointed) -> None:
        """Take what a checkpoint of `other` holds (weights, optimizer state, statistics), not its
        version: a population's member copying a better one (app/training/population.py)."""
        if other.architecture != self.architecture:
            raise CheckpointMismatch(f"cannot copy a learner made for {other.architecture} into one made for {self.architecture}")
        mine = self._parts()
        for name, part in other._parts().items():
            mine[name].load_state_dict(copy.deepcopy(part.state_dict()))


def save_checkpoint(directory: Path, architecture: dict[str, Any], parts: dict[str, Stateful], weights_seq_no: int) -> Path:
    """Write the checkpoint atomically; returns its path. `architecture`: what a checkpoint
    must agree on to be loaded (spaces, sizes, algorithm); `parts`: what it holds, by name."""
    data = {
        "weights_seq_no": weights_seq_no,
        "architecture": architecture,
        **{name: part.state_dict() for name, part in parts.items()},
    }
    path = directory / CHECKPOINT_FILE
    write_atomically(path, lambda f: torch.save(data, f))
    return path


def write_atomically(path: Path, write: Callable[[IO[bytes]], None], sync: bool = True) -> None:
    """`write` into a temporary file beside `path` that then replaces `path`; `sync`: flushed
    to the disk first, so that not even a power cut leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def load_checkpoint(
    directory: Path, architecture: dict[str, Any], parts: dict[str, Stateful], remedies: dict[str, str] | None = None
) -> int | None:
    """Restore `parts` from `directory` (each onto the device it is on); returns the saved
    weights_seq_no, or None when there is no checkpoint yet. Raises CheckpointMismatch when
    the checkpoint's architecture differs from `architecture` (a key it lacks counts as None),
    its first remedy `remedies[key]` where given, else to set the key as it was saved."""
    remove_orphaned_temporaries(directory)
    path = directory / CHECKPOINT_FILE
    if not path.exists():
        return None
    data = torch.load(path, weights_only=True, map_location="cpu")
    for key in [*architecture, *(key for key in data["architecture"] if key not in architecture)]:
        saved, expected = data["architecture"].get(key), architecture.get(key)
        if saved != expected:
            was = f"without {key} (its default then)" if saved is None else f"with {key}={saved}"
            given = f"no {key}" if expected is None else f"{key}={expected}"
            remedy = (remedies or {}).get(key) or f"set {key} as it was saved"
            raise CheckpointMismatch(
                f"checkpoint {path} was saved {was} "
                f"but the settings give {given}: {remedy} to go on with this run, "
                f"start with another --checkpoint-dir, or move {path.name} out of {directory} to start afresh"
            )
    for name, part in parts.items():
        part.load_state_dict(data[name])
    return int(data["weights_seq_no"])


def save_adopted_spaces(directory: Path, spaces: dict[str, Any]) -> None:
    """The spaces the default module adopted from a game ({observation_space, action_space}
    as JSON), in `directory` (the checkpoint_dir): a restart builds the module with them."""
    save_json(directory / ADOPTED_SPACES_FILE, spaces)


def with_adopted_spaces(settings: Settings) -> Settings:
    """`settings` with the spaces the default module adopted in an earlier start, if it was
    given none and adopted some then; else `settings` as they are. Raises ValueError
    (damaged file, spaces the settings refuse) naming the file."""
    if settings.spaces_given or (spaces := adopted_spaces(settings.checkpoint_dir)) is None:
        return settings
    log.info("the default module keeps the spaces a game declared in an earlier start (%s)", settings.checkpoint_dir / ADOPTED_SPACES_FILE)
    return settings.model_copy(update=spaces)


def adopted_spaces(directory: Path) -> dict[str, Any] | None:
    """The spaces save_adopted_spaces wrote in `directory`, as the settings' values, or None.
    Raises ValueError (damaged file, spaces the settings refuse) naming the file."""
    spaces = load_json(directory / ADOPTED_SPACES_FILE)
    if spaces is None:
        return None
    adopted = {}
    for name in ("observation_space", "action_space"):
        try:
            adopted[name] = TypeAdapter(Settings.model_fields[name].annotation).validate_python(spaces.get(name))
        except ValidationError as exc:
            raise ValueError(f"{directory / ADOPTED_SPACES_FILE} holds a {name} the gateway refuses: {exc.errors()[0]['msg']}") from None
    return adopted


def save_json(path: Path, state: dict[str, Any]) -> None:
    """A JSON object, atomically (the curriculum's lessons, a game's adopted spaces)."""
    data = orjson.dumps(state)

    def write(f: IO[bytes]) -> None:
        f.write(data)

    write_atomically(path, write)


def load_json(path: Path) -> dict[str, Any] | None:
    """A JSON object a `save_json` wrote, or None if there is none; ValueError if damaged."""
    if not path.exists():
        return None
    try:
        state = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path} is damaged: {exc}") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path} is damaged: not a JSON object")
    return state


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
