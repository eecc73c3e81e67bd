"""The Provider base class and the request/response records it speaks.

Every model qmkar can ask, hosted or offline, subclasses Provider: an async `generate`
plus the hooks the runner, the cache and batch mode call (a provider with a batch API
overrides the batch hooks; the defaults say it has none). SDK types never leave a
provider's module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import Field

from qmkar.defaults import CONCURRENCY
from qmkar.deferred import DeferredModel
from qmkar.errors import ProviderCallError, ProviderError
from qmkar.tasks.base import Item


class Usage(DeferredModel):
    """Token counts for one answer, as the provider reported them."""

    input_tokens: int | None = Field(default=None, description="Prompt tokens.")
    output_tokens: int | None = Field(default=None, description="Completion tokens, reasoning included.")
    reasoning_tokens: int | None = Field(default=None, description="Of output_tokens, spent reasoning.")
    cached_tokens: int | None = Field(default=None, description="Of input_tokens, read from a cache.")


class ModelRequest(DeferredModel):
    """What is sent to a model for one item."""

    messages: list[dict[str, str]] = Field(description="Chat messages as sent.")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Generation settings (temperature, max tokens...)."
    )


class ModelResponse(DeferredModel):
    """What came back: the final answer text kept apart from any reasoning."""

    text: str = Field(description="The final answer text; parsing reads only this.")
    reasoning: str | None = Field(default=None, description="Reasoning or thinking text, if any.")
    usage: Usage | None = Field(default=None, description="Token usage, when the provider reports it.")
    model: str | None = Field(default=None, description="The model name the provider reported.")
    truncated: bool = Field(
        default=False, description="The answer stopped at the output limit (the provider's finish "
        "reason length, max_tokens or a full context window).")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Provider-specific details worth keeping (finish reason...)."
    )


class Identity(NamedTuple):
    """Who answers a request: what a condition records of its provider."""

    provider: str  # prefix: openai, anthropic, deepseek, sim, oracle, replay...
    endpoint: str | None  # the address requests go to; None when answered on this machine
    model: str  # the model as its provider knows it


class BatchLimits(NamedTuple):
    """The most one batch may hold."""

    requests: int
    bytes: int  # of the requests as sent (the uploaded file, or the request body)


class BatchRef(NamedTuple):
    """A batch the provider accepted."""

    id: str
    input_file_id: str | None = None  # OpenAI: the uploaded file of requests


class BatchStatus(DeferredModel):
    """Where a batch stands, in the provider's words and in counts."""

    id: str = Field(description="The provider's batch id.")
    status: str = Field(description="The provider's status, lower case (validating, in_progress, "
                        "finalizing, completed, failed, expired, cancelling, cancelled; Anthropic: "
                        "in_progress, canceling, ended).")
    ended: bool = Field(description="No more results will come: collect them now.")
    total: int = Field(default=0, description="Requests in the batch.")
    done: int = Field(default=0, description="Requests finished so far (Anthropic: only at the end).")
    failed: int = Field(default=0, description="Of those finished, how many have no answer.")
    message: str | None = Field(default=None, description="Why the whole batch failed, when it did.")


class BatchResult(NamedTuple):
    """One request's outcome inside a batch: an answer or why there is none."""

    custom_id: str
    response: ModelResponse | None
    error: ProviderCallError | None


class Provider(ABC):
    """A model qmkar can ask. `name` is the full model name as the user wrote it.

    Only `generate` must be written; the other hooks' defaults fit a model that answers
    on this machine (sent no settings, named by its name, never cached, nothing to close).
    """

    name: str
    # Questions in flight at once when the run's --concurrency is not given.
    default_concurrency: int = CONCURRENCY

    @abstractmethod
    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        """Answer one request. Raise ProviderCallError when the request fails.

        `item` is passed so that offline providers (oracle, replay) can look up an
        answer; providers that model a real reader use only `request.messages`.
        """

    async def aclose(self) -> None:
        """Release connections; called once after the run."""
        return None

    def settings_for(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The generation settings this model is really sent, as conditions record them.

        Hosted providers fill in their own defaults and refuse, with a ProviderError, a
        setting their model does not take. A model answered on this machine is sent none:
        sampling settings cannot change its answers, so none are recorded.
        """
        return {}

    def identity(self) -> Identity:
        """Who answers, as a condition records it: provider, endpoint address, model.

        By default the model name says it all and nothing goes over the network
        (oracle); a hosted provider names its endpoint and address, a simulated memory its
        options, a replay file its content."""
        prefix, _, rest = self.name.partition(":")
        return Identity(prefix, None, rest or prefix)

    def cache_identity(self) -> dict[str, str] | None:
        """What names this model in the response cache's key; None: never cache its answers.

        Hosted providers return {"endpoint", "base_url", "model"}; an offline answer costs
        nothing to compute again, so by default nothing is cached.
        """
        return None

    # ---- batch mode: a provider with a batch API overrides all of these -------------------

    def batch_limits(self) -> BatchLimits | None:
        """The most one batch may hold; None: this provider has no batch API (the default)."""
        return None

    def batch_request(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        """One request as a batch holds it (plain JSON), named by `custom_id`."""
        raise self.no_batch_api()

    async def submit_batch(self, requests: list[dict[str, Any]], marker: str) -> BatchRef:
        """Submit requests made by batch_request as one batch; `marker` tags it where the
        API allows (find_batch looks for it). Raises ProviderCallError."""
        raise self.no_batch_api()

    async def find_batch(self, marker: str, count: int, since: datetime, known: set[str]) -> BatchRef | None:
        """A batch submitted since `since` that a lost reply may have created: tagged with
        `marker`, or else holding `count` requests and not one of `known`."""
        raise self.no_batch_api()

    async def batch_status(self, batch_id: str) -> BatchStatus:
        raise self.no_batch_api()

    def batch_results(self, batch_id: str) -> AsyncIterator[BatchResult]:
        """Every result an ended batch holds, in the provider's order (not the submission's);
        requests it has no line for have none."""
        raise self.no_batch_api()

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        """Ask the provider to stop a batch; what it finished stays collectable."""
        raise self.no_batch_api()

    def no_batch_api(self) -> ProviderError:
        return ProviderError(f"{self.name} has no batch API; run it without --batch")
