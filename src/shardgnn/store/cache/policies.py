"""Cache policies: which rows a cache keeps. A policy sees each batch's distinct cacheable ids and
the slots they sit in, and decides what to admit and what to evict."""

from __future__ import annotations

import abc
import collections

import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.store.cache.config import BUILT_POLICIES, STATIC_POLICIES


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

    def load(self, id_of: np.ndarray) -> None:
        """Hold exactly ``id_of`` (slot by slot, -1 empty), as :attr:`id_of` was saved."""
        assert id_of.shape == self.id_of.shape
        self.slot_of.fill(-1)
        self.id_of[:] = id_of
        held = np.flatnonzero(id_of >= 0)
        self.slot_of[id_of[held]] = held


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
    def step(
        self, index: CacheIndex, ids: np.ndarray, slots: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(admit_positions, target_slots)`` for this batch."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """What the policy decides its next admissions from (a checkpoint carries it), copied:
        later steps do not change it."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`."""


NOTHING = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


class StaticPolicy(CachePolicy):
    """A fixed set of ids, loaded once (``degree``, ``presample``)."""

    def __init__(self, name: str, ids: np.ndarray):
        self.name, self.ids = name, np.asarray(ids, dtype=np.int64)

    def initial_ids(self) -> np.ndarray:
        return self.ids

    def step(self, index, ids, slots):
        return NOTHING


class FIFOPolicy(CachePolicy):
    """Admit every miss at the ring's head, evicting the oldest admission (BGL); a hit does not
    refresh a row. When a batch misses more rows than fit, its first-requested ones are admitted."""

    name = "fifo"

    def __init__(self):
        self.head = 0

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"head": np.array(self.head)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.head = int(state["head"])

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

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {"clock": np.array(self.clock)}
        return state if self.last_used is None else {**state, "last_used": self.last_used.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.clock = int(state["clock"])
        last_used = state.get("last_used")
        self.last_used = None if last_used is None else np.array(last_used, dtype=np.int64)

    def step(self, index, ids, slots):
        if self.last_used is None:
            self.last_used = np.full(index.capacity, -1, dtype=np.int64)  # empty slots go first
        self.clock += 1
        hit = slots >= 0
        self.last_used[slots[hit]] = self.clock
        misses = np.flatnonzero(~hit)[: index.capacity]
        k = misses.shape[0]
        if k == 0:
            return NOTHING
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

    def state_dict(self) -> dict[str, np.ndarray]:
        """The access counts (ties among rows unused in a window); a planned window's decisions
        are not state: a resumed run plans its window again."""
        return {"count": self.count.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if "count" in state:  # older checkpoints carried none
            self.count[:] = state["count"]
        self._queue.clear()

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
            self._next[ids] = next_after[offsets[b] : offsets[b + 1]]
            self.count[ids] += 1
            candidates = np.concatenate([cached, misses])
            if candidates.shape[0] <= capacity:
                keep = candidates
            else:
                nxt = self._next[candidates]
                # Priority: soonest next use; rows unused in the window rank after all others,
                # the more often accessed the better.
                key = np.where(
                    nxt == _NEVER, window_len + 1 + 1.0 / (1.0 + self.count[candidates]), nxt
                )
                keep = candidates[np.argpartition(key, capacity - 1)[:capacity]]
            in_cache[cached] = False
            in_cache[keep] = True
            kept = in_cache[candidates]
            admitted = kept[cached.shape[0] :]
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
            return NOTHING
        # The plan keeps exactly ``capacity`` rows once full, so admissions = evictions + free
        # slots.
        freed = index.slot_of[evict]
        extra = admit.shape[0] - freed.shape[0]
        assert extra >= 0
        targets = np.concatenate([freed, index.free_slots(extra)]) if extra else freed
        assert targets.shape[0] == admit.shape[0], "the plan admits more rows than fit"
        return admit_pos, targets


def make_policy(
    name: str, *, num_nodes: int, lookahead: int = 16, static_ids: np.ndarray | None = None
) -> CachePolicy:
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
    if name == "auto":  # workers started through the library, not `shardgnn train`
        raise ConfigError(
            "--cache-policy auto is resolved by `shardgnn train` before its workers start; "
            f"give workers one of {', '.join(BUILT_POLICIES)}"
        )
    raise ConfigError(f"cache policy {name!r} must be one of {BUILT_POLICIES}")
