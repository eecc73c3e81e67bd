"""Replay: answers collected elsewhere (a chat web page, another tool), scored by qmkar.

The file is JSONL, one `{"id": ..., "answer": "..."}` per line (an optional
"reasoning" field is kept apart). An item whose id has no line is reported as a
`missing` error, never guessed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from qmkar.errors import ProviderCallError, ProviderError
from qmkar.providers.base import Identity, ModelRequest, ModelResponse, Provider
from qmkar.tasks.base import Item


def load_answers(path: Path) -> dict[str, dict[str, Any]]:
    """Map id -> answer record; raise ProviderError with the line number on bad input."""
    if not path.is_file():
        raise ProviderError(f"replay file {path} does not exist (or is not a file)")
    answers: dict[str, dict[str, Any]] = {}
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ProviderError(f"replay file {path} line {number} is not JSON: {exc}") from None
            if not isinstance(record, dict) or "id" not in record or "answer" not in record:
                raise ProviderError(
                    f'replay file {path} line {number} needs an object with "id" and "answer"'
                )
            if not isinstance(record["answer"], str):
                raise ProviderError(
                    f'replay file {path} line {number}: "answer" must be a string of the '
                    "model's text"
                )
            answers[str(record["id"])] = record
    return answers


class ReplayProvider(Provider):
    """Answers each item with the line of the replay file that has its id."""

    def __init__(self, path: Path) -> None:
        self.name = f"replay:{path}"
        self.path = path
        self.answers = load_answers(path)
        # Another file at the same path answers differently: its content is part of the model.
        self.version = hashlib.sha256(path.read_bytes()).hexdigest()[:12]

    def identity(self) -> Identity:
        return Identity("replay", None, f"{self.path}@{self.version}")

    async def generate(self, item: Item, request: ModelRequest) -> ModelResponse:
        record = self.answers.get(item.id)
        if record is None:
            raise ProviderCallError(
                f"no answer for this question's id in {self.path}", kind="missing", retryable=False
            )
        reasoning = record.get("reasoning")
        return ModelResponse(
            text=record["answer"],
            reasoning=reasoning if isinstance(reasoning, str) else None,
            model=str(record["model"]) if "model" in record else None,
        )


def create(model: str, options: dict[str, Any]) -> ReplayProvider:
    if not model:
        raise ProviderError("replay needs a file: write --model replay:PATH/TO/answers.jsonl")
    return ReplayProvider(Path(model).expanduser())
