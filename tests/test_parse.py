"""One test per parsing rule (see the numbered list in qmkar/parse.py), plus answer
shapes seen from real chat models."""

from __future__ import annotations

import random

import pytest

from qmkar.parse import (
    ParsedAnswer,
    final_text,
    parse_copy,
    parse_count,
    parse_recall,
    plain_numbers,
    quoted_pairs,
    read_copy,
    read_count,
    read_recall,
)
from qmkar.tasks.qmkar import QmkarParams
from tests.support.factories import counting_item, parse, recall_item

EXPECTED = [4527, 6383, 1234]


@pytest.mark.parametrize(
    "text",
    [
        "4527, 6383, 1234",
        "4527 6383 1234",
        "4527\n6383\n1234",
        "4527、6383、1234",
        "4527，6383，1234",
        "[4527, 6383, 1234]",
        "**4527**, **6383**, **1234**",
        "- 4527\n- 6383\n- 1234",
        "* 4527\n* 6383\n* 1234",
        "The values are 4527, 6383 and 1234.",
        "The values are 4527, 6383, and 1234.",
        "v: 4527; v: 6383; v: 1234",
        "```\n4527\n6383\n1234\n```",
        '{"values": [4527, 6383, 1234]}',
        "4527;6383;1234",
        "4527,6383,1234",
        "Values: 4527 | 6383 | 1234",
        "４５２７, ６３８３, １２３４",
        "4527 (first), 6383 (second), 1234 (third)",
        "Answer: 4527 / 6383 / 1234",
        "| k | v |\n|---|---|\n| 230 | 4527 |\n| 230 | 6383 |\n| 230 | 1234 |",
        "Values for k=230:\n\n1. **4527**\n2. **6383**\n3. **1234**",
        "4527 (position 12), 6383 (position 240), 1234 (pair #400)",
        "4527.0, 6383.0, 1234.0",
        "4527. 6383. 1234.",
        "230 → 4527, 6383, 1234",
        "值为：4527、6383、1234",
    ],
)
def test_list_shapes(text: str) -> None:
    assert parse(recall_item(), text).values == EXPECTED


def test_rule1_think_blocks_are_ignored() -> None:
    text = "<think>k is 230... maybe 9999 or 7777? Let me check 3333.</think>\n4527, 6383, 1234"
    assert parse(recall_item(), text).values == EXPECTED


def test_rule1_only_a_closing_tag_reads_after_it() -> None:
    text = "The pairs with k 230 are... 7777 no.\n</think>\n\n4527, 6383, 1234"
    assert parse(recall_item(), text).values == EXPECTED


def test_rule1_unclosed_think_hides_the_rest() -> None:
    assert parse(recall_item(), "<think>4527 and maybe 7777").values == []
    assert final_text("4527 <thinking>7777") .strip() == "4527"


def test_rule2_thousands_separators() -> None:
    assert parse(recall_item(), "4,527, 6,383, 1,234").values == EXPECTED
    assert parse(recall_item(), "4,527 and 6,383 and 1,234").values == EXPECTED


def test_rule2_separator_that_would_leave_the_value_range_splits() -> None:
    item = recall_item(expected=(123, 456))
    item.params = QmkarParams(value_range="100..999")
    assert parse(item, "123,456").values == [123, 456]


def test_rule2_numbers_glued_to_letters_are_not_values() -> None:
    assert parse(recall_item(), "The 3rd is 1234; from gpt4: 4527").values == [1234, 4527]


def test_rule3_enumerators_and_labels_are_not_values() -> None:
    assert parse(recall_item(), "1. 4527\n2. 6383\n3. 1234").values == EXPECTED
    assert parse(recall_item(), "1) 4527\n2) 6383\n3) 1234").values == EXPECTED
    assert parse(recall_item(), "(1) 4527\n(2) 6383\n(3) 1234").values == EXPECTED
    assert parse(recall_item(), "Value 1: 4527\nValue 2: 6383\nValue 3: 1234").values == EXPECTED
    assert parse(recall_item(), "v1 = 4527, v2 = 6383, v3 = 1234").values == EXPECTED


