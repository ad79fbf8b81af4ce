"""Progress bars and summary tables for long-running commands."""

from __future__ import annotations

import sys
from typing import Iterable, Sequence

from tqdm.auto import tqdm


class _Silent:
    """A no-op stand-in for a tqdm bar, so loops call ``set_postfix`` unconditionally."""

    def __init__(self, iterable: Iterable):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def set_postfix(self, *args, **kwargs) -> None:
        pass


def progress(iterable: Iterable, desc: str, enabled: bool = True, total: int | None = None):
    """A tqdm bar on stderr when ``enabled`` and stderr is a terminal; silent otherwise."""
    if not enabled or not sys.stderr.isatty():
        return _Silent(iterable)
    return tqdm(iterable, desc=desc, leave=False, dynamic_ncols=True, total=total)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table (also valid Markdown)."""

    def cell(value: object) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:.4f}" if abs(value) < 100 else f"{value:,.1f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    text_rows = [[cell(v) for v in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in text_rows)) if text_rows else len(h)
        for i, h in enumerate(headers)
    ]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join(
        [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, text_rows)]
    )
