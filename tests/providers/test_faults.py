"""The real openai and anthropic SDKs against the fault server: each fault ends as the rules say."""

from __future__ import annotations

import asyncio

import pytest

from qmkar.asking import Sending, ask
from qmkar.defaults import REASONING_MAX_TOKENS
from qmkar.errors import ProviderError
from qmkar.providers.base import ModelRequest
from qmkar.providers.registry import resolve
from qmkar.render import default_template, render
from tests.support.fakeserver import RETRYABLE
from tests.support.hosted import items, policy

QUESTION = items(1)[0]


def first_then_fine(fault: str):
    return lambda body, seen: fault if seen == 0 else None


def always(fault: str):
    return lambda body, seen: fault


def openai_provider(server, name="openai:gpt-4o", **options):
    options = {"base_url": server.base_url, "api_key_env": "FAKE_API_KEY", "timeout": 5, **options}
    return resolve(name, options)


def anthropic_provider(server, name="claude-3-5-sonnet-20241022", **options):
    return resolve(name, {"base_url": server.root_url, "timeout": 5, **options})


def ask_once(provider, sending, settings=None):
    settings = provider.settings_for(settings or {"seed": 0})
    request = ModelRequest(messages=render(QUESTION, default_template("qmkar")), settings=settings)
    return ask_request(provider, request, sending)


def ask_request(provider, request, sending):
    """ask() once with this request, the provider's client closed after."""
    async def go():
        try:
            return await ask(provider, QUESTION, request, sending)
        finally:
            await provider.aclose()

    return asyncio.run(go())


OPENAI_KIND = {"429": "http_429", "429-date": "http_429", "429-ms": "http_429", "429-reset": "http_429",
               "500": "http_500", "502": "http_502", "503": "http_503", "529": "http_529",
               "reset": "connection", "hang": "timeout", "malformed": "bad_response", "empty": "bad_response"}


@pytest.mark.parametrize("fault", sorted(RETRYABLE))
def test_openai_retryable_fault_is_retried_then_answered(server, keyed, fault):
    server.script = first_then_fine(fault)
    # Long enough for a slow shared machine to answer, short enough to wait out a hang.
    timeout = 2.0 if fault == "hang" else 10.0
    retry, _ = policy(timeout=timeout)
    response, attempts, error, fatal = ask_once(openai_provider(server, timeout=timeout), Sending(retry))
    assert error is None and not fatal
    assert response.text == "1234"
    assert [a.error.kind if a.error else None for a in attempts] == [OPENAI_KIND[fault], None]
    assert len(server.requests) == 2


@pytest.mark.parametrize("fault", ["400", "404", "422", "429-quota", "401", "403"])
def test_openai_non_retryable_fault_is_tried_once(server, keyed, fault):
    server.script = always(fault)
    retry, sleeps = policy()
    response, attempts, error, fatal = ask_once(openai_provider(server), Sending(retry))
    assert response is None
    assert len(attempts) == 1 and len(server.requests) == 1 and sleeps.waits == []
    assert error.status == int(fault[:3])
    # A bad key, no access or no money stops the model's run; a bad request does not.
    assert fatal == (fault in ("401", "403", "429-quota"))


def test_retries_stop_at_max_retries_and_say_so(server, keyed):
    server.script = always("503")
    retry, sleeps = policy(max_retries=3)
    response, attempts, error, fatal = ask_once(openai_provider(server), Sending(retry))
    assert response is None and not fatal
    assert len(attempts) == 4 and len(server.requests) == 4 and len(sleeps.waits) == 3
    assert error.kind == "http_503" and "gave up after 4 attempts" in error.message


def test_retry_after_is_honoured_else_exponential_backoff(server, keyed):
    faults = iter(["429", "500", "500"])
    server.script = lambda body, seen: next(faults, None)
    retry, sleeps = policy(initial_wait=2.0, max_wait=100.0)
    response, attempts, error, _ = ask_once(openai_provider(server), Sending(retry))
    assert error is None and len(attempts) == 4
    # Retry-After: 0 is taken at its word; the 500s (attempts 2 and 3) back off
    # exponentially, 2 s * 2^(attempt-1), plus up to 2 s of jitter.
    assert sleeps.waits[0] == 0.0
    assert 4.0 <= sleeps.waits[1] <= 6.0 and 8.0 <= sleeps.waits[2] <= 10.0


def test_total_budget_bounds_retries(server, keyed):
    server.script = always("hang")
    retry, _ = policy(max_retries=50, timeout=0.2, budget=1.5, initial_wait=0.01)
    response, attempts, error, _ = ask_once(openai_provider(server, timeout=5), Sending(retry))
    assert response is None and error.kind == "timeout"
    assert 2 <= len(attempts) <= 8  # 0.2 s attempts inside a 1.5 s budget, never 51


