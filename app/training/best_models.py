"""The model a game ships: each module's best version by its evaluation episodes
(RLLINK.md, "The model a game ships").

Evaluation episodes are played with the distribution's mode, as a shipped game plays, and
are never trained on. A module's last `episodes` of them (whichever versions played them)
are its window; whenever the window is full and its mean return is the highest so far (or
equals it: the newer is kept, as at a task's highest return), the newest version that
played in it becomes the module's best: `<models_dir>/<module_id>/
best.onnx`, described by `best.json` (`weights_seq_no`, `evaluation_return_mean`,
`episodes`, and `oldest_weights_seq_no`, the oldest version in the window). The window
spans versions because a client's evaluation episodes are a few per version (every Nth
episode of each env); the newest is the one the mean is freshest for. A restart keeps the
best so far (read back from best.json), so a new best must beat it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.training.checkpoints import write_atomically
from app.training.policy_store import PolicyStore

log = logging.getLogger("app.training.best_models")

BEST_FILE = "best.onnx"
BEST_INFO_FILE = "best.json"


@dataclass(frozen=True)
class BestModel:
    """Which version best.onnx is, and the evaluation it was chosen by (best.json)."""

    weights_seq_no: int
    evaluation_return_mean: float
    episodes: int
    oldest_weights_seq_no: int


class BestModels:
    """Each trainable module's evaluation window and best version so far; a new best's model
    is taken from the versions the store keeps and written by `run` (the learner thread's:
    file work off the event loop)."""

    def __init__(
        self, directory: Path, episodes: int, module_ids: list[str], store: PolicyStore,
        run: Callable[..., Awaitable[Any]],
    ) -> None:
        self.directory = directory
        self.episodes = episodes
        self.module_ids = module_ids
        self._store = store
        self._run = run
        self._windows: dict[str, deque[tuple[int, float]]] = {}  # module id -> (version, return) of recent ones
        self._writes: set[asyncio.Future[Any]] = set()  # referenced until done
        self.best: dict[str, BestModel] = {}

    def on_evaluation(self, module_id: str, weights_seq_no: int | None, episode_return: float) -> None:
        """An evaluation episode ended (TrainingMetrics calls it); a version without a number
        is the latest one. A new best whose version the store no longer keeps is let go."""
        if module_id not in self.module_ids:
            return  # a frozen opponent's
        version = self._store.current.weights_seq_no if weights_seq_no is None else weights_seq_no
        if (best := self.record(module_id, version, episode_return)) is None:
            return
        kept = self._store.kept(best.weights_seq_no)
        if kept is None or module_id not in kept.modules:
            log.debug("%s: version %d would be the best model, but it is no longer kept", module_id, best.weights_seq_no)
            return
        self.keep(module_id, best)
        self._writes.add(task := asyncio.ensure_future(self._run(self.write, module_id, best, kept.modules[module_id].onnx_bytes)))
        task.add_done_callback(self._writes.discard)

    def restore(self, module_ids: list[str]) -> None:
        """The best so far of each of these modules (restored from their checkpoints) that has a best.json."""
        for module_id in module_ids:
            path = self.directory / module_id / BEST_INFO_FILE
            try:
                values = json.loads(path.read_text())
                self.best[module_id] = BestModel(**{name: values[name] for name in BestModel.__dataclass_fields__})
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("%s is unreadable (%s): %s starts without a best model", path, exc, module_id)

    def record(self, module_id: str, weights_seq_no: int, episode_return: float) -> BestModel | None:
        """An evaluation episode of the module ended, played (last) by `weights_seq_no`: the
        module's new best if its window now scores at least the best so far, else None."""
        window = self._windows.setdefault(module_id, deque(maxlen=self.episodes))
        window.append((weights_seq_no, episode_return))
        if len(window) < self.episodes:
            return None
        mean = sum(episode_return for _, episode_return in window) / len(window)
        versions = [version for version, _ in window]
        best = self.best.get(module_id)
        if best is not None and (mean, max(versions)) <= (best.evaluation_return_mean, best.weights_seq_no):
            return None  # worse, or as good and no newer; as good and newer is kept (at a task's highest return, say)
        return BestModel(max(versions), mean, len(window), min(versions))

    def keep(self, module_id: str, best: BestModel) -> None:
        """`best` is the module's best from now on (its model is on its way to the disk)."""
        self.best[module_id] = best
        log.info(
            "%s: best model now version %d (evaluation return mean %.4g over the last %d evaluation episodes, "
            "versions %d-%d)", module_id, best.weights_seq_no, best.evaluation_return_mean, best.episodes,
            best.oldest_weights_seq_no, best.weights_seq_no,
        )

    def write(self, module_id: str, best: BestModel, onnx_bytes: bytes) -> None:
        """best.onnx, then best.json, each written whole; a failure is logged, never raised."""
        module_dir = self.directory / module_id
        try:
            write_atomically(module_dir / BEST_FILE, lambda f: f.write(onnx_bytes), sync=False)
            info = json.dumps(asdict(best), indent=2).encode()
            write_atomically(module_dir / BEST_INFO_FILE, lambda f: f.write(info), sync=False)
        except OSError as exc:
            log.warning("best model of %s (version %d) not written to %s: %s", module_id, best.weights_seq_no, module_dir, exc)
