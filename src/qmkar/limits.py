"""How fast one (endpoint, model) may be asked: in-flight limit, requests and tokens per minute.

The in-flight limit adapts (AIMD): a 429 (or a 529 "overloaded") halves it, at most once
per CUT_INTERVAL so that the replies to requests already in flight do not compound, and
pauses every request until the server's reset time. Each clean answer raises it again:
by 1/limit (one per round of answers) while 429s are recent, and by a whole one (doubling
each round) once RECOVERY seconds have passed without any, so a limit cut by a burst of
429s is back at --concurrency within a few rounds of clean answers. Other errors (500s,
timeouts) leave it alone: they say nothing about sending too fast. The clock and sleep are
injectable so tests need not wait.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

CUT_INTERVAL = 1.0  # seconds between two halvings of the in-flight limit
RECOVERY = 2.0  # seconds without a 429 after which each clean answer raises the limit by one


class Bucket:
    """A token bucket that may go into debt: reserving returns how long to wait."""

    def __init__(self, per_minute: float, capacity: float, clock: Callable[[], float]) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.capacity = capacity
        self.level = capacity
        self.clock = clock
        self.stamp = clock()

    def reserve(self, amount: float) -> float:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level / self.rate


class Limiter:
    """Paces the requests to one (endpoint, model). All in one event loop: no locks needed."""

    def __init__(
        self,
        concurrency: int,
        rpm: float | None = None,
        tpm: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.ceiling = concurrency
        self.window = float(concurrency)  # the in-flight limit, fractional while it grows
        self.active = 0
        self.clock = clock
        self.sleep = sleep
        self.paused_until = 0.0
        self.last_cut = float("-inf")
        self.rate_limited = 0  # 429s seen, for the end-of-run summary
        self._waiting: deque[asyncio.Future[None]] = deque()
        # Ten seconds' worth of burst: enough to fill the pipe, too little to trip a server's window.
        self.requests = Bucket(rpm, max(1.0, rpm / 6), clock) if rpm else None
        self.tokens = Bucket(tpm, max(1.0, tpm / 6), clock) if tpm else None

    @property
    def limit(self) -> int:
        """How many requests may be in flight now."""
        return max(1, int(self.window))

    def _wake(self) -> None:
        while self._waiting and self.active < self.limit:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self.active += 1  # the slot passes straight to the waiter
                waiter.set_result(None)

    @asynccontextmanager
    async def slot(self, tokens: int = 0) -> AsyncIterator[None]:
        """Hold one request slot, after waiting for the limit, any pause and the rate buckets."""
        if self.active < self.limit and not self._waiting:
            self.active += 1
        else:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self.active -= 1  # it was handed a slot it will not use
                    self._wake()
                elif waiter in self._waiting:
                    self._waiting.remove(waiter)
                raise
        try:
            delay = max(0.0, self.paused_until - self.clock())
            if self.requests is not None:
                delay = max(delay, self.requests.reserve(1))
            if self.tokens is not None and tokens:
                delay = max(delay, self.tokens.reserve(tokens))
            if delay > 0:
                await self.sleep(delay)
            yield
        finally:
            self.active -= 1
            self._wake()

    async def succeeded(self) -> None:
        """A clean answer: raise the limit (additively while 429s are recent)."""
        if self.window >= self.ceiling:
            return
        before = self.limit
        quiet = self.clock() - self.last_cut >= RECOVERY
        self.window = min(float(self.ceiling), self.window + (1.0 if quiet else 1.0 / self.window))
        if self.limit > before:
            self._wake()

    async def rate_limited_for(self, retry_after: float | None) -> None:
        """A 429: halve the limit and pause everyone for as long as the server asked."""
        self.rate_limited += 1
        now = self.clock()
        if now - self.last_cut >= CUT_INTERVAL:
            self.window = max(1.0, self.window / 2)
            self.last_cut = now
        if retry_after:
            self.paused_until = max(self.paused_until, now + retry_after)
