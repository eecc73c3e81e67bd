"""Items + prompt templates -> chat messages.

Templates are plain text files, one per task (prompts/<task>.txt), with placeholders
in braces. Each task family names the placeholders its templates must use and may
use, and the text each stands for; only those are replaced, so any other brace in a
user's template is left as written (dyck's template shows "{}" that way).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from qmkar import userfiles
from qmkar.errors import QmkarError, TemplateError
from qmkar.tasks import family
from qmkar.tasks.base import Item, made_ahead


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
    """The built-in template for `task`: prompts/<task>.txt (the blog's text for its
    tasks), else the text its family carries (`TaskFamily.template`)."""
    path = _packaged_prompts() / f"{task}.txt"
    if path.is_file():
        return Template(task, path.read_text(encoding="utf-8"), f"builtin:{task}.txt")
    try:
        text = family(task).template
    except QmkarError:
        text = None
    if text is None:
        raise TemplateError(f"no built-in prompt template for task {task!r}: add prompts/{task}.txt "
                            "or give its family a `template`")
    return Template(task, text, f"builtin:{task}")


def load_template(task: str, path: Path | None) -> Template:
    """The user's template at `path` for `task`, or the built-in one; checked either way."""
    if path is None:
        return default_template(task)
    text = userfiles.read_text(path, "template", TemplateError)
    template = Template(task, text, str(path))
    check_template(template)
    return template


def check_template(template: Template) -> None:
    """Raise TemplateError unless the template uses every placeholder its task needs."""
    try:
        wanted = family(template.task).placeholders
    except QmkarError:
        raise TemplateError(f"no placeholders are defined for task {template.task!r}") from None
    missing = [name for name in wanted if "{" + name + "}" not in template.text]
    if missing:
        described = "; ".join(f"{{{name}}}: {wanted[name]}" for name in missing)
        raise TemplateError(
            f"template {template.origin} for task {template.task} lacks {described}"
        )


def render_text(item: Item, template: Template) -> str:
    """The prompt text for `item`."""
    if template.task != item.task:
        raise TemplateError(
            f"template {template.origin} is for task {template.task}, item {item.id} is {item.task}"
        )
    made = made_ahead(item)
    if made is not None and made.prompted is not None and made.prompted.template == template.text:
        return made.prompted.text  # the very string: pricing.TokenCounter knows its count
    return fill(template.text, made.fields if made is not None else family(item.task).prompt_fields(item))


def fill(text: str, fields: dict[str, str]) -> str:
    """A template's text with each {field} replaced by its value."""
    for name, value in fields.items():
        text = text.replace("{" + name + "}", value)
    return text


def render(item: Item, template: Template) -> list[dict[str, str]]:
    """Chat messages for `item`: one user turn holding the rendered template."""
    return [{"role": "user", "content": render_text(item, template)}]


class Templates:
    """The template for each task of a run: the user's own for its task, else the built-in one."""

    def __init__(self, user: Template | None = None) -> None:
        self.user = user

    @classmethod
    def for_run(cls, task: str, path: Path | None) -> Templates:
        """The user's template at `path` (checked against `task`), or none."""
        return cls(load_template(task, path) if path is not None else None)

    def __call__(self, task: str) -> Template:
        if self.user is not None and self.user.task == task:
            return self.user
        return default_template(task)
