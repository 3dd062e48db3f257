"""Large JSON bodies decoded in worker processes, beside the event loop.

Decoding an episode chunk (`app.sansio.json_arrays`) is most of what the gateway does per env
step, and it holds the GIL: on the event loop it caps ingest at one core. Worker
processes decode large JSON bodies into dicts with numpy arrays (a message's several
chunks as columns: app.sansio.chunk_columns) and send them back pickled; the event loop keeps
framing, validation and the replies, in order.

Workers start with the first body large enough for them, not with the gateway: a gateway
whose bodies are all small (thin clients, short chunks, tests) never runs one, and the
bodies that arrive while they import are decoded on the event loop.

A worker is an accelerator, never a dependency: a body it cannot take (small, msgpack,
no worker ready) or loses (the worker died, or hung) is decoded on the event loop, with
the same result. A dead worker is replaced. So is a hung one (stopped, deadlocked,
swapped out): a worker that has bodies outstanding and answers nothing for
`reply_timeout_s` is killed, and the bodies it held come back as None, in order, for
the event loop to decode; whatever it might still send is ignored.

    python -m app.transport.decode_workers KEY...   # a worker: frames on stdin, pickles on stdout

Both directions carry a 4-byte big-endian length, then that many bytes: a JSON body
in; out, first an empty frame once the worker has imported (it is ready: bodies go to
it from then on, so its start-up never counts against the reply bound), then for each
body the pickled result of `loads_episodes(body, KEYS)` (a dict, or None when the
body needs the event loop's decoder, which then decodes it as if no worker existed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import logging
import os
import pickle
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

import numpy as np

from app.sansio.chunk_columns import loads_episodes

log = logging.getLogger("app.transport.decode_workers")

_LENGTH = struct.Struct("!I")
# JSON bodies from this size on go to a worker. The hop costs the event loop tens of
# microseconds (writing the body; unpickling a 500-step chunk takes ~25 us); decoding
# 16 kB of episode chunk takes about 80 us.
OFFLOAD_MIN_BODY_BYTES = 16 * 1024
_STOP_TIMEOUT_S = 5.0
_REPLACE_DELAY_S = 1.0  # a worker that keeps dying costs one start a second, not a busy loop
_SOCKET_BUFFER_BYTES = 1 << 20  # a few whole bodies per write, not one slice per wakeup
# A worker's silence is checked this many times per reply bound, on the event loop: a
# hung worker is found between one and 1.25 bounds after its last answer. The verdict
# takes that many silent checks in a row, each a quarter bound after the last one ran,
# so an event loop that stalled (answers waiting unread) does not by itself make a
# worker look hung: the reader catches up before the next check.
_CHECKS_PER_BOUND = 4
# A worker is one thread: numpy's BLAS would otherwise run a long array's checks (np.vdot)
# on threads of its own, which spin on every core (1.5 cores for 64 chunks of 500 steps).
_WORKER_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


class DecodeWorkers:
    """A few worker processes decoding large JSON bodies; `submit` hands one over.

    `reply_timeout_s` bounds how long a worker holding bodies may stay silent before it
    counts as hung: it is then killed and replaced, and its bodies are decoded on the
    event loop. It only has to exceed the longest single decode (~40 ms for an 8 MiB
    body) by far enough that a busy machine never trips it.
    """

    def __init__(self, count: int, keys: frozenset[str], reply_timeout_s: float = 2.0) -> None:
        if reply_timeout_s <= 0:
            raise ValueError(f"reply_timeout_s must be positive, not {reply_timeout_s!r}")
        self._count = count
        self._keys = sorted(keys)  # the fields whose number lists become arrays
        self._reply_timeout_s = reply_timeout_s
        self._workers: list[_Worker] = []
        self._accepting = False  # `start` ran and `stop` did not: bodies may start the workers
        self._starting: asyncio.Task[None] | None = None  # spawning them, from the first large body on
        self._stopping = False

    async def start(self) -> None:
        """Let the first body large enough for a worker start them all (`submit`)."""
        self._accepting = self._count > 0

    async def stop(self) -> None:
        self._stopping, self._accepting = True, False
        if self._starting is not None:
            await self._starting  # a worker spawned after this sees `_stopping` and stops
        await asyncio.gather(*(worker.stop() for worker in self._workers))
        self._workers.clear()

    @property
    def running(self) -> int:
        return len(self.pids)

    @property
    def ready(self) -> int:
        """Workers that have started up and take bodies (`running` counts those starting too)."""
        return sum(worker.ready for worker in self._workers)

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers running (ready or starting up)."""
        return [worker.pid for worker in self._workers if worker.alive]

    @property
    def decoded(self) -> int:
        """Bodies the workers running now have decoded into a dict."""
        return sum(worker.decoded for worker in self._workers if worker.alive)

    async def submit(self, body: bytes) -> asyncio.Future[dict[str, Any] | None] | None:
        """A future of the decoded body, or None if no worker takes it (decode it here).

        The future's result is None when the worker declined the body, died or hung:
        the caller then decodes it itself, as it would have without workers.
        """
        if len(body) < OFFLOAD_MIN_BODY_BYTES or body[:1] != b"{":
            return None
        if self._starting is None and self._accepting:
            self._starting = asyncio.create_task(self._spawn_all(len(body)), name="decode workers starting")
        workers = [worker for worker in self._workers if worker.ready]
        if not workers:
            return None
        worker = min(workers, key=lambda w: len(w.pending))
        return await worker.submit(body)

    async def _spawn_all(self, body_bytes: int) -> None:
        """Spawn the workers (they import in the background; bodies wait in their sockets)."""
        for _ in range(self._count):
            if self._stopping:
                return
            await self._spawn()
        log.info("%d decode worker process(es) started (the first body of %d bytes came in)", self._count, body_bytes)

    async def _spawn(self) -> None:
        """Start a worker whose stdin and stdout are one end of a socket pair."""
        ours, its = socket.socketpair()
        for sock in (ours, its):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER_BYTES)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER_BYTES)
        try:
            # A session of its own: Ctrl+C in a terminal interrupts the gateway's process
            # group, and the gateway stops its workers itself (end of input), in order; a
            # worker interrupted too would print a KeyboardInterrupt traceback and be replaced.
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app.transport.decode_workers", *self._keys,
                stdin=its, stdout=its, env=_WORKER_ENV, start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            log.error("could not start a decode worker (%s); decoding on the event loop", exc)
            return
        finally:
            its.close()
        reader, writer = await asyncio.open_connection(sock=ours)
        worker = _Worker(process, reader, writer, self._replace, self._reply_timeout_s)
        if self._stopping:  # `stop` ran while this replacement was starting: not left running
            await worker.stop()
            return
        self._workers.append(worker)

    async def _replace(self, worker: _Worker) -> None:
        """A worker died or was killed as hung: drop it and start another (unless stopping)."""
        if worker in self._workers:
            self._workers.remove(worker)
        if not self._stopping:
            if not worker.hung:  # a hung one's warning has been logged when it was killed
                log.warning(
                    "decode worker %d exited (code %s); its bodies are decoded on the event loop; "
                    "starting another in %g s", worker.pid, worker.returncode, _REPLACE_DELAY_S,
                )
            await asyncio.sleep(_REPLACE_DELAY_S)
            if not self._stopping:
                await self._spawn()


