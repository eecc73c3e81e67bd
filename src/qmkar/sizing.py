"""Contexts sized in tokens: how many pairs (values, symbols) fill a prompt of N tokens.

`--context-tokens 4k,8k` asks for prompts of that many tokens. For each target, `Sizing.fit`
finds the largest context whose rendered prompt (item 0 of the seed, through the run's
template) has at most that many tokens by the run's tokenizer (tokens.py). Each task family
says how its context grows through one hook, `TaskFamily.sized` (QMKAR's keys grow with its
pairs). Items record the target and the tokenizer in their params (`context_tokens`,
`tokenizer`: part of their condition) and their own count (`prompt_tokens`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from qmkar import tokens
from qmkar.errors import UsageError
from qmkar.render import Template, default_template, render
from qmkar.tasks import TaskSpec, family, generate
from qmkar.tasks.base import MAX_CONTEXT, Item, TaskParams, option_name
from qmkar.tokens import Counter, show_size


class Fit(NamedTuple):
    """A token target and the context that fills it."""

    target: int
    size: int  # pairs, values or symbols
    tokens: int  # item 0's prompt tokens at that size
    spec: TaskSpec  # the task's options with the size (and what grows with it) set


def for_models(targets: list[int], tokenizer: str | None, names: list[str], options: dict[str, Any],
               template: Template | None) -> Sizing:
    """The sizing of a run asking `names` (model names as typed): --tokenizer when given, else
    the tokenizer the models share (tokens.for_models)."""
    from qmkar.providers.registry import canonical_or_name

    models = [(name, *canonical_or_name(name, options)) for name in names]
    return Sizing(targets, tokens.for_models(models, tokenizer), template)


def prompt_tokens(item: Item, template: Template, counter: Counter) -> int:
    """Tokens of the prompt an item is sent as: its messages' text (chat wrappers excluded)."""
    return sum(counter.count(message["content"]) for message in render(item, template))


_FITS: dict[str, Fit] = {}  # the search is the same on every call with the same inputs


class Sizing:
    """Token targets, the tokenizer and the template that turn a task's options into one
    fitted spec per target."""

    def __init__(self, targets: list[int], counter: Counter, template: Template | None = None) -> None:
        self.targets, self.counter, self.template = targets, counter, template
        self._counted: dict[str, int] = {}

    def template_for(self, task: str) -> Template:
        return self.template if self.template is not None and self.template.task == task \
            else default_template(task)

    def fits(self, spec: TaskSpec, seed: int) -> list[Fit]:
        """One fit per target, smallest first."""
        check_sizable(spec)
        return [self.fit(spec, target, seed) for target in self.targets]

    def fit(self, spec: TaskSpec, target: int, seed: int) -> Fit:
        """The largest context whose item 0 has at most `target` prompt tokens."""
        template = self.template_for(spec.task)
        key = json.dumps([spec.task, spec.params.model_dump(mode="json"), target, self.counter.name,
                          hashlib.sha256(template.text.encode()).hexdigest(), seed])
        if key not in _FITS:
            _FITS[key] = self._search(spec, target, seed, template)
        return _FITS[key]

    def _search(self, spec: TaskSpec, target: int, seed: int, template: Template) -> Fit:
        chosen = family(spec.task)
        measured: dict[int, tuple[int, TaskParams, int]] = {}

        def tokens(size: int) -> int:
            if size > MAX_CONTEXT:  # never built: such a context counts as over every target
                return target + 1
            if size not in measured:
                params = chosen.sized(spec.params, size)
                assert params is not None  # check_sizable refused tasks that cannot be sized
                item = next(generate(TaskSpec(spec.task, params), 1, seed))
                measured[size] = (prompt_tokens(item, template, self.counter), params, item.size)
            return measured[size][0]

        low = smallest_size(spec)
        if tokens(low) > target:
            raise UsageError(
                f"--context-tokens {show_size(target)}: the smallest {spec.task} context "
                f"({low} {chosen.size_unit}) already has {tokens(low):,} tokens by {self.counter.name}; "
                "choose a larger size")
        size = largest_within(tokens, low, target)
        _, params, length = measured[size]
        params = params.model_copy(update={"context_tokens": target, "tokenizer": self.counter.name})
        return Fit(target, length, tokens(size), TaskSpec(spec.task, params))

    def annotate(self, item: Item) -> Item:
        """The item with its own prompt tokens recorded (params.prompt_tokens), when it was sized."""
        if item.params.extra("context_tokens") is None:
            return item
        if item.id not in self._counted:
            self._counted[item.id] = prompt_tokens(item, self.template_for(item.task), self.counter)
        item.params = item.params.model_copy(update={"prompt_tokens": self._counted[item.id]})
        return item

    def describe(self, fits: list[Fit]) -> list[str]:
        """A line per fit, for the user: target -> size, what grew with it, tokens counted."""
        lines = []
        for fit in fits:
            unit = family(fit.spec.task).size_unit
            keys = getattr(fit.spec.params, "key_range", None)
            grows = keys is not None and "key_range" in sized_fields(fit.spec.task)
            grown = f", keys {keys}" if grows else ""
            lines.append(f"{fit.spec.task} at {show_size(fit.target)} tokens: {fit.size:,} {unit}{grown} "
                         f"({fit.tokens:,} prompt tokens by {self.counter.note})")
        return lines


