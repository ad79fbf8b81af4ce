"""Overlap: run the upstream stages (sampling, feature fetch) for batch i+1 in a background thread
while the caller trains on batch i.

The thread owns every collective of the data pipeline; it must use a process group that no other
thread uses (``DistContext.data_group``) so that collectives stay in the same order on every rank.
Exceptions in the thread are re-raised in the caller.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class Prefetcher(Iterable[T]):
    """Iterate ``source`` in a background thread, keeping up to ``depth`` items ready."""

    def __init__(self, source: Iterable[T], depth: int = 1):
        assert depth >= 1
        self.source, self.depth = source, depth

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        items: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def produce() -> None:
            try:
                for item in self.source:
                    while not stop.is_set():
                        try:
                            items.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if stop.is_set():
                        return
                items.put(_DONE)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                items.put(exc)

        thread = threading.Thread(target=produce, name="shardgnn-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = items.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join(timeout=5)
