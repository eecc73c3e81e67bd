"""Which settings each hosted model takes, in one table: the 2026 rules for reasoning models.

A provider asks `find(endpoint, model)` for its model's Rule once, then `settings` for
what a request carries (recorded in the condition; a setting the model does not take is
refused with one line, never dropped) and `chat_fields` / `messages_fields` for how the
SDK sends it. The first rule that matches wins. Data only: no SDK is imported here, so
--dry-run reads the answer budgets without building a client.

A user's endpoints TOML (providers/endpoints.py) can give a model another rule:

    [rules."mylab:*-reasoner"]        # ENDPOINT:MODEL, * and ? match anything
    like = "deepseek-reasoner"        # the name of a rule below
    max_tokens = 65536                # optional: its default answer budget
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, NamedTuple

from qmkar.defaults import MAX_TOKENS, REASONING_MAX_TOKENS, TEMPERATURE
from qmkar.errors import ProviderError
from qmkar.providers.endpoints import endpoints_file

ANY = frozenset({"*"})  # every endpoint
MIN_THINKING_BUDGET = 1024  # Anthropic's floor for budget_tokens
# How a rule sends --reasoning-effort and --thinking-budget (None: the model takes none).
Effort = Literal["reasoning_effort", "output_config.effort", "reasoning.effort"] | None
Budget = Literal["thinking.budget_tokens", "google.thinking_budget", "reasoning.max_tokens"] | None
# temperature: "default" sends TEMPERATURE unless given; "unset" sends only a given one;
# "refused" and "ignored" refuse a given one (the API rejects it, or accepts and disregards it).
Temperature = Literal["default", "unset", "refused", "ignored"]


class Rule(NamedTuple):
    name: str
    endpoints: frozenset[str]
    pattern: str  # searched in the model id, lower case
    max_tokens: int  # the default answer budget (reasoning included)
    temperature: Temperature = "default"
    effort: Effort = None
    budget: Budget = None
    budget_param: str = "max_tokens"  # the field the budget is sent in
    exclusive: bool = False  # effort and budget are two ways to say one thing: give one
    responses_only: bool = False  # the model has no chat completions: refused, with a line saying so
    thinking_max_tokens: int | None = None  # the budget when thinking is on (Anthropic)


RULES: tuple[Rule, ...] = (
    # OpenAI models served only by the Responses API (their model pages list v1/responses and no
    # v1/chat/completions): https://platform.openai.com/docs/models/o1-pro, .../o3-pro, .../gpt-5-pro,
    # .../gpt-5-codex, .../o3-deep-research, .../computer-use-preview. qmkar sends chat completions.
    Rule("openai-responses-only", frozenset({"openai"}),
         r"^(o\d+-pro|gpt-\d+(\.\d+)?-(pro|codex)|codex-|o\d+(-mini)?-deep-research|computer-use)",
         REASONING_MAX_TOKENS, responses_only=True),
    # OpenAI o-series and gpt-5 onwards (gpt-5.x, gpt-6...): max_completion_tokens (max_tokens is
    # refused), reasoning_effort (none...max, per the openai 3.x SDK's ReasoningEffort), no
    # temperature (HTTP 400 "Unsupported parameter"); "reserve at least 25,000 tokens for reasoning
    # and outputs": https://developers.openai.com/api/docs/guides/reasoning
    Rule("openai-reasoning", frozenset({"openai"}), r"^(o\d+|gpt-([5-9]|\d\d))", REASONING_MAX_TOKENS,
         temperature="refused", effort="reasoning_effort", budget_param="max_completion_tokens"),
    # Claude Opus 4.7 and later: adaptive thinking only (thinking.type "enabled" with budget_tokens
    # is a 400), output_config.effort sets the depth, temperature/top_p/top_k are refused:
    # https://platform.claude.com/docs/en/about-claude/models/migration-guide#migrating-to-claude-opus-4-7
    # and https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-adaptive-thinking.html
    Rule("anthropic-effort", frozenset({"anthropic"}),
         r"^claude-(opus-4-([7-9]|\d\d)|mythos|fable|(opus|sonnet|haiku)-[5-9])", MAX_TOKENS,
         temperature="refused", effort="output_config.effort", thinking_max_tokens=REASONING_MAX_TOKENS),
    # Claude 3.7 and the 4.x models before Opus 4.7: extended thinking with budget_tokens, at least
    # 1,024 and below max_tokens; thinking is not compatible with temperature:
    # https://platform.claude.com/docs/en/build-with-claude/extended-thinking
    Rule("anthropic-thinking", frozenset({"anthropic"}), r"^claude-(3-7|(opus|sonnet|haiku)-4)", MAX_TOKENS,
         budget="thinking.budget_tokens"),
    # Older Claude models (3, 3.5): no thinking.
    Rule("anthropic", frozenset({"anthropic"}), r"", MAX_TOKENS),
    # deepseek-reasoner: reasoning_content beside content; temperature, top_p... "will not trigger
    # an error but will also have no effect"; max_tokens defaults to 32K, at most 64K:
    # https://api-docs.deepseek.com/guides/reasoning_model
    Rule("deepseek-reasoner", frozenset({"deepseek"}), r"^deepseek-reasoner", REASONING_MAX_TOKENS,
         temperature="ignored"),
    # Gemini through its OpenAI-compatible endpoint: reasoning_effort (Gemini 3: a thinking level;
    # 2.5: a budget), or extra_body google.thinking_config.thinking_budget; the two overlap and
    # cannot be used together: https://ai.google.dev/gemini-api/docs/openai#thinking. Gemini 3:
    # keep temperature at its default 1.0: https://ai.google.dev/gemini-api/docs/gemini-3
    Rule("gemini-3", frozenset({"gemini"}), r"^gemini-3", REASONING_MAX_TOKENS, temperature="unset",
         effort="reasoning_effort", budget="google.thinking_budget", exclusive=True),
    Rule("gemini-thinking", frozenset({"gemini"}), r"^gemini-2\.5", REASONING_MAX_TOKENS,
         effort="reasoning_effort", budget="google.thinking_budget", exclusive=True),
    # OpenRouter: one `reasoning` object for every vendor, {"effort": ...} or {"max_tokens": N},
    # not both; the text comes back as message.reasoning:
    # https://openrouter.ai/docs/use-cases/reasoning-tokens
    Rule("openrouter-reasoning", frozenset({"openrouter"}),
         r"(^|/)(o\d|gpt-([5-9]|\d\d))|reasoner|(^|[-/_])r1($|[-_])|thinking|qwq|gemini-(2\.5|3)",
         REASONING_MAX_TOKENS, temperature="unset", effort="reasoning.effort",
         budget="reasoning.max_tokens", exclusive=True),
    Rule("openrouter", frozenset({"openrouter"}), r"", MAX_TOKENS, effort="reasoning.effort",
         budget="reasoning.max_tokens", exclusive=True),
    # Open reasoning models on any other compatible server (DeepSeek R1, QwQ, "thinking"
    # variants) think inside the chat completion: they get room for it.
    Rule("open-reasoning", ANY, r"reasoner|(^|[-/_])r1($|[-_])|thinking|qwq", REASONING_MAX_TOKENS),
    Rule("chat", ANY, r"", MAX_TOKENS),
)
BY_NAME = {rule.name: rule for rule in RULES}


def _matches(rule: Rule, endpoint: str, model: str) -> bool:
    return (rule.endpoints == ANY or endpoint in rule.endpoints) and bool(re.search(rule.pattern, model))


def find(endpoint: str, model: str, reasoning: bool | None = None,
         file: Path | str | None = None) -> Rule:
    """The rule for `model` at `endpoint`: the user's [rules] first, then an endpoint's
    `reasoning = true/false`, then the table. The model id's last '/' part is matched for
    every endpoint but OpenRouter, whose ids name the vendor (openai/o3)."""
    for pattern, rule in load_overrides(file).items():
        if fnmatch.fnmatchcase(f"{endpoint}:{model}", pattern):
            return rule
    if reasoning is not None:
        return BY_NAME["openai-reasoning" if reasoning else "chat"]._replace(endpoints=ANY)
    name = model.lower() if endpoint == "openrouter" else model.rsplit("/", 1)[-1].lower()
    return next(rule for rule in RULES if _matches(rule, endpoint, name))


def load_overrides(file: Path | str | None = None) -> dict[str, Rule]:
    """The user's [rules."ENDPOINT:MODEL"] tables, as rules ({} without a file)."""
    path = endpoints_file(file)
    if path is None or not path.is_file():
        return {}
    try:
        tables = tomllib.loads(path.read_text(encoding="utf-8")).get("rules") or {}
    except tomllib.TOMLDecodeError:
        return {}  # the endpoints loader reports a broken file, with its line
    found: dict[str, Rule] = {}
    for pattern, table in tables.items():
        where = f"endpoints file {path}: [rules.\"{pattern}\"]"
        if not isinstance(table, dict) or table.get("like") not in BY_NAME:
            raise ProviderError(f"{where} needs like = one of {', '.join(BY_NAME)}")
        if set(table) - {"like", "max_tokens"}:
            raise ProviderError(f"{where} has unknown keys {sorted(set(table) - {'like', 'max_tokens'})}; "
                                "allowed: like, max_tokens")
        rule = BY_NAME[table["like"]]._replace(endpoints=ANY)
        if "max_tokens" in table:
            if not isinstance(table["max_tokens"], int) or table["max_tokens"] < 1:
                raise ProviderError(f"{where}: max_tokens must be a whole number of tokens above 0")
            rule = rule._replace(max_tokens=table["max_tokens"])
        found[pattern] = rule
    return found


