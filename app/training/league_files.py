"""A self-play module's league on disk, beside its checkpoint: `league/league.json` (the
ratings, which versions are snapshots, their rated results and the recent records: League.ratings;
the fixed references are not saved) and one `league/<weights_seq_no>.onnx` per
snapshot (`league/-<weights_seq_no>.onnx` per frozen exploiter, by the version it joined
at), written once; files of snapshots that left the window are removed. A league
made for another model interface (spaces, input names: `--action-masking` changed, say)
or damaged is not restored: the league starts again, with its folder emptied. `LeagueFiles`
does both for the training service, on the learner thread."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import onnx
import orjson

from app.training.checkpoints import remove_orphaned_temporaries, write_atomically
from app.training.self_play import League

LEAGUE_DIR = "league"
RATINGS_FILE = "league.json"
INTERFACE_PROPS = ("observation_space", "action_space", "input_names", "output_names")

logger = logging.getLogger("app.training")


class LeagueUnusable(Exception):
    """The saved league cannot be restored (the message says why)."""


def save_league(module_dir: Path, ratings: dict, snapshots: dict[int, bytes]) -> None:
    """Write the snapshots not on disk yet, then the ratings (which name them), then drop the others."""
    directory = module_dir / LEAGUE_DIR
    for version, onnx_bytes in snapshots.items():
        path = directory / f"{version}.onnx"
        if not path.exists():
            write_atomically(path, lambda f, data=onnx_bytes: f.write(data))
    write_atomically(directory / RATINGS_FILE, lambda f: f.write(orjson.dumps(ratings)))
    for path in directory.glob("*.onnx"):
        if path.stem.removeprefix("-").isdigit() and int(path.stem) not in snapshots:
            path.unlink(missing_ok=True)


def load_league(module_dir: Path, current_model: bytes) -> tuple[dict, dict[int, bytes]] | None:
    """The ratings and the snapshots' ONNX by version, or None if no league was saved.
    Raises LeagueUnusable if it is damaged or its snapshots' interface is not `current_model`'s."""
    directory = module_dir / LEAGUE_DIR
    if not (directory / RATINGS_FILE).exists():
        return None
    remove_orphaned_temporaries(directory)
    expected = interface(current_model)
    try:
        ratings = orjson.loads((directory / RATINGS_FILE).read_bytes())
        versions = [int(snapshot["weights_seq_no"]) for snapshot in ratings["snapshots"] + ratings.get("exploiters", [])]
        snapshots = {version: (directory / f"{version}.onnx").read_bytes() for version in versions}
        for version, onnx_bytes in snapshots.items():
            if (found := interface(onnx_bytes)) != expected:
                differ = ", ".join(k for k in INTERFACE_PROPS if found.get(k) != expected.get(k))
                raise LeagueUnusable(f"snapshot {version} was made with another {differ}")
    except LeagueUnusable:
        raise
    except Exception as exc:  # a missing or cut file, bad JSON, an ONNX that does not parse
        raise LeagueUnusable(f"{directory} is damaged ({type(exc).__name__}: {exc})") from None
    return ratings, snapshots


def clear_league(module_dir: Path) -> None:
    """Empty the module's league folder (a fresh league must not pick up old snapshot files)."""
    shutil.rmtree(module_dir / LEAGUE_DIR, ignore_errors=True)


def interface(onnx_bytes: bytes) -> dict[str, str]:
    """What a client feeding the model relies on: spaces and input and output names."""
    props = {prop.key: prop.value for prop in onnx.load_from_string(onnx_bytes).metadata_props}
    return {key: props.get(key, "") for key in INTERFACE_PROPS}


class LeagueFiles:
    """Every self-play module's league beside its checkpoint in `checkpoint_dir`: restored at
    start, written after a training step that changed it; `run` runs file work on the learner thread."""

    def __init__(self, checkpoint_dir: Path, leagues: Mapping[str, League], run: Callable[..., Awaitable[Any]]) -> None:
        self._checkpoint_dir = checkpoint_dir
        self._leagues = leagues
        self._run = run
        self._saved_ratings: dict[str, dict[str, Any]] = {}  # each league's ratings as last written (League.ratings)

    async def restore(self, module_id: str, restored: bool, current_model: bytes) -> None:
        """A restored self-play module's ratings and snapshots, if they were saved and fit its
        model (`current_model`); else its league starts again (its folder emptied)."""
        module_dir = self._checkpoint_dir / module_id
        saved = None
        if restored:
            try:
                saved = await self._run(load_league, module_dir, current_model)
            except LeagueUnusable as exc:
                logger.warning("self-play league of %s not restored, it starts again: %s", module_id, exc)
        if saved is None:
            await self._run(clear_league, module_dir)
            return
        league = self._leagues[module_id]
        league.restore(*saved)
        versions = [s.weights_seq_no for s in league.snapshots]
        logger.info("self-play league of %s restored: elo %.0f after %d rated games, snapshots of versions %s",
                    module_id, league.elo, league.rated_games, versions)

    async def save(self) -> None:
        """Every league that changed, ratings and snapshots; a failure is logged, and the next
        training step tries again."""
        for module_id, league in self._leagues.items():  # taken here, on the event loop that changes them
            ratings, snapshots = league.ratings(), league.snapshot_files()
            if ratings == self._saved_ratings.get(module_id):  # no new game, no new snapshot: on disk already
                continue
            try:
                await self._run(save_league, self._checkpoint_dir / module_id, ratings, snapshots)
            except OSError as exc:
                logger.warning("self-play league of %s not saved: %s", module_id, exc)
            else:
                self._saved_ratings[module_id] = ratings
