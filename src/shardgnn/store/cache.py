"""Feature caches: a cached store is a store.

:class:`CachedFeatureStore` wraps any :class:`FeatureStore` (in practice the distributed one) and
keeps up to ``capacity`` rows that would otherwise come from a slow tier: a peer (remote rows) or
this rank's own memory-mapped file (``--feature-storage disk``). Rows held in RAM by this rank are
never cached; they are already as fast as a cache.

Which rows are kept is a :class:`CachePolicy`:

========== ======= ==================================================================== ============
policy     kind    rule                                                                 from
========== ======= ==================================================================== ============
degree     static  the highest in-degree cacheable nodes                               PaGraph, Quiver
presample  static  the nodes the sampler touched most often in one unrecorded epoch     GNNLab (PreSC)
fifo       dynamic admit every miss, evict the oldest admission (a ring)               BGL
lru        dynamic admit every miss, evict the least recently used                     classic
belady     dynamic look ``W`` batches ahead; keep the rows used soonest                Ginex, Bagpipe
========== ======= ==================================================================== ============

The row-free part (ids, slots, policy, counters) is :class:`CacheCore`, so a policy can be run on
a recorded trace (:func:`simulate`) through exactly the code the store runs.

Accounting (GNNLab's definition): per ``gather`` the distinct cacheable ids are *requested*; those
not cached at call time are *missed*; hit rate = (requested - missed) / requested, in bytes (all
rows have the same size, so rows give the same ratio).
"""

from __future__ import annotations

import abc
import collections
import copy
import dataclasses
import re
import typing

import numba
import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.store.feature import FeatureStore, copy_rows

POLICIES = ("none", "degree", "presample", "fifo", "lru", "belady")
STATIC_POLICIES = ("degree", "presample")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%|kb|mb|gb|rows)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"kb": 1e3, "mb": 1e6, "gb": 1e9}


@dataclasses.dataclass(kw_only=True)
class CacheConfig:
    """The feature cache of distributed mini-batch training (one cache per worker)."""

    policy: str = "none"
    """none, degree, presample, fifo, lru or belady"""
    size: str = "10%"
    """capacity per worker: a percentage (or fraction < 1) of all nodes, a row count, or bytes (e.g. 256MB)"""
    lookahead: int = 16
    """belady: batches sampled ahead (the inspector's window); their missing rows arrive in one exchange"""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"cache policy {self.policy!r} must be one of {POLICIES}")
        parse_cache_size(self.size)
        if self.lookahead < 1:
            raise ConfigError(f"cache lookahead={self.lookahead} must be >= 1 batch")

    @property
    def enabled(self) -> bool:
        return self.policy != "none"

    def capacity_rows(self, num_nodes: int, row_bytes: int) -> int:
        """The capacity in rows for a graph of ``num_nodes`` nodes whose rows take ``row_bytes``."""
        return resolve_capacity(self.size, num_nodes, row_bytes)


def parse_cache_size(text: str) -> tuple[str, float]:
    """``("fraction" | "rows" | "bytes", value)`` of a ``--cache-size`` string."""
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"cache size {text!r} is not understood; give a percentage of nodes (20%), a fraction "
                          "(0.2), a row count (50000) or a size in bytes (256MB, 2GB)")
    value, unit = float(match.group(1)), (match.group(2) or "").lower()
    if unit == "%":
        kind, value = "fraction", value / 100
    elif unit in _UNIT_BYTES:
        kind, value = "bytes", value * _UNIT_BYTES[unit]
    elif unit == "rows" or ("." not in match.group(1)):
        kind = "rows"
    else:
        kind = "fraction"
    if kind == "fraction" and not 0 < value <= 1:
        raise ConfigError(f"cache size {text!r} is a fraction of nodes and must lie in (0, 100%]")
    if kind == "rows" and value != int(value):
        raise ConfigError(f"cache size {text!r}: a row count must be a whole number")
    return kind, value


