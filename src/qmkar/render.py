"""Items + prompt templates -> chat messages.

Templates are plain text files, one per task (prompts/<task>.txt), with placeholders
in braces. Only the placeholders listed in PLACEHOLDERS (each required in a task's
template) and OPTIONAL_PLACEHOLDERS are replaced, so any other brace in a user's
template is left as written (dyck's template shows "{}" that way).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from qmkar.errors import TemplateError
from qmkar.tasks import multitoken
from qmkar.tasks.base import Item

PLACEHOLDERS: dict[str, dict[str, str]] = {
    "qmkar": {
        "pairs": "the context: 'k: K, v: V' joined by '; '",
        "key": "the queried key",
    },
    "mqar": {
        "pairs": "the context: 'k: K, v: V' joined by '; '",
        "keys": "the queried keys joined by ', '",
    },
    "counting": {
        "values": "the values joined by ', '",
        "value": "the queried value",
    },
    # The seed papers' variant tasks (docs/variants.md).
    "qmkar-kv": {
        "pairs": "the context: 'k: K1-K2, v: V1-V2' joined by '; '",
        "key": "the queried key, its parts joined by '-'",
    },
    "mqar-kv": {
        "pairs": "the context: 'k: K1-K2, v: V1-V2' joined by '; '",
        "keys": "the queried keys (parts joined by '-') joined by ', '",
    },
    "parity": {"bits": "the bits joined by spaces"},
    "parity-ones": {"bits": "the bits joined by spaces"},
    "dyck": {"sequence": "the brackets joined by spaces"},
    "copy": {"sequence": "the numbers joined by spaces"},
}

# Placeholders a template may use but need not (replaced when present).
OPTIONAL_PLACEHOLDERS: dict[str, dict[str, str]] = {
    "qmkar-kv": {"key_tokens": "numbers per key", "value_tokens": "numbers per value",
                 "example": "one value of the context, as written there"},
    "mqar-kv": {"key_tokens": "numbers per key", "value_tokens": "numbers per value",
                "example": "one value of the context, as written there"},
    "parity": {"length": "number of bits"},
    "parity-ones": {"length": "number of bits"},
    "dyck": {"length": "number of brackets"},
    "copy": {"length": "number of numbers"},
}


class Template(NamedTuple):
    """A prompt template's text and where it came from (recorded in transcripts)."""

    task: str
    text: str
    origin: str


def _packaged_prompts() -> Path:
    """The templates folder: inside the installed package, else the checkout's prompts/."""
    packaged = resources.files("qmkar") / "prompts"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "prompts"
    if checkout.is_dir():
        return checkout
    raise TemplateError(
        "qmkar's prompt templates are missing from this installation; reinstall qmkar"
    )


@cache
def default_template(task: str) -> Template:
    """The built-in template for `task` (the blog's text)."""
    path = _packaged_prompts() / f"{task}.txt"
    if not path.is_file():
        raise TemplateError(f"no built-in prompt template for task {task!r}")
    return Template(task, path.read_text(encoding="utf-8"), f"builtin:{task}.txt")


def load_template(task: str, path: Path | None) -> Template:
    """The user's template at `path` for `task`, or the built-in one; checked either way."""
    if path is None:
        return default_template(task)
    if not path.is_file():
        raise TemplateError(f"template {path} does not exist (or is not a file)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TemplateError(f"template {path} is not UTF-8 text") from None
    template = Template(task, text, str(path))
    check_template(template)
    return template


def check_template(template: Template) -> None:
    """Raise TemplateError unless the template uses every placeholder its task needs."""
    wanted = PLACEHOLDERS.get(template.task)
    if wanted is None:
        raise TemplateError(f"no placeholders are defined for task {template.task!r}")
    missing = [name for name in wanted if "{" + name + "}" not in template.text]
    if missing:
        described = "; ".join(f"{{{name}}}: {wanted[name]}" for name in missing)
        raise TemplateError(
            f"template {template.origin} for task {template.task} lacks {described}"
        )


def prompt_fields(item: Item) -> dict[str, str]:
    """The text each placeholder stands for in this item's prompt."""
    if item.task in ("qmkar", "mqar"):
        pairs = "; ".join(f"k: {k}, v: {v}" for k, v in item.pairs or [])
        keys = ", ".join(str(k) for k in item.query)
        return {"pairs": pairs, "key": keys, "keys": keys}
    if item.task == "counting":
        values = ", ".join(str(v) for v in item.values or [])
        return {"values": values, "value": str(item.query[0])}
    if item.task in PLACEHOLDERS:
        return variant_fields(item)
    raise TemplateError(f"no renderer for task {item.task!r}")


def variant_fields(item: Item) -> dict[str, str]:
    """Placeholder text for the variant tasks (multi-part keys, parity, dyck, copy)."""
    if item.task in ("qmkar-kv", "mqar-kv"):
        pairs = "; ".join(
            f"k: {multitoken.show_key(item, k)}, v: {multitoken.show_value(item, v)}"
            for k, v in item.pairs or []
        )
        keys = ", ".join(multitoken.show_key(item, k) for k in item.query)
        example = multitoken.show_value(item, item.pairs[0][1]) if item.pairs else ""
        return {"pairs": pairs, "key": keys, "keys": keys,
                "key_tokens": str(item.params["key_tokens"]),
                "value_tokens": str(item.params["value_tokens"]), "example": example}
    if item.task in ("parity", "parity-ones"):
        return {"bits": " ".join(str(b) for b in item.values or []), "length": str(item.size)}
    if item.task == "dyck":
        return {"sequence": " ".join(item.text or ""), "length": str(item.size)}
    if item.task == "copy":
        return {"sequence": " ".join(str(v) for v in item.values or []), "length": str(item.size)}
    raise TemplateError(f"no renderer for task {item.task!r}")


def render_text(item: Item, template: Template) -> str:
    """The prompt text for `item`."""
    if template.task != item.task:
        raise TemplateError(
            f"template {template.origin} is for task {template.task}, item {item.id} is {item.task}"
        )
    text = template.text
    for name, value in prompt_fields(item).items():
        text = text.replace("{" + name + "}", value)
    return text


def render(item: Item, template: Template) -> list[dict[str, str]]:
    """Chat messages for `item`: one user turn holding the rendered template."""
    return [{"role": "user", "content": render_text(item, template)}]
