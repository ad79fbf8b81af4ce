"""The row-free part of a cache (ids, slots, policy, exact counters), shared by the store and by
:func:`simulate`, which runs a policy on a recorded trace through exactly the code the store runs.
"""

from __future__ import annotations

import copy

import numba
import numpy as np

from shardgnn.store.cache.policies import NOTHING, BeladyPolicy, CacheIndex, CachePolicy


@numba.njit(nogil=True, cache=True)
def _distinct_kernel(ids, marks, distinct, inverse, first):  # pragma: no cover - compiled
    count = 0
    for i in range(ids.shape[0]):
        v = ids[i]
        if marks[v] < 0:
            marks[v] = count
            distinct[count] = v
            first[count] = i
            count += 1
        inverse[i] = marks[v]
    for j in range(count):  # leave the scratch array as it was found
        marks[distinct[j]] = -1
    return count


def distinct_in_order(
    ids: np.ndarray, marks: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(distinct, inverse, first)``: the distinct ids in first-occurrence order,
    ``distinct[inverse] == ids`` and ``ids[first] == distinct`` (first occurrences).

    ``marks``: a scratch int64 array over all node ids, all -1 (returned so); one pass, no sort.
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if marks is None:
        marks = np.full(int(ids.max()) + 1 if ids.shape[0] else 0, -1, dtype=np.int64)
    distinct, inverse, first = np.empty_like(ids), np.empty_like(ids), np.empty_like(ids)
    count = _distinct_kernel(ids, marks, distinct, inverse, first)
    return distinct[:count], inverse, first[:count]


class CacheCore:
    """The row-free part of a cache: index, policy and exact counters (rows requested/missed)."""

    def __init__(self, policy: CachePolicy, num_nodes: int, capacity: int):
        self.policy, self.index = policy, CacheIndex(num_nodes, capacity)
        self.requested = self.missed = 0

    def preload(self, ids: np.ndarray) -> np.ndarray:
        """Place ``ids`` (an empty cache's first content, not counted) in the first slots."""
        slots = np.arange(ids.shape[0])
        self.index.place(ids, slots)
        return slots

    def view(self) -> "CacheCore":
        """The same index and policy with counters of its own (for read-only lookups)."""
        view = copy.copy(self)
        view.requested = view.missed = 0
        return view

    def access(
        self, ids: np.ndarray, *, admit: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Look up distinct ``ids``; count; let the policy admit. Returns ``(slots_before,
        admit_positions, target_slots)``; the index already reflects the admissions."""
        slots = self.index.slot_of[ids]
        self.requested += ids.shape[0]
        self.missed += int((slots < 0).sum())
        if not admit:
            return slots, *NOTHING
        pos, targets = self.policy.step(self.index, ids, slots)
        if pos.shape[0]:
            self.index.place(ids[pos], targets)
        assert self.index.size <= self.index.capacity
        return slots, pos, targets


def simulate(
    policy: CachePolicy,
    num_nodes: int,
    capacity: int,
    trace: list[np.ndarray],
    initial: np.ndarray | None = None,
    epoch_sizes: list[int] | None = None,
) -> tuple[int, int]:
    """``(requested, missed)`` rows of ``policy`` on a recorded trace of batches (ids may repeat
    within a batch). Belady plans ``policy.lookahead`` batches at a time, a window never crossing
    an epoch boundary (``epoch_sizes``: batches per epoch; default one epoch), as the loader does.
    The cache starts with ``initial`` (default: the policy's static ids; loading is not counted)."""
    core = CacheCore(policy, num_nodes, capacity)
    core.preload(
        (policy.initial_ids() if initial is None else np.asarray(initial, dtype=np.int64))[
            :capacity
        ]
    )
    batches = [distinct_in_order(np.asarray(t, dtype=np.int64))[0] for t in trace]
    ends = np.cumsum(epoch_sizes if epoch_sizes is not None else [len(batches)])
    for b, ids in enumerate(batches):
        if isinstance(policy, BeladyPolicy) and not policy.pending:
            epoch_end = int(ends[np.searchsorted(ends, b, side="right")])
            policy.plan(core.index, batches[b : min(b + policy.lookahead, epoch_end)])
        core.access(ids)
    return core.requested, core.missed
