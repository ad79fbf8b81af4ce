"""Command-line flags derived from config dataclasses: one flag per setting, nothing written twice.

:func:`add_flags` turns every :func:`~shardgnn.options.option` field of a config into an
``argparse`` argument (nested :func:`~shardgnn.options.component` configs become argument
groups), with the field's help text, choices and default. Defaults are *not* given to argparse
(``SUPPRESS``): a flag the user did not give is absent from the namespace, so
:func:`config_from_args` leaves it to the dataclass, and the CLI can tell which flags were given.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import typing
import warnings
from collections.abc import Collection, Iterator
from typing import Any, TypeVar

from shardgnn.options import default_of, flag_for, flag_of, from_dict, value_type

__all__ = ["add_flags", "config_from_args", "field_help", "finite_float", "flag_for", "was_given"]

T = TypeVar("T")


_WHAT = {
    int: ("integers such as 15,10,5", "an integer"),
    float: ("numbers such as 0.6,0.2,0.2", "a number"),
    str: ("names", "a name"),
}


def finite_float(text: str) -> float:
    """A number flag's parser: ``float``'s, refusing inf and nan (no setting means them, and an
    infinite --timeout failed inside every worker)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


finite_float.__name__ = "float"  # what argparse names in "invalid float value"


def nonempty_text(text: str) -> str:
    """A text flag's parser: ``str``'s, refusing an empty value (no setting means it:
    ``--results ''`` wrote nothing, ``partition --out ''`` named the working folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a value")
    return text


nonempty_text.__name__ = "str"
_PARSERS: dict[type, Any] = {float: finite_float, str: nonempty_text}


def _list_of(kind: type) -> Any:
    """A parser of comma-separated ``kind`` values; an empty entry is an error, not one fewer."""
    many, one = _WHAT[kind]

    def parse(text: str) -> tuple:
        items = [item.strip() for item in text.split(",")]
        for position, item in enumerate(items, 1):
            if not item:
                raise argparse.ArgumentTypeError(
                    f"{text!r}: entry {position} is empty; give comma-separated {many}"
                )
            try:
                _PARSERS.get(kind, kind)(item)
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r}: {item!r} is not {one}") from None
        return tuple(_PARSERS.get(kind, kind)(item) for item in items)

    parse.__name__ = f"{kind.__name__} list"  # what argparse names in "invalid ... value"
    return parse


def _show(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return text.replace("%", "%%")  # argparse formats help strings with %


def field_help(cls: type, name: str) -> str:
    """The help text of one setting, with its default appended (as ``--help`` shows it)."""
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    return _help(field)


def _help(field: dataclasses.Field) -> str:
    text = field.metadata["help"]
    default = default_of(field)
    if default is not None and default is not dataclasses.MISSING and not isinstance(default, bool):
        text += f" (default: {_show(default)})"
    return text


def _own_fields_first(cls: type) -> list[dataclasses.Field]:
    """Fields declared by ``cls`` itself before those it inherits (the command's own flags lead)."""
    own = cls.__dict__.get("__annotations__", {})
    fields = dataclasses.fields(cls)
    return [f for f in fields if f.name in own] + [f for f in fields if f.name not in own]


def add_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    group: Any = None,
    prefix: str = "",
    only: Collection[str] | None = None,
) -> None:
    """Add a flag for every setting of config class ``cls`` (components as argument groups);
    ``dest`` of each flag is the field's dotted path (``model.hidden``). Fields declared with
    ``cli=False`` are left to the caller (the dataset, a positional argument). ``only``: the
    names of the settings to add (a command that reads a few settings of a shared config)."""
    target = group or parser
    hints = typing.get_type_hints(cls)
    for field in _own_fields_first(cls):
        meta, dest = field.metadata, prefix + field.name
        if not meta.get("cli", True) or (only is not None and field.name not in only):
            continue
        if meta.get("component"):
            add_flags(
                parser,
                hints[field.name],
                group=parser.add_argument_group(meta["title"]),
                prefix=dest + ".",
            )
            continue
        flag = flag_of(cls, field.name)
        names = [flag] + ([meta["short"]] if meta.get("short") else [])
        kind, _ = value_type(hints[field.name])
        common: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS, "help": _help(field)}
        if kind is bool:
            negative = meta.get("negative_flag")
            if default_of(field) and negative:
                target.add_argument(
                    negative, action="store_false", **{**common, "help": meta["negative_help"]}
                )
            else:
                target.add_argument(*names, action="store_true", **common)
            continue
        if typing.get_origin(kind) is tuple:
            target.add_argument(
                *names,
                type=_list_of(typing.get_args(kind)[0]),
                metavar=meta.get("metavar") or "A,B,...",
                **common,
            )
            continue
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )  # type: ignore[misc]
        choices, accepts = meta.get("choices"), meta.get("accepts")
        metavar = (
            None
            if choices and not accepts
            else meta.get("metavar") or flag.lstrip("-").upper().replace("-", "_")
        )
        if choices and accepts:  # more than the choices: the config checks the value
            metavar = "{" + ",".join(map(str, choices)) + "}|" + accepts[1]
        action = target.add_argument(
            *names,
            type=_PARSERS.get(kind, kind),
            choices=None if accepts else choices,
            metavar=metavar,
            required=required,
            **common,
        )
        action.also_called = meta.get("also_called")  # read by refusals of a value (choice_hint)


def was_given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the user gave the flag whose destination is ``dest`` (a dotted setting path)."""
    return dest in vars(args)


def config_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` from the flags given (the dataclass supplies every default) plus
    ``overrides`` (dotted paths, e.g. ``run.partitions``)."""
    nested: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in vars(args).items() if k.split(".")[0] in names}
    values.update(overrides)
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = nested
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return from_dict(cls, nested, where="flags")


@contextlib.contextmanager
def warning_lines(command: str) -> Iterator[None]:
    """Python warnings shown as one ``shardgnn COMMAND: warning: ...`` line each, without the
    source line Python prints after them (which filters apply is left as it is)."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"shardgnn {command}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield
