"""`rllink-gateway export` (also `python -m app export`): one module's model of a run as an
.onnx file, without starting a server.

The newest version is built from the run's checkpoint; an older one is copied from the
files the gateway kept of it (<models-dir>/<module>/v<N>.onnx, app/training/model_files.py);
`best`, the version evaluation episodes chose, from best.onnx (app/training/best_models.py).
A problem a person can fix (no such run, module or version kept) is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import yaml

from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.settings.runs import SNAPSHOT_FILE
from app.training.best_models import BEST_FILE, BEST_INFO_FILE
from app.training.checkpoints import CHECKPOINT_FILE, CheckpointMismatch, adopted_spaces, write_atomically
from app.training.model_files import kept_versions, version_file

EXIT_USER_ERROR = 2
BEST = "best"  # --version best


class ExportError(Exception):
    """What to change, in one line."""


def parse_args(argv: Sequence[str], prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"{prog} export", description="Write one module's model of a run as an .onnx file, without starting a server."
    )
    parser.add_argument("--run-id", required=True, help="the run (its folder under --runs-dir)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs are kept (default: runs)")
    parser.add_argument("--module", help="the module's id (default: the run's default module)")
    parser.add_argument(
        "--version", type=_version, help="a kept weights_seq_no, or best: best.onnx (default: the checkpoint's, the newest)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the .onnx file to write")
    return parser.parse_args(argv)


def _version(text: str) -> int | str:
    """A weights_seq_no, or `best`."""
    if text == BEST:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a version number nor {BEST!r}") from None


def run_settings(runs_dir: Path, run_id: str) -> Settings:
    """The settings a run was started with (its snapshot), so its modules are built alike."""
    snapshot = runs_dir / run_id / SNAPSHOT_FILE
    if not snapshot.is_file():
        runs = sorted(p.parent.name for p in runs_dir.glob(f"*/{SNAPSHOT_FILE}"))
        raise ExportError(f"no run {run_id!r} in {runs_dir.resolve()} (runs there: {', '.join(runs) or 'none'})")
    values = yaml.safe_load(snapshot.read_text())
    # Folders the run derived from where it was (runs_dir, run_id) are derived again from
    # where it is now: the run may have been moved, or the command run from elsewhere.
    was = Path(values.get("runs_dir", "runs")) / run_id
    derived = {"checkpoint_dir": was / "checkpoints", "tensorboard_dir": was / "tensorboard", "models_dir": was / "models"}
    for name, path in derived.items():
        if values.get(name) is not None and Path(values[name]) == path:
            del values[name]
    settings = Settings(**{**values, "runs_dir": runs_dir, "run_id": run_id, "decode_workers": 0})
    try:
        adopted = adopted_spaces(settings.checkpoint_dir)  # the snapshot has the defaults the module gave up
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    return settings if adopted is None else settings.model_copy(update=adopted)


def export_model(settings: Settings, module_id: str | None, version: int | str | None, out: Path) -> str:
    """Write the model; what was written, in words."""
    policies = PolicySet.from_settings(settings)
    module_id = module_id or policies.default_module_id
    if module_id not in policies.modules:
        raise ExportError(f"run {settings.run_id!r} has no module {module_id!r}; its modules: {', '.join(policies.modules)}")
    models = cast(Path, settings.models_dir) / module_id  # set by Settings
    if version == BEST:
        return _copy_best(models, module_id, out)
    kept = kept_versions(models)
    module = policies.modules[module_id]
    if module.population is not None and version is None:  # no checkpoint of its own: its newest file (its best member's)
        if not kept:
            raise ExportError(f"module {module_id!r} of run {settings.run_id!r} has no model files yet (a population: "
                              f"export one of its members, {', '.join(module.members)})")  # fmt: skip
        version = max(kept)
    if version is not None and version in kept:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(models / version_file(version), out)
        return f"module {module_id}, version {version} (kept in {models})"
    if not module.trainable or not (settings.checkpoint_dir / module_id / CHECKPOINT_FILE).is_file():
        what = "no checkpoint (a self-play opponent has none)" if not module.trainable else "no checkpoint yet"
        raise ExportError(f"module {module_id!r} of run {settings.run_id!r} has {what}; kept versions: {_listed(kept)}")
    from app.training.module_learners import ModuleLearners  # torch: only when a model is built

    learners = ModuleLearners(settings, PolicySet([module]))
    try:
        newest = learners.restore(module_id)
    except CheckpointMismatch as exc:  # the run's settings were changed by hand since
        raise ExportError(str(exc)) from None
    if version is not None and version != newest:
        raise ExportError(
            f"version {version} of {module_id!r} is not kept; the checkpoint holds {newest}, kept versions: {_listed(kept)}"
        )
    state = learners.export(module_id)
    write_atomically(out, lambda f: f.write(state.onnx_bytes))
    return f"module {module_id}, version {state.weights_seq_no} (from the checkpoint)"


def _copy_best(models: Path, module_id: str, out: Path) -> str:
    """best.onnx, as best.json describes it."""
    try:
        info = json.loads((models / BEST_INFO_FILE).read_text())
    except FileNotFoundError:
        raise ExportError(
            f"module {module_id!r} has no best model in {models} yet: it is chosen by evaluation episodes "
            "(evaluation_interval above 0, and at least best_model_episodes of them)"
        ) from None
    except ValueError as exc:
        raise ExportError(f"{models / BEST_INFO_FILE} is unreadable: {exc}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(models / BEST_FILE, out)
    return (
        f"module {module_id}, best version {info['weights_seq_no']} (evaluation return mean "
        f"{info['evaluation_return_mean']:.4g} over {info['episodes']} episodes)"
    )


def _listed(versions: list[int]) -> str:
    return ", ".join(map(str, versions)) or "none"


def main(argv: Sequence[str], prog: str) -> int:
    args = parse_args(argv, prog)
    try:
        settings = run_settings(args.runs_dir, args.run_id)
        what = export_model(settings, args.module, args.version, args.out)
    except ExportError as exc:
        print(f"cannot export: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(f"wrote {args.out}: {what}")
    return 0
