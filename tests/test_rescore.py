"""rescore's shortcuts give what the general code gives: items built without pydantic's
loop, and answer lines graded and written again."""

from __future__ import annotations

from pathlib import Path

from qmkar.records import ItemLine
from qmkar.rescore import ITEM_FIELDS, Items
from qmkar.tasks.base import Item
from tests.support.factories import counting_item, recall_item


def _same(built: Item, constructed: Item) -> None:
    assert built == constructed
    assert list(built.__dict__) == list(constructed.__dict__)
    assert built.model_fields_set == constructed.model_fields_set
    assert built.__pydantic_extra__ == constructed.__pydantic_extra__
    assert built.__pydantic_private__ == constructed.__pydantic_private__
    assert built.model_dump_json() == constructed.model_dump_json()


def test_a_trusted_item_is_what_model_construct_builds() -> None:
    for item in (recall_item(), recall_item("mqar", (230, 150, 300)), counting_item()):
        fields = {name: getattr(item, name) for name in Item.model_fields}
        _same(Item.trusted(set(ITEM_FIELDS), **fields), Item.model_construct(set(ITEM_FIELDS), **fields))


def test_an_item_line_decodes_to_the_item_pydantic_reads(tmp_path: Path) -> None:
    for item in (recall_item(), recall_item("mqar", (230, 150, 300)), counting_item()):
        line = ItemLine(item=item).model_dump_json().encode()
        (tmp_path / "t.jsonl").write_bytes(line + b"\n")
        items = Items(tmp_path / "t.jsonl")
        try:
            decoded = items.decode(line)
        finally:
            items.close()
        read = ItemLine.model_validate_json(line).item
        assert decoded == read
        assert decoded.model_dump_json() == read.model_dump_json()
        _same(decoded, Item.model_construct(set(ITEM_FIELDS), **dict(decoded.__dict__)))
        assert decoded.model_fields_set == set(ITEM_FIELDS)