def test_rule4_echoed_pairs_drop_the_key() -> None:
    text = "k: 230, v: 4527; k: 230, v: 6383; k: 230, v: 1234"
    assert parse(recall_item(), text).values == EXPECTED


def test_rule4_other_keys_written_as_keys_are_dropped_but_their_values_count() -> None:
    assert parse(recall_item(), "k: 231, v: 7777; k = 230, v = 4527").values == [7777, 4527]


def test_rule4_queried_key_in_prose_is_not_a_value() -> None:
    assert parse(recall_item(), "For k = 230: 4527, 6383, 1234").values == EXPECTED
    assert parse(recall_item(), "If k is 230, v is 4527, 6383 or 1234.").values == EXPECTED
    assert parse(recall_item(), "230: 4527, 6383, 1234").values == EXPECTED
    assert parse(recall_item(), "The key 230 maps to 4527, 6383, 1234").values == EXPECTED


def test_rule4_mqar_keys_in_an_answer_are_dropped() -> None:
    item = recall_item("mqar", query=(230, 150, 300), expected=(4527, 6383, 1234))
    assert parse(item, "230: 4527\n150: 6383\n300: 1234").values == EXPECTED
    assert parse(item, "4527, 6383, 1234").values == EXPECTED


def test_rule5_counts_in_prose_are_not_values() -> None:
    text = "There are 3 values for k = 230 among the 500 pairs: 4527, 6383, 1234."
    assert parse(recall_item(), text).values == EXPECTED


def test_rule6_duplicates_count_once_in_first_seen_order() -> None:
    assert parse(recall_item(), "6383, 4527, 6383, 4527").values == [6383, 4527]


def test_an_echoed_context_reads_as_every_value_once_in_first_seen_order() -> None:
    # Mock servers echo the prompt: thousands of values, repeats, keys and counting nouns.
    rng = random.Random(3)
    pairs = [(rng.randint(100, 999), rng.randint(1000, 9999)) for _ in range(2000)]
    context = "; ".join(f"k: {key}, v: {value}" for key, value in pairs)
    text = f"Here are 2000 pairs: {context}. If k is 230, what are v? 3 values"
    wanted = [v for v in dict.fromkeys(value for _, value in pairs) if v != 230]
    assert len(wanted) < len(pairs)  # repeats to drop
    parsed = parse(recall_item(), text)
    assert parsed.values == wanted and not parsed.refused


def test_rule7_refusals_and_empty_answers_predict_nothing() -> None:
    for text in ["", "   ", "I'm sorry, I cannot find k = 230 in the context.",
                 "None", "No values found."]:
        parsed = parse(recall_item(), text)
        assert parsed.values == [], text
        assert parsed.refused, text


def test_wrong_values_are_kept_for_scoring() -> None:
    assert parse(recall_item(), "4527, 7777, 9999").values == [4527, 7777, 9999]


@pytest.mark.parametrize(
    "text",
    [
        "12",
        "12.",
        "The count is 12.",
        "There are 12 values equal to 44.",
        "**12**",
        "Count: 12",
        "44 appears 12 times in the list.",
        "The value 44 appears 12 times.",
        "The number 44 occurs twelve times.",
        "Answer: 12",
        "After counting the occurrences of 44, the answer is 12.",
        "<think>44, 44, 44... 11? no</think>12",
        "I count a total of 12 values equal to 44",
        "12 occurrences",
        "The count of values equal to 44 is 12.",
        "There are **12** occurrences of the value 44.",
        "The count is approximately 12",
        "It appears 12 times, at positions 3, 17 and 40.",
        "12.0",
    ],
)
def test_rules8_to_10_counting_shapes(text: str) -> None:
    assert parse(counting_item(), text).values == [12], text