def resolve_capacity(size: str, num_nodes: int, row_bytes: int) -> int:
    """Rows that ``size`` allows, at most ``num_nodes`` and at least 1."""
    kind, value = parse_cache_size(size)
    rows = {"fraction": lambda: int(round(value * num_nodes)), "rows": lambda: int(value),
            "bytes": lambda: int(value // max(row_bytes, 1))}[kind]()
    if rows < 1:
        raise ConfigError(f"cache size {size!r} holds no row ({num_nodes:,} nodes of {row_bytes:,} bytes); "
                          "give a larger --cache-size or --cache-policy none")
    return min(rows, num_nodes)


def top_ids(scores: np.ndarray, cacheable: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` cacheable ids of highest positive score (ties: lower id first), best first."""
    candidates = np.flatnonzero(cacheable & (scores > 0))
    order = np.lexsort((candidates, -scores[candidates].astype(np.float64)))
    return candidates[order[:k]].astype(np.int64)


class CacheIndex:
    """Which node id sits in which of ``capacity`` slots (both directions, dense arrays)."""

    def __init__(self, num_nodes: int, capacity: int):
        assert capacity >= 1
        self.capacity = capacity
        self.slot_of = np.full(num_nodes, -1, dtype=np.int64)
        self.id_of = np.full(capacity, -1, dtype=np.int64)

    def place(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Put ``ids`` (none of them cached) into ``slots`` (distinct), evicting the occupants."""
        assert ids.shape == slots.shape and (self.slot_of[ids] < 0).all()
        old = self.id_of[slots]
        self.slot_of[old[old >= 0]] = -1
        self.id_of[slots] = ids
        self.slot_of[ids] = slots

    def free_slots(self, count: int) -> np.ndarray:
        return np.flatnonzero(self.id_of < 0)[:count]

    @property
    def size(self) -> int:
        return int((self.id_of >= 0).sum())

    def cached_ids(self) -> np.ndarray:
        return np.sort(self.id_of[self.id_of >= 0])


class CachePolicy(abc.ABC):
    """Decides admissions and evictions. ``step`` sees one batch's distinct cacheable ids (in
    first-request order) and their slots before the batch (-1: miss) and returns the positions
    of the misses to admit and the slots they go to (whose occupants are evicted)."""

    name: str
    lookahead = 0

    def initial_ids(self) -> np.ndarray:
        """Ids to load before the first batch (static policies)."""
        return np.zeros(0, dtype=np.int64)

    @abc.abstractmethod
    def step(self, index: CacheIndex, ids: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(admit_positions, target_slots)`` for this batch."""


_NOTHING = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


class StaticPolicy(CachePolicy):
    """A fixed set of ids, loaded once (``degree``, ``presample``)."""

    def __init__(self, name: str, ids: np.ndarray):
        self.name, self.ids = name, np.asarray(ids, dtype=np.int64)

    def initial_ids(self) -> np.ndarray:
        return self.ids

    def step(self, index, ids, slots):
        return _NOTHING


class FIFOPolicy(CachePolicy):
    """Admit every miss at the ring's head, evicting the oldest admission (BGL); a hit does not
    refresh a row. When a batch misses more rows than fit, its first-requested ones are admitted."""

    name = "fifo"

    def __init__(self):
        self.head = 0

    def step(self, index, ids, slots):
        misses = np.flatnonzero(slots < 0)[: index.capacity]
        targets = (self.head + np.arange(misses.shape[0])) % index.capacity
        self.head = int((self.head + misses.shape[0]) % index.capacity)
        return misses, targets


class LRUPolicy(CachePolicy):
    """Admit every miss, evicting the least recently used rows (batch granularity: the rows of one
    batch share a timestamp; a batch's hits are refreshed before victims are chosen)."""

    name = "lru"

    def __init__(self):
        self.last_used: np.ndarray | None = None
        self.clock = 0

    def step(self, index, ids, slots):
        if self.last_used is None:
            self.last_used = np.full(index.capacity, -1, dtype=np.int64)  # empty slots go first
        self.clock += 1
        hit = slots >= 0
        self.last_used[slots[hit]] = self.clock
        misses = np.flatnonzero(~hit)[: index.capacity]
        k = misses.shape[0]
        if k == 0:
            return _NOTHING
        targets = np.argpartition(self.last_used, k - 1)[:k] if k < index.capacity else np.arange(k)
        self.last_used[targets] = self.clock
        return misses, targets


_NEVER = np.iinfo(np.int64).max


class BeladyPolicy(CachePolicy):
    """Belady's MIN over a look-ahead window (Ginex's inspector, Bagpipe's oracle).

    :meth:`plan` receives the next ``W`` batches, simulates them from the current cache content
    and queues one decision per batch: after serving batch ``b``, keep the ``capacity`` rows among
    (cached ∪ batch ``b``) whose next use is soonest; rows never used again in the window go first
    (ties among them: fewest accesses so far, so long-run hot rows survive a window boundary).
    With the whole trace as the window this is the offline optimum (tested against brute force).
    """

    name = "belady"

    def __init__(self, num_nodes: int, lookahead: int):
        assert lookahead >= 1
        self.lookahead = lookahead
        self.count = np.zeros(num_nodes, dtype=np.int64)
        self._next = np.full(num_nodes, _NEVER, dtype=np.int64)
        self._queue: collections.deque = collections.deque()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def plan(self, index: CacheIndex, window: list[np.ndarray]) -> list[np.ndarray]:
        """Queue the decisions for ``window`` (each batch's distinct cacheable ids, in the order
        ``step`` will see them); return each batch's misses."""
        assert not self._queue, "the previous window was not consumed"
        sizes = np.array([w.shape[0] for w in window], dtype=np.int64)
        flat = np.concatenate(window) if window else np.zeros(0, dtype=np.int64)
        batch_of = np.repeat(np.arange(len(window), dtype=np.int64), sizes)
        # Next occurrence of each (id, batch) pair within the window: sort by (id, batch).
        order = np.lexsort((batch_of, flat))
        sid, sb = flat[order], batch_of[order]
        same = np.zeros(flat.shape[0], dtype=bool)
        same[:-1] = sid[1:] == sid[:-1]
        nxt_sorted = np.full(flat.shape[0], _NEVER, dtype=np.int64)
        nxt_sorted[:-1][same[:-1]] = sb[1:][same[:-1]]
        next_after = np.empty_like(nxt_sorted)
        next_after[order] = nxt_sorted
        first = np.ones(flat.shape[0], dtype=bool)
        first[1:] = sid[1:] != sid[:-1]
        cached = index.cached_ids()
        self._next[cached] = _NEVER
        self._next[sid[first]] = sb[first]  # a cached id's next use is its first in the window
        in_cache = np.zeros(index.slot_of.shape[0], dtype=bool)  # simulated content
        in_cache[cached] = True
        capacity, window_len = index.capacity, len(window)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        misses_per_batch = []
        for b, ids in enumerate(window):
            hit = in_cache[ids]
            miss_pos = np.flatnonzero(~hit)
            misses = ids[miss_pos]
            misses_per_batch.append(misses)
            self._next[ids] = next_after[offsets[b]:offsets[b + 1]]
            self.count[ids] += 1
            candidates = np.concatenate([cached, misses])
            if candidates.shape[0] <= capacity:
                keep = candidates
            else:
                nxt = self._next[candidates]
                # Priority: soonest next use; rows unused in the window rank after all others,
                # the more often accessed the better.
                key = np.where(nxt == _NEVER, window_len + 1 + 1.0 / (1.0 + self.count[candidates]), nxt)
                keep = candidates[np.argpartition(key, capacity - 1)[:capacity]]
            in_cache[cached] = False
            in_cache[keep] = True
            kept = in_cache[candidates]
            admitted = kept[cached.shape[0]:]
            evict, admit = cached[~kept[: cached.shape[0]]], misses[admitted]
            self._queue.append((ids, miss_pos[admitted], admit, evict))
            cached = keep
        return misses_per_batch

    def step(self, index, ids, slots):
        if not self._queue:  # used without look-ahead: a window of one batch
            self.plan(index, [ids])
        planned, admit_pos, admit, evict = self._queue.popleft()
        assert np.array_equal(planned, ids), "gather called with ids other than the planned batch"
        if admit.shape[0] == 0:
            return _NOTHING
        # The plan keeps exactly ``capacity`` rows once full, so admissions = evictions + free slots.
        freed = index.slot_of[evict]
        extra = admit.shape[0] - freed.shape[0]
        assert extra >= 0
        targets = np.concatenate([freed, index.free_slots(extra)]) if extra else freed
        assert targets.shape[0] == admit.shape[0], "the plan admits more rows than fit"
        return admit_pos, targets


def make_policy(name: str, *, num_nodes: int, lookahead: int = 16, static_ids: np.ndarray | None = None) -> CachePolicy:
    """The policy called ``name``; static policies take the ids they keep."""
    if name in STATIC_POLICIES:
        assert static_ids is not None, f"{name} needs its ids"
        return StaticPolicy(name, static_ids)
    if name == "fifo":
        return FIFOPolicy()
    if name == "lru":
        return LRUPolicy()
    if name == "belady":
        return BeladyPolicy(num_nodes, lookahead)
    raise ConfigError(f"cache policy {name!r} must be one of {POLICIES[1:]}")


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


def distinct_in_order(ids: np.ndarray, marks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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

    def access(self, ids: np.ndarray, *, admit: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Look up distinct ``ids``; count; let the policy admit. Returns ``(slots_before,
        admit_positions, target_slots)``; the index already reflects the admissions."""
        slots = self.index.slot_of[ids]
        self.requested += ids.shape[0]
        self.missed += int((slots < 0).sum())
        if not admit:
            return slots, *_NOTHING
        pos, targets = self.policy.step(self.index, ids, slots)
        if pos.shape[0]:
            self.index.place(ids[pos], targets)
        assert self.index.size <= self.index.capacity
        return slots, pos, targets


def simulate(policy: CachePolicy, num_nodes: int, capacity: int, trace: list[np.ndarray],
             initial: np.ndarray | None = None, epoch_sizes: list[int] | None = None) -> tuple[int, int]:
    """``(requested, missed)`` rows of ``policy`` on a recorded trace of batches (ids may repeat
    within a batch). Belady plans ``policy.lookahead`` batches at a time, a window never crossing
    an epoch boundary (``epoch_sizes``: batches per epoch; default one epoch), as the loader does.
    The cache starts with ``initial`` (default: the policy's static ids; loading is not counted)."""
    core = CacheCore(policy, num_nodes, capacity)
    core.preload((policy.initial_ids() if initial is None else np.asarray(initial, dtype=np.int64))[:capacity])
    batches = [distinct_in_order(np.asarray(t, dtype=np.int64))[0] for t in trace]
    ends = np.cumsum(epoch_sizes if epoch_sizes is not None else [len(batches)])
    for b, ids in enumerate(batches):
        if isinstance(policy, BeladyPolicy) and not policy.pending:
            epoch_end = int(ends[np.searchsorted(ends, b, side="right")])
            policy.plan(core.index, batches[b: min(b + policy.lookahead, epoch_end)])
        core.access(ids)
    return core.requested, core.missed


class _Split(typing.NamedTuple):
    """One batch's ids split for the cache: positions of cacheable and plain (RAM-local) ids, and
    the cacheable ids' distinct values with ``distinct[inverse]`` = them and first occurrences."""

    where_c: np.ndarray
    where_plain: np.ndarray
    distinct: np.ndarray
    inverse: np.ndarray
    first: np.ndarray


class CachedFeatureStore(FeatureStore):
    """A cache in front of ``fallback`` (same interface; ``gather`` is collective exactly when
    the fallback's is: one fallback ``gather`` per call, or per look-ahead window for belady).

    Args:
        fallback: the store the rows come from (e.g. :class:`DistFeatureStore`).
        policy: the admission/eviction rule.
        capacity: rows held at most.
        fill_from: the store static content is loaded from (default ``fallback``; a distributed
            store under another communication stage keeps set-up bytes apart from fetch bytes).
    """

    def __init__(self, fallback: FeatureStore, policy: CachePolicy, capacity: int,
                 fill_from: FeatureStore | None = None):
        self.fallback, self.policy = fallback, policy
        self.capacity = int(min(capacity, fallback.shape[0]))
        self.core = CacheCore(policy, fallback.shape[0], self.capacity)
        self.rows = torch.zeros((self.capacity, *fallback.shape[1:]), dtype=fallback.dtype)
        self._staged_ids = np.zeros(0, dtype=np.int64)
        self._staged_rows: torch.Tensor | None = None
        self._window: list[_Split] = []
        self.max_staged_rows = 0
        self.readonly = False
        self._marks = np.full(fallback.shape[0], -1, dtype=np.int64)  # scratch of distinct_in_order
        # Static content is loaded once (a collective gather when the fallback is distributed).
        if isinstance(policy, StaticPolicy):
            initial = policy.initial_ids()[: self.capacity]
            self.rows[self.core.preload(initial)] = (fill_from or fallback).gather(torch.from_numpy(initial))

    # -------------------------------------------------------------- the store interface
    @property
    def shape(self) -> tuple[int, ...]:
        return self.fallback.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.fallback.dtype

    @property
    def collective(self) -> bool:
        return self.fallback.collective

    @property
    def lookahead(self) -> int:
        """Batches the loader should announce through :meth:`plan` before gathering them."""
        return 0 if self.readonly else self.policy.lookahead

    def cacheable(self, ids: np.ndarray) -> np.ndarray:
        """Rows that come from a slow tier: a peer, or this rank's disk."""
        if self.fallback.on_disk:
            return np.ones(ids.shape[0], dtype=bool)
        return ~self.fallback.local_mask(ids)

    def read_only_view(self, fallback: FeatureStore) -> "CachedFeatureStore":
        """The same cached rows in front of another store (e.g. evaluation's), never admitting and
        counting separately; it stays valid while this cache changes."""
        view = copy.copy(self)  # shares rows and index
        view.fallback, view.readonly, view._window, view.core = fallback, True, [], self.core.view()
        view._marks = np.full_like(self._marks, -1)
        return view

    def _split(self, ids_np: np.ndarray) -> "_Split":
        cacheable = self.cacheable(ids_np)
        where_c = np.flatnonzero(cacheable)
        return _Split(where_c, np.flatnonzero(~cacheable), *distinct_in_order(ids_np[where_c], self._marks))

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        ids_np = ids.numpy()
        planned = bool(self._window)
        # A planned batch was split by the inspector already.
        where_c, where_plain, distinct, inverse, first = self._window.pop(0) if planned else self._split(ids_np)
        assert where_c.shape[0] + where_plain.shape[0] == ids_np.shape[0] and \
            np.array_equal(ids_np[where_c[first]], distinct), "gather called with ids other than the planned batch"
        slots, admit_pos, targets = self.core.access(distinct, admit=not self.readonly)
        missing = np.flatnonzero(slots < 0)
        hit_occ = slots[inverse] >= 0  # per cacheable occurrence
        out = torch.empty((ids_np.shape[0], *self.shape[1:]), dtype=self.dtype)
        copy_rows(out, where_c[hit_occ], self.rows, slots[inverse[hit_occ]])
        # Every distinct id's first output position: misses are written there, repeats copied.
        first_occ = where_c[first]
        miss_first = first_occ[missing]
        if planned:
            # Misses come from the window's staged rows; no collective per batch.
            at = np.searchsorted(self._staged_ids, distinct[missing])
            assert (self._staged_ids[at] == distinct[missing]).all(), "a planned miss was not staged"
            copy_rows(out, miss_first, self._staged_rows, at)
            if not self._window:
                self._staged_ids, self._staged_rows = np.zeros(0, dtype=np.int64), None
        else:
            # One fallback gather (collective when distributed), straight into the output.
            self.fallback.gather_into(torch.from_numpy(distinct[missing]), out, miss_first)
        repeats = ~hit_occ & (where_c != first_occ[inverse])
        copy_rows(out, where_c[repeats], out, first_occ[inverse[repeats]])
        # Rows this process holds in RAM are copied directly, never cached.
        self.fallback.read_local_into(ids_np[where_plain], out, where_plain)
        if admit_pos.shape[0]:
            copy_rows(self.rows, targets, out, first_occ[admit_pos])
        return out

    # -------------------------------------------------------------- look-ahead (belady)
    def plan(self, window: list[torch.Tensor]) -> None:
        """The inspector: announce the next batches' ids (gathered next, in this order). Pure
        computation; :meth:`prefetch` then brings their misses in one exchange."""
        assert isinstance(self.policy, BeladyPolicy) and not self._window
        for ids in window:
            self.check_ids(ids)
        self._window = [self._split(ids.numpy()) for ids in window]
        misses = self.policy.plan(self.core.index, [split.distinct for split in self._window])
        self._to_fetch = np.unique(np.concatenate(misses)) if misses else np.zeros(0, dtype=np.int64)

    def prefetch(self) -> None:
        """Fetch every row the planned window misses (collective when the fallback's gather is)."""
        self._staged_ids = self._to_fetch
        self._staged_rows = self.fallback.gather(torch.from_numpy(self._to_fetch))
        self.max_staged_rows = max(self.max_staged_rows, int(self._to_fetch.shape[0]))

    # -------------------------------------------------------------- counters
    def reset_counters(self) -> tuple[int, int]:
        """``(requested_rows, missed_rows)`` since the last reset."""
        out = (self.core.requested, self.core.missed)
        self.core.requested = self.core.missed = 0
        return out
