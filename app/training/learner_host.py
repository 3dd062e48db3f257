"""Where the learners run: a thread of the gateway's process, or a process of their own.

`LearnerThread` (the default) runs `ModuleLearners`' calls on one thread beside the event loop.
Torch releases the GIL inside its kernels, but a training step is also thousands of Python
operations between them, and those hold it: under heavy traffic the event loop and the
learner wait on each other, and training slows down most. `LearnerProcess` (setting
`learner_process`) runs the same calls in a child process at a lower priority, so neither
waits for the other's interpreter; the cost is a second interpreter with torch (RAM), a few
seconds more at start-up, and pickling each batch across a pipe.

Both run calls one at a time, in the order they were made, on one thread of this process
(for the process: the thread that writes the call and waits for the answer), so a call
made after another sees its effects. A child that dies (killed, out of memory) fails the
call it was running; the next call starts a new one, which restores every module from its
last checkpoint (an off-policy learner's replay buffer refills) and gets the hyperparameters
changed since.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from app.settings.config import Settings
from app.settings.logs import configure_logging
from app.settings.policies import PolicySet
from app.training.module_learners import ModuleLearners

log = logging.getLogger("app.training")

_STOP_TIMEOUT_S = 30.0  # for the child to save and exit once told to
# The learner process runs at this niceness, so that it takes the CPU the event loop leaves
# (a thin client waiting for its action freezes; a training step can wait). bench/inference.py
# style, 64 thin clients while PPO trains, 2 runs each: at 0, GET_ACTION p99 12.0-12.7 ms,
# 11.4k-12.1k actions/s, steps of 1.15 s; at 10, p99 10.5-10.7 ms, 13.6k, steps of 1.5-1.6 s.
LEARNER_NICENESS = 10


class LearnerProcessLost(RuntimeError):
    """The learner process exited while it ran a call (or before it could start)."""


class _OneThread:
    """What both hosts share: one thread of this process that runs everything in order."""

    def __init__(self, thread_name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)

    def submit(self, method: str, *args: Any) -> Future:
        """Run `ModuleLearners.<method>(*args)` without waiting (in order with every other call)."""
        raise NotImplementedError

    async def call(self, method: str, *args: Any) -> Any:
        """Run `ModuleLearners.<method>(*args)`; its result (or its exception)."""
        return await asyncio.wrap_future(self.submit(method, *args))

    async def run(self, fn: Callable, *args: Any) -> Any:
        """Run a function of this process on that thread (file work kept in order with the calls)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)


class LearnerThread(_OneThread):
    """The learners in this process; their calls run on one thread beside the event loop."""

    def __init__(self, settings: Settings, policies: PolicySet) -> None:
        super().__init__("learner")
        self.learners = ModuleLearners(settings, policies)

    async def start(self) -> None:
        pass

    def submit(self, method: str, *args: Any) -> Future:
        return self._executor.submit(self.learners.call, method, args)

    async def stop(self) -> None:
        self._executor.shutdown(wait=True)