def largest_within(tokens: Callable[[int], int], low: int, target: int) -> int:
    """The largest size from `low` up whose tokens(size) is at most `target`, given that
    tokens(low) is: tokens grows with size nearly in proportion, so secant steps from the sizes
    measured so far land on it in a few counts; a step that does not halve the bracket is
    followed by a halving, so uneven growth (keys gaining a digit) costs a few more."""
    probe = low * 2 + 16
    while tokens(probe) <= target:  # extrapolate until a size is over the target
        slope = (tokens(probe) - tokens(low)) / (probe - low)
        low = probe
        probe = low + (int((target - tokens(low)) / slope) + 1 if slope > 0 else low)
    high = probe
    while high - low > 1:
        width = high - low
        slope = (tokens(high) - tokens(low)) / width
        guess = min(max(low + int((target - tokens(low)) / slope), low + 1), high - 1)
        if tokens(guess) > target:
            high = guess
        else:
            low = guess
            if guess + 1 < high and tokens(guess + 1) > target:
                high = guess + 1
        if high - low > max(1, width // 2):
            middle = (low + high) // 2
            if tokens(middle) <= target:
                low = middle
            else:
                high = middle
    return low


def smallest_size(spec: TaskSpec) -> int:
    """The smallest context the task's other options allow (targets need room, dyck is even)."""
    chosen = family(spec.task)
    for size in range(1, 65):
        try:
            chosen.sized(spec.params, size)
        except UsageError:
            continue
        return size
    raise UsageError(f"--context-tokens cannot size {spec.task} with these options")


def check_sizable(spec: TaskSpec) -> None:
    """Refuse a task that cannot be sized, and an option given that sizing would override
    (--pairs, --length...)."""
    chosen = family(spec.task)
    if chosen.sized(chosen.params_type(), 64) is None:
        raise UsageError(f"--context-tokens does not apply to --task {spec.task}: its context cannot "
                         "be sized in tokens")
    sizes = [smallest_size(spec), 8192]
    overridden = [name for name in sorted(spec.params.model_fields_set)
                  if any(getattr(chosen.sized(spec.params, size), name) != getattr(spec.params, name)
                         for size in sizes)]
    if overridden:
        names = ", ".join(option_name(name) for name in overridden)
        raise UsageError(f"--context-tokens chooses {names} itself; give one or the other")


@lru_cache(maxsize=64)
def sized_fields(task: str) -> frozenset[str]:
    """The params a task's `sized` hook sets (pairs, and QMKAR's key range...): what differs
    between its default options sized small and sized large."""
    chosen = family(task)
    default = chosen.params_type()
    small, large = chosen.sized(default, 64), chosen.sized(default, 8192)
    if small is None or large is None:
        return frozenset()
    return frozenset(name for name in type(default).model_fields
                     if getattr(small, name) != getattr(large, name))


def axis_params(task: str, params: dict[str, Any]) -> frozenset[str]:
    """The params a token target decided, for a condition's params that hold one (a grid
    over --context-tokens varies them together); none otherwise."""
    if "context_tokens" not in params:
        return frozenset()
    return frozenset({"context_tokens"}) | sized_fields(task)
