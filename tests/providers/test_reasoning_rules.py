"""Every rule of providers/rules.py by the request it produces: sent through the real SDK
to the loopback server, which records the body as it arrived."""

from __future__ import annotations

import asyncio

import pytest

from qmkar.defaults import MAX_TOKENS, REASONING_MAX_TOKENS
from qmkar.errors import ProviderError
from qmkar.providers import rules
from qmkar.providers.base import ModelRequest
from qmkar.providers.registry import resolve
from qmkar.render import default_template, render
from tests.support.hosted import items

QUESTION = items(1)[0]


def provider_for(server, name, **options):
    anthropic = name.startswith(("claude-", "anthropic:"))
    base = {"base_url": server.root_url if anthropic else server.base_url, "timeout": 5}
    if not anthropic:
        base["api_key_env"] = "FAKE_API_KEY"
    return resolve(name, {**base, **options})


def sent(server, name, given=None, **options):
    """(settings recorded, body received) for one question asked of `name` with `given`."""
    provider = provider_for(server, name, **options)
    settings = provider.settings_for({"seed": 0, **(given or {})})
    request = ModelRequest(messages=render(QUESTION, default_template("qmkar")), settings=settings)

    async def go():
        try:
            return await provider.generate(QUESTION, request)
        finally:
            await provider.aclose()

    response = asyncio.run(go())
    return settings, server.requests[-1]["body"], response


def refused(server, name, given, said):
    before = len(server.requests)
    with pytest.raises(ProviderError, match=said):
        provider_for(server, name).settings_for({"seed": 0, **given})
    assert len(server.requests) == before


def test_a_chat_model_gets_greedy_sampling_a_short_budget_and_the_seed(server, keyed):
    settings, body, _ = sent(server, "gpt-4o")
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.0, MAX_TOKENS, 0)
    assert "max_completion_tokens" not in body and "reasoning_effort" not in body
    refused(server, "gpt-4o", {"reasoning_effort": "low"}, "takes no --reasoning-effort")


@pytest.mark.parametrize("model", ["o3", "gpt-5", "o4-mini"])
def test_openai_reasoning_models_take_max_completion_tokens_and_effort_but_no_temperature(
        server, keyed, model):
    settings, body, _ = sent(server, model, {"reasoning_effort": "high"})
    assert body["max_completion_tokens"] == REASONING_MAX_TOKENS and body["reasoning_effort"] == "high"
    assert "max_tokens" not in body and "temperature" not in body
    assert settings["max_tokens"] == REASONING_MAX_TOKENS
    refused(server, model, {"temperature": 0.0}, "takes no --temperature")


@pytest.mark.parametrize("model", ["o3-pro", "gpt-5-pro", "gpt-5-codex", "o4-mini-deep-research"])
def test_responses_only_models_are_refused_in_one_line(server, keyed, model):
    refused(server, model, {}, "only by OpenAI's Responses API")


def test_claude_with_a_thinking_budget_leaves_room_for_the_answer_and_no_temperature(server, keyed):
    settings, body, response = sent(server, "claude-sonnet-4-6", {"thinking_budget": 2000})
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert body["max_tokens"] == 2000 + MAX_TOKENS and "temperature" not in body and "seed" not in body
    assert response.text == "1234" and response.reasoning.startswith("I recall")
    _, body, _ = sent(server, "claude-sonnet-4-6")  # without thinking: greedy
    assert body["temperature"] == 0.0 and "thinking" not in body and body["max_tokens"] == MAX_TOKENS


@pytest.mark.parametrize("given, said", [
    ({"thinking_budget": 1000}, "at least 1,024"),
    ({"thinking_budget": 4000, "max_tokens": 4000}, "must be above --thinking-budget"),
    ({"thinking_budget": 2000, "temperature": 0.0}, "takes no --temperature"),
    ({"reasoning_effort": "high"}, "takes --thinking-budget"),
])
def test_claude_thinking_budgets_outside_anthropics_rules_are_refused(server, keyed, given, said):
    refused(server, "claude-sonnet-4-6", given, said)


def test_newer_claude_takes_effort_and_adaptive_thinking_not_budgets_or_temperature(server, keyed):
    settings, body, _ = sent(server, "claude-opus-4-7", {"reasoning_effort": "high"})
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "high"}
    assert body["max_tokens"] == REASONING_MAX_TOKENS and "temperature" not in body
    _, body, _ = sent(server, "claude-opus-4-7")
    assert "temperature" not in body and "thinking" not in body and body["max_tokens"] == MAX_TOKENS
    refused(server, "claude-opus-4-7", {"thinking_budget": 2000}, "takes no --thinking-budget")
    refused(server, "claude-opus-4-7", {"temperature": 0.0}, "takes no --temperature")