def default_max_tokens(rule: Rule, settings: dict[str, Any]) -> int:
    """The answer budget a request gets when the user set none."""
    budget = settings.get("thinking_budget")
    if budget is not None and rule.budget == "thinking.budget_tokens":
        return int(budget) + MAX_TOKENS  # thinking comes out of max_tokens: leave the answer its room
    thinking = settings.get("reasoning_effort") is not None and rule.effort == "output_config.effort"
    return rule.thinking_max_tokens if thinking and rule.thinking_max_tokens else rule.max_tokens


def settings(rule: Rule, name: str, given: dict[str, Any]) -> dict[str, Any]:
    """The settings a request carries, as the condition records them; one ProviderError
    line for a setting the model does not take."""
    chosen = {k: v for k, v in given.items() if v is not None}
    if rule.responses_only:
        raise ProviderError(f"{name} is served only by OpenAI's Responses API, which qmkar does not "
                            "send to; ask a chat-completions model instead (gpt-5, o3, o4-mini...)")
    effort, budget = chosen.get("reasoning_effort"), chosen.get("thinking_budget")
    if effort is not None and rule.effort is None:
        hint = " (Claude's extended thinking takes --thinking-budget)" if rule.budget else ""
        raise ProviderError(f"{name} takes no --reasoning-effort{hint}; leave it out")
    if budget is not None and rule.budget is None:
        hint = " (it takes --reasoning-effort)" if rule.effort else ""
        raise ProviderError(f"{name} takes no --thinking-budget{hint}; leave it out")
    if effort is not None and budget is not None and rule.exclusive:
        raise ProviderError(f"{name}: --reasoning-effort and --thinking-budget set the same thing here; "
                            "give one")
    thinking = budget is not None and rule.budget == "thinking.budget_tokens"
    if "temperature" in chosen:
        if rule.temperature == "refused":
            raise ProviderError(f"{name} is a reasoning model and takes no --temperature; leave it out "
                                "(or ask it in a separate run)")
        if rule.temperature == "ignored":
            raise ProviderError(f"{name} ignores --temperature (its API accepts and disregards it); "
                                "leave it out so the record says what was really used")
        if thinking:
            raise ProviderError(f"{name} with --thinking-budget takes no --temperature (extended "
                                "thinking samples at the default); leave one out")
    elif rule.temperature == "default" and not thinking:
        chosen["temperature"] = TEMPERATURE
    if thinking and budget is not None:
        if budget < MIN_THINKING_BUDGET:
            raise ProviderError(f"{name}: --thinking-budget must be at least {MIN_THINKING_BUDGET:,} "
                                f"tokens (Anthropic's minimum), not {budget:,}")
        if chosen.get("max_tokens") is not None and chosen["max_tokens"] <= budget:
            raise ProviderError(f"{name}: --max-tokens ({chosen['max_tokens']:,}) must be above "
                                f"--thinking-budget ({budget:,}): the thinking comes out of it")
    chosen["max_tokens"] = chosen.get("max_tokens") or default_max_tokens(rule, chosen)
    return chosen