def test_counting_when_the_count_equals_the_queried_value() -> None:
    item = counting_item(queried=12, count=12)
    assert parse(item, "12").values == [12]
    assert parse(item, "There are 12 values equal to 12.").values == [12]


def test_counting_refusal_predicts_nothing() -> None:
    parsed = parse(counting_item(), "Sorry, I can't count that without a tool.")
    assert parsed.values == [] and parsed.refused


# The shortcut for answers that are numbers alone (parse.plain_numbers) against every rule in
# turn (read_*): random texts near and far from that shape, compared whole.
PLAIN_PARTS = ["4527", "6383", "1234", "230", "150", "44", "12", "0", "007", "99999999999", "4527"]
PLAIN_SEPARATORS = [", ", " ", "\n", ",\n", ", ", ", "]
OTHER_PARTS = ["k: ", "v = ", "times", " values", "1.", "2)", "#3", "(4)", "٤٥", "４５２７", "**", "`",
               ".0", ".5", "<think>", "</think>", ",", ",,", "  ", "\t", "\r\n", " \n", "\n\n", ";", "-",
               "a", "sorry", "1,234", "123,456", "\u00a0", "twelve", "position 3", "is "]


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 8)):
            if parts and rng.random() < 0.8:
                parts.append(rng.choice(PLAIN_SEPARATORS))
            parts.append(rng.choice(PLAIN_PARTS) if rng.random() < 0.8 else str(rng.randint(0, 10**6)))
        noisy = rng.random() < 0.4
        for _ in range(rng.randint(1, 3) if noisy else 0):
            parts.insert(rng.randint(0, len(parts)), rng.choice(OTHER_PARTS))
        texts.append("".join(parts))
    return texts


def _same(fast: ParsedAnswer, slow: ParsedAnswer, text: str) -> None:
    assert fast == slow, text
    assert fast.model_fields_set == slow.model_fields_set, text
    assert fast.model_dump_json() == slow.model_dump_json(), text


@pytest.mark.parametrize("seed", range(2))
def test_the_shortcut_for_numbers_alone_reads_what_the_rules_read(seed: int) -> None:
    qmkar = recall_item()
    mqar = recall_item("mqar", query=(230, 150, 300))
    counted = [counting_item(), counting_item(queried=12, count=12)]
    texts = _texts(3000, seed)
    for text in texts:
        for item in (qmkar, mqar):
            _same(parse_recall(item, text, 9999), read_recall(item, text, 9999), text)
            _same(parse_recall(item, text, 999), read_recall(item, text, 999), text)
        for item in counted:
            _same(parse_count(item, text, 9999), read_count(item, text, 9999), text)
        _same(parse_copy(text, 99), read_copy(text, 99), text)
    taken = sum(plain_numbers(text) is not None for text in texts)
    assert len(texts) // 3 < taken < len(texts)  # both roads are travelled


# The shortcut for answers that open with pairs written as the context writes them
# (parse.quoted_pairs) against every rule in turn: pairs in the shapes it takes and near them,
# then tails that sit on the boundary (a counting noun, a comma and digits, a fraction, a
# letter, a tag, a line that opens with an enumerator), glued on with no space between.
QUOTED_KEYS = ["230", "150", "151", "0", "007", "1234"]
QUOTED_VALUES = ["4527", "6383", "230", "150", "5", "1", "12", "999", "123", "4527", "99999999999"]
QUOTED_SEPARATORS = ["; ", ";", ";\n", "\n", " \n", ";\t", "; \n "]  # the shortcut's
NEAR_SEPARATORS = ["\n\n", ", ", " ", ";;", ". ", "", ";\r\n", "\t"]  # and others
QUOTED_TAILS = OTHER_PARTS + [" values", " times", "values", " 3 values", ",123", ",1234", ".00", ".0x", ".7",
                              "x", "k", "key 5", "k: 5", "v: 5", "v 1:", "value 2:", "\n1. 44", "\n(2) 45",
                              "1", " 1", "\n\nIf k is 230, what are v? Please directly give me all values",
                              "</think>4527", "<think>9", "\u0663", "\uff14", "_", "%", "1, 2, 3", "sorry"]


