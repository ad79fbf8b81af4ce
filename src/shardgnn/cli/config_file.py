"""``shardgnn COMMAND --config FILE``: a command's flags read from a TOML, YAML or JSON file.

The file is a mapping whose keys are the command's flags without their dashes (``hidden = 64``,
``fanouts = [10, 10]``, ``quiet = true``, ``dataset = "cora"`` for the positional argument) or
tables named like the settings they hold (``[model]`` then ``hidden = 64``: the setting
``model.hidden``). Its settings become command-line words placed before the ones typed, so the
command line wins over the file; a setting from the file counts as given (a flag the chosen
recipe does not read is refused, as on the command line). A key that names no flag of the
command, a value of the wrong shape, or a file that does not parse is refused in one line.
"""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path
from typing import Any

from shardgnn.cli.flags import finite_float
from shardgnn.errors import ConfigError
from shardgnn.options import choice_hint

CONFIG_FLAG = "--config"
FORMATS = (".toml", ".yaml", ".yml", ".json")


def expand_config_file(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` (``COMMAND ...``) with ``--config FILE`` replaced by the file's settings as
    command-line words, before the command's own words (which override them).

    Raises:
        ConfigError: one line naming the file and what is wrong with it.
    """
    if not argv or not any(a == CONFIG_FLAG or a.startswith(CONFIG_FLAG + "=") for a in argv):
        return argv
    command, rest = argv[0], argv[1:]
    sub = _subparser(parser, command)
    if sub is None:
        return argv  # not a command: the parser says so
    path, rest = _take_config_flag(rest)
    settings = _read(path)
    words, dataset = _as_words(settings, sub, path, command)
    if dataset is not None and not _has_positional(sub, rest):
        words.insert(0, str(dataset))
    return [command, *words, *rest]


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(command)
    return None


def _take_config_flag(words: list[str]) -> tuple[Path, list[str]]:
    rest, path = [], None
    i = 0
    while i < len(words):
        word = words[i]
        if word == CONFIG_FLAG:
            if i + 1 >= len(words):
                raise ConfigError(f"{CONFIG_FLAG} needs a file: {CONFIG_FLAG} FILE.toml")
            path, i = words[i + 1], i + 2
            continue
        if word.startswith(CONFIG_FLAG + "="):
            path = word.split("=", 1)[1]
        else:
            rest.append(word)
        i += 1
    assert path is not None
    return Path(path).expanduser(), rest


def _read(path: Path) -> dict[str, Any]:
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(
            f"{CONFIG_FLAG} {path}: give a .toml, .yaml/.yml or .json file (the format follows "
            "the extension)"
        )
    if not path.is_file():
        raise ConfigError(f"{CONFIG_FLAG} {path}: no such file")
    text = path.read_text()
    try:
        if path.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            try:
                import yaml
            except ImportError:
                raise ConfigError(
                    f"{CONFIG_FLAG} {path}: reading YAML needs PyYAML (pip install pyyaml), or "
                    "write the file as .toml"
                ) from None
            data = yaml.safe_load(text)
    except ConfigError:
        raise
    except Exception as exc:  # each parser's own error type: its message says where
        message = " ".join(str(exc).split())
        raise ConfigError(f"{CONFIG_FLAG} {path}: does not parse ({message})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{CONFIG_FLAG} {path}: must hold a mapping of flags to values")
    return data


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(key, value)`` pairs, tables joined by dots (``model.hidden``)."""
    out = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, name + ".")
        else:
            out.append((name, value))
    return out


def _as_words(
    settings: dict[str, Any], sub: argparse.ArgumentParser, path: Path, command: str
) -> tuple[list[str], Any]:
    by_flag = {s: a for a in sub._actions for s in a.option_strings if s.startswith("--")}
    by_dest = {a.dest: a for a in sub._actions if a.option_strings}
    words: list[str] = []
    dataset = None
    for key, value in _flatten(settings):
        if key in ("dataset", "dataset_arg") and command in ("train", "info", "partition"):
            dataset = value
            continue
        flag = "--" + key.replace("_", "-")
        action = by_flag.get(flag) or by_dest.get(key)
        if action is None or flag in ("--config", "--help"):
            close = difflib.get_close_matches(flag, by_flag, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0].lstrip('-')}?)" if close else ""
            raise ConfigError(
                f"{CONFIG_FLAG} {path}: {key!r} is not a flag of `shardgnn {command}`{hint}; "
                "keys are flags without their dashes, or [tables] named like the settings"
            )
        words += _words_for(action, key, value, path)
    return words, dataset


def _words_for(action: argparse.Action, key: str, value: Any, path: Path) -> list[str]:
    flag = next(s for s in action.option_strings if s.startswith("--"))
    if action.nargs == 0:  # an on/off flag: true gives it, false leaves it out
        if not isinstance(value, bool):
            raise ConfigError(f"{CONFIG_FLAG} {path}: {key} is an on/off flag: true or false")
        return [flag] if value else []
    if isinstance(value, (list, tuple)):
        word = ",".join(str(v) for v in value)
        _check_value(action, key, word, path)
        return [flag, word]
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{CONFIG_FLAG} {path}: {key} takes a value, not {value!r}")
    _check_value(action, key, str(value), path)
    return [flag, str(value)]


def _check_value(action: argparse.Action, key: str, word: str, path: Path) -> None:
    """Refuse, naming the file, a value the flag's own parsing would refuse (the parser would
    name the flag alone, as if it had been typed)."""
    value: Any = word
    if callable(action.type):
        try:
            value = action.type(word)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            kinds = {int: "not an integer", finite_float: "not a number"}
            reason = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else None
            reason = reason or kinds.get(action.type, f"not a valid {key}")
            raise ConfigError(f"{CONFIG_FLAG} {path}: {key} = {word!r}: {reason}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        flag = max(action.option_strings, key=len, default=f"--{key}")
        also_called = getattr(action, "also_called", None)
        hint = choice_hint(flag, word, action.choices, also_called, lambda c: f"{key} = {c!r}")
        raise ConfigError(f"{CONFIG_FLAG} {path}: {key} = {word!r}: choose one of {choices}{hint}")


def _has_positional(sub: argparse.ArgumentParser, words: list[str]) -> bool:
    """Whether the words typed give the command's positional argument (the dataset)."""
    try:
        known, _ = sub.parse_known_args(words)
    except SystemExit:
        return False
    return any(
        getattr(known, a.dest, None) is not None for a in sub._actions if not a.option_strings
    )
