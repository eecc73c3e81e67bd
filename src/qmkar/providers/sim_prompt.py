"""What a simulated model reads from a prompt: the pairs (or the list) and the query.

The sim reads the rendered prompt, never the item's answer; a prompt must be laid out
like the built-in template prompts/<task>.txt (its family's `sim_reads` says how).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from qmkar.errors import ProviderCallError
from qmkar.tasks import family

PAIR = re.compile(r"\bk\s*:\s*(\d+)\s*,\s*v\s*:\s*(\d+)")
NUMBER = re.compile(r"\d+")
NUMBER_LIST = re.compile(r"\d+(?:[ \t]*,[ \t]*\d+)+")


NOTHING = np.zeros(0, dtype=np.int64)
NOTHING.setflags(write=False)


class Prompt(NamedTuple):
    """What a simulated model reads from a prompt."""

    keys: np.ndarray = NOTHING  # recall: the keys, in context order
    written: np.ndarray = NOTHING  # recall: the value written with each key
    values: list[int] = []  # counting: the list
    query: list[int] = []  # queried key(s), or [the counted value]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.keys.tolist(), self.written.tolist(), strict=True))


def _numbers(digits: list[str]) -> np.ndarray:
    try:
        return np.array(digits, dtype=np.int64)
    except OverflowError:
        raise ProviderCallError(
            f"sim cannot hold a number as large as {max(digits, key=len)}", kind="too_large", fatal=True
        ) from None


# What PAIR's \s and \w match among ASCII characters.
WHITESPACE = bytes([9, 10, 11, 12, 13, 28, 29, 30, 31, 32])
WORD = np.zeros(256, dtype=bool)
WORD[list(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")] = True
COMMA_V, K_COLON = int.from_bytes(b",v:", "little"), int.from_bytes(b"k:", "little")
ZEROS = np.uint64(int.from_bytes(b"0" * 8, "little"))
PAD = 16


def _eight_digits(words: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The numbers whose digits end eight characters (read as a little-endian uint64) each,
    `lengths` of them digits: the characters before are made 0s, then pairs of digits,
    pairs of those and so on are combined with one multiplication each."""
    before = (np.uint64(1) << (np.uint64(8) * (np.uint64(8) - lengths))) - np.uint64(1)
    words = (words & ~before) | (ZEROS & before)
    words -= ZEROS
    words = (words * np.uint64(10) + (words >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    words = (words * np.uint64(100) + (words >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    words = (words * np.uint64(10000) + (words >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return words.astype(np.int64)


Found = tuple[np.ndarray, np.ndarray, list[int]]  # keys, the values written with them, the other numbers


def _pairs_fast(texts: list[str]) -> list[Found | None]:
    """What PAIR.split gives each text (keys, values, the other numbers), found for all the
    texts at once with a few array operations instead of a regular expression per text;
    None for a text it cannot be sure of (not ASCII, a NUL in it, a number of more than
    eight digits, whitespace between two digits, a word character before a k).

    With its whitespace deleted, a text holds a pair wherever a number follows "k:", the
    next follows ",v:" right after it, and no word character comes before the k (one there
    is only unsure: the whitespace deleted may have parted them). The texts are read as
    one, joined by NULs, which no number, pair or word spans.
    """
    found: list[Found | None] = [None] * len(texts)
    usable = [i for i, text in enumerate(texts) if text.isascii() and "\0" not in text]
    if not usable:
        return found
    raws = [texts[i].encode("ascii") for i in usable]
    compact = [raw.translate(None, WHITESPACE) for raw in raws]
    packed = b" " * PAD + b"\0".join(compact) + b" " * PAD
    solid = np.frombuffer(packed, dtype=np.uint8)
    digit = (solid - 48) < 10
    edges = np.flatnonzero(digit[1:] != digit[:-1]) + 1
    starts, ends = edges[::2], edges[1::2]  # the numbers of the packed texts
    count = len(usable)
    owner = np.searchsorted(PAD + np.cumsum([0] + [len(c) + 1 for c in compact[:-1]]), starts, "right") - 1
    numbers_in = np.bincount(owner, minlength=count)
    # as many numbers in each text as written: deleting whitespace joined none
    digit = (np.frombuffer(b"\0" + b"\0".join(raws), dtype=np.uint8) - 48) < 10
    firsts = np.flatnonzero(digit[1:] > digit[:-1]) + 1
    text_starts = np.cumsum([1] + [len(r) + 1 for r in raws[:-1]])
    written_in = np.bincount(np.searchsorted(text_starts, firsts, "right") - 1, minlength=count)
    lengths = (ends - starts).astype(np.uint64)
    too_long = np.bincount(owner, weights=lengths > 8, minlength=count) > 0
    numbers = _eight_digits(np.ndarray((len(solid) - 7,), dtype="<u8", buffer=packed, strides=(1,))[ends - 8],
                            np.minimum(lengths, np.uint64(8)))
    # four characters from each place, as one little-endian number
    quads = np.ndarray((len(solid) - 3,), dtype="<u4", buffer=packed, strides=(1,))
    follows = quads[starts[:-1] - 3]  # [the character before k, "k", ":", first digit]
    pair = np.flatnonzero(((follows >> 8) & 0xFFFF == K_COLON) & (starts[1:] - ends[:-1] == 3)
                          & (quads[ends[:-1]] & 0xFFFFFF == COMMA_V))
    unsure = np.bincount(owner[pair], weights=WORD[follows[pair] & 0xFF], minlength=count) > 0
    inside = np.zeros(len(starts), dtype=bool)
    inside[pair] = inside[pair + 1] = True
    texts_numbers = np.searchsorted(owner, np.arange(count + 1))
    texts_pairs = np.searchsorted(owner[pair], np.arange(count + 1))
    for j in np.flatnonzero((numbers_in == written_in) & (numbers_in >= 2) & ~too_long & ~unsure).tolist():
        mine = pair[texts_pairs[j] : texts_pairs[j + 1]]
        other = slice(texts_numbers[j], texts_numbers[j + 1])
        found[usable[j]] = numbers[mine], numbers[mine + 1], numbers[other][~inside[other]].tolist()
    return found


def _outside(text: str, spans: list[tuple[int, int]]) -> list[int]:
    """The numbers of `text` outside the given spans."""
    kept, last = [], 0
    for start, end in spans:
        kept.append(text[last:start])
        last = end
    kept.append(text[last:])
    return [int(n) for n in NUMBER.findall(" ".join(kept))]


# _pairs_fast reads up to about this many characters at once: its arrays then stay in a
# core's cache (8 prompts of 500 pairs took 0.10 ms each, 64 at once 0.14; inner timings).
CHUNK = 64_000


def read_prompts(task: str, texts: list[str]) -> list[Prompt | ProviderCallError]:
    """read_prompt for each of many prompts of one task (or why it cannot be read): the
    pairs are found for several at once."""
    found: list[Found | None] = [None] * len(texts)
    if family(task).sim_reads == "pairs":
        found, size = [], 0
        chunk: list[str] = []
        for text in texts:
            if chunk and size + len(text) > CHUNK:
                found += _pairs_fast(chunk)
                chunk, size = [], 0
            chunk.append(text)
            size += len(text)
        found += _pairs_fast(chunk)
    prompts: list[Prompt | ProviderCallError] = []
    for text, pairs in zip(texts, found, strict=True):
        try:
            prompts.append(_read(task, text, pairs))
        except ProviderCallError as exc:
            prompts.append(exc)
    return prompts


def read_prompt(task: str, text: str) -> Prompt:
    """Pairs (or the list) and the query from a prompt written like prompts/<task>.txt.

    The task's family says how its prompts read (`sim_reads`): pairs and queried keys
    (one key when each question has targets, several when it has queries), or a list
    and the value to count."""
    return _read(task, text, _pairs_fast([text])[0] if family(task).sim_reads == "pairs" else None)


def _read(task: str, text: str, found: Found | None) -> Prompt:
    """read_prompt, the pairs already found by _pairs_fast (None: by the regular expression)."""
    reads = family(task).sim_reads
    one_key = family(task).width_name == "targets"
    layout = {
        "pairs": "pairs written 'k: K, v: V', and the queried key"
                 + (" as the only other number" if one_key else "s as the only other numbers"),
        "list": "the values as one comma-separated list, and the counted value as the only other number",
    }

    def unreadable(why: str) -> ProviderCallError:
        return ProviderCallError(
            f"sim cannot read this {task} prompt: {why}. It reads prompts laid out like the "
            f"built-in template prompts/{task}.txt ({layout.get(reads or '', '')})",
            kind="unreadable_prompt",
            fatal=True,  # every prompt of the run shares the template, so stop at once
        )

    if reads == "pairs":
        parts = PAIR.split(text) if found is None else []  # outside, key, value, outside, ..., outside
        if len(parts) == 1 or (found is not None and not len(found[0])):
            raise unreadable("it holds no 'k: K, v: V' pairs")
        query = [int(n) for n in NUMBER.findall(" ".join(parts[::3]))] if found is None else found[2]
        if not query or (one_key and len(query) != 1):
            raise unreadable(f"outside the pairs it holds {len(query)} numbers, not the queried key"
                             + ("" if one_key else "s"))
        if found is None:
            return Prompt(_numbers(parts[1::3]), _numbers(parts[2::3]), query=query)
        return Prompt(found[0], found[1], query=query)
    if reads == "list":
        lists = list(NUMBER_LIST.finditer(text))
        if not lists:
            raise unreadable("it holds no comma-separated list of numbers")
        longest = max(lists, key=lambda m: m.end() - m.start())
        query = _outside(text, [longest.span()])
        if len(query) != 1:
            raise unreadable(f"outside the list it holds {len(query)} numbers, not the one value to count")
        return Prompt(values=[int(n) for n in NUMBER.findall(longest[0])], query=query)
    raise ProviderCallError(f"sim has no reader for task {task!r}", kind="unreadable_prompt")
