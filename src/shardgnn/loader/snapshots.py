"""Snapshot graphs in time order, each rebuilt from the previous one and its delta (the item
stream of discrete-time training)."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from shardgnn.graph.snapshots import SnapshotSequence


class SnapshotGraphs:
    """The graphs of snapshots ``0 .. count - 1`` in order, each rebuilt from the previous one
    and its delta; ``prep_s`` sums the time spent building them.

    Args:
        seq: the snapshots (a base graph plus deltas).
        count: how many to yield, from snapshot 0.
        build: ``(indptr, indices) -> graph``: what the trainer computes on (its message graph
            on its device); built here, so that its time counts as preparation and runs
            ahead of the compute when the stream is prefetched.
    """

    def __init__(
        self,
        seq: SnapshotSequence,
        count: int,
        build: Callable[[np.ndarray, np.ndarray], Any],
    ):
        self.seq, self.count, self.build = seq, count, build
        self.prep_s = 0.0

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        keys = None
        for t in range(self.count):
            start = time.perf_counter()
            keys = self.seq.edges(t, keys)
            indptr, indices = self.seq.csr(keys)
            graph = self.build(indptr, indices)
            self.prep_s += time.perf_counter() - start
            yield t, graph
