"""Chronological event batches (the item sampler of temporal training) over the event stream.

Events are trained in time order: a batch is a contiguous range of event positions, scored
before any of its events enters node memory. TGL's random chunk scheduling: with ``chunks``
``c > 1`` each batch is ``c`` chunks, and every epoch starts its batches at a random chunk
boundary (the first batch shorter), so that the same events are not always batched together
and memory sees different batch boundaries from one epoch to the next.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardgnn.graph.temporal import TemporalGraph
from shardgnn.seeding import mix_seed


class EventBatches:
    """``(index, (start, stop))`` event ranges covering ``[first, last)`` in time order.

    Args:
        first, last: the event positions to cover.
        batch_size: events per batch.
        chunks: chunks per batch (random chunk scheduling when > 1).
        seed: the schedule's seed (the epoch's offset is ``mix_seed(seed, epoch)``).
    """

    def __init__(self, first: int, last: int, batch_size: int, chunks: int = 1, seed: int = 0):
        assert 0 <= first <= last and 1 <= chunks <= batch_size
        self.first, self.last, self.batch_size = first, last, batch_size
        self.chunks, self.seed = chunks, seed
        self._bounds = self._schedule(0)
        self._start = 0

    def _schedule(self, epoch: int) -> np.ndarray:
        if self.last == self.first:
            return np.array([self.first], dtype=np.int64)
        offset = 0
        if self.chunks > 1:
            chunk = max(self.batch_size // self.chunks, 1)
            k = int(np.random.default_rng(mix_seed(self.seed, epoch)).integers(0, self.chunks))
            offset = k * chunk
        inner = np.arange(self.first + (offset or self.batch_size), self.last, self.batch_size)
        return np.concatenate([[self.first], inner, [self.last]]).astype(np.int64)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """The epoch's schedule, from its ``start``-th batch (a resumed epoch)."""
        self._bounds = self._schedule(epoch)
        self._start = start

    def __len__(self) -> int:
        return max(len(self._bounds) - 1 - self._start, 0)

    def __iter__(self):
        for index in range(self._start, len(self._bounds) - 1):
            yield index, (int(self._bounds[index]), int(self._bounds[index + 1]))


@dataclasses.dataclass
class EventStream:
    """The events a trainer streams (every process holds all of them: each batch is split
    among ranks), in the ids its memory and sampler use."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    feat: np.ndarray | None
    num_nodes: int
    name: str
    labels: np.ndarray | None = None
    """the source's class at each event (-1: none; :attr:`TemporalGraph.labels`)"""

    @property
    def num_events(self) -> int:
        return int(self.src.shape[0])

    @classmethod
    def of(cls, graph: TemporalGraph) -> "EventStream":
        return cls(
            graph.src, graph.dst, graph.t, graph.edge_feat, graph.num_nodes, graph.name,
            graph.labels,
        )  # fmt: skip
