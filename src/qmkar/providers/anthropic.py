"""Anthropic's messages API through the official SDK, one at a time or as Message Batches.

The one module that imports the anthropic SDK. Extended thinking (--thinking-budget) is
stored as reasoning, never parsed as the answer. Its client never retries
(max_retries=0); qmkar.retry does.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message
from anthropic.types.messages import MessageBatch, MessageBatchErroredResult, MessageBatchSucceededResult

from qmkar.errors import ProviderCallError, ProviderError
from qmkar.providers import rules
from qmkar.providers.base import (
    BatchLimits,
    BatchRef,
    BatchResult,
    BatchStatus,
    Identity,
    ModelRequest,
    ModelResponse,
    Provider,
    Usage,
)
from qmkar.providers.http import (
    bad_response,
    error_message,
    mask_url,
    no_batch_api,
    sdk_error,
    status_error,
)
from qmkar.tasks.base import Item

SDK_ARGUMENTS = frozenset(inspect.signature(anthropic.resources.AsyncMessages.create).parameters)
SDK_ERRORS = (anthropic.APIStatusError, anthropic.APIConnectionError, anthropic.APIResponseValidationError,
              ValueError)
# Message Batches take up to 100,000 requests or 256 MB, whichever comes first.
BATCH_LIMITS = BatchLimits(requests=100_000, bytes=256_000_000)
# The HTTP status each error type of a batch result stands for, so it is retried (or not)
# as the same error of a single request would be.
ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529}


class AnthropicProvider(Provider):
    """A Claude model."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float | None = None,
        http_client: httpx2.AsyncClient | None = None,
        endpoints_file: Path | str | None = None,
    ) -> None:
        if not model:
            raise ProviderError("name a model after 'anthropic:', e.g. anthropic:claude-sonnet-4-6")
        self.name = f"anthropic:{model}"
        self.model = model
        self.endpoint = "anthropic"
        # Thinking, effort and temperature by model: providers/rules.py's table.
        self.rule = rules.find(self.endpoint, model, file=endpoints_file)
        self._key = api_key
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout, http_client=http_client
        )
        self.base_url = str(self._client.base_url)  # the address really used; it keys the cache

    def identity(self) -> Identity:
        # The SDK adds a trailing slash; the same server is the same endpoint either way.
        return Identity(self.endpoint, mask_url(self.base_url.rstrip("/")), self.model)

    def cache_identity(self) -> dict[str, str]:
        """The endpoint, the address really used and the model: a cached answer is reused
        only for the same model at the same address."""
        return {"endpoint": self.endpoint, "base_url": self.base_url, "model": self.model}

    def settings_for(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings actually sent, by the model's rule (providers/rules.py): no seed
        (Claude takes none); extended thinking or effort where the model has them. A setting
        Claude does not take is refused, not dropped."""
        return rules.settings(self.rule, self.name, {k: v for k, v in settings.items() if k != "seed"})

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The body of a messages request, as a batch holds it."""
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        messages = [m for m in request.messages if m["role"] != "system"]
        params: dict[str, Any] = {"model": self.model, "messages": messages,
                                  **rules.messages_fields(self.rule, request.settings)}
        if system:
            params["system"] = system
        return params

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        # Fields this SDK version has no argument for (2.x has none for temperature) go in the body.
        arguments = self._params(request)
        extra = {key: arguments.pop(key) for key in list(arguments) if key not in SDK_ARGUMENTS}
        return {**arguments, "extra_body": extra} if extra else arguments

    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        try:
            message = await self._client.messages.create(**self._arguments(request))
        except SDK_ERRORS as exc:
            raise self._error(exc) from None
        return self._response(message)

    def _error(self, exc: Exception) -> ProviderCallError:
        return sdk_error(exc, anthropic, secret=self._key, model=self.model)

    def _response(self, message: Message) -> ModelResponse:
        blocks = getattr(message, "content", None)
        if not blocks:
            said = error_message({"error": (message.model_extra or {}).get("error")})
            raise bad_response(f"the server answered 200 with an error: {said}" if said
                               else "the response had no content blocks", secret=self._key)
        texts = [b.text for b in blocks if b.type == "text"]
        thoughts = [b.thinking for b in blocks if b.type == "thinking"]
        redacted = sum(1 for b in blocks if b.type == "redacted_thinking")
        usage = message.usage
        extra: dict[str, Any] = {"stop_reason": message.stop_reason}
        if redacted:
            extra["redacted_thinking_blocks"] = redacted
        cached = getattr(usage, "cache_read_input_tokens", None)
        return ModelResponse(
            truncated=message.stop_reason in ("max_tokens", "model_context_window_exceeded"),
            text="".join(texts),
            reasoning="\n\n".join(thoughts) if thoughts else None,
            usage=Usage(
                input_tokens=usage.input_tokens + (cached or 0),
                output_tokens=usage.output_tokens,
                cached_tokens=cached,
            ) if usage is not None else None,
            model=message.model,
            extra=extra,
        )

    async def aclose(self) -> None:
        await self._client.close()

    # ---- Message Batches ----------------------------------------------------------------

    def batch_limits(self) -> BatchLimits:
        return BATCH_LIMITS

    def batch_request(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        return {"custom_id": custom_id, "params": self._params(request)}

    async def submit_batch(self, requests: list[dict[str, Any]], marker: str) -> BatchRef:
        # Message Batches carry no metadata: find_batch knows a batch by its time and size.
        try:
            batch = await self._client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
        except SDK_ERRORS as exc:
            if isinstance(exc, anthropic.APIStatusError) and exc.status_code in (404, 405, 501):
                where = f"anthropic at {mask_url(self.base_url.rstrip('/'))}"
                raise no_batch_api(where, "Message Batches API",
                                   "POST /v1/messages/batches", exc.status_code) from None
            raise self._error(exc) from None
        return BatchRef(batch.id)

    async def find_batch(self, marker: str, count: int, since: datetime, known: set[str]) -> BatchRef | None:
        try:
            async for batch in self._client.messages.batches.list(limit=100):
                if batch.created_at.timestamp() < since.timestamp() - 600:  # newest first
                    break
                if batch.id not in known and batch.created_at >= since and _total(batch) == count:
                    return BatchRef(batch.id)
        except SDK_ERRORS as exc:
            raise self._error(exc) from None
        return None

    async def batch_status(self, batch_id: str) -> BatchStatus:
        try:
            return _status(await self._client.messages.batches.retrieve(batch_id))
        except SDK_ERRORS as exc:
            raise self._error(exc) from None

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        try:
            return _status(await self._client.messages.batches.cancel(batch_id))
        except SDK_ERRORS as exc:
            raise self._error(exc) from None

    async def batch_results(self, batch_id: str) -> AsyncIterator[BatchResult]:
        try:
            async for entry in await self._client.messages.batches.results(batch_id):
                yield self._batch_result(entry.custom_id, entry.result)
        except (*SDK_ERRORS, anthropic.AnthropicError) as exc:
            if isinstance(exc, SDK_ERRORS):
                raise self._error(exc) from None
            raise bad_response(f"cannot read the batch's results: {exc}"[:300], secret=self._key) from None

    def _batch_result(self, custom_id: str, result: Any) -> BatchResult:
        if isinstance(result, MessageBatchSucceededResult):
            try:
                return BatchResult(custom_id, self._response(result.message), None)
            except ProviderCallError as exc:
                return BatchResult(custom_id, None, exc)
        if isinstance(result, MessageBatchErroredResult):
            inner = result.error.error
            kind = str(getattr(inner, "type", "api_error"))
            error = status_error(ERROR_STATUS.get(kind, 500), str(getattr(inner, "message", kind)), {},
                                 {"error": {"type": kind}}, secret=self._key, model=self.model)
            if kind == "billing_error":  # fixed by paying, then worth asking again
                error.retryable = True
            return BatchResult(custom_id, None, error)
        what = str(getattr(result, "type", "unknown"))
        kind = {"canceled": "batch_cancelled", "expired": "batch_expired"}.get(what, f"batch_{what}")
        text = {"canceled": "the batch was cancelled before this request ran",
                "expired": "the batch expired (24 h) before this request ran"}.get(
            what, f"the batch gave no answer ({what})")
        return BatchResult(custom_id, None, ProviderCallError(text, kind=kind, retryable=True))


def _counts(batch: MessageBatch) -> dict[str, int]:
    # Read leniently: the SDK does not check what a compatible server leaves out.
    return {name: int(getattr(batch.request_counts, name, 0) or 0)
            for name in ("processing", "succeeded", "errored", "canceled", "expired")}


def _total(batch: MessageBatch) -> int:
    return sum(_counts(batch).values())


def _status(batch: MessageBatch) -> BatchStatus:
    counts = _counts(batch)
    status = str(batch.processing_status).lower()
    return BatchStatus(id=batch.id, status=status, ended=status == "ended", total=sum(counts.values()),
                       done=sum(counts.values()) - counts["processing"],
                       failed=counts["errored"] + counts["canceled"] + counts["expired"])


def create(model: str, options: dict[str, Any]) -> AnthropicProvider:
    """anthropic:MODEL or a bare claude-* name; its key (ANTHROPIC_API_KEY or --api-key-env)
    read by registry.resolve."""
    return AnthropicProvider(
        model,
        api_key=options.get("api_key"),
        base_url=options.get("base_url"),
        timeout=options.get("timeout"),
        http_client=options.get("http_client"),
        endpoints_file=options.get("endpoints_file"),
    )
