"""A self-play module's league on disk, beside its checkpoint: `league/league.json` (the
ratings, and which versions are snapshots) and one `league/<weights_seq_no>.onnx` per
snapshot, written once; files of snapshots that left the window are removed."""

from __future__ import annotations

from pathlib import Path

import orjson

from app.training.checkpoints import remove_orphaned_temporaries, write_atomically

LEAGUE_DIR = "league"
RATINGS_FILE = "league.json"


def save_league(module_dir: Path, ratings: dict, snapshots: dict[int, bytes]) -> None:
    """Write the snapshots not on disk yet, then the ratings (which name them), then drop the others."""
    directory = module_dir / LEAGUE_DIR
    for version, onnx_bytes in snapshots.items():
        path = directory / f"{version}.onnx"
        if not path.exists():
            write_atomically(path, lambda f, data=onnx_bytes: f.write(data))
    write_atomically(directory / RATINGS_FILE, lambda f: f.write(orjson.dumps(ratings)))
    for path in directory.glob("*.onnx"):
        if path.stem.isdigit() and int(path.stem) not in snapshots:
            path.unlink(missing_ok=True)


def load_league(module_dir: Path) -> tuple[dict, dict[int, bytes]] | None:
    """The ratings and the snapshots' ONNX by version, or None if no league was saved."""
    directory = module_dir / LEAGUE_DIR
    if not (directory / RATINGS_FILE).exists():
        return None
    remove_orphaned_temporaries(directory)
    ratings = orjson.loads((directory / RATINGS_FILE).read_bytes())
    versions = [snapshot["weights_seq_no"] for snapshot in ratings["snapshots"]]
    return ratings, {version: (directory / f"{version}.onnx").read_bytes() for version in versions}