def test_claude_without_thinking_takes_no_budget(server, keyed):
    _, body, _ = sent(server, "claude-3-5-sonnet-20241022")
    assert body["temperature"] == 0.0 and body["max_tokens"] == MAX_TOKENS
    refused(server, "claude-3-5-sonnet-20241022", {"thinking_budget": 2000}, "takes no --thinking-budget")


def test_deepseek_reasoner_gets_room_no_temperature_and_its_reasoning_kept_apart(server, keyed):
    server.script = lambda body, seen: "reasoning-only"
    settings, body, response = sent(server, "deepseek-reasoner")
    assert body["max_tokens"] == REASONING_MAX_TOKENS and "temperature" not in body
    assert response.reasoning == "thinking about 1234" and response.text == ""
    refused(server, "deepseek-reasoner", {"temperature": 0.0}, "ignores --temperature")


def test_gemini_3_takes_a_thinking_level_or_a_budget_never_both(server, keyed):
    _, body, _ = sent(server, "gemini-3-pro-preview", {"reasoning_effort": "low"})
    assert body["reasoning_effort"] == "low" and "temperature" not in body and "seed" not in body
    assert body["max_tokens"] == REASONING_MAX_TOKENS
    _, body, _ = sent(server, "gemini-3-pro-preview", {"thinking_budget": 800})
    assert body["extra_body"] == {"google": {"thinking_config": {"thinking_budget": 800}}}
    assert "reasoning_effort" not in body
    refused(server, "gemini-3-pro-preview", {"reasoning_effort": "low", "thinking_budget": 800}, "give one")


def test_gemini_2_5_is_greedy_by_default_with_room_to_think(server, keyed):
    _, body, _ = sent(server, "gemini-2.5-pro", {"thinking_budget": 1024})
    assert body["temperature"] == 0.0 and body["max_tokens"] == REASONING_MAX_TOKENS
    assert body["extra_body"]["google"]["thinking_config"]["thinking_budget"] == 1024
    _, body, _ = sent(server, "gemini-1.5-pro")
    assert body["max_tokens"] == MAX_TOKENS and "extra_body" not in body
    refused(server, "gemini-1.5-pro", {"reasoning_effort": "low"}, "takes no --reasoning-effort")


def test_openrouter_sends_one_reasoning_object(server, keyed):
    _, body, _ = sent(server, "openrouter:openai/o3", {"reasoning_effort": "high"})
    assert body["reasoning"] == {"effort": "high"} and "reasoning_effort" not in body
    assert body["max_tokens"] == REASONING_MAX_TOKENS and "temperature" not in body
    _, body, _ = sent(server, "openrouter:meta-llama/llama-3.1-405b-instruct", {"thinking_budget": 2000})
    assert body["reasoning"] == {"max_tokens": 2000} and body["temperature"] == 0.0
    refused(server, "openrouter:openai/o3", {"reasoning_effort": "high", "thinking_budget": 9}, "give one")


def test_open_reasoning_models_elsewhere_get_room_to_think(server, keyed):
    _, body, _ = sent(server, "vllm:deepseek-ai/DeepSeek-R1")
    assert body["max_tokens"] == REASONING_MAX_TOKENS and body["temperature"] == 0.0


def test_a_reasoning_model_that_runs_out_of_room_is_reported_truncated(server, keyed):
    server.script = lambda body, seen: "length"
    _, _, response = sent(server, "o3")
    assert response.truncated and response.text == ""


def test_a_users_endpoints_file_overrides_a_rule(server, keyed, tmp_path):
    file = tmp_path / "endpoints.toml"
    file.write_text('[rules."vllm:my-*"]\nlike = "openai-reasoning"\nmax_tokens = 65536\n')
    _, body, _ = sent(server, "vllm:my-reasoner", {"reasoning_effort": "low"}, endpoints_file=file)
    assert body["max_completion_tokens"] == 65536 and "temperature" not in body
    _, body, _ = sent(server, "vllm:other", endpoints_file=file)
    assert body["max_tokens"] == MAX_TOKENS
    file.write_text('[rules."vllm:*"]\nlike = "no-such-rule"\n')
    with pytest.raises(ProviderError, match="needs like = one of"):
        provider_for(server, "vllm:x", endpoints_file=file)


def test_every_rule_is_named_once_and_the_last_matches_anything():
    assert len(rules.BY_NAME) == len(rules.RULES)
    assert rules.find("somewhere", "any-model").name == "chat"
