"""The Provider interface, the request/response records it speaks, and the registry.

Every model qmkar can ask, hosted or offline, is a Provider: an object with an async
`generate(request) -> ModelResponse`. SDK types never leave a provider's own module.
The registry maps the part of a model name before ':' to a factory that is imported
only when that provider is used, so an offline run never imports an SDK.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from qmkar.errors import ProviderError
from qmkar.tasks.base import Item


class Usage(BaseModel):
    """Token counts for one answer, as the provider reported them."""

    input_tokens: int | None = Field(default=None, description="Prompt tokens.")
    output_tokens: int | None = Field(default=None, description="Completion tokens, reasoning included.")
    reasoning_tokens: int | None = Field(default=None, description="Of output_tokens, spent reasoning.")
    cached_tokens: int | None = Field(default=None, description="Of input_tokens, read from a cache.")


class ModelRequest(BaseModel):
    """What is sent to a model for one item."""

    messages: list[dict[str, str]] = Field(description="Chat messages as sent.")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Generation settings (temperature, max tokens...)."
    )


class ModelResponse(BaseModel):
    """What came back: the final answer text kept apart from any reasoning."""

    text: str = Field(description="The final answer text; parsing reads only this.")
    reasoning: str | None = Field(default=None, description="Reasoning or thinking text, if any.")
    usage: Usage | None = Field(default=None, description="Token usage, when the provider reports it.")
    model: str | None = Field(default=None, description="The model name the provider reported.")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Provider-specific details worth keeping (finish reason...)."
    )


@runtime_checkable
class Provider(Protocol):
    """A model qmkar can ask. `name` is the full model name as the user wrote it."""

    name: str

    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        """Answer one request. Raise ProviderCallError when the request fails.

        `item` is passed so that offline providers (oracle, replay) can look up an
        answer; providers that model a real reader use only `request.messages`.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; called once after the run."""
        ...


# prefix -> "module:factory". A factory takes (model: str, options: dict) where `model`
# is the text after "prefix:" (may be empty) and returns a Provider.
PROVIDERS: dict[str, str] = {
    "oracle": "qmkar.providers.oracle:create",
    "replay": "qmkar.providers.replay:create",
    "sim": "qmkar.providers.sim:create",
}

# Short descriptions for `qmkar models` and for the unknown-name error.
DESCRIPTIONS: dict[str, str] = {
    "oracle": "always answers correctly (offline; proves the pipeline)",
    "replay": "replay:PATH answers from a JSONL file of {\"id\", \"answer\"} (offline)",
    "sim": "sim:MEMORY[?opt=val&...] a simulated memory (softmax, linear, gla, delta, gated-delta, "
    "window, hybrid) that reads the prompt (offline; docs/theory.md)",
}


def split_name(name: str) -> tuple[str, str]:
    """Split 'provider:model' into its parts; a bare name is (name, '')."""
    prefix, _, rest = name.partition(":")
    return prefix.strip(), rest.strip()


def resolve(name: str, options: dict[str, Any] | None = None) -> Provider:
    """The provider for a model name such as 'oracle' or 'replay:answers.jsonl'."""
    prefix, rest = split_name(name)
    target = PROVIDERS.get(prefix)
    if target is None:
        known = ", ".join(sorted(PROVIDERS))
        raise ProviderError(
            f"unknown model {name!r}: no provider named {prefix!r}. Known providers: {known} "
            "(write provider:model, e.g. replay:answers.jsonl; `qmkar models` lists them)"
        )
    module_name, _, factory_name = target.partition(":")
    factory = getattr(importlib.import_module(module_name), factory_name)
    provider = factory(rest, dict(options or {}))
    provider.name = name
    return provider
