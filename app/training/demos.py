"""Demonstration files: recorded episodes as RLlink episode chunks, one JSON object a line.

Each line is an episode chunk (RLLINK.md, "Episode chunk": obs, actions, rewards,
is_terminated, is_truncated; optional action_mask, agent_id, module_id, episode_id),
validated by the same model and against the same module spaces as the chunks clients
send (EpisodeChunk with the gateway's modules as context). Blank lines and lines starting
with `#` (a header a recorder may write) are skipped. A file with a bad line is refused
as a whole, with the file, the line number and what is wrong in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from app.schemas import EpisodeChunk
from app.settings.policies import PolicySet
from app.training.checkpoints import CheckpointMismatch


class DemoFileError(CheckpointMismatch):
    """A demonstration file that cannot be read or has a bad line; the text says which and why.
    A CheckpointMismatch: what a module's start-up state cannot be built from, refused at start."""


def load_demos(path: Path, policies: PolicySet, module_id: str | None = None) -> list[EpisodeChunk]:
    """The chunks of `path`, each validated against the gateway's modules; with `module_id`,
    every chunk must train that module (a file given as that module's demos)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DemoFileError(f"demos file {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    context = {"policies": policies, "from_json": True}
    chunks = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"demos file {path}, line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DemoFileError(f"{where}: not JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(data, dict):
            raise DemoFileError(f"{where}: an episode chunk must be a JSON object, got {type(data).__name__}")
        try:
            chunk = EpisodeChunk.model_validate(data, context=context)
        except ValidationError as exc:
            raise DemoFileError(f"{where}: {_problems(exc)}") from None
        if module_id is not None and chunk.module_id != module_id:
            raise DemoFileError(f"{where}: the chunk trains module {chunk.module_id!r}, but this file is {module_id!r}'s demos")
        chunks.append(chunk)
    if not chunks:
        raise DemoFileError(f"demos file {path}: holds no episode chunk")
    return chunks


def _problems(exc: ValidationError) -> str:
    """pydantic's errors as one line: `field: problem; ...` (at most 3)."""
    problems = [
        f"{'.'.join(str(part) for part in err['loc']) or 'chunk'}: {err['msg'].removeprefix('Value error, ')}"
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    return "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
