"""A connection's read deadline: one lazily moved timer instead of asyncio.timeout() per read.

A busy connection reads thousands of times a second, and `asyncio.timeout()` puts a timer
in the event loop's heap for each read and takes it out again (3.3 us a read, measured
under uvloop). Here starting a read only notes when it must end; one timer per connection
fires at the earliest such moment or later, and then either finds the deadline moved (and
waits again until then) or cancels the reading task, which `expired` tells apart from any
other cancellation.

The reading task is the one that makes the deadline (the connection's), noted once:
`asyncio.current_task()` and `get_running_loop()` each make a getpid() system call in
CPython 3.11 (5.7% of a profile of 1,000 thin clients; the throughput gain was within
the machine's noise).
"""

from __future__ import annotations

import asyncio


class ReadDeadline:
    """The deadline of the read under way on one connection (reads follow one another,
    all in the task that made it)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._reader = asyncio.current_task()
        self._when: float | None = None  # loop time the read under way must end by; None: no read
        self._timer: asyncio.TimerHandle | None = None
        self.expired = False  # the last read was cancelled for its deadline

    def start(self, timeout: float) -> None:
        """The reading task starts a read that must end within `timeout` seconds."""
        self._when = self._loop.time() + timeout
        self.expired = False
        if self._timer is None:
            self._timer = self._loop.call_at(self._when, self._check)
        elif self._when < self._timer.when():  # a shorter timeout than the timer's: move it forward
            self._timer.cancel()
            self._timer = self._loop.call_at(self._when, self._check)

    def finish(self) -> None:
        """The read ended (data, end of stream, or its cancellation)."""
        self._when = None

    def expire_now(self) -> None:
        """End the read under way at once, as if its deadline had passed."""
        if self._when is not None:
            self._expire()

    def close(self) -> None:
        """No more reads: drop the timer."""
        self._when = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._when is None:  # between reads: the next start arms a new timer
            return
        if self._loop.time() < self._when:  # the deadline moved on since the timer was set
            self._timer = self._loop.call_at(self._when, self._check)
            return
        self._expire()

    def _expire(self) -> None:
        self.expired, self._when = True, None
        self._reader.cancel()
