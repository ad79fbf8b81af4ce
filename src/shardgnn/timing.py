"""Wall-clock accounting per named stage (sample, fetch, compute...), shared by every layer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from typing import Callable, Iterator

# The order in which epoch lines and tables show a step's stages: the pipeline's order, then the
# step itself, then the learnable rows' update.
STAGE_ORDER = ("negatives", "sample", "lookahead", "fetch", "wait", "comm", "compute", "embed")


_MAIN_THREAD = threading.main_thread().ident
_listener: Callable[[str], None] | None = None
_open_stages: list[str] = []  # the main thread's stages, outermost first
_last_told = ""


def tell_stages_to(listener: Callable[[str], None] | None) -> None:
    """Have ``listener`` told where this process's main thread is, each time that changes:
    ``"in <stage>"`` on entering a :class:`StageTimer` stage (and on leaving a nested one),
    ``"after <stage>"`` on leaving the outermost. A launched worker tells its launcher, which then
    says where a worker it had to kill was (``None``: stop telling)."""
    global _listener, _last_told
    _listener, _last_told = listener, ""
    _open_stages.clear()


def _tell(where: str) -> None:
    global _last_told
    if where != _last_told and _listener is not None:
        _last_told = where
        _listener(where)


class StageTimer:
    """Accumulates seconds per stage name: ``with timer("sample"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        # Only the main thread's stages are told: a prefetching thread's would interleave.
        telling = _listener is not None and threading.get_ident() == _MAIN_THREAD
        if telling:
            _open_stages.append(stage)
            _tell(f"in {stage}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start
            if telling and _open_stages:
                _open_stages.pop()
                _tell(f"in {_open_stages[-1]}" if _open_stages else f"after {stage}")

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] += seconds

    def reset(self) -> dict[str, float]:
        """Return the accumulated seconds and start again from zero."""
        out = dict(self.seconds)
        self.seconds.clear()
        return out
