"""Answer text -> the numbers it predicts. Pure: the rules, and the readers that apply them.

A task family picks its reader (tasks/): qmkar and mqar `parse_recall`, counting
`parse_count`, parity and dyck `parse_label` with their label words, copy `parse_copy`;
multi-part recall's reader (rule 11) lives with its key encoding in tasks/multitoken.py.
Every rule has a test in tests/test_parse.py. The recall, counting and copy readers take
a shortcut for the commonest answer, numbers alone (`plain_numbers`), and the recall reader
another for an answer that opens by quoting pairs as the context writes them (`quoted_pairs`:
a model listing "k: 230, v: 5542; k: 230, v: 2882", or a mock server echoing the whole
prompt); tests/test_parse.py holds both to what the rules give.

Rules for every task (applied in this order):

  1. Reasoning is never read. `<think>`/`<thinking>`/`<reasoning>` blocks are removed;
     if only a closing `</think>` is present, only the text after it is read; an
     unclosed opening tag hides everything after it. Provider reasoning fields never
     reach this module.
  2. Numbers are runs of digits not glued to Latin letters ("3rd", "gpt4" are not
     numbers). "4,527" (1-3 digits, then groups of exactly 3 after a comma with no
     space) is one number when that fits the task's value range; otherwise the
     groups are separate numbers ("123,456" with 3-digit values is two numbers).
     Full-width digits count. Markdown needs no rule beyond dropping `*` and
     backticks: only numbers are read.
  3. List enumerators are not values: "1." / "2)" / "(3)" / "#4" at the start of a
     line, label numbers such as "Value 1:", "v2 =", "answer 3)", and positions
     ("position 12", "pair #40", "index 7"). A fractional part of zeros is dropped
     ("12.0" is 12); "4527.6383" is two numbers.

Recall tasks (qmkar, mqar):

  4. Keys are not values: a number written as a key ("k: 230", "k = 230", "key 230",
     "k is 230") and any number equal to a queried key are dropped. (MQAR's key range
     100..1000 touches its value range 1000..9999 only at 1000, the one ambiguity.)
  5. A number followed by a counting noun ("3 values", "500 pairs", "2 times") is a
     count, not a value.
  6. Duplicates count once; values keep the order of their first appearance.
  7. An answer with no values left predicts nothing; it is marked `refused` when it
     reads as a refusal ("I cannot", "sorry", "not found", ...).

Counting:

  8. Number words ("twelve", "twenty-one") are numbers.
  9. The queried value written as such ("equal to 44", "the value 44", "number 44")
     is not the count.
 10. A number followed by a counting noun ("12 times", "12 values", "12 occurrences")
     is the count; failing that, a number after "count is", "answer is", "there
     are", "total of", "appears", "occurs", "is:" ...; failing that, the last number
     left, the queried value only if it is all there is.

Multi-part recall (qmkar-kv, mqar-kv; values are stored as codes, see tasks/multitoken.py):

 11. Numbers are read by rules 1-3. A key written as such ("k: 123-45") is dropped
     with all its parts, and so is any run of numbers equal to a queried key's parts;
     a number followed on the same line by a counting noun is dropped (rule 5,
     stricter so a value ending a line is kept). The numbers left are
     cut, in order, into values of m numbers, whatever separates them, so a value
     counts only when every part is right. A trailing incomplete value is predicted
     as -1 (always wrong). Rules 6-7 then apply.

Labels (parity, parity-ones, dyck; 1 = odd / balanced, 0 = even / unbalanced):

 12. The last of the task's label words decides: odd/even (parity), balanced/
     unbalanced/imbalanced (dyck); "not" just before a label flips it. Failing that,
     the last yes/no (the prompts ask "is it odd?" / "is it balanced?": yes = 1);
     failing that, the last standalone 0 or 1. Nothing found predicts nothing.

Copying (copy):

 13. Every number read by rules 1-3 is a copied token, in order, repeats kept.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from pydantic import Field

from qmkar.deferred import DeferredModel

if TYPE_CHECKING:  # items are read, never built, here: no import of the task registry
    from qmkar.tasks.base import Item


THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)

# Numbers alone: runs of ASCII digits, each two parted by a comma, a space or a newline, or
# a comma and then one space or newline (a comma followed by a digit is left to rule 2).
PLAIN = re.compile(r"[0-9]+(?:,?[ \n][0-9]+)*")
DIGITS = re.compile(r"[0-9]+")
# Pairs as a context writes them, one after another from the start of an answer: each "k: K, v:
# V" (spaces after the colons and the comma optional), the next after a semicolon, a line break
# or both, with spaces or tabs around them. `[0-9]++` never gives digits back.
PAIR = r"k: ?[0-9]++, ?v: ?[0-9]++"
PAIR_AFTER = r"(?:;[ \t]*|;?[ \t]*\n[ \t]*)" + PAIR  # a separator, then a pair
PAIRS = re.compile(PAIR + r"(?:" + PAIR_AFTER + r")*+")
NEXT_PAIR = re.compile(PAIR_AFTER)
# The same run in the context's own spelling ("k: 248, v: 5542; k: 169, v: 2882"): one form to
# test at each step instead of PAIRS' choices, so less than half of its time on an echo.
CONTEXT_PAIRS = re.compile(r"k: [0-9]++, v: [0-9]++(?:; k: [0-9]++, v: [0-9]++)*+")
# Every byte but an ASCII digit made a space: a run of pairs' numbers, split in C.
DIGITS_ONLY = bytes(byte if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
INTS = msgspec.json.Decoder(list[int])
NUMBER = re.compile(r"(?<![A-Za-z_\d])(\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?(?![A-Za-z_\d])")
ENUMERATOR = re.compile(r"(?m)^[ \t>*\-+]*(?:\(?\d{1,3}[.)]|#\d{1,3}|\(\d{1,3}\))(?=\s)")
# Each (?=[...]) holds the first letters of the words after it: it matches nothing they do
# not, and lets the regex pass over most places of a long answer at one test.
LABEL = re.compile(
    r"(?i)\b(?=[vainr])(?:values?|val|v|answers?|items?|no|number|result)\s*[#_]?\s*(\d{1,2})\s*[:=)]"
    r"|\b(?=[pileo])(?:position|pos|index|idx|pair|line|entry|occurrence)\s*[#:]?\s*(\d+)"
)
KEY_MARK = re.compile(r"(?i)\b(?:k|key)\s*(?:is|=|:|==)?\s*(\d+)")
COUNT_NOUN = (
    r"[ \t]*(?:values?|numbers?|pairs?|items?|occurrences?|times?|entries|entry|results?|keys?"
    r"|instances?|matches|elements?)\b"
)
# A number that a counting noun follows (rules 5 and 10). It starts only where a run of digits
# does and never gives digits back (`\d++`): a shorter run is followed by a digit, never by a
# noun, so it finds what `(\d+)` + COUNT_NOUN finds, without retrying each digit of each number
# (most of the time spent reading a long answer such as an echoed context).
COUNTED = re.compile(r"(?<!\d)(\d++)" + COUNT_NOUN, re.IGNORECASE)
REFUSAL = re.compile(
    r"(?i)\b(?:sorry|cannot|can't|can not|unable|not able|no values?|none|not found|"
    r"does not (?:appear|exist)|doesn't (?:appear|exist)|no such|i don't know|unknown)\b"
)
QUERIED_VALUE = re.compile(
    r"(?i)(?:equal(?:s)?(?:\s+to)?|equaling|value(?:s)?(?:\s+of)?|number|of|for)\s*[:=]?\s*\**(\d+)"
)
COUNT_AFTER = re.compile(
    r"(?i)(?:count(?:\s+is)?|answer(?:\s+is)?|there\s+(?:are|is)|total(?:\s+of|\s+is)?|"
    r"appears|occurs|is|=|:)\s*[:=]?\s*\**\s*(\d+)"
)

WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19,
}
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
        "eighty": 80, "ninety": 90}
NUMBER_WORD = re.compile(
    r"(?i)\b(?:(" + "|".join(TENS) + r")(?:[-\s](" + "|".join(list(WORDS)[1:10]) + r"))?|("
    + "|".join(WORDS) + r"))\b"
)


class ParsedAnswer(DeferredModel):
    """What an answer text predicts."""

    values: list[int] = Field(description="Predicted values (recall) or [count] (counting).")
    refused: bool = Field(default=False, description="No prediction and the text reads as a refusal.")


def final_text(text: str) -> str:
    """Rule 1: the answer with reasoning blocks removed."""
    text = THINK_BLOCK.sub(" ", text)
    closes = list(THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    # Emphasis marks sit between a number and its noun ("**12** times"); they carry nothing.
    return unicodedata.normalize("NFKC", text).replace("*", "").replace("`", "")


def numbers(text: str, ceiling: int, pos: int = 0) -> list[tuple[int, int, int]]:
    """Rules 2-3: (value, start, end) of each number that is not an enumerator or label, from
    `pos` on (the text before it is still looked back at, as a whole-text scan would)."""
    skipped = {m.start(m.lastindex or 1) for m in LABEL.finditer(text, pos)}
    for match in ENUMERATOR.finditer(text, pos):
        enumerator = re.search(r"\d+", match.group(0))
        if enumerator:
            skipped.add(match.start() + enumerator.start())
    found = []
    for match in NUMBER.finditer(text, pos):
        start, end = match.span(1)
        if start in skipped:
            continue
        digits = text[start:end]
        if "," in digits:
            joined = int(digits.replace(",", ""))
            if joined <= ceiling:
                found.append((joined, start, end))
            else:
                for part in digits.split(","):
                    found.append((int(part), start, start + len(part)))
                    start += len(part) + 1
            continue
        found.append((int(digits), start, end))
    return found


def plain_numbers(text: str) -> list[int] | None:
    """The numbers of an answer that is numbers alone (PLAIN), in order; None for any other.

    Rules 1-3 read such a text as exactly these: it has no tags, letters, marks or
    non-ASCII digits for rules 1 and 3 to act on, and no comma a digit follows (rule 2).
    No letters also means no key marks or counting nouns (rules 4, 5, 9, 10)."""
    if PLAIN.fullmatch(text) is None:
        return None
    return list(map(int, DIGITS.findall(text)))


def quoted_pairs(body: str) -> tuple[list[int], int]:
    """The values of the pairs an answer's text (rule 1 applied) opens with, written as the
    context writes them (PAIRS), but the last; and where that last value starts, from which
    the rules read the rest. ([], 0) for a text that does not open so.

    Rules 2-5 read those pairs' text as exactly these numbers: each key is marked as a key
    (rule 4); no number in it is a label, an enumerator, a count or part of "4,527" (a digit
    is followed by a comma and a space or a "v", or by a semicolon or a line break, then a
    "k" that no counting noun starts with); and no match of the rules' patterns begins there
    and ends past the last value's start. The last value is left to the rules, which see
    what follows it ("... v: 5767 values"); the queried keys (rule 4) and repeats (rule 6)
    are the caller's to drop.

    A run in the context's own spelling (CONTEXT_PAIRS) is where PAIRS' run ends too, unless
    another pair follows it (NEXT_PAIR): each of PAIRS' steps matches what CONTEXT_PAIRS' does
    there, and neither gives back what it took. The run's text holds only its numbers, keys
    and values in turn, and ASCII letters and marks: its values are every second number."""
    run = CONTEXT_PAIRS.match(body)
    if run is None or NEXT_PAIR.match(body, run.end()) is not None:
        run = PAIRS.match(body)
        if run is None:
            return [], 0
    last = len(body[:run.end()].rstrip("0123456789"))  # where the last value's digits start
    values = body[:last].encode("ascii").translate(DIGITS_ONLY).split()[1::2]
    try:  # read as one JSON list: a third of the time of an int() each
        return INTS.decode(b"[" + b",".join(values) + b"]"), last
    except msgspec.DecodeError:  # not JSON's numbers ("007"), or past 64 bits
        return list(map(int, values)), last


def parse_recall(item: Item, text: str, ceiling: int) -> ParsedAnswer:
    """Rules 1-7: the values a qmkar or mqar answer predicts (`ceiling`: the largest value, rule 2)."""
    plain = plain_numbers(text)
    if plain is not None:
        queried = set(item.query)
        values = [value for value in dict.fromkeys(plain) if value not in queried]
        if values:  # none left: rule 7 (is it a refusal?) is the general reader's
            return ParsedAnswer(values=values, refused=False)
    body = final_text(text)
    quoted, start = quoted_pairs(body)
    return _read_recall(item, body, ceiling, quoted, start)


def read_recall(item: Item, text: str, ceiling: int) -> ParsedAnswer:
    """parse_recall without its shortcuts: every rule applied in turn."""
    return _read_recall(item, final_text(text), ceiling, [], 0)


def _read_recall(item: Item, body: str, ceiling: int, quoted: list[int], start: int) -> ParsedAnswer:
    """Rules 2-7 over `body` from `start` on, after the values `quoted` before it."""
    key_starts = {m.start(1) for m in KEY_MARK.finditer(body, start)}
    count_starts = {m.start(1) for m in COUNTED.finditer(body, start)}
    queried = set(item.query)
    read = (value for value, at, _ in numbers(body, ceiling, start)
            if not (at in key_starts or at in count_starts))
    kept = dict.fromkeys(itertools.chain(quoted, read))  # rule 6 in one pass
    for key in queried:
        kept.pop(key, None)
    values = list(kept)
    return ParsedAnswer(values=values, refused=not values and refusal(body))


def _words_to_digits(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        tens, unit, word = match.groups()
        if word:
            return str(WORDS[word.lower()])
        return str(TENS[tens.lower()] + (WORDS[unit.lower()] if unit else 0))

    return NUMBER_WORD.sub(replace, text)


def parse_count(item: Item, text: str, ceiling: int) -> ParsedAnswer:
    """Rules 1-3 and 8-10: the count a counting answer gives."""
    plain = plain_numbers(text)
    if plain is not None:  # rule 10's last resorts: no nouns, words or marks to go by
        queried_value = item.query[0] if item.query else None
        others = [value for value in plain if value != queried_value]
        return ParsedAnswer(values=[others[-1] if others else plain[-1]])
    return read_count(item, text, ceiling)


def read_count(item: Item, text: str, ceiling: int) -> ParsedAnswer:
    """parse_count without its shortcut: every rule applied in turn."""
    body = _words_to_digits(final_text(text))
    found = numbers(body, ceiling)
    if not found:
        return ParsedAnswer(values=[], refused=refusal(body))
    queried_value = item.query[0] if item.query else None
    queried_starts = {
        m.start(1) for m in QUERIED_VALUE.finditer(body) if int(m.group(1)) == queried_value
    }
    candidates = [(v, s) for v, s, _ in found if s not in queried_starts]
    starts = {s for _, s in candidates}
    for match in COUNTED.finditer(body):
        if match.start(1) in starts:
            return ParsedAnswer(values=[int(match.group(1))])
    for match in COUNT_AFTER.finditer(body):
        if match.start(1) in starts:
            return ParsedAnswer(values=[int(match.group(1))])
    others = [v for v, _ in candidates if v != queried_value]
    if others:
        return ParsedAnswer(values=[others[-1]])
    if candidates:
        return ParsedAnswer(values=[candidates[-1][0]])
    return ParsedAnswer(values=[found[-1][0]])


def refusal(body: str) -> bool:
    """Rule 7: whether an answer that predicts nothing reads as a refusal (or is empty)."""
    return bool(REFUSAL.search(body) or not body.strip())


# Rule 5 for multi-part values: the noun must follow on the same line, so a value
# ending a line is not taken for a count of the "key ..." or "values" that starts the next.
COUNT_ON_LINE = re.compile(  # `(?<!\d)(\d++)`: as in COUNTED
    r"(?i)(?<!\d)(\d++)[ \t]*(?:values?|numbers?|pairs?|items?|occurrences?|times?|entries|entry|results?)\b"
)


def parse_grouped(
    text: str, ceiling: int, queried_parts: list[list[int]], value_parts: int,
    encode: Callable[[list[int]], int],
) -> ParsedAnswer:
    """Rules 1-3, 5-7 and 11: multi-part values, each `value_parts` numbers, as codes.

    `queried_parts` holds each queried key's parts (all keys have as many); `encode`
    turns a value's parts into the code the item stores.
    """
    key_parts = len(queried_parts[0]) if queried_parts else 1
    body = final_text(text)
    key_starts = {m.start(1) for m in KEY_MARK.finditer(body)}
    count_starts = {m.start(1) for m in COUNT_ON_LINE.finditer(body)}
    found = [(v, start) for v, start, _ in numbers(body, ceiling) if start not in count_starts]
    kept: list[int] = []
    index = 0
    while index < len(found):
        run = [v for v, _ in found[index:index + key_parts]]
        if found[index][1] in key_starts or run in queried_parts:
            index += key_parts
            continue
        kept.append(found[index][0])
        index += 1
    groups = (kept[start:start + value_parts] for start in range(0, len(kept), value_parts))
    values = list(dict.fromkeys(encode(group) if len(group) == value_parts else -1 for group in groups))
    return ParsedAnswer(values=values, refused=not values and refusal(body))


YES_NO = re.compile(r"(?i)\b(yes|no)\b")
BIT = re.compile(r"(?<![\w.,])([01])(?![\w,]|\.\d)")


def parse_label(text: str, words: dict[str, int]) -> ParsedAnswer:
    """Rules 1 and 12: [1] or [0] by the task's label `words`; [] when none is given."""
    body = final_text(text)
    pattern = re.compile(r"(?i)(\bnot\s+|n't\s+)?\b(" + "|".join(words) + r")\b")
    labels = list(pattern.finditer(body))
    if labels:
        last = labels[-1]
        value = words[last.group(2).lower()]
        return ParsedAnswer(values=[1 - value if last.group(1) else value])
    answers = list(YES_NO.finditer(body))
    if answers:
        return ParsedAnswer(values=[int(answers[-1].group(1).lower() == "yes")])
    bits = list(BIT.finditer(body))
    if bits:
        return ParsedAnswer(values=[int(bits[-1].group(1))])
    return ParsedAnswer(values=[], refused=refusal(body))


def parse_copy(text: str, ceiling: int) -> ParsedAnswer:
    """Rules 1-3 and 13: the tokens a copy answer gives, in order."""
    plain = plain_numbers(text)
    if plain is not None:
        return ParsedAnswer(values=plain, refused=False)
    return read_copy(text, ceiling)


def read_copy(text: str, ceiling: int) -> ParsedAnswer:
    """parse_copy without its shortcut: every rule applied in turn."""
    body = final_text(text)
    values = [v for v, _, _ in numbers(body, ceiling)]
    return ParsedAnswer(values=values, refused=not values and refusal(body))
