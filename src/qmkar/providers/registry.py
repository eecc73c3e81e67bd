"""Model names to providers: which provider a --model name means, its API key, and how to
build it.

Each prefix maps to a "module:factory" string that is imported only when a name with
that prefix is resolved, so importing the registry (or running offline) loads no SDK. A
hosted provider's key is read here, before its module is imported: a missing key is said
at once, not after the second or more an SDK takes to import.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from typing import Any

from qmkar.errors import ProviderError
from qmkar.providers.base import Provider
from qmkar.providers.endpoints import ENDPOINTS, find, load_endpoints

# A factory takes (model, options): `model` is the text after "prefix:" (may be empty);
# options["provider"] is the prefix itself, so one factory can serve several names.
Factory = Callable[[str, dict[str, Any]], Provider]

# The factory of every OpenAI-compatible endpoint, built-in or from the user's file.
COMPATIBLE = "qmkar.providers.openai:create_compatible"

# prefix -> "module:factory", the built-in endpoints included.
PROVIDERS: dict[str, str] = {
    "oracle": "qmkar.providers.oracle:create",
    "replay": "qmkar.providers.replay:create",
    "sim": "qmkar.providers.sim:create",
    "openai": "qmkar.providers.openai:create",
    "anthropic": "qmkar.providers.anthropic:create",
    **{name: COMPATIBLE for name in ENDPOINTS},
}
# Providers that answer on this machine: no endpoint, no key, no connection options.
OFFLINE = frozenset({"oracle", "replay", "sim"})
# The variable each hosted provider of its own reads its key from (an endpoint's is in its
# entry); --api-key-env names another.
KEY_VARIABLES: dict[str, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

# Short descriptions for `qmkar models` and for the unknown-name error.
DESCRIPTIONS: dict[str, str] = {
    "oracle": "always answers correctly (offline; proves the pipeline)",
    "replay": "replay:PATH answers from a JSONL file of {\"id\", \"answer\"} (offline)",
    "sim": "sim:MEMORY[?opt=val&...] a simulated memory (softmax, linear, gla, delta, gated-delta, "
    "window, hybrid) that reads the prompt (offline; docs/theory.md)",
    "openai": f"OpenAI chat completions (gpt-4o, o1, o3-mini...); key in {KEY_VARIABLES['openai']}",
    "anthropic": "Anthropic messages (claude-sonnet-4-6, claude-opus-4-7...); key in "
    f"{KEY_VARIABLES['anthropic']}",
    **{name: endpoint.description for name, endpoint in ENDPOINTS.items()},
}

# Bare model names that need no "provider:" in front, by how they start.
BARE_NAMES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(gpt-|chatgpt-|o\d($|-))"), "openai"),
    (re.compile(r"^claude-"), "anthropic"),
    (re.compile(r"^deepseek-"), "deepseek"),
    (re.compile(r"^gemini-"), "gemini"),
    (re.compile(r"^minimax-", re.IGNORECASE), "minimax"),
)


def split_name(name: str) -> tuple[str, str]:
    """Split 'provider:model' into its parts; a bare name is (name, '')."""
    prefix, _, rest = name.partition(":")
    return prefix.strip(), rest.strip()


def canonical(name: str, options: dict[str, Any] | None = None) -> tuple[str, str]:
    """(provider prefix, model) for a name as the user wrote it.

    'provider:model' always works (the user's endpoints file included); a bare name
    resolves by how it starts (gpt-4o -> openai, claude-... -> anthropic); any other bare
    name goes to the OpenAI-compatible --base-url when one was given.
    """
    options = options or {}
    prefix, rest = split_name(name)
    if ":" in name:
        if prefix in PROVIDERS:
            return prefix, rest
        if prefix in load_endpoints(options.get("endpoints_file")):
            return prefix, rest
    elif name in PROVIDERS:
        return name, ""
    else:
        for pattern, provider in BARE_NAMES:
            if pattern.match(name):
                return provider, name
        if options.get("base_url"):
            return "openai", name
    known = ", ".join(sorted(PROVIDERS))
    raise ProviderError(
        f"unknown model {name!r}: no provider named {prefix!r}. Known providers: {known} "
        "(write provider:model, e.g. openai:gpt-4o or together:meta-llama/...; "
        "bare gpt-*, o1/o3/o4*, claude-*, deepseek-*, gemini-*, MiniMax-* names work too; "
        "`qmkar models` lists them)"
    )


def factory(prefix: str) -> Factory:
    """The factory for a prefix, importing its module (and so its SDK) now."""
    module_name, _, factory_name = PROVIDERS.get(prefix, COMPATIBLE).partition(":")
    built: Factory = getattr(importlib.import_module(module_name), factory_name)
    return built


def key_variable(prefix: str, options: dict[str, Any]) -> str | None:
    """The environment variable a hosted provider's key is read from: --api-key-env, else
    the provider's own. None when it takes no key: openai given a --base-url (a local server),
    an endpoint whose entry names no variable, or a name that is no endpoint (its factory
    says so)."""
    if options.get("api_key_env"):
        return str(options["api_key_env"])
    if prefix == "openai" and options.get("base_url"):
        return None
    if prefix in KEY_VARIABLES:
        return KEY_VARIABLES[prefix]
    endpoint = find(prefix, options)
    return endpoint.key_env if endpoint is not None else None


def read_key(variable: str | None, provider: str) -> str | None:
    """The API key from the environment, or one clear error saying which variable to set."""
    if variable is None:
        return None
    key = os.environ.get(variable, "").strip()
    if not key:
        raise ProviderError(
            f"{provider} needs an API key: set {variable} (export {variable}=...) and run again"
        )
    return key


def canonical_or_name(name: str, options: dict[str, Any] | None = None) -> tuple[str, str]:
    """(provider prefix, model) of a name, or (its prefix, the name) when it no longer
    resolves (a transcript read where its endpoints file is gone)."""
    try:
        return canonical(name, options)
    except ProviderError:
        return split_name(name)[0] or name, name


def resolve(name: str, options: dict[str, Any] | None = None) -> Provider:
    """The provider for a model name such as 'gpt-4o', 'deepseek:deepseek-chat' or 'oracle'."""
    # Options left unset on the command line are not options at all.
    options = {key: value for key, value in (options or {}).items() if value is not None}
    prefix, rest = canonical(name, options)
    if prefix in OFFLINE:
        # Connection settings (--base-url, --timeout...) are for the hosted models of the
        # same run; an offline model's own options are in its name (sim:delta?d=256).
        options = {}
    else:
        options["provider"] = prefix
        options["api_key"] = read_key(key_variable(prefix, options), prefix)
    create = factory(prefix)
    provider = create(rest, options)
    provider.name = name
    return provider
