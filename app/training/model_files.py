"""Every published version of every module as an .onnx file: the model a game ships.

`<models_dir>/<module_id>/latest.onnx` is always the newest; `v<weights_seq_no>.onnx`
keeps each of the last `models_kept` versions (older ones are deleted). Files are written
whole under a temporary name and renamed, so a game or a script that reads one never sees
half a model (not synced to the disk: after a power cut, the checkpoint, which is, can
export it again). A module whose model did not change in a version (not trained in that
step) is not written again. The same files are what `rllink-gateway export` reads for an older
version (app/startup/export.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.training.checkpoints import write_atomically
from app.training.policy_store import PolicySetState

log = logging.getLogger("app.training.model_files")

LATEST_FILE = "latest.onnx"


def version_file(weights_seq_no: int) -> str:
    """The name of one kept version's file."""
    return f"v{weights_seq_no}.onnx"


def kept_versions(module_dir: Path) -> list[int]:
    """The versions whose files are in a module's folder, oldest first."""
    names = (path.stem[1:] for path in module_dir.glob("v*.onnx"))
    return sorted(int(name) for name in names if name.isdigit())


class ModelFiles:
    """Writes each module's models as they are published (in the learner thread: file work
    stays off the event loop)."""

    def __init__(self, directory: Path, kept: int) -> None:
        self.directory = directory
        self.kept = kept
        self._written: dict[str, int] = {}  # module id -> version of its model on disk

    def write(self, published: PolicySetState) -> None:
        """Write every module's model that changed since the last call; a failure is logged
        (the next version tries again), never raised: training goes on without the files."""
        for module_id, state in published.modules.items():
            if self._written.get(module_id) == state.weights_seq_no:
                continue
            module_dir = self.directory / module_id
            try:
                module_dir.mkdir(parents=True, exist_ok=True)
                names = [version_file(state.weights_seq_no)] if self.kept > 0 else []
                for name in [*names, LATEST_FILE]:
                    write_atomically(module_dir / name, lambda f, data=state.onnx_bytes: f.write(data), sync=False)
                for old in kept_versions(module_dir)[: -self.kept or None]:
                    (module_dir / version_file(old)).unlink(missing_ok=True)
            except OSError as exc:
                log.warning("model of %s (version %d) not written to %s: %s", module_id, state.weights_seq_no, module_dir, exc)
                continue
            self._written[module_id] = state.weights_seq_no
