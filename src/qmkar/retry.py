"""The one retry layer: tenacity around each request, bounded in count and total time.

A failure is retried when the provider marked it retryable (408, 409, 429, 5xx, 529,
connection errors, timeouts, unreadable bodies). The wait is what the server asked for
(Retry-After and friends, already read by qmkar.providers.http) or else exponential
back-off with jitter. Every attempt is returned, with its error, for the transcript.
The sleep is injectable so tests run without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, NamedTuple, TypeVar

from tenacity import (
    DoAttempt,
    DoSleep,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from qmkar.defaults import MAX_RETRIES, RETRY_BUDGET, TIMEOUT
from qmkar.errors import ProviderCallError
from qmkar.limits import Limiter
from qmkar.transcript import Attempt, CallError


@dataclass
class RetryPolicy:
    """How hard to try one question: retries, total seconds, seconds per attempt, back-off.
    A server's own wait (Retry-After) is taken whole; one longer than the budget left ends
    the question as an error, which the next run asks again."""

    max_retries: int = MAX_RETRIES
    budget: float = RETRY_BUDGET
    timeout: float | None = TIMEOUT
    initial_wait: float = 1.0
    max_wait: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)


T = TypeVar("T")


class Outcome(NamedTuple, Generic[T]):
    """What trying came to: the result (an answer, or whatever else the call returns), every
    attempt, and the error that ended it (fatal: stop asking this model)."""

    response: T | None
    attempts: list[Attempt]
    error: CallError | None
    fatal: bool


class stop_after_budget(stop_base):  # noqa: N801 (named like tenacity's own stop conditions)
    """Stop when the next wait would end past `budget` seconds from the first attempt's
    sending: time a question spends queued behind --concurrency before it is first sent is
    not spent trying it."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.first_sent: float | None = None  # time.monotonic() when the first attempt was sent

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self.first_sent is None:
            return False
        return time.monotonic() - self.first_sent + (retry_state.upcoming_sleep or 0.0) >= self.budget


class stop_when(stop_base):  # noqa: N801 (named like tenacity's own stop conditions)
    """Stop retrying as soon as `condition()` holds (the run is stopping: Ctrl-C)."""

    def __init__(self, condition: Callable[[], bool]) -> None:
        self.condition = condition

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.condition()


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderCallError) and exc.retryable


def _wait(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    backoff = wait_exponential_jitter(
        multiplier=policy.initial_wait, max=policy.max_wait, jitter=policy.initial_wait
    )

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ProviderCallError) and exc.retry_after is not None:
            return exc.retry_after
        return backoff(state)

    return wait


def call_error(exc: ProviderCallError) -> CallError:
    """The transcript's record of a failure."""
    # A fatal error (bad key, no access, no quota) stops this run but may pass once the user
    # has fixed it, so the next run asks again.
    return CallError(kind=exc.kind, message=str(exc), status=exc.status,
                     retryable=exc.retryable or exc.fatal)


async def send(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    limiter: Limiter | None = None,
    tokens: int = 0,
    halted: Callable[[], bool] | None = None,
) -> Outcome[T]:
    """Call until an answer, a failure that retrying cannot fix, the budget runs out, or
    `halted()` says the run is stopping (Ctrl-C: no new attempts)."""
    attempts: list[Attempt] = []
    budget = stop_after_budget(policy.budget)

    async def attempt_once() -> T:
        started = datetime.now(UTC)
        clock = queued = time.perf_counter()
        try:
            if limiter is None:
                budget.first_sent = budget.first_sent or time.monotonic()
                response = await _timed(call, policy.timeout)
            else:
                async with limiter.slot(tokens):
                    clock = time.perf_counter()  # time spent queued is not the attempt's
                    started = datetime.now(UTC)
                    budget.first_sent = budget.first_sent or time.monotonic()
                    response = await _timed(call, policy.timeout)
        except ProviderCallError as exc:
            attempts.append(Attempt(started_at=started, seconds=time.perf_counter() - clock,
                                    waited=clock - queued, error=call_error(exc)))
            if limiter is not None and exc.status in (429, 529):  # too fast, or overloaded
                await limiter.rate_limited_for(exc.retry_after)
            raise
        attempts.append(Attempt(started_at=started, seconds=time.perf_counter() - clock,
                                waited=clock - queued))
        if limiter is not None:
            await limiter.succeeded()
        return response

    # Most questions are answered at the first attempt: that one is made before tenacity's
    # objects are built, and they see its failure as their first attempt's.
    try:
        return Outcome(await attempt_once(), attempts, None, False)
    except ProviderCallError as exc:
        first: ProviderCallError | None = exc
    # tenacity decides (stop, wait, retry); this loop only awaits. It is AsyncRetrying's own
    # loop without its per-step wrapping of every strategy in a coroutine, which costs more
    # CPU than the rest of qmkar's work on a question.
    retrying = Retrying(
        stop=stop_any(
            stop_after_attempt(policy.max_retries + 1),
            budget,
            stop_when(lambda: halted is not None and halted()),
        ),
        wait=_wait(policy),
        retry=retry_if_exception(_retryable),
        reraise=True,
    )
    retrying.begin()
    state = RetryCallState(retrying, fn=None, args=(), kwargs={})
    try:
        while True:
            action = retrying.iter(state)
            if isinstance(action, DoAttempt):
                try:
                    if first is not None:
                        failed, first = first, None
                        raise failed
                    state.set_result(await attempt_once())
                except ProviderCallError as exc:
                    state.set_exception((type(exc), exc, exc.__traceback__))
            elif isinstance(action, DoSleep):
                state.prepare_for_next_attempt()
                await policy.sleep(float(action))
            else:
                return Outcome(action, attempts, None, False)
    except ProviderCallError as exc:
        error = call_error(exc)
        if exc.retryable and len(attempts) > 1:
            error.message = f"{error.message} (gave up after {len(attempts)} attempts)"
        return Outcome(None, attempts, error, exc.fatal)


async def _timed(call: Callable[[], Awaitable[T]], timeout: float | None) -> T:
    if timeout is None:
        return await call()
    try:
        async with asyncio.timeout(timeout):
            return await call()
    except TimeoutError:
        raise ProviderCallError(
            f"no answer within the {timeout:g} s timeout", kind="timeout", retryable=True
        ) from None
