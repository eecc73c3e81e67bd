"""The project's exception tree; the CLI turns each into one clear line for the user.

    QmkarError                 a mistake the user can fix (message says how)
    ├── UsageError             impossible or contradictory options
    ├── DatasetError           a dataset file that cannot be read as items
    ├── TemplateError          a prompt template that is missing or malformed
    ├── TranscriptError        a transcript file that cannot be read or written
    ├── OutputError            an output file that cannot be written (the path and the reason)
    └── ProviderError          a model name or provider set-up that cannot work
        └── ProviderCallError  one request failed (carries whether a retry may help)

Anything else raised inside qmkar is a bug and keeps its traceback.
"""

from __future__ import annotations


class QmkarError(Exception):
    """A problem the user can fix; its message says what to do."""


class UsageError(QmkarError):
    """Options that cannot produce a valid run."""


class DatasetError(QmkarError):
    """A dataset file that cannot be read as items."""


class TemplateError(QmkarError):
    """A prompt template that is missing or does not fit its task."""


class TranscriptError(QmkarError):
    """A transcript file that cannot be read or appended to."""


class ProviderError(QmkarError):
    """A model name or provider configuration that cannot work (unknown name, no key)."""


class ProviderCallError(ProviderError):
    """One request to a model failed.

    `kind` is a short stable label stored in transcripts ("missing", "http_429",
    "timeout", ...); `retryable` says whether sending the same request again may help;
    `fatal` says the whole model run should stop (bad key, no access).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        retryable: bool = False,
        fatal: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.fatal = fatal
        self.status = status
        self.retry_after = retry_after


class OutputError(QmkarError):
    """A file qmkar was asked to write that cannot be written (the path and the reason)."""
