"""Settings, each defined once: a field of a config dataclass.

A component's config is a ``kw_only`` dataclass whose fields are declared with :func:`option`
(default, help text, choices, and the flag's spelling when it is not ``--field-name``) or with
:func:`component` (a nested config). Everything else is derived from those declarations:

* validation of types (:func:`check_types`, first in every ``__post_init__``: configs built in
  Python or rebuilt by :func:`from_dict`; the command line and ``--config`` files parse each
  flag to its type) and of choices
  (:func:`check_choices`), and error messages that name the flag and the bad value
  (:func:`invalid`);
* the command-line flags (``shardgnn.cli.flags`` builds ``argparse`` arguments from the fields);
* the JSON form (:func:`to_dict` / :func:`from_dict`) that the launcher hands to every worker and
  every results file and checkpoint records.

This module imports only the standard library, so building the command line stays fast.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import types
import typing
from typing import Any, Callable, Mapping, Sequence, TypeVar

from shardgnn.errors import ConfigError

T = TypeVar("T")

_MISSING: Any = dataclasses.MISSING


def option(
    default: Any = _MISSING,
    *,
    help: str,
    choices: tuple | None = None,
    flag: str | None = None,
    short: str | None = None,
    negative_flag: str | None = None,
    negative_help: str | None = None,
    metavar: str | None = None,
    cli: bool = True,
    default_factory: Any = _MISSING,
    accepts: Any = None,
    also_called: Mapping[str, tuple[str, ...]] | None = None,
) -> Any:
    """A setting: a dataclass field that carries its help text and its choices.

    Args:
        default: the default value (the only place it is written).
        help: one line for ``--help``; the default is appended by the CLI, so do not repeat it.
        choices: the allowed values; :func:`check_choices` enforces them and the CLI lists them.
        flag: the flag's spelling (default ``--`` + the field name with dashes); ``short``: a
            one-letter alias (``-k``).
        negative_flag: for a bool that defaults to True, the flag that sets it False (``--quiet``),
            with ``negative_help`` as its help.
        metavar: the value's name in ``--help``.
        cli: False for settings the command line sets another way (a positional argument).
        accepts: ``(predicate, what)``: values outside ``choices`` that ``predicate`` accepts
            are valid too (``what`` names them in ``--help`` and in messages: ``MODULE:CLASS``).
        also_called: the names other systems (or the papers) give the choices, lower-case, and
            the choices meant: a refusal of ``--method kahypar`` says ``--method hypergraph``.
    """
    metadata = {
        "help": help,
        "choices": choices,
        "flag": flag,
        "short": short,
        "negative_flag": negative_flag,
        "negative_help": negative_help,
        "metavar": metavar,
        "cli": cli,
        "accepts": accepts,
        "also_called": also_called,
    }
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def component(cls: type, *, title: str) -> Any:
    """A nested config (its own dataclass); ``title`` names its group of flags in ``--help``."""
    return dataclasses.field(default_factory=cls, metadata={"component": True, "title": title})


def flag_of(obj_or_cls: Any, name: str) -> str:
    """The command-line spelling of field ``name`` (``--cache-policy`` for
    ``CacheConfig.policy``; a bool that defaults to True and has a negative flag is spelled by
    that flag alone, ``--quiet`` for ``progress``)."""
    field = {f.name: f for f in dataclasses.fields(obj_or_cls)}[name]
    if field.metadata.get("negative_flag") and default_of(field) is True:
        return field.metadata["negative_flag"]
    return field.metadata.get("flag") or "--" + name.replace("_", "-")


def flag_for(cls: type, path: str) -> str:
    """The flag of the setting at dotted ``path`` below config class ``cls`` (``cache.size`` ->
    ``--cache-size``)."""
    *parents, leaf = path.split(".")
    for name in parents:
        cls = typing.get_type_hints(cls)[name]
    return flag_of(cls, leaf)


def invalid(obj: Any, name: str, constraint: str, value: Any = _MISSING) -> ConfigError:
    """A :class:`ConfigError` naming one setting, its bad value and the constraint it breaks:
    ``--hidden 0: must be >= 1``."""
    value = getattr(obj, name) if value is _MISSING else value
    shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
    return ConfigError(f"{flag_of(obj, name)} {shown!s}: {constraint}")


MAX_SEED = 2**63 - 1
"""The largest seed (``--seed``, ``--link-split-seed``...): what every generator takes (numpy's
refuse negative seeds, torch's overflow past 64 bits)."""


_HINTS: dict[type, dict[str, Any]] = {}
_KINDS = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "text",
}
_PLURALS = {int: "integers", float: "numbers", str: "texts"}


def _scalar(value: Any, kind: Any) -> Any:
    """``value`` as ``kind``, or :data:`_MISSING` when it is not one (a bool is no integer or
    number here). Python's own numbers are kept as given; numpy's become Python's and a path
    (``os.PathLike``) its text, so the config stays JSON."""
    if kind is bool:
        return value if isinstance(value, bool) else _MISSING
    if isinstance(value, bool):
        return _MISSING
    if kind is int and isinstance(value, numbers.Integral):
        return value if type(value) is int else int(value)
    if kind is float and isinstance(value, numbers.Real):
        return value if type(value) in (int, float) else float(value)
    if kind is str and isinstance(value, (str, os.PathLike)):
        return os.fspath(value) if isinstance(value, os.PathLike) else value
    if kind in _KINDS:
        return _MISSING
    return value  # a type no setting declares today: not checked


