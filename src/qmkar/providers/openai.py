"""OpenAI's chat completions through the official SDK, for OpenAI and every compatible endpoint.

The one module that imports the openai SDK: OpenAIProvider turns a ModelRequest into a
chat completion and the answer into qmkar's records (failures via http.sdk_error), and
speaks the Batch API (a JSONL file uploaded to /v1/files, /v1/batches, the output and
error files read back). Its client never retries (max_retries=0); qmkar.retry does.

A question is sent with the client's own `post` (the SDK's documented call for any
endpoint: its headers, key, base URL, timeouts and error classes), its body encoded by
msgspec, and the answer's JSON read into the few fields qmkar keeps (`Completion`,
msgspec). `chat.completions.create` would do the same plus two things qmkar does not need,
about a quarter of the SDK's CPU per question in a profile of the bare SDK loop
(docs/performance.md): walking the request through its TypedDict transforms, and building
the whole pydantic ChatCompletion of the answer. The batch API's answers are read into the
same structs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx2
import msgspec
import openai
from openai.types import Batch

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
from qmkar.providers.endpoints import find
from qmkar.providers.http import (
    bad_response,
    error_code,
    error_message,
    mask_url,
    no_batch_api,
    sdk_error,
    status_error,
)
from qmkar.tasks.base import Item

NO_KEY = "no-key-required"  # the SDK insists on a key string; local servers ignore it
SDK_ERRORS = (openai.APIStatusError, openai.APIConnectionError, openai.APIResponseValidationError, ValueError)
# The Batch API's limits: 50,000 requests or 200 MB per input file.
BATCH_LIMITS = BatchLimits(requests=50_000, bytes=200_000_000)
BATCH_ENDPOINT: Final = "/v1/chat/completions"
MARKER_KEY = "qmkar_submission"  # the batch metadata key find_batch looks for
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
CHAT_PATH: Final = "/chat/completions"  # of the client's base URL


# What qmkar reads of a chat completion (any other field is ignored). Types are checked
# (laxly: "12" reads as 12), so a body of the wrong shape is one bad_response, not a crash.
class TokenDetails(msgspec.Struct):
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


class CompletionUsage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_tokens_details: TokenDetails | None = None
    prompt_tokens_details: TokenDetails | None = None
    prompt_cache_hit_tokens: Any = None  # DeepSeek's count of prompt tokens read from its cache


class Message(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    reasoning_content: Any = None  # deepseek-reasoner
    reasoning: Any = None  # vLLM, OpenRouter


class Choice(msgspec.Struct):
    message: Message | None = None
    finish_reason: str | None = None


class Completion(msgspec.Struct):
    choices: list[Choice] | None = None
    model: str | None = None
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None
    error: Any = None  # a 200 carrying an error, as some compatible servers send


COMPLETION = msgspec.json.Decoder(Completion, strict=False)


class OpenAIProvider(Provider):
    """A chat-completions model at an OpenAI-compatible endpoint."""

    def __init__(
        self,
        model: str,
        *,
        endpoint: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        http_client: httpx2.AsyncClient | None = None,
        reasoning: bool | None = None,
        send_seed: bool = True,
        endpoints_file: Path | str | None = None,
    ) -> None:
        if not model:
            raise ProviderError(f"name a model after '{endpoint}:', e.g. {endpoint}:gpt-4o")
        self.name = f"{endpoint}:{model}"
        self.model = model
        self.endpoint = endpoint
        # What settings it takes and how they are sent: providers/rules.py's table.
        self.rule = rules.find(endpoint, model, reasoning, endpoints_file)
        self.send_seed = send_seed
        self._key = api_key
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_KEY,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            http_client=http_client,
        )
        # The address really used (the SDK may take it from OPENAI_BASE_URL): it keys the cache.
        self.base_url = str(self._client.base_url)

    def identity(self) -> Identity:
        # The SDK adds a trailing slash; the same server is the same endpoint either way.
        return Identity(self.endpoint, mask_url(self.base_url.rstrip("/")), self.model)

    def cache_identity(self) -> dict[str, str]:
        """The endpoint, the address really used and the model: a cached answer is reused
        only for the same model at the same address."""
        return {"endpoint": self.endpoint, "base_url": self.base_url, "model": self.model}

    def settings_for(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The generation settings this model is actually sent (recorded in transcripts), by
        its rule (providers/rules.py); a setting the model does not take is refused with one
        line, never silently dropped."""
        chosen = rules.settings(self.rule, self.name, settings)
        if not self.send_seed:
            chosen.pop("seed", None)
        return chosen

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The request body as sent (a batch line holds the same): the model, the messages
        and the settings in the fields its rule sends them in."""
        arguments, extra = rules.chat_fields(self.rule, request.settings)
        return {"model": self.model, "messages": request.messages, **arguments, **extra}

    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        try:
            # The body's JSON is written here by msgspec and handed over as bytes (the SDK
            # sends bytes as they are): a quarter of the time of the SDK's json.dumps for
            # a prompt of 500 pairs, on the run's busiest thread.
            body = await self._client.post(CHAT_PATH, content=msgspec.json.encode(self._body(request)),
                                           cast_to=bytes)
        except SDK_ERRORS as exc:
            raise self._error(exc) from None
        try:
            completion = COMPLETION.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_response(f"unreadable response: {exc}"[:300], secret=self._key) from None
        return self._response(completion)

    def _error(self, exc: Exception) -> ProviderCallError:
        return sdk_error(exc, openai, secret=self._key, model=self.model)

    def _response(self, completion: Completion) -> ModelResponse:
        if not completion.choices:
            said = error_message({"error": completion.error})
            raise bad_response(f"the server answered 200 with an error: {said}" if said
                               else "the response had no choices", secret=self._key)
        choice = completion.choices[0]
        message = choice.message
        if message is None:
            raise bad_response("the response's first choice had no message", secret=self._key)
        # deepseek-reasoner says reasoning_content; vLLM and OpenRouter say reasoning.
        reasoning = message.reasoning_content or message.reasoning
        if not isinstance(reasoning, str):
            reasoning = None
        extra: dict[str, Any] = {"finish_reason": choice.finish_reason}
        if message.refusal:
            extra["refusal"] = message.refusal
        if completion.system_fingerprint:
            extra["system_fingerprint"] = completion.system_fingerprint
        return ModelResponse(
            truncated=choice.finish_reason == "length",
            text=message.content or "",
            reasoning=reasoning,
            usage=_usage(completion.usage),
            model=completion.model,
            extra=extra,
        )

    async def aclose(self) -> None:
        await self._client.close()

    # ---- the Batch API ------------------------------------------------------------------

    def batch_limits(self) -> BatchLimits:
        return BATCH_LIMITS

    def batch_request(self, custom_id: str, request: ModelRequest) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": BATCH_ENDPOINT, "body": self._body(request)}

    async def submit_batch(self, requests: list[dict[str, Any]], marker: str) -> BatchRef:
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in requests).encode()
        try:
            # The name must end in .jsonl: OpenAI refuses any other for a batch.
            uploaded = await self._client.files.create(
                file=("qmkar-batch.jsonl", data, "application/jsonl"), purpose="batch")
        except SDK_ERRORS as exc:
            raise self._batch_error(exc, "POST /v1/files") from None
        try:
            batch = await self._client.batches.create(
                input_file_id=uploaded.id, endpoint=BATCH_ENDPOINT, completion_window="24h",
                metadata={MARKER_KEY: marker})
        except SDK_ERRORS as exc:
            error = self._batch_error(exc, "POST /v1/batches")
            if error.kind == "no_batch_api":
                await self._forget_file(uploaded.id)
            raise error from None
        return BatchRef(batch.id, uploaded.id)

    def _batch_error(self, exc: Exception, call: str) -> ProviderCallError:
        if isinstance(exc, openai.APIStatusError) and exc.status_code in (404, 405, 501):
            where = f"{self.endpoint} at {mask_url(self.base_url.rstrip('/'))}"
            return no_batch_api(where, "OpenAI Batch API",
                                call, exc.status_code)
        return self._error(exc)

    async def _forget_file(self, file_id: str) -> None:
        try:
            await self._client.files.delete(file_id)
        except SDK_ERRORS:
            pass  # an unused upload expires by itself

    async def find_batch(self, marker: str, count: int, since: datetime, known: set[str]) -> BatchRef | None:
        try:
            async for batch in self._client.batches.list(limit=100):
                if (batch.metadata or {}).get(MARKER_KEY) == marker:
                    return BatchRef(batch.id, batch.input_file_id)
                if batch.created_at < since.timestamp() - 600:  # newest first: the rest are older
                    break
        except SDK_ERRORS as exc:
            raise self._error(exc) from None
        return None

    async def batch_status(self, batch_id: str) -> BatchStatus:
        try:
            batch = await self._client.batches.retrieve(batch_id)
        except SDK_ERRORS as exc:
            raise self._error(exc) from None
        return _status(batch)

    async def cancel_batch(self, batch_id: str) -> BatchStatus:
        try:
            batch = await self._client.batches.cancel(batch_id)
        except SDK_ERRORS as exc:
            raise self._error(exc) from None
        return _status(batch)

    async def batch_results(self, batch_id: str) -> AsyncIterator[BatchResult]:
        try:
            batch = await self._client.batches.retrieve(batch_id)
            for file_id in (batch.output_file_id, batch.error_file_id):
                if not file_id:  # a batch with no successes has no output file, and vice versa
                    continue
                async with self._client.files.with_streaming_response.content(file_id) as content:
                    async for line in content.iter_lines():
                        if line.strip():
                            yield self._batch_line(line)
        except SDK_ERRORS as exc:
            raise self._error(exc) from None

    def _batch_line(self, line: str) -> BatchResult:
        """A line of an output or error file: an answer, an HTTP error, or a request the
        batch never ran (expired, cancelled)."""
        try:
            data = json.loads(line)
            custom_id = str(data["custom_id"])
        except (ValueError, KeyError, TypeError):
            raise bad_response(f"unreadable batch result line: {line[:200]}", secret=self._key) from None
        reply = data.get("response") or {}
        status, body = reply.get("status_code"), reply.get("body")
        if status == 200 and isinstance(body, dict):
            try:
                completion = msgspec.convert(body, Completion, strict=False)
                return BatchResult(custom_id, self._response(completion), None)
            except msgspec.ValidationError as exc:
                return BatchResult(custom_id, None, bad_response(f"unreadable answer: {exc}"[:300]))
            except ProviderCallError as exc:
                return BatchResult(custom_id, None, exc)
        if isinstance(status, int):
            text = error_message(body) or f"the batch answered HTTP {status}"
            return BatchResult(custom_id, None, status_error(status, text, {}, body, secret=self._key,
                                                             model=self.model))
        error = data.get("error") or {}
        code = error_code({"error": error}) or "error"
        kind = code if code.startswith("batch_") else f"batch_{code}"
        text = error_message({"error": error}) or f"the batch did not run this request ({code})"
        return BatchResult(custom_id, None, ProviderCallError(text, kind=kind, retryable=True))


def _status(batch: Batch) -> BatchStatus:
    # Compatible servers may say COMPLETED, or leave counts out; the SDK checks neither.
    status = str(batch.status or "").lower()
    counts = batch.request_counts
    total, completed, failed = (int(getattr(counts, key, 0) or 0) for key in ("total", "completed", "failed"))
    errors = [e.message or e.code or "" for e in (batch.errors.data or [])] if batch.errors else []
    message = "; ".join(e for e in errors if e) or None
    return BatchStatus(id=batch.id, status=status, ended=status in ENDED, total=total,
                       done=completed + failed, failed=failed, message=message)


def _usage(usage: CompletionUsage | None) -> Usage | None:
    if usage is None:
        return None
    completion_details, prompt_details = usage.completion_tokens_details, usage.prompt_tokens_details
    cached = prompt_details.cached_tokens if prompt_details is not None else None
    if cached is None:  # DeepSeek reports its context cache this way
        cached = usage.prompt_cache_hit_tokens
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        reasoning_tokens=completion_details.reasoning_tokens if completion_details is not None else None,
        cached_tokens=cached if isinstance(cached, int) else None,
    )


def create(model: str, options: dict[str, Any]) -> OpenAIProvider:
    """openai:MODEL, or a bare gpt-*/o1/o3/o4 name; its key (OPENAI_API_KEY or --api-key-env)
    read by registry.resolve."""
    return OpenAIProvider(
        model,
        endpoint="openai",
        base_url=options.get("base_url"),
        api_key=options.get("api_key"),
        timeout=options.get("timeout"),
        http_client=options.get("http_client"),
        endpoints_file=options.get("endpoints_file"),
    )


def create_compatible(model: str, options: dict[str, Any]) -> OpenAIProvider:
    """ENDPOINT:MODEL for a built-in or user-configured OpenAI-compatible endpoint; its key
    (the entry's variable or --api-key-env) read by registry.resolve."""
    name = options["provider"]
    endpoint = find(name, options)
    if endpoint is None:
        raise ProviderError(f"no endpoint named {name!r}")
    return OpenAIProvider(
        model,
        endpoint=name,
        base_url=options.get("base_url") or endpoint.base_url,
        api_key=options.get("api_key"),
        timeout=options.get("timeout"),
        http_client=options.get("http_client"),
        reasoning=endpoint.reasoning,
        send_seed=endpoint.send_seed,
        endpoints_file=options.get("endpoints_file"),
    )
