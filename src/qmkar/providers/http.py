"""What an HTTP failure from a hosted model means: retry it, give up, or stop the model.

Shared by openai.py and anthropic.py and imports neither SDK: from a status, headers and
error body (sdk_error reads them off the SDK exception it is given) it builds the
ProviderCallError that qmkar.retry acts on. Keys are scrubbed from every message here.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import ModuleType
from typing import Any

from qmkar.errors import ProviderCallError

# 408 timeout, 409 conflict (lock contention), 429 rate limit, 5xx server trouble, and
# Anthropic's 529 "overloaded" may go away if the same request is sent again later.
RETRYABLE_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
# A bad key or no access to the model: every other request to it fails the same way.
FATAL_STATUSES = frozenset({401, 403})
# A 429 with one of these codes means the account is out of money, not sending too fast.
QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached", "quota_exceeded")

# The reset headers providers send alongside 429s, most specific first.
RESET_HEADERS = (
    "x-ratelimit-reset-requests",  # OpenAI: a duration such as "1s" or "6m0s"
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-reset",  # Anthropic: an RFC 3339 time
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
    "x-ratelimit-reset",  # several compatible endpoints: seconds, or a unix time
)
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def _duration_seconds(text: str) -> float | None:
    """'1s', '6m0s', '1h2m3.5s', '250ms' -> seconds."""
    match = _DURATION.match(text.strip())
    if not match or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def _until(moment: datetime, now: float) -> float:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, moment.timestamp() - now)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """How long the server asked us to wait before the next request, if it said.

    Reads `retry-after-ms`, then `Retry-After` (seconds or an HTTP date), then the
    providers' rate-limit reset headers. `now` is a unix time (for tests).
    """
    now = time.time() if now is None else now
    lower = {k.lower(): v for k, v in headers.items()}
    if (value := lower.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    if (value := lower.get("retry-after")) is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                return _until(parsedate_to_datetime(value), now)
            except (TypeError, ValueError, IndexError):
                pass
    for name in RESET_HEADERS:
        value = lower.get(name)
        if value is None:
            continue
        value = value.strip()
        if (seconds := _duration_seconds(value)) is not None:
            return seconds
        try:
            number = float(value)
        except ValueError:
            try:
                return _until(datetime.fromisoformat(value.replace("Z", "+00:00")), now)
            except ValueError:
                continue
        # A big number is a unix time, a small one a delay.
        return max(0.0, number - now) if number > 1e9 else max(0.0, number)
    return None


def error_code(body: Any) -> str | None:
    """The machine-readable code of an error body ({"error": {"code"|"type": ...}})."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            for key in ("code", "type"):
                if isinstance(inner.get(key), str):
                    return inner[key]
    return None


# The user:password@ of a URL (https://me:pw@host/v1): what mask_url hides.
URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")


def mask_url(text: str) -> str:
    """The text with the credentials of every URL in it replaced by ***."""
    return URL_CREDENTIALS.sub("***@", text) if "@" in text else text


def redact(text: str, secret: str | None) -> str:
    """The text with the secret and any credentials written into a URL replaced."""
    if secret and len(secret) >= 6:
        text = text.replace(secret, "[redacted]")
    return mask_url(text)


def status_error(
    status: int,
    message: str,
    headers: Mapping[str, str],
    body: Any = None,
    *,
    secret: str | None = None,
    model: str = "",
) -> ProviderCallError:
    """The ProviderCallError for an HTTP error status."""
    code = error_code(body)
    message = redact(message, secret)
    if status == 429 and code in QUOTA_CODES:
        return ProviderCallError(
            f"{model}: quota exhausted (HTTP 429 {code}); add credit or raise the limit, "
            f"then run the same command again. Server said: {message}",
            kind="quota", status=status, retryable=False, fatal=True,
        )
    if status in FATAL_STATUSES:
        what = "the API key was refused" if status == 401 else "the key has no access to this model"
        return ProviderCallError(
            f"{model}: {what} (HTTP {status}); check the key variable and the model name. "
            f"Server said: {message}",
            kind=f"http_{status}", status=status, retryable=False, fatal=True,
        )
    retryable = status in RETRYABLE_STATUSES
    return ProviderCallError(
        f"HTTP {status}: {message}",
        kind=f"http_{status}", status=status, retryable=retryable,
        retry_after=retry_after_seconds(headers) if retryable else None,
    )


def connection_error(message: str, *, timeout: bool = False, secret: str | None = None) -> ProviderCallError:
    kind = "timeout" if timeout else "connection"
    return ProviderCallError(redact(message, secret), kind=kind, retryable=True)


def bad_response(message: str, *, secret: str | None = None) -> ProviderCallError:
    """A 200 whose body is not a usable answer (malformed JSON, no choices)."""
    return ProviderCallError(redact(message, secret), kind="bad_response", retryable=True)


def error_message(body: Any) -> str | None:
    """The human message inside an API error body ({"error": {"message": ...}} and kin)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if inner is None:
            return None
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if isinstance(inner, str):
            return inner[:500]
        return json.dumps(body)[:300]
    return None


def sdk_error(exc: Exception, sdk: ModuleType, *, secret: str | None, model: str) -> ProviderCallError:
    """Translate an exception of the openai or anthropic SDK (passed as `sdk`, the module).

    Both SDKs raise the same four classes (status, timeout, connection, unreadable
    response); anything else is not theirs and is re-raised as the bug it is.
    """
    if isinstance(exc, sdk.APIStatusError):
        try:
            body = exc.response.json()
        except ValueError:
            body = exc.body
        text = error_message(body) or exc.response.text[:300] or str(exc)
        return status_error(exc.status_code, text, exc.response.headers, body, secret=secret, model=model)
    if isinstance(exc, sdk.APITimeoutError):
        return connection_error("the request timed out", timeout=True)
    if isinstance(exc, sdk.APIConnectionError):
        return connection_error(f"connection failed: {exc.__cause__ or exc}", secret=secret)
    if isinstance(exc, sdk.APIResponseValidationError | ValueError):
        return bad_response(f"unreadable response: {exc}"[:300], secret=secret)
    raise exc


def no_batch_api(where: str, api: str, call: str, status: int) -> ProviderCallError:
    """The one line for an endpoint that answers 404 (or 405, 501) where a batch API would be."""
    return ProviderCallError(f"{where} does not offer the {api} ({call} answered {status}); run it "
                             "without --batch", kind="no_batch_api", status=status, fatal=True)
