"""Errors shardgnn raises for problems a user can fix.

Policy (after torchtitan): a mistake in user input (a file, a flag, a dataset spec) raises a
subclass of :class:`ShardgnnError`, which is also a :class:`ValueError`, with a message that
names the offending file or value, the constraint it breaks and how to fix it. Internal
invariants use ``assert``.
"""

from __future__ import annotations

import os


class ShardgnnError(ValueError):
    """Base class of every user-facing shardgnn error."""


class DatasetError(ShardgnnError):
    """A dataset file or dataset spec is missing, malformed or inconsistent."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, fix: str | None = None):
        self.path = None if path is None else os.fspath(path)
        text = message if self.path is None else f"{self.path}: {message}"
        if fix:
            text = f"{text}\n  fix: {fix}"
        super().__init__(text)


class ConfigError(ShardgnnError):
    """A command-line flag or configuration value is out of its allowed range."""