def chat_fields(rule: Rule, settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(arguments, extra body) of a chat completion carrying `settings`."""
    arguments: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if settings.get("max_tokens") is not None:
        arguments[rule.budget_param] = settings["max_tokens"]
    for key in ("temperature", "seed", "top_p"):
        if settings.get(key) is not None:
            arguments[key] = settings[key]
    effort, budget = settings.get("reasoning_effort"), settings.get("thinking_budget")
    if effort is not None:
        if rule.effort == "reasoning.effort":
            extra["reasoning"] = {"effort": effort}
        else:
            arguments["reasoning_effort"] = effort
    if budget is not None:
        if rule.budget == "reasoning.max_tokens":
            extra["reasoning"] = {"max_tokens": budget}
        elif rule.budget == "google.thinking_budget":
            # Gemini reads its own options from a body field named extra_body (the docs' example
            # passes extra_body={"extra_body": {"google": ...}} through the SDK).
            extra["extra_body"] = {"google": {"thinking_config": {"thinking_budget": budget}}}
    return arguments, extra


def messages_fields(rule: Rule, settings: dict[str, Any]) -> dict[str, Any]:
    """The body fields of an Anthropic message carrying `settings` (no seed: Claude takes none)."""
    fields: dict[str, Any] = {"max_tokens": settings.get("max_tokens", rule.max_tokens)}
    if settings.get("temperature") is not None:
        fields["temperature"] = settings["temperature"]
    if settings.get("thinking_budget") is not None:
        fields["thinking"] = {"type": "enabled", "budget_tokens": settings["thinking_budget"]}
    if settings.get("reasoning_effort") is not None:
        fields["thinking"] = {"type": "adaptive"}
        fields["output_config"] = {"effort": settings["reasoning_effort"]}
    return fields
