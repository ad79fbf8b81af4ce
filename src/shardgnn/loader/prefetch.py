"""Overlap: run the upstream stages (sampling, feature fetch) for batch i+1 in a background thread
while the caller trains on batch i.

The thread owns every collective of the data pipeline; it must use a process group that no other
thread uses (``DistContext.data_group``) so that collectives stay in the same order on every rank.
Exceptions in the thread are re-raised in the caller.
"""

from __future__ import annotations

import math
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

    def __iter__(self) -> PrefetchIterator[T]:
        return PrefetchIterator(iter(self.source), self.depth)


class PrefetchIterator(Iterator[T]):
    """One pass of a :class:`Prefetcher`; :meth:`close` ends it early on every rank alike."""

    def __init__(self, source: Iterator[T], depth: int):
        self._source, self._depth = source, depth
        self._items: queue.Queue = queue.Queue(maxsize=depth)
        self._limit: float = math.inf  # how many items the producer may make (set by close)
        self._consumed = 0
        self._abort = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._produce, name="shardgnn-prefetch", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        produced = 0
        try:
            while produced < self._limit:
                try:
                    item = next(self._source)
                except StopIteration:
                    break
                produced += 1
                if not self._put(item):
                    return
            self._put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def _put(self, item: object) -> bool:
        while not self._abort.is_set():
            try:
                self._items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> PrefetchIterator[T]:
        return self

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        item = self._items.get()
        if item is _DONE:
            self._finished = True
            self._thread.join()
            raise StopIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        self._consumed += 1
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Stop early, leaving the data group's collectives matched across ranks.

        Ranks stop after the same consumed item, but their producers may be at different points:
        one has queued ``depth`` items and is making the next, another is still making the first.
        Each is therefore let finish exactly ``consumed + depth + 1`` items (the most any producer
        can have begun: ``depth`` queued plus one in hand), which are discarded; then every rank has
        issued the same collectives and no thread is left inside one.
        """
        if self._finished:
            return
        self._limit = self._consumed + self._depth + 1
        while True:
            item = self._items.get()
            if isinstance(item, BaseException):  # a peer failed meanwhile: say so
                self._finished = True
                raise item
            if item is _DONE:
                break
        self._finished = True
        self._thread.join()

    def abort(self) -> None:
        """Stop after a failure: do not wait for the producer's collectives (a peer may be gone)."""
        self._abort.set()
        self._finished = True
        self._thread.join(timeout=5)

    def __del__(self) -> None:
        if not self._finished:
            self._abort.set()
