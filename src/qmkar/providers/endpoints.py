"""OpenAI-compatible endpoints by name: the built-in table and the user's TOML file.

Data only, no SDK: per endpoint a base URL, the variable holding its key (local servers
need none) and its quirks; openai.create_compatible sends to them. The user's file
(docs/providers.md) looks like:

    [endpoints.mylab]
    base_url = "https://llm.mylab.example/v1"
    api_key_env = "MYLAB_API_KEY"     # leave out for a server that takes no key
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from pydantic import ConfigDict, ValidationError, field_validator

from qmkar import userfiles
from qmkar.deferred import DeferredModel
from qmkar.errors import ProviderError, QmkarError


class Endpoint(NamedTuple):
    base_url: str
    key_env: str | None  # None: the server takes no key
    description: str
    reasoning: bool | None = None  # None: decide from the model name
    send_seed: bool = True


ENDPOINTS: dict[str, Endpoint] = {
    "deepseek": Endpoint("https://api.deepseek.com", "DEEPSEEK_API_KEY",
                         "DeepSeek (deepseek-chat, deepseek-reasoner); key in DEEPSEEK_API_KEY"),
    "minimax": Endpoint("https://api.minimax.io/v1", "MINIMAX_API_KEY",
                        "MiniMax (MiniMax-Text-01); key in MINIMAX_API_KEY"),
    "gemini": Endpoint("https://generativelanguage.googleapis.com/v1beta/openai/", "GEMINI_API_KEY",
                       "Google Gemini's OpenAI-compatible endpoint; key in GEMINI_API_KEY",
                       send_seed=False),
    "together": Endpoint("https://api.together.xyz/v1", "TOGETHER_API_KEY",
                         "Together AI (Llama 3.1 405B ...); key in TOGETHER_API_KEY"),
    "openrouter": Endpoint("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY",
                           "OpenRouter (any vendor/model); key in OPENROUTER_API_KEY"),
    "fireworks": Endpoint("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY",
                          "Fireworks AI; key in FIREWORKS_API_KEY"),
    "groq": Endpoint("https://api.groq.com/openai/v1", "GROQ_API_KEY", "Groq; key in GROQ_API_KEY"),
    "vllm": Endpoint("http://localhost:8000/v1", None, "a local vLLM server (localhost:8000, no key)"),
    "llamacpp": Endpoint("http://localhost:8080/v1", None,
                         "a local llama.cpp server (localhost:8080, no key)"),
    "ollama": Endpoint("http://localhost:11434/v1", None, "a local Ollama server (localhost:11434, no key)"),
}

ENDPOINTS_ENV = "QMKAR_ENDPOINTS"
DEFAULT_ENDPOINTS_FILE = Path("~/.config/qmkar/endpoints.toml")


def check_base_url(url: str) -> str:
    """`url` when it can be an endpoint's address (http or https, a host, a port in
    1..65535); ValueError saying what is wrong otherwise."""
    if not url.strip() or any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise ValueError(f"{url!r} is not a URL (it is empty or holds spaces)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} must start with http:// or https://, e.g. https://llm.example/v1")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host, e.g. https://llm.example/v1")
    if port == 0:
        raise ValueError(f"{url!r}: port 0 is not a port a server listens on (1..65535)")
    return url


def key_path(loc: tuple[int | str, ...]) -> str:
    """A TOML key path as a user writes it: endpoints.mylab.base_url, prices."gpt-4.1".input."""
    return ".".join(str(part) if re.fullmatch(r"[A-Za-z0-9_-]+", str(part)) else f'"{part}"'
                    for part in loc)


def toml_table(path: Path, what: str, error: type[QmkarError]) -> dict[str, Any]:
    """A user's TOML file read as a table; `error` naming the file on bad bytes or syntax."""
    try:
        return tomllib.loads(userfiles.read_text(path, what, error))
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path} is not valid TOML: {exc}") from None


def shape_error(exc: ValidationError, path: Path, what: str, hint: str) -> str:
    """The first problem of a TOML file that has the wrong shape, with its key path."""
    first = exc.errors()[0]
    where = key_path(tuple(first["loc"])) or "the file"
    message = str((first.get("ctx") or {}).get("error") or first["msg"])
    return f"{what} {path}: {where}: {message}; {hint}"


class EndpointEntry(DeferredModel):
    """One [endpoints.NAME] table of the user's file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    base_url: str
    api_key_env: str | None = None
    description: str | None = None
    reasoning: bool | None = None
    send_seed: bool = True

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_base_url(value)


class EndpointsFile(DeferredModel):
    """The user's endpoints file: [endpoints.NAME] tables, and [rules."ENDPOINT:MODEL"] tables
    that providers/rules.py reads and checks (which settings those models take)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    endpoints: dict[str, EndpointEntry] = {}
    rules: dict[str, dict[str, Any]] = {}

    @field_validator("endpoints")
    @classmethod
    def _names(cls, value: dict[str, EndpointEntry]) -> dict[str, EndpointEntry]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"[endpoints.{name}]: a name is letters, digits, '.', '_' and '-' "
                                 "(it is written NAME:model)")
            if name in RESERVED:
                raise ValueError(f"[endpoints.{name}]: {name} is a built-in provider; choose another name")
        return value


# Provider prefixes that are not endpoints: a user's endpoint cannot take their names.
RESERVED = frozenset({"oracle", "replay", "sim", "openai", "anthropic"})
ENDPOINTS_HINT = ('each endpoint is a table [endpoints.NAME] with base_url = "https://.../v1" and '
                  "optionally api_key_env, description, reasoning, send_seed (docs/providers.md)")


def endpoints_file(path: Path | str | None = None) -> Path | None:
    """The TOML file of user endpoints: the given path, $QMKAR_ENDPOINTS, or the default if present."""
    if path is not None:
        return Path(path)
    if os.environ.get(ENDPOINTS_ENV):
        return Path(os.environ[ENDPOINTS_ENV])
    try:
        default = DEFAULT_ENDPOINTS_FILE.expanduser()
    except RuntimeError:  # no home folder (HOME unset, no passwd entry): no default file
        return None
    return default if default.is_file() else None


def load_endpoints(path: Path | str | None = None) -> dict[str, Endpoint]:
    """The user's named endpoints from a TOML file ({} when there is none)."""
    file = endpoints_file(path)
    if file is None:
        return {}
    data = toml_table(file, "endpoints file", ProviderError)
    try:
        parsed = EndpointsFile.model_validate(data)
    except ValidationError as exc:
        raise ProviderError(shape_error(exc, file, "endpoints file", ENDPOINTS_HINT)) from None
    return {
        name: Endpoint(entry.base_url, entry.api_key_env,
                       entry.description or f"{entry.base_url} (from {file})", entry.reasoning,
                       entry.send_seed)
        for name, entry in parsed.endpoints.items()
    }


def find(name: str, options: dict[str, Any]) -> Endpoint | None:
    """The endpoint called `name`: the user's file wins over the built-in table."""
    user = load_endpoints(options.get("endpoints_file"))
    return user.get(name) or ENDPOINTS.get(name)