class _Worker:
    """One worker process: bodies written in order, results read back in that order.

    While bodies are outstanding, a check every quarter of the reply bound (one timer
    per worker, not one per body) counts the checks between which the worker answered
    nothing; `_CHECKS_PER_BOUND` of them in a row and it is hung: `_abandon` kills it.
    """

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_exit: Callable[[_Worker], Awaitable[None]],
        reply_timeout_s: float,
    ) -> None:
        self._process = process
        self._reader, self._writer = reader, writer
        self.pid = process.pid
        self.pending: collections.deque[asyncio.Future] = collections.deque()
        self.alive = True  # not known to have exited, nor killed
        self.ready = False  # alive and started up: it takes bodies
        self.hung = False  # killed for answering nothing within the bound
        self.decoded = 0  # bodies decoded into a dict (not declined)
        self._on_exit = on_exit
        self._loop = asyncio.get_running_loop()
        self._check_interval_s = reply_timeout_s / _CHECKS_PER_BOUND
        self._reply_timeout_s = reply_timeout_s
        self._answers = 0  # results read, dicts or not: the worker's sign of life
        self._answers_at_check = 0
        self._silent_checks = 0
        self._check: asyncio.TimerHandle | None = None  # armed while bodies are outstanding
        self._results = asyncio.create_task(self._read_results(), name=f"decode worker {self.pid}")

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def submit(self, body: bytes) -> asyncio.Future:
        future = self._loop.create_future()
        self.pending.append(future)
        if self._check is None:  # it had nothing outstanding: its silence counts from now
            self._answers_at_check, self._silent_checks = self._answers, 0
            self._check = self._loop.call_later(self._check_interval_s, self._check_silence)
        if self._writer.transport.is_closing():
            # It died and the event loop closed its socket, but the reader has yet to see
            # that (uvloop would raise on a write): the reader answers the future with None.
            return future
        try:
            self._writer.write(_LENGTH.pack(len(body)))
            self._writer.write(body)
            await self._writer.drain()  # the worker is behind: wait, as the client's reads do
        except (ConnectionError, OSError):
            pass  # the reader sees it exit and answers every pending future with None
        return future

    def _check_silence(self) -> None:
        """The timer: re-armed while bodies are outstanding; `_abandon` the worker if it
        answered nothing across `_CHECKS_PER_BOUND` checks in a row."""
        self._check = None
        if not self.pending or not self.alive:
            return  # re-armed by the next `submit`
        if self._answers != self._answers_at_check:
            self._answers_at_check, self._silent_checks = self._answers, 0
        else:
            self._silent_checks += 1
            if self._silent_checks >= _CHECKS_PER_BOUND:
                self._abandon()
                return
        self._check = self._loop.call_later(self._check_interval_s, self._check_silence)

    def _abandon(self) -> None:
        """It hung: its bodies go back to their callers as None (decoded on the event loop,
        in order), it is killed, and its socket closed; the reader then sees the end,
        ignores any answer still buffered, reaps it and has it replaced."""
        self.hung = True
        self.alive = self.ready = False
        bodies = len(self.pending)
        self._resolve_pending()
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()  # SIGKILL: it ends a stopped process too
        self._writer.transport.abort()  # wakes a `submit` waiting for room in the socket
        log.warning(
            "decode worker %d answered nothing for %g s with %d body(ies) outstanding: killed it; "
            "those bodies are decoded on the event loop; starting another in %g s",
            self.pid, self._reply_timeout_s, bodies, _REPLACE_DELAY_S,
        )

    def _resolve_pending(self) -> None:
        """Answer every outstanding body with None: its caller decodes it instead."""
        for future in self.pending:
            if not future.done():  # its connection may have gone
                future.set_result(None)
        self.pending.clear()

    async def _read_results(self) -> None:
        """Mark it ready when it says so, then answer each body's future in order; once
        it exits (or is killed), answer the rest with None, reap it and have it replaced."""
        try:
            await self._reader.readexactly(_LENGTH.size)  # the empty frame: started up
            self.ready = self.alive
            while True:
                (size,) = _LENGTH.unpack(await self._reader.readexactly(_LENGTH.size))
                result = pickle.loads(await self._reader.readexactly(size))
                if self.hung:
                    break  # too late: its bodies were answered with None
                self._answers += 1
                self.decoded += result is not None
                future = self.pending.popleft()
                if not future.done():  # its connection may have gone
                    future.set_result(result)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # it exited, or was killed as hung
        except Exception as exc:  # unpickling: a bug of ours
            log.error("decode worker %d sent something unreadable: %r", self.pid, exc)
            self._process.kill()
        finally:
            self.alive = self.ready = False
            if self._check is not None:
                self._check.cancel()
                self._check = None
            self._writer.close()
            self._resolve_pending()
        await self._process.wait()
        await self._on_exit(self)

    async def stop(self) -> None:
        """End its input (it exits at end of input), kill it if it does not.

        Only our sending half is shut: a worker still starting up can still say it is
        ready (and one decoding, send its results) before it reads the end and exits.
        Closing the whole socket would make those writes fail in the worker: a
        BrokenPipeError there, while the gateway gives up starting, say.
        """
        self.alive = self.ready = False
        if self._process.returncode is None:
            if self._writer.can_write_eof() and not self._writer.transport.is_closing():
                self._writer.write_eof()
            else:
                self._writer.close()
            try:
                await asyncio.wait_for(self._process.wait(), _STOP_TIMEOUT_S)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        self._results.cancel()
        await asyncio.gather(self._results, return_exceptions=True)