def test_reasoning_only_reply_is_an_empty_answer_with_reasoning_kept(server, keyed):
    server.script = always("reasoning-only")
    retry, _ = policy()
    response, attempts, error, _ = ask_once(openai_provider(server, name="deepseek-reasoner"), Sending(retry))
    assert error is None and response.text == ""
    assert response.reasoning == "thinking about 1234"


def test_openai_usage_and_settings_as_sent(server, keyed):
    retry, _ = policy()
    response, _, _, _ = ask_once(openai_provider(server), Sending(retry))
    assert response.usage.model_dump() == {
        "input_tokens": 100, "output_tokens": 7, "reasoning_tokens": 3, "cached_tokens": 40}
    sent = server.requests[0]["body"]
    assert (sent["temperature"], sent["max_tokens"], sent["seed"]) == (0.0, 1024, 0)
    assert sent["messages"][-1]["role"] == "user"


def test_openai_body_arrives_as_the_json_the_sdk_would_have_written(server, keyed):
    """qmkar encodes the body itself (msgspec) and hands the SDK bytes: the server must read
    the same JSON, declared as JSON, with non-ASCII and control characters intact."""
    retry, _ = policy()
    provider = openai_provider(server)
    text = 'k: 1, v: 2\n\t"quoted" \\ caf\u00e9 \u2028 \x01 \U0001F600'
    request = ModelRequest(messages=[{"role": "user", "content": text}],
                           settings=provider.settings_for({"seed": 0, "temperature": 0.7}))
    ask_request(provider, request, Sending(retry))
    sent = server.requests[0]
    assert sent["headers"]["content-type"] == "application/json"
    assert sent["body"] == {"model": "gpt-4o", "messages": [{"role": "user", "content": text}],
                            "temperature": 0.7, "max_tokens": 1024, "seed": 0}


def test_reasoning_model_gets_max_completion_tokens_and_no_temperature(server, keyed):
    retry, _ = policy()
    provider = openai_provider(server, name="o1")
    with pytest.raises(ProviderError, match="takes no --temperature"):
        provider.settings_for({"temperature": 0.5, "seed": 0})
    ask_once(provider, Sending(retry), {"reasoning_effort": "high", "seed": 0})
    sent = server.requests[0]["body"]
    assert "temperature" not in sent and "max_tokens" not in sent
    assert sent["max_completion_tokens"] == REASONING_MAX_TOKENS and sent["reasoning_effort"] == "high"


@pytest.mark.parametrize("fault, kind", [("529", "http_529"), ("503", "http_503"), ("429-ms", "http_429"),
                                         ("reset", "connection"), ("malformed", "bad_response"),
                                         ("empty", "bad_response")])
def test_anthropic_retryable_fault_is_retried(server, keyed, fault, kind):
    server.script = first_then_fine(fault)
    retry, _ = policy()
    response, attempts, error, _ = ask_once(anthropic_provider(server), Sending(retry))
    assert error is None and response.text == "1234"
    assert attempts[0].error.kind == kind


def test_anthropic_bad_key_is_fatal_at_once(server, keyed):
    server.script = always("401")
    retry, _ = policy()
    response, attempts, error, fatal = ask_once(anthropic_provider(server), Sending(retry))
    assert fatal and len(attempts) == 1 and error.status == 401


def test_anthropic_thinking_is_reasoning_never_the_answer(server, keyed):
    retry, _ = policy()
    response, _, error, _ = ask_once(anthropic_provider(server, "claude-sonnet-4-6"), Sending(retry),
                                     {"seed": 0, "thinking_budget": 2000})
    assert error is None
    assert response.text == "1234" and response.reasoning == "I recall 9999 1234"
    sent = server.requests[0]["body"]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert "temperature" not in sent and sent["max_tokens"] >= 2000
    assert response.usage.input_tokens == 100 and response.usage.cached_tokens == 10


def test_anthropic_system_message_goes_to_system(server, keyed):
    retry, _ = policy()
    provider = anthropic_provider(server)
    request = ModelRequest(messages=[{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "Hi"}],
                           settings=provider.settings_for({}))
    ask_request(provider, request, Sending(retry))
    sent = server.requests[0]["body"]
    assert sent["system"] == "Be brief." and [m["role"] for m in sent["messages"]] == ["user"]
    assert sent["temperature"] == 0.0 and "seed" not in sent


def test_a_halted_run_makes_no_further_attempts(server, keyed):
    server.script = always("503")
    retry, _ = policy(max_retries=5)
    sending = Sending(retry)
    sending.halted = True  # as after Ctrl-C
    response, attempts, error, _ = ask_once(openai_provider(server), sending)
    assert response is None and len(attempts) == 1 and error.kind == "http_503"
