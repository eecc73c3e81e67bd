"""The pure rules: which failures retry, how long to wait, pacing, names, prices."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from email.utils import formatdate

import pytest

from qmkar import limits
from qmkar.errors import ProviderError, UsageError
from qmkar.limits import Limiter
from qmkar.pricing import cost, load_prices, price_for, usage_totals
from qmkar.providers.http import retry_after_seconds, status_error
from qmkar.providers.registry import canonical

NOW = 1_800_000_000.0


@pytest.mark.parametrize("headers, seconds", [
    ({"Retry-After": "7"}, 7.0),
    ({"retry-after": formatdate(NOW + 30, usegmt=True)}, 30.0),
    ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # the finer one wins
    ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
    ({"x-ratelimit-reset-tokens": "1.5s"}, 1.5),
    ({"x-ratelimit-reset-requests": "120ms"}, 0.12),
    ({"x-ratelimit-reset": str(NOW + 4)}, 4.0),
    ({"x-ratelimit-reset": "3"}, 3.0),
    ({}, None),
    ({"Retry-After": "soon"}, None),
])
def test_retry_after_headers(headers, seconds):
    assert retry_after_seconds(headers, now=NOW) == (pytest.approx(seconds) if seconds is not None else None)


def test_anthropic_reset_time_is_a_moment():
    moment = datetime(2027, 1, 15, 8, 0, 12, tzinfo=UTC)
    headers = {"anthropic-ratelimit-requests-reset": "2027-01-15T08:00:12Z"}
    assert retry_after_seconds(headers, now=moment.timestamp() - 12) == pytest.approx(12.0)


@pytest.mark.parametrize("status, retryable, fatal", [
    (400, False, False), (401, False, True), (403, False, True), (404, False, False),
    (408, True, False), (409, True, False), (422, False, False), (429, True, False),
    (500, True, False), (502, True, False), (503, True, False), (529, True, False),
])
def test_which_statuses_retry_and_which_stop_the_model(status, retryable, fatal):
    error = status_error(status, "boom", {})
    assert (error.retryable, error.fatal, error.kind) == (retryable, fatal, f"http_{status}")


def test_insufficient_quota_429_is_never_retried():
    body = {"error": {"code": "insufficient_quota"}}
    error = status_error(429, "out of credit", {"Retry-After": "1"}, body)
    assert not error.retryable and error.fatal and error.kind == "quota"


def test_status_error_redacts_the_key():
    error = status_error(401, "Incorrect API key provided: sk-secret-123456", {}, secret="sk-secret-123456")
    assert "sk-secret-123456" not in str(error) and "[redacted]" in str(error)


@pytest.mark.parametrize("name, expected", [
    ("gpt-4o", ("openai", "gpt-4o")), ("o1", ("openai", "o1")), ("o4-mini", ("openai", "o4-mini")),
    ("claude-3-5-sonnet-20241022", ("anthropic", "claude-3-5-sonnet-20241022")),
    ("deepseek-reasoner", ("deepseek", "deepseek-reasoner")),
    ("gemini-1.5-pro", ("gemini", "gemini-1.5-pro")),
    ("MiniMax-Text-01", ("minimax", "MiniMax-Text-01")),
    ("openrouter:meta-llama/llama-3.1-405b-instruct", ("openrouter", "meta-llama/llama-3.1-405b-instruct")),
    ("ollama:llama3.1:8b", ("ollama", "llama3.1:8b")), ("openai:o1", ("openai", "o1")),
])
def test_names_resolve_by_prefix(name, expected):
    assert canonical(name) == expected


def test_o_names_need_a_digit():
    with pytest.raises(ProviderError, match="Known providers"):
        canonical("ollama3")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_limiter_halves_on_429_and_recovers_after_clean_rounds():
    clock = FakeClock()
    limiter = Limiter(8, clock=clock, sleep=clock.sleep)

    async def scenario():
        await limiter.rate_limited_for(None)
        assert limiter.limit == 4
        await limiter.rate_limited_for(None)  # a reply to a request already in flight
        assert limiter.limit == 4
        clock.now += 1
        await limiter.rate_limited_for(3.0)
        assert limiter.limit == 2 and limiter.paused_until == clock.now + 3
        async with limiter.slot():
            pass
        assert clock.slept == [3.0]  # the pause the server asked for
        cut_at = clock.now - 3
        clock.now = cut_at + 0.5  # 429s are recent: about a round of clean answers adds one
        for _ in range(3):
            await limiter.succeeded()
        assert limiter.limit == 3
        await limiter.rate_limited_for(None)  # within a second of the last cut: no cut
        assert limiter.limit == 3
        clock.now = cut_at + limits.RECOVERY  # quiet since: each clean answer adds one
        for _ in range(5):
            await limiter.succeeded()
        assert limiter.limit == 8
        for _ in range(5):
            await limiter.succeeded()
        assert limiter.limit == 8  # never past --concurrency

    asyncio.run(scenario())


def test_limiter_under_steady_random_429s_keeps_a_good_part_of_its_ceiling():
    """30% faults, half of them 429s, at a 50 ms round trip: the limit is cut at most once a
    second and grows back between cuts (about one per round), so it holds a good part of
    --concurrency instead of collapsing to a few requests in flight."""
    clock = FakeClock()
    limiter = Limiter(64, clock=clock, sleep=clock.sleep)
    rng = random.Random(5)
    seen = []

    async def scenario():
        while clock.now < 60:
            for _ in range(limiter.limit):  # one round trip: every request in flight answers
                if rng.random() < 0.15:
                    await limiter.rate_limited_for(0.0)
                else:
                    await limiter.succeeded()
            seen.append(limiter.limit)
            clock.now += 0.05

    asyncio.run(scenario())
    assert min(seen) >= 16
    assert sum(seen) / len(seen) >= 24


def test_limiter_never_holds_more_than_its_limit():
    limiter = Limiter(3)
    peak = 0

    async def one():
        nonlocal peak
        async with limiter.slot():
            peak = max(peak, limiter.active)
            await asyncio.sleep(0.001)

    async def scenario():
        await asyncio.gather(*(one() for _ in range(30)))

    asyncio.run(scenario())
    assert peak == 3


def test_rpm_paces_requests():
    clock = FakeClock()
    limiter = Limiter(100, rpm=60, clock=clock, sleep=clock.sleep)  # one a second, burst of 10

    async def scenario():
        for _ in range(20):
            async with limiter.slot():
                pass

    asyncio.run(scenario())
    # 10 go at once, the next 10 one second apart.
    assert clock.now == pytest.approx(10.0)


def test_tpm_paces_by_tokens():
    clock = FakeClock()
    limiter = Limiter(100, tpm=6000, clock=clock, sleep=clock.sleep)  # 100 tokens a second, burst 1000

    async def scenario():
        for _ in range(6):
            async with limiter.slot(tokens=500):
                pass

    asyncio.run(scenario())
    assert clock.now == pytest.approx(20.0)  # 3000 tokens, 1000 free, 2000 at 100/s


def test_prices_match_longest_prefix_and_can_be_overridden(tmp_path):
    table = load_prices()
    assert price_for("gpt-4o-mini-2024-07-18", table).input == 0.15
    assert price_for("gpt-4o-2024-08-06", table).input == 2.50
    assert price_for("no-such-model", table) is None
    override = tmp_path / "prices.toml"
    override.write_text('[prices."gpt-4o"]\ninput = 1.0\noutput = 2.0\n')
    assert price_for("gpt-4o", load_prices(override)).input == 1.0
    override.write_text('[prices."gpt-4o"]\ninput = 1.0\n')
    with pytest.raises(UsageError, match=r"prices.gpt-4o.output: Field required"):
        load_prices(override)


def test_cost_counts_cached_tokens_at_their_rate():
    price = load_prices()["gpt-4o"]
    assert cost(price, 1_000_000, 0) == pytest.approx(2.50)
    assert cost(price, 1_000_000, 100_000, cached_tokens=1_000_000) == pytest.approx(1.25 + 1.0)


def test_usage_totals_skip_errors_and_count_cache_hits():
    from qmkar.providers.base import ModelRequest, Usage
    from qmkar.slim import slim_of
    from qmkar.tally import tallies
    from qmkar.tasks import generate, make_spec
    from qmkar.transcript import CallError, Record

    item = next(generate(make_spec("qmkar", pairs=5), 1, 0))
    base = dict(model="gpt-4o", item=item, template="t", request=ModelRequest(messages=[]),
                started_at="2026-01-01T00:00:00Z", seconds=1.0)
    records = [
        Record(**base, answer="1", usage=Usage(input_tokens=100, output_tokens=10, cached_tokens=50)),
        Record(**base, answer="1", usage=Usage(input_tokens=100, output_tokens=10), extra={"cache": "hit"}),
        Record(**base, error=CallError(kind="http_500", message="x")),
    ]
    found = tallies(slim_of(record) for record in records)
    (total,) = usage_totals(found, load_prices(), {"gpt-4o": "gpt-4o"})
    assert (total.answered, total.errors, total.cache_hits) == (2, 1, 1)
    assert (total.input_tokens, total.output_tokens, total.cached_tokens) == (200, 20, 50)
    assert total.cost == pytest.approx((150 * 2.5 + 50 * 1.25 + 20 * 10) / 1e6)


def test_limiter_shrinks_under_load_and_never_exceeds_the_new_limit():
    clock = FakeClock()
    limiter = Limiter(8, clock=clock, sleep=clock.sleep)
    peaks: list[tuple[int, int]] = []

    async def one(index: int):
        async with limiter.slot():
            peaks.append((limiter.active, limiter.limit))
            if index == 3:
                await limiter.rate_limited_for(None)  # 8 -> 4 with the first 4 in flight
            for _ in range(3):
                await asyncio.sleep(0)

    async def scenario():
        await asyncio.gather(*(one(i) for i in range(40)))

    asyncio.run(scenario())
    assert limiter.limit == 4 and limiter.active == 0
    after_cut = peaks[8:]
    assert after_cut and max(active for active, _ in after_cut) <= 4
