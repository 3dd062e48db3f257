"""Large JSON bodies decoded in worker processes, beside the event loop.

Decoding an episode chunk (`app.json_arrays`) is most of what the gateway does per env
step, and it holds the GIL: on the event loop it caps ingest at one core. Worker
processes decode large JSON bodies into dicts with numpy arrays and send them back
pickled; the event loop keeps framing, validation and the replies, in order.

A worker is an accelerator, never a dependency: a body it cannot take (small, msgpack,
no worker running) or loses (the worker died) is decoded on the event loop, with the
same result. A dead worker is replaced.

    python -m app.decode_workers KEY...   # a worker: frames on stdin, pickles on stdout

Both directions carry a 4-byte big-endian length, then that many bytes: a JSON body
in; out, the pickled result of `loads_with_arrays(body, KEYS)` (a dict, or None when
the body needs the event loop's decoder, which then decodes it as if no worker existed).
"""

from __future__ import annotations

import asyncio
import collections
import io
import logging
import pickle
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from app.json_arrays import loads_with_arrays

log = logging.getLogger("app.decode_workers")

_LENGTH = struct.Struct("!I")
# JSON bodies from this size on go to a worker. The hop costs the event loop tens of
# microseconds (writing the body; unpickling a 500-step chunk takes ~25 us); decoding
# 16 kB of episode chunk takes about 80 us.
OFFLOAD_MIN_BODY_BYTES = 16 * 1024
_STOP_TIMEOUT_S = 5.0
_REPLACE_DELAY_S = 1.0  # a worker that keeps dying costs one start a second, not a busy loop
_SOCKET_BUFFER_BYTES = 1 << 20  # a few whole bodies per write, not one slice per wakeup


class DecodeWorkers:
    """A few worker processes decoding large JSON bodies; `submit` hands one over."""

    def __init__(self, count: int, keys: frozenset[str]) -> None:
        self._count = count
        self._keys = sorted(keys)  # the fields whose number lists become arrays
        self._workers: list[_Worker] = []
        self._stopping = False

    async def start(self) -> None:
        """Spawn the workers (they import in the background; bodies wait in their sockets)."""
        for _ in range(self._count):
            await self._spawn()
        if self._count:
            log.info("%d decode worker process(es) started", self._count)

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.gather(*(worker.stop() for worker in self._workers))
        self._workers.clear()

    @property
    def running(self) -> int:
        return len(self.pids)

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers running."""
        return [worker.pid for worker in self._workers if worker.alive]

    @property
    def decoded(self) -> int:
        """Bodies the workers running now have decoded into a dict."""
        return sum(worker.decoded for worker in self._workers if worker.alive)

    async def submit(self, body: bytes) -> asyncio.Future[dict[str, Any] | None] | None:
        """A future of the decoded body, or None if no worker takes it (decode it here).

        The future's result is None when the worker declined the body or died: the
        caller then decodes it itself, as it would have without workers.
        """
        if len(body) < OFFLOAD_MIN_BODY_BYTES or body[:1] != b"{":
            return None
        workers = [worker for worker in self._workers if worker.alive]
        if not workers:
            return None
        worker = min(workers, key=lambda w: len(w.pending))
        return await worker.submit(body)

    async def _spawn(self) -> None:
        """Start a worker whose stdin and stdout are one end of a socket pair."""
        ours, its = socket.socketpair()
        for sock in (ours, its):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER_BYTES)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER_BYTES)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app.decode_workers", *self._keys, stdin=its, stdout=its
            )
        except OSError as exc:
            ours.close()
            log.error("could not start a decode worker (%s); decoding on the event loop", exc)
            return
        finally:
            its.close()
        reader, writer = await asyncio.open_connection(sock=ours)
        self._workers.append(_Worker(process, reader, writer, self._replace))

    async def _replace(self, worker: _Worker) -> None:
        """A worker died: drop it and start another (unless stopping)."""
        if worker in self._workers:
            self._workers.remove(worker)
        if not self._stopping:
            log.warning(
                "decode worker %d exited (code %s); its bodies are decoded on the event loop; "
                "starting another in %g s", worker.pid, worker.returncode, _REPLACE_DELAY_S,
            )
            await asyncio.sleep(_REPLACE_DELAY_S)
            if not self._stopping:
                await self._spawn()


class _Worker:
    """One worker process: bodies written in order, results read back in that order."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_exit: Callable[[_Worker], Awaitable[None]],
    ) -> None:
        self._process = process
        self._reader, self._writer = reader, writer
        self.pid = process.pid
        self.pending: collections.deque[asyncio.Future] = collections.deque()
        self.alive = True
        self.decoded = 0  # bodies decoded into a dict (not declined)
        self._on_exit = on_exit
        self._results = asyncio.create_task(self._read_results(), name=f"decode worker {self.pid}")

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def submit(self, body: bytes) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        try:
            self._writer.write(_LENGTH.pack(len(body)))
            self._writer.write(body)
            await self._writer.drain()  # the worker is behind: wait, as the client's reads do
        except (ConnectionError, OSError):
            pass  # the reader sees it exit and answers every pending future with None
        return future

    async def _read_results(self) -> None:
        try:
            while True:
                (size,) = _LENGTH.unpack(await self._reader.readexactly(_LENGTH.size))
                result = pickle.loads(await self._reader.readexactly(size))
                self.decoded += result is not None
                future = self.pending.popleft()
                if not future.done():  # its connection may have gone
                    future.set_result(result)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # it exited
        except Exception as exc:  # unpickling: a bug of ours
            log.error("decode worker %d sent something unreadable: %r", self.pid, exc)
            self._process.kill()
        finally:
            self.alive = False
            self._writer.close()
            for future in self.pending:
                if not future.done():
                    future.set_result(None)  # decoded by the caller instead
            self.pending.clear()
        await self._process.wait()
        await self._on_exit(self)

    async def stop(self) -> None:
        """Close its input (it exits at end of input), kill it if it does not."""
        self.alive = False
        if self._process.returncode is None:
            self._writer.close()
            try:
                await asyncio.wait_for(self._process.wait(), _STOP_TIMEOUT_S)
            except TimeoutError:
                self._process.kill()
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
    """The worker: decode each body from stdin, write each result to stdout."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the results
    while len(header := stdin.read(_LENGTH.size)) == _LENGTH.size:
        (size,) = _LENGTH.unpack(header)
        body = stdin.read(size)
        try:
            reply = _dumps(loads_with_arrays(body, keys))
        except Exception:  # a bug of ours, or nesting too deep to pickle: the event loop decodes it
            log.exception("decoding a body failed")
            reply = pickle.dumps(None)
        stdout.write(_LENGTH.pack(len(reply)))
        stdout.write(reply)
        stdout.flush()


if __name__ == "__main__":
    # From the module by name, so that pickles refer to `app.decode_workers._array`.
    from app.decode_workers import main as worker_main

    worker_main(frozenset(sys.argv[1:]))
