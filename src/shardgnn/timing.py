"""Wall-clock accounting per named stage (sample, fetch, compute...), shared by every layer."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Iterator

# The order in which epoch lines and tables show a step's stages: the pipeline's order, then the
# step itself, then the learnable rows' update.
STAGE_ORDER = ("negatives", "sample", "lookahead", "fetch", "wait", "comm", "compute", "embed")


class StageTimer:
    """Accumulates seconds per stage name: ``with timer("sample"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] += seconds

    def reset(self) -> dict[str, float]:
        """Return the accumulated seconds and start again from zero."""
        out = dict(self.seconds)
        self.seconds.clear()
        return out
