"""A response cache on disk, so an identical request is never paid for twice across runs.

The key is a hash of the endpoint, its address, the model, the messages, the
generation settings as sent and the sample index (never the API key). A sampled request
(temperature not 0) is answered afresh unless the user allows reuse
(asking.cache_readable). Only answers are stored; errors never are. One
small JSON file per answer, written atomically, so concurrent runs and kill -9 leave no
half-written entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from qmkar.errors import UsageError
from qmkar.providers.base import ModelRequest, ModelResponse

CACHE_ENV = "QMKAR_CACHE_DIR"


def default_directory() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "qmkar" / "responses"
    try:
        home = Path.home()
    except RuntimeError:  # HOME unset and no passwd entry (some containers, CI runners)
        raise UsageError("the response cache has no folder: there is no home folder (HOME is not set); "
                         f"set {CACHE_ENV} or XDG_CACHE_HOME, or pass --cache-dir DIR or --no-cache"
                         ) from None
    return home / ".cache" / "qmkar" / "responses"


class ResponseCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hits = 0
        self.failed_writes = 0

    @staticmethod
    def key(who: dict[str, str], request: ModelRequest, sample: int = 0) -> str:
        """The entry of a request: who answers it (endpoint, address, model), the messages,
        the settings as sent and which sample it is: every part of the condition that
        reaches the model. The first sample's key is the one earlier versions wrote, so
        their entries still answer."""
        entry: dict[str, Any] = {"who": who, "messages": request.messages, "settings": request.settings}
        if sample:
            entry["sample"] = sample
        text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> ModelResponse | None:
        path = self._path(key)
        try:
            response = ModelResponse.model_validate_json(path.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None
        self.hits += 1
        return response

    def put(self, key: str, response: ModelResponse) -> None:
        """Store an answer; a cache that cannot be written (full disk, read-only) only costs a
        later rerun its savings, so it never stops the run."""
        path = self._path(key)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.{id(response)}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(response.model_dump_json(), encoding="utf-8")
            os.replace(temporary, path)
        except OSError:
            self.failed_writes += 1
            with contextlib.suppress(OSError):
                temporary.unlink()
