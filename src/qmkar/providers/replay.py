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

from qmkar import userfiles
from qmkar.errors import ProviderCallError, ProviderError
from qmkar.providers.base import Identity, ModelRequest, ModelResponse, Provider
from qmkar.tasks.base import Item


def load_answers(path: Path) -> dict[str, dict[str, Any]]:
    """Map id -> answer record; raise ProviderError with the line number on bad input.

    An id given twice with the same answer is read once; with different answers (or
    reasoning) it is refused, naming both lines: which one to score cannot be guessed."""
    answers: dict[str, dict[str, Any]] = {}
    first_line: dict[str, int] = {}
    for number, line in userfiles.read_lines(path, "replay file", ProviderError):
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
        if isinstance(record["id"], (dict, list, bool)) or record["id"] is None:
            raise ProviderError(f'replay file {path} line {number}: "id" must be the item\'s id, '
                                "a string")
        if not isinstance(record["answer"], str):
            raise ProviderError(
                f'replay file {path} line {number}: "answer" must be a string of the '
                "model's text"
            )
        if not isinstance(record.get("reasoning", ""), str):
            raise ProviderError(f'replay file {path} line {number}: "reasoning" must be a string')
        key = str(record["id"])
        earlier = answers.get(key)
        if earlier is not None and _said(earlier) != _said(record):
            raise ProviderError(
                f"replay file {path} answers id {key} twice, differently (lines {first_line[key]} "
                f"and {number}); keep the one to score"
            )
        if earlier is None:
            answers[key], first_line[key] = record, number
    return answers


def _said(record: dict[str, Any]) -> tuple[Any, ...]:
    """What a replay line says about its question: two lines that agree on this are one answer."""
    return record["answer"], record.get("reasoning"), record.get("model")


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
    try:
        path = Path(model).expanduser()
    except RuntimeError:  # "~" with no home folder (HOME unset, no passwd entry)
        raise ProviderError(f"replay:{model}: there is no home folder to expand ~ in (HOME is not set); "
                            "give the path without ~") from None
    return ReplayProvider(path)