def check_types(obj: Any) -> None:
    """Refuse a field whose value is not of its declared type (``--hidden 16.5: must be an
    integer``; a nested config that is not its class), and normalise what is: a list for a
    tuple setting becomes a tuple, numpy numbers Python's. The command line (and a ``--config``
    file, read through the same parsers) gives every flag its type; this holds configs built in
    Python, and those :func:`from_dict` rebuilds, to the same."""
    cls = type(obj)
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    for field in dataclasses.fields(obj):
        value, kind = getattr(obj, field.name), hints[field.name]
        if field.metadata.get("component"):
            if not isinstance(value, kind):
                raise ConfigError(
                    f"{cls.__name__}.{field.name}: must be a {kind.__name__}, not "
                    f"{type(value).__name__}"
                )
            continue
        base, optional = value_type(kind)
        if value is None:
            if not optional:
                raise invalid(obj, field.name, "must be given (None is not a value here)")
            continue
        if typing.get_origin(base) is tuple:
            item = typing.get_args(base)[0]
            items = [_scalar(v, item) for v in value] if isinstance(value, (tuple, list)) else None
            if items is None or _MISSING in items:
                shown = value if isinstance(value, (tuple, list)) else repr(value)
                raise invalid(obj, field.name, f"must be a list of {_PLURALS[item]}", shown)
            setattr(obj, field.name, tuple(items))
            continue
        checked = _scalar(value, base)
        if checked is _MISSING:
            raise invalid(obj, field.name, f"must be {_KINDS[base]}", repr(value))
        setattr(obj, field.name, checked)


def choice_hint(
    flag: str,
    value: Any,
    choices: Sequence[Any],
    also_called: Mapping[str, tuple[str, ...]] | None = None,
    spell: Callable[[str], str] | None = None,
) -> str:
    """`` (did you mean --spmm 1.5d?)`` for ``value``, outside ``flag``'s ``choices``: the
    choices it names in other words (``also_called``, the setting's :func:`option`), in other
    capitals, or spelled close to it (words only: a number close to another is no hint); else
    ``""``. ``spell``: how a choice is written where the value came from (``flag choice``
    unless given: a config file's ``key = 'choice'``)."""
    import difflib

    word = str(value).strip().lower()
    names = [str(c) for c in choices]
    meant = tuple(m for m in (also_called or {}).get(word, ()) if m in names)
    if not meant:
        same = [c for c in names if c.lower() == word]
        close = [] if word.isdigit() else difflib.get_close_matches(word, names, n=1, cutoff=0.6)
        meant = tuple(same or close)
    spell = spell or (lambda choice: f"{flag} {choice}")
    return f" (did you mean {' or '.join(map(spell, meant))}?)" if meant else ""


def check_choices(obj: Any) -> None:
    """Refuse a field whose value is not among its declared choices (None passes: it means
    unset), and a seed (a field named ``seed`` or ``*_seed``) outside ``[0, MAX_SEED]``."""
    for field in dataclasses.fields(obj):
        choices, value = field.metadata.get("choices"), getattr(obj, field.name)
        seed = field.name == "seed" or field.name.endswith("_seed")
        if seed and isinstance(value, int) and not 0 <= value <= MAX_SEED:
            raise invalid(obj, field.name, "must lie in [0, 2**63 - 1]")
        if choices is None or value is None or value in choices:
            continue
        accepts = field.metadata.get("accepts")
        if accepts is not None and accepts[0](value):
            continue
        also = f" or {accepts[1]}" if accepts is not None else ""
        hint = choice_hint(
            flag_of(obj, field.name), value, choices, field.metadata.get("also_called")
        )
        raise invalid(
            obj, field.name, "choose one of " + ", ".join(map(str, choices)) + also + hint
        )


def to_dict(obj: Any) -> dict[str, Any]:
    """The config as plain JSON-ready data (nested configs as dicts, tuples as lists)."""
    return _jsonable(dataclasses.asdict(obj))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str = "config") -> T:
    """Rebuild ``cls`` from :func:`to_dict` output (validation runs again).

    Raises:
        ConfigError: an unknown key or a value of the wrong shape (names ``where`` and the key).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}")
    kwargs = {}
    for name, value in data.items():
        kind = hints[name]
        if fields[name].metadata.get("component"):
            kwargs[name] = from_dict(kind, value, where=f"{where}.{name}")
        elif value is not None and _is_tuple(kind):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def _is_tuple(kind: Any) -> bool:
    return any(typing.get_origin(k) is tuple for k in (kind, *typing.get_args(kind)))


def value_type(kind: Any) -> tuple[Any, bool]:
    """``(base type, optional)`` of a field annotation: ``int | None`` -> ``(int, True)``."""
    optional = False
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        optional = len(args) < len(typing.get_args(kind))
        assert len(args) == 1, f"unsupported setting type {kind}"
        kind = args[0]
    return kind, optional


def default_of(field: dataclasses.Field) -> Any:
    """The default value a field declares."""
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return field.default


def changed_settings(obj: Any, names: tuple[str, ...] | None = None) -> list[str]:
    """Flags of the fields of ``obj`` (or of ``names`` among them) whose values differ from their
    declared defaults."""
    return [
        flag_of(obj, f.name)
        for f in dataclasses.fields(obj)
        if (names is None or f.name in names) and getattr(obj, f.name) != default_of(f)
    ]