class _Pickler(pickle.Pickler):
    """Pickles arrays as their bytes: in half the time numpy's own pickling takes."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is np.ndarray:
            return _array, (obj.tobytes(), obj.dtype.str, obj.shape)
        return NotImplemented


def _array(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """An array unpickled from `_Pickler`'s bytes (writable, like one decoded here)."""
    return np.frombuffer(bytearray(data), dtype).reshape(shape)


def _dumps(result: dict[str, Any] | None) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(result)
    return out.getvalue()


def main(keys: frozenset[str]) -> None:
    """The worker: decode each body from stdin, write each result to stdout, until the
    end of stdin. The gateway may go first (it stopped, or was killed): then the worker
    ends without a word, as it would at the end of its input."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the results
    try:
        _serve(keys, stdin, stdout)
    except (BrokenPipeError, ConnectionResetError):
        # The gateway's end is gone. Python would flush stdout again on the way out and
        # print that error once more: stdout becomes /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        sys.exit(0)


def _serve(keys: frozenset[str], stdin: BinaryIO, stdout: BinaryIO) -> None:
    stdout.write(_LENGTH.pack(0))  # ready: imported, bodies may come
    stdout.flush()
    while len(header := stdin.read(_LENGTH.size)) == _LENGTH.size:
        (size,) = _LENGTH.unpack(header)
        body = stdin.read(size)
        try:
            reply = _dumps(loads_episodes(body, keys))
        except Exception:  # a bug of ours, or nesting too deep to pickle: the event loop decodes it
            log.exception("decoding a body failed")
            reply = pickle.dumps(None)
        stdout.write(_LENGTH.pack(len(reply)))
        stdout.write(reply)
        stdout.flush()


if __name__ == "__main__":
    # From the module by name, so that pickles refer to `app.transport.decode_workers._array`.
    from app.transport.decode_workers import main as worker_main

    worker_main(frozenset(sys.argv[1:]))