class LearnerProcess(_OneThread):
    """The learners in a child process; calls go to it over a pipe, one at a time."""

    def __init__(self, settings: Settings, policies: PolicySet) -> None:
        super().__init__("learner-pipe")
        self._settings = settings
        self._policies = policies
        self._process: subprocess.Popen | None = None
        self._pipe: Connection | None = None
        self._replayed: dict[tuple, tuple[str, tuple]] = {}  # what a new child must be told again
        self._restores: dict[str, None] = {}  # modules a new child restores from their checkpoints

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def start(self) -> None:
        await self.run(self._spawn)

    def submit(self, method: str, *args: Any) -> Future:
        return self._executor.submit(self._call, method, args)

    async def stop(self) -> None:
        await self.run(self._stop)
        self._executor.shutdown(wait=True)

    # -- On the pipe's thread ------------------------------------------------------------

    def _spawn(self) -> None:
        """Start a child and wait until it has built the learners (its exception if it could not).

        A fresh interpreter (`python -m app.training.learner_host FD`), not multiprocessing's
        spawn, which would import the embedding program's main module again; fork would copy
        the locks of the event loop's threads."""
        ours, theirs = socket.socketpair()
        started = time.perf_counter()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", "app.training.learner_host", str(theirs.fileno())], pass_fds=[theirs.fileno()]
            )
        self._process, self._pipe = process, Connection(ours.detach())
        self._send("start", (self._settings, self._policies))
        self._answer("start")
        log.info("learner process %d started in %.1f s", process.pid, time.perf_counter() - started)

    def _call(self, method: str, args: tuple) -> Any:
        if self._process is None or self._process.poll() is not None:
            self._respawn()
        if method == "restore":
            self._restores[args[0]] = None
        elif method == "set_num_threads":
            self._replayed[(method,)] = (method, args)  # the latest
        elif method == "set_config":
            self._replayed[(method, args[0])] = (method, args)  # the latest per module
        self._send(method, (method, args))
        return self._answer(method)

    def _respawn(self) -> None:
        """A new child after one died: it restores what the last one had, and is told again
        what it was told."""
        if self._process is not None:
            log.error("learner process %d exited (code %s); starting a new one", self._process.pid, self._process.returncode)
            self._pipe.close()
        self._spawn()
        for method, args in self._replayed.values():
            self._send(method, (method, args))
            self._answer(method)
        for module_id in self._restores:
            self._send("restore", ("restore", (module_id,)))
            version = self._answer("restore")
            log.info("learner process %d: %s restored at weights_seq_no %s", self._process.pid, module_id, version)

    def _send(self, method: str, message: Any) -> None:
        try:
            self._pipe.send(message)
        except (OSError, EOFError) as exc:
            raise self._lost(method) from exc

    def _answer(self, method: str) -> Any:
        try:
            status, value = self._pipe.recv()
        except (OSError, EOFError) as exc:
            raise self._lost(method) from exc
        if status == "error":
            raise value
        return value

    def _lost(self, method: str) -> LearnerProcessLost:
        try:
            code = self._process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:  # its end of the pipe closed, yet it runs: make sure it is gone
            self._process.kill()
            code = self._process.wait()
        return LearnerProcessLost(f"the learner process {self._process.pid} exited (code {code}) during {method}")

    def _stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            try:
                self._pipe.send(None)
            except OSError:
                pass
            try:
                self._process.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.error("learner process %d did not exit; killing it", self._process.pid)
                self._process.kill()
                self._process.wait()
        self._pipe.close()


def serve_learners(pipe: Connection) -> None:
    """The learner process: take the settings and policies, build the learners, then
    answer calls until told to stop (None) or the gateway's end of the pipe closes."""
    # Ctrl-C in a terminal, or a service manager's SIGTERM to every process of the gateway's
    # group, is for the gateway: it stops the learners after they have saved (and if the
    # gateway dies, its end of the pipe closes, and that ends this process).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(LEARNER_NICENESS)
    try:
        settings, policies = pipe.recv()
    except (EOFError, OSError):
        return
    configure_logging(settings.log_level)
    try:
        learners = ModuleLearners(settings, policies)
    except Exception as exc:
        _reply(pipe, "error", exc)
        return
    _reply(pipe, "ok", None)
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            return  # the gateway is gone
        if message is None:
            return
        method, args = message
        try:
            result = learners.call(method, args)
        except Exception as exc:
            log.exception("learner call %s failed", method)
            _reply(pipe, "error", exc)
        else:
            _reply(pipe, "ok", result)


def _reply(pipe: Any, status: str, value: Any) -> None:
    try:
        pipe.send((status, value))
    except (EOFError, OSError):
        pass  # the gateway is gone
    except Exception as exc:  # an exception that does not pickle: its text does
        pipe.send(("error", RuntimeError(f"{type(value).__name__}: {value} ({exc})")))


def learner_host(settings: Settings, policies: PolicySet) -> LearnerThread | LearnerProcess:
    """The host `learner_process` asks for."""
    return LearnerProcess(settings, policies) if settings.learner_process else LearnerThread(settings, policies)


if __name__ == "__main__":
    serve_learners(Connection(int(sys.argv[1])))