def _quoted(rng: random.Random) -> str:
    parts = []
    for index in range(rng.randint(1, 6)):
        if index:
            parts.append(rng.choice(QUOTED_SEPARATORS if rng.random() < 0.9 else NEAR_SEPARATORS))
        colon, comma = rng.choice([": ", ":", ": "]), rng.choice([", ", ",", ", ", ", ", " "])
        letters = rng.choice([("k", "v")] * 12 + [("K", "V"), ("key", "value"), ("k", "val")])
        key, value = rng.choice(QUOTED_KEYS), rng.choice(QUOTED_VALUES)
        parts.append(f"{letters[0]}{colon}{key}{comma}{letters[1]}{rng.choice([': ', ':'])}{value}")
    for _ in range(rng.randint(0, 3)):
        parts.append(rng.choice(QUOTED_TAILS) if rng.random() < 0.7 else
                     rng.choice(QUOTED_SEPARATORS + NEAR_SEPARATORS))
    if rng.random() < 0.2:
        parts.insert(0, rng.choice(QUOTED_TAILS))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(2))
def test_the_shortcut_for_quoted_pairs_reads_what_the_rules_read(seed: int) -> None:
    rng = random.Random(seed)
    items = [recall_item(), recall_item("mqar", query=(230, 150, 300))]
    taken = 0  # answers whose first values the shortcut reads
    for _ in range(6000):
        text = _quoted(rng)
        taken += quoted_pairs(final_text(text))[0] != []
        for item in items:
            _same(parse_recall(item, text, 9999), read_recall(item, text, 9999), text)
            _same(parse_recall(item, text, 999), read_recall(item, text, 999), text)
    assert 1000 < taken < 6000  # both roads are travelled


def test_quoted_pairs_leave_the_last_value_and_what_follows_to_the_rules() -> None:
    body = "k: 230, v: 4527; k: 150, v: 6383;\nk: 230, v: 1234 values"
    assert quoted_pairs(body) == ([4527, 6383], body.index("1234"))
    assert quoted_pairs("k: 230, v: 4527") == ([], len("k: 230, v: "))
    # Numbers JSON does not write (a leading zero, past 64 bits) are read as int() reads them.
    big = "k: 1, v: 007; k: 2, v: 99999999999999999999999; k: 3, v: 4"
    assert quoted_pairs(big) == ([7, 99999999999999999999999], len(big) - 1)
    # A run in the context's spelling that goes on in another is read to its end.
    body = "k: 230, v: 4527; k: 150, v: 6383\nk:230,v:12;k: 1, v: 2 x"
    assert quoted_pairs(body) == ([4527, 6383, 12], body.index("2 x"))
    for other in ["The pairs: k: 230, v: 4527; k: 230, v: 1", "K: 230, V: 4527; k: 1, v: 2",
                  "k: ٤, v: 4; k: 1, v: 2"]:
        assert quoted_pairs(other) == ([], 0), other
    echoed = "; ".join(f"k: {key}, v: {value}" for key, value in [(230, 4527), (150, 6383), (230, 1234)])
    echoed += "\n\nIf k is 230, what are v? Please directly give me all values without other output"
    assert parse_recall(recall_item(), echoed, 9999).values == [4527, 6383, 1234]


def test_numbers_alone_are_read_by_the_shortcut() -> None:
    assert plain_numbers("4527, 6383, 1234") == EXPECTED
    assert plain_numbers("4527\n6383,\n1234") == EXPECTED
    assert plain_numbers("4527 6383 1234") == EXPECTED
    for other in ["4527,6383", "4527, 6383 ", " 4527", "4527.", "٤٥٢٧", "", "4527;6383", "4527  6383"]:
        assert plain_numbers(other) is None, other
