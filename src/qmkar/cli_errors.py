"""How every command reports problems: the two consoles, one-line errors and warnings,
click's usage errors as one line, and the sane bounds of numeric options.

A user's mistake is one line on stderr, `error: ...`, printed exactly as written (no rich
markup is read, so run[v2].jsonl and [endpoints.mylab] show as they are).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

# typer bundles its own click: its usage errors are this class, not click's.
from typer._click.exceptions import UsageError as ClickUsageError
from typer.core import TyperCommand, TyperGroup, TyperOption

from qmkar.errors import QmkarError, UsageError
from qmkar.tasks.base import option_name

# Redirected output is not cut at 80 columns: tables go to files and pipes whole. Neither
# console reads markup: a file called run[v2].jsonl or a table [endpoints.mylab] in a
# message is printed as written (styles are given as rich Text, never as tags).
out = Console(markup=False) if Console().is_terminal else Console(width=200, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)


def error_line(message: str) -> None:
    """`error: message` on stderr, the message exactly as written."""
    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)


def warning_line(message: str) -> None:
    """`warning: message` on stderr, the message exactly as written."""
    err.print(Text.assemble(("warning:", "yellow"), " ", message), highlight=False)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the project's errors into one clear line on stderr and exit code 1."""
    try:
        yield
    except QmkarError as exc:
        error_line(str(exc))
        raise typer.Exit(code=1) from None


def check_numbers(given: dict[str, Any], bounds: dict[str, tuple[float, float]]) -> None:
    """Refuse a number that is not finite or lies outside its option's bounds."""
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            raise UsageError(f"{option_name(name)} must be a finite number, not {value}")
        if name in bounds and not bounds[name][0] <= value <= bounds[name][1]:
            low, high = bounds[name]
            raise UsageError(f"{option_name(name)} must be between {low:,g} and {high:,g}, not {value:,g}")


class OneLineUsage(ClickUsageError):
    """A malformed command line (click's usage errors), shown as one line like every error."""

    def show(self, file: Any = None) -> None:
        command = self.ctx.command_path if self.ctx is not None else "qmkar"
        error_line(f"{self.format_message()} (see {command} --help)")


class OneLine:
    """Mixed into a command or group: its usage errors are one line (OneLineUsage)."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)  # type: ignore[misc]
        except ClickUsageError as exc:
            if isinstance(exc, OneLineUsage):
                raise
            raise OneLineUsage(exc.format_message(), exc.ctx) from None


class OneLineGroup(OneLine, TyperGroup):
    """The `qmkar` group and its sub-apps: an unknown command is one line too."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except ClickUsageError as exc:
            if isinstance(exc, OneLineUsage):
                raise
            raise OneLineUsage(exc.format_message(), exc.ctx) from None


class OneEach(OneLine, TyperCommand):
    """A command that refuses an option given twice unless it takes several values: a
    repeated -t or --dataset would otherwise silently keep the last. It refuses an --output
    of `-` too, however spelled (`./-` included): every command's --output is a file or
    folder, and many tools read `-` as standard output, where qmkar would make a file or
    folder named `-`. Its usage errors are one line."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        seen: set[str] = set()
        single = {name: param for param in self.params if isinstance(param, TyperOption)
                  and not param.multiple for name in (*param.opts, *param.secondary_opts)}
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            param = single.get(name)
            if param is None:
                continue
            if param.name in seen:
                raise typer.BadParameter("given twice; give it once (the second would silently "
                                         "replace the first)", ctx=ctx, param=param)
            seen.add(str(param.name))
        rest = super().parse_args(ctx, args)
        if str(ctx.params.get("output")) == "-":  # however it was spelled: -o -, -o-, --output=-
            output = next(param for param in self.params
                          if isinstance(param, TyperOption) and param.name == "output")
            raise typer.BadParameter("'-' is not standard output here: qmkar writes files and folders "
                                     "only; give a path", ctx=ctx, param=output)
        return rest
