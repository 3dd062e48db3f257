"""Launching games: N processes of one build, each told where the gateway is, started again
when one dies, all stopped with the gateway.

Each game gets the `--rllink-*` arguments of RLLINK.md "Launching games", then the game's
own. Its output (stdout and stderr) is appended to `<log_dir>/<index>.log`, so a restart's
output follows that of the process it replaces. A game that exits is started again after
a pause that doubles (1 s, 2 s, 4 s, ... at most 30 s), at most `max_restarts` times; then
it stays down. Every game runs in a process group of its own (a script's children with
it, and a Ctrl-C in the terminal reaches the gateway only): stopping sends SIGTERM to each
group, then SIGKILL to those still there after the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("app.launcher")

FIRST_RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 30.0
TOKEN_FLAG = "--rllink-token"


class LaunchError(ValueError):
    """The build cannot be started; the message says why, in one line."""


def build_command(env_path: str) -> list[str]:
    """The words of `env_path` (split as a shell would, no other shell features), its first
    checked: a path to an executable file, or a program on PATH; else a LaunchError."""
    try:
        words = shlex.split(env_path)
    except ValueError as exc:
        raise LaunchError(f"--env-path {env_path!r} cannot be split into words: {exc}") from None
    if not words:
        raise LaunchError("--env-path is empty: give the game's executable")
    program = words[0]
    if os.sep not in program:
        if shutil.which(program) is None:
            raise LaunchError(f"--env-path {env_path!r}: {program!r} is not a program on PATH (give its path)")
        return words
    path = Path(program)
    if not path.exists():
        raise LaunchError(f"--env-path {env_path!r}: {path} does not exist")
    if path.is_dir():
        raise LaunchError(f"--env-path {env_path!r}: {path} is a folder, not an executable (give the build's executable)")
    if not os.access(path, os.X_OK):
        raise LaunchError(f"--env-path {env_path!r}: {path} is not executable (chmod +x {shlex.quote(program)})")
    return words


def game_arguments(host: str, port: int, index: int, time_scale: float, token: str | None = None) -> list[str]:
    """The `--rllink-*` arguments of game `index` (RLLINK.md "Launching games"); the token only when auth is on."""
    return [
        "--rllink-host",
        host,
        "--rllink-port",
        str(port),
        *([TOKEN_FLAG, token] if token is not None else []),
        "--rllink-time-scale",
        f"{time_scale:g}",
        "--rllink-env-index",
        str(index),
    ]


def shown(argv: Sequence[str]) -> str:
    """A command line as logs show it: the token's value as ***."""
    words = [shlex.quote(word) for word in argv]
    for i, word in enumerate(argv[:-1]):
        if word == TOKEN_FLAG:
            words[i + 1] = "***"
    return " ".join(words)


def restart_delay(restarts: int) -> float:
    """Seconds before the `restarts`-th restart (from 1): 1, 2, 4, ... at most MAX_RESTART_DELAY_S."""
    return min(MAX_RESTART_DELAY_S, FIRST_RESTART_DELAY_S * 2.0 ** (restarts - 1))


@dataclass
class _Game:
    index: int
    argv: list[str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0


class GameLauncher:
    """Starts one process per command, keeps them running (bounded restarts), stops them all."""

    def __init__(self, commands: Sequence[Sequence[str]], log_dir: Path, max_restarts: int, grace_s: float) -> None:
        self.log_dir = log_dir
        self.max_restarts = max_restarts
        self.grace_s = grace_s
        self._games = [_Game(i, list(argv), log_dir / f"{i}.log") for i, argv in enumerate(commands)]
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        """Start every game; a LaunchError (nothing left running) if one cannot be started at all."""
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for game in self._games:
                await self._spawn(game)
        except OSError as exc:
            await self.stop()
            raise LaunchError(f"cannot start the game {shown(self._games[0].argv[:1])}: {exc.strerror or exc}") from None
        self._tasks = [asyncio.ensure_future(self._keep_running(game)) for game in self._games]

    async def stop(self) -> None:
        """No more restarts; SIGTERM to every game, SIGKILL to those still there after the grace period."""
        self._stopping.set()
        if not any(game.process is not None for game in self._games):
            return
        started = time.monotonic()
        killed = sum(await asyncio.gather(*(self._end(game) for game in self._games)))
        await asyncio.gather(*self._tasks)
        how = f"{killed} killed after {self.grace_s:g} s" if killed else "each exited on SIGTERM"
        log.info("games stopped in %.1f s (%s)", time.monotonic() - started, how)

    def kill_now(self) -> None:
        """SIGKILL to every game at once (the gateway is about to end without waiting)."""
        self._stopping.set()
        for game in self._games:
            if game.process is not None and game.process.returncode is None:
                _signal_group(game.process.pid, signal.SIGKILL)

    async def _spawn(self, game: _Game) -> None:
        """Start the game's process, its output appended to its log (OSError if it cannot start)."""
        with _open_log(game) as output:
            game.process = await asyncio.create_subprocess_exec(
                *game.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("game %d started (pid %d): %s; its output: %s", game.index, game.process.pid, shown(game.argv), game.log_path)

    async def _keep_running(self, game: _Game) -> None:
        """Wait for the game to exit and start it again, until it has used its restarts or the launcher stops."""
        while True:
            started = time.monotonic()
            code = await game.process.wait() if game.process is not None else None
            if self._stopping.is_set():
                return
            if game.process is not None:
                _signal_group(game.process.pid, signal.SIGKILL)  # what it left behind
            ran = f"exited with code {code} after {time.monotonic() - started:.1f} s" if code is not None else "did not start"
            if game.restarts >= self.max_restarts:
                log.error(
                    "game %d %s, and was restarted %d times already: it stays down (--env-max-restarts %d); its output: %s",
                    game.index,
                    ran,
                    game.restarts,
                    self.max_restarts,
                    game.log_path,
                )
                return
            game.restarts += 1
            delay = restart_delay(game.restarts)
            log.warning(
                "game %d %s: restart %d of %d in %g s; its output: %s",
                game.index,
                ran,
                game.restarts,
                self.max_restarts,
                delay,
                game.log_path,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            if self._stopping.is_set():
                return
            try:
                await self._spawn(game)
            except OSError as exc:
                log.error("game %d cannot start again: %s", game.index, exc.strerror or exc)
                game.process = None
            if self._stopping.is_set():  # stopped while it started: end it here, stop() did not see it
                await self._end(game)
                return

    async def _end(self, game: _Game) -> bool:
        """SIGTERM to the game's process group, SIGKILL after the grace period; whether it had to be killed."""
        process, killed = game.process, False
        if process is None:
            return False
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), self.grace_s)
            except TimeoutError:
                killed = True
        _signal_group(process.pid, signal.SIGKILL)  # the game if it is still there, and what it started
        await process.wait()
        return killed


def _open_log(game: _Game) -> BinaryIO:
    """The game's log, opened to append to, a line saying which start of the game follows."""
    output = open(game.log_path, "ab")  # closed by the caller once the process has it
    output.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} start {game.restarts + 1}: {shown(game.argv)}\n".encode())
    output.flush()
    return output


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to the process group a game leads (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
