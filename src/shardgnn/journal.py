"""An undo journal: changes made ahead of a checkpoint, kept so that a stop can take them back.

A prefetch thread, or a window of batches fetched in one exchange, changes state (error-feedback
residuals, cached rows) for batches a stop may leave untrained; a resumed run fetches them again
and must find that state as it was. The owner opens an entry per batch (``open(tag)``, tags
comparable with ``<``, e.g. ``(epoch, batch)``), records what each change overwrites
(``record(where, before)``), and on a stop rewinds to the first batch not trained
(``rewind(tag, restore)``).
"""

from __future__ import annotations

import typing

W = typing.TypeVar("W")  # where a change wrote (e.g. row indices)
B = typing.TypeVar("B")  # what was there before it


class _Entry(typing.NamedTuple):
    tag: typing.Any
    state: typing.Any  # a snapshot taken at open (None: the writes are the whole state)
    writes: list[tuple[typing.Any, typing.Any]]  # (where, before), oldest first


class Journal(typing.Generic[W, B]):
    """The last ``keep`` entries; an older one is let go, and a rewind that would need it fails
    (never silently inexact).

    Args:
        keep: entries kept: the batches a prefetch thread of depth 1 can have fetched past the
            last trained one (one queued, one in flight), and the window that one lies in.
    """

    def __init__(self, keep: int = 4):
        self.keep = keep
        self.entries: list[_Entry] = []
        self._dropped: typing.Any = None  # the tag of the latest entry let go

    def __bool__(self) -> bool:
        """Whether an entry is open (changes are to be recorded)."""
        return bool(self.entries)

    def open(self, tag: typing.Any, state: typing.Any = None) -> None:
        """Start an entry ``tag``, with ``state`` (a snapshot the owner restores on a rewind to
        it; the owner's copy, not changed later). The latest entry's tag again continues it; an
        entry with neither state nor writes is replaced (a window's later batches write
        nothing, and rewinding to it or to the next restores the same)."""
        if self.entries:
            last = self.entries[-1]
            if last.tag == tag:
                return
            if last.state is None and not last.writes:
                self.entries[-1] = _Entry(tag, state, [])
                return
        self.entries.append(_Entry(tag, state, []))
        if len(self.entries) > self.keep:
            self._dropped = self.entries.pop(0).tag

    def record(self, where: W, before: B) -> None:
        """A change under the open entry overwrote ``before`` at ``where`` (the owner's copy)."""
        if self.entries:
            self.entries[-1].writes.append((where, before))

    def rewind(self, tag: typing.Any, restore: typing.Callable[[W, B], None]) -> typing.Any:
        """Undo every change recorded under ``tag`` or later, the latest first (``restore`` puts
        ``before`` back at ``where``), and return the state of the earliest entry undone (None
        when none was). The journal is then empty."""
        state = None
        for entry in reversed(self.entries):
            if entry.tag < tag:
                break
            for where, before in reversed(entry.writes):
                restore(where, before)
            state = entry.state
        assert self._dropped is None or self._dropped < tag, (
            f"rewind to {tag!r}: changes from {self._dropped!r} on were not all kept"
        )
        self.clear()
        return state

    def clear(self) -> None:
        self.entries.clear()
        self._dropped = None
