"""Typed, frozen options parsed once from Spark's string options.

A connector declares its options as a frozen dataclass whose fields carry :func:`option` metadata::

    @dataclass(frozen=True)
    class GeneratorOptions:
        rows: int = option(1000, doc="number of rows", minimum=0)
        password: Secret = option(Secret(""), doc="never printed")

:func:`parse_options` turns a ``Mapping[str, str]`` (Spark lower-cases the keys) into that dataclass. An unknown
key, a value of the wrong type, a value outside its bounds or a missing required option raises
:class:`OptionsError` naming the option and listing the accepted ones. :class:`Secret` values never appear in an
error, a log line or a ``repr``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, get_type_hints

from splitsource._errors import OptionsError

__all__ = ["REQUIRED", "Secret", "describe_options", "name_list", "option", "options_table", "parse_options"]

T = TypeVar("T")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of an option that has none: parsing fails when the user leaves it out."""


class Secret:
    """A string that is never shown: ``repr`` and ``str`` print ``***``. Use :meth:`reveal` to get the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))


def option(
    default: Any = REQUIRED,
    *,
    doc: str,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: Iterable[str] | None = None,
    parse: Callable[[str], Any] | None = None,
    shown: str | None = None,
) -> Any:
    """Declare one option: its default, a one-line doc, and optional bounds, choices or a custom parser;
    ``shown``: how the default is written in tables when it is not a plain value (a parsed default)."""
    meta = {
        "shown": shown,
        "doc": doc,
        "minimum": minimum,
        "maximum": maximum,
        "choices": tuple(choices) if choices is not None else None,
        "parse": parse,
    }
    if default is REQUIRED:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def name_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (a ``columns`` option's), each once, without the spaces around them; empty:
    none. A parser for :func:`option`: a name given twice is refused, in one line naming the option and the name.

    >>> name_list(" id, name ")
    ('id', 'name')
    """
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names {', '.join(twice)} more than once")
    return names


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _convert(name: str, kind: Any, text: str, meta: Mapping[str, Any]) -> Any:
    parser = meta.get("parse")
    shown = "***" if kind is Secret else repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text):,} chars)"
    try:
        if parser is not None:
            value = parser(text)
        elif kind is Secret:
            value = Secret(text)
        elif kind is bool:
            value = _parse_bool(text)
        elif kind is int:
            value = int(text.strip().replace("_", ""))
        elif kind is float:
            value = float(text.strip())
            if not math.isfinite(value):
                raise ValueError("a number must be finite")
        else:
            value = text
    except (TypeError, ValueError) as exc:
        raise OptionsError(f"option '{name}': invalid value {shown}: {exc}") from None
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise OptionsError(f"option '{name}': invalid value {shown}; accepted: {', '.join(choices)}")
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and value < lo:
        raise OptionsError(f"option '{name}': {shown} is below the minimum {lo}")
    if hi is not None and value > hi:
        raise OptionsError(f"option '{name}': {shown} is above the maximum {hi}")
    return value


def parse_options(cls: type[T], raw: Mapping[str, str], *, context: str = "", ignore: Iterable[str] = ()) -> T:
    """Parse string options into the frozen dataclass ``cls``.

    Keys are matched case-insensitively (Spark lower-cases them). Keys in ``ignore`` are skipped silently: they
    belong to another layer (the framework's own options, Spark's ``path``).
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    fields = {f.name.lower(): f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    skip = {k.lower() for k in ignore}
    where = f" for {context}" if context else ""
    values: dict[str, Any] = {}
    for key, text in raw.items():
        lowered = key.lower()
        if lowered in skip:
            continue
        field = fields.get(lowered)
        if field is None:
            close = difflib.get_close_matches(lowered, list(fields), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise OptionsError(
                f"unknown option '{key}'{where}{hint}; accepted options: {', '.join(sorted(fields))}"
            )
        values[field.name] = _convert(field.name, hints[field.name], str(text), field.metadata)
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise OptionsError(f"missing required option(s){where}: {', '.join(missing)}")
    return cls(**values)


def _shown_default(f: dataclasses.Field[Any]) -> str:
    if f.default is dataclasses.MISSING:
        return "required"
    value = f.default
    if f.metadata.get("shown") is not None:
        return str(f.metadata["shown"])
    if isinstance(value, Secret):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe_options(cls: type[Any]) -> list[tuple[str, str, str]]:
    """``(name, default, meaning)`` for every option of ``cls``, from the options' own metadata: the one source of
    the tables in ``--help``, docstrings and ``docs/`` (see :func:`options_table`)."""
    rows = []
    for f in dataclasses.fields(cls):
        doc = str(f.metadata.get("doc", ""))
        choices = f.metadata.get("choices")
        if choices:
            doc += f" (one of: {', '.join(choices)})"
        rows.append((f.name, _shown_default(f), doc))
    return rows


def options_table(cls: type[Any], style: str = "markdown") -> str:
    """The options of ``cls`` as a table: ``markdown`` (docs) or ``text`` (``--help``, docstrings)."""
    rows = describe_options(cls)
    if style == "markdown":
        lines = ["| option | default | meaning |", "|---|---|---|"]
        for name, default, doc in rows:
            shown = f"`{default}`" if default and default != "required" else (default or "—")
            lines.append(f"| `{name}` | {shown} | {doc} |")
        return "\n".join(lines)
    if style != "text":
        raise ValueError(f"style {style!r}: markdown or text")
    width = max(len(name) for name, _, _ in rows)
    dwidth = max(len(default or "—") for _, default, _ in rows)
    return "\n".join(f"  {name:<{width}}  {default or '—':<{dwidth}}  {doc}" for name, default, doc in rows)
