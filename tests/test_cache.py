"""Feature caches: policies on traces (against a brute-force optimum), the cached store's rows and
counters, disk-backed features, and the distributed cache end to end."""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import pytest
import torch

import shardgnn.store.cache.store as cache_store
from shardgnn.errors import ConfigError
from shardgnn.graph.features import normalize_features, row_sums
from shardgnn.store.cache.build import top_ids
from shardgnn.store.cache.config import CacheConfig, resolve_capacity
from shardgnn.store.cache.core import simulate
from shardgnn.store.cache.policies import (
    BeladyPolicy,
    FIFOPolicy,
    LRUPolicy,
    StaticPolicy,
    make_policy,
)
from shardgnn.store.cache.store import CachedFeatureStore
from shardgnn.store.feature import (
    FeatureStore,
    LocalFeatureStore,
    SparseRowStore,
    advise_random,
    csr_rows,
    held_bytes,
    rows_in_memory,
)

DYNAMIC = ("fifo", "lru", "belady")


def optimal_misses(trace: list[np.ndarray], capacity: int, initial=()) -> int:
    """Fewest misses any policy can have (fetch on demand, keep any subset of what it holds):
    exhaustive search over cache contents, from the cache content ``initial``."""
    best = {frozenset(int(v) for v in initial): 0}
    for batch in trace:
        batch = frozenset(int(v) for v in batch)
        nxt: dict[frozenset, int] = {}
        for state, cost in best.items():
            cost += len(batch - state)
            pool = sorted(state | batch)
            for k in range(min(capacity, len(pool)) + 1):
                for keep in itertools.combinations(pool, k):
                    key = frozenset(keep)
                    if nxt.get(key, 1 << 30) > cost:
                        nxt[key] = cost
        best = nxt
    return min(best.values())


def random_trace(rng, num_nodes, batches, max_batch, skew=1.2):
    weights = 1.0 / np.arange(1, num_nodes + 1) ** skew
    weights /= weights.sum()
    out = []
    for _ in range(batches):
        size = int(rng.integers(1, max_batch + 1))
        out.append(rng.choice(num_nodes, size=size, p=weights))
    return out


def policy(name, num_nodes, trace, capacity, lookahead=None):
    if name == "degree":  # a stand-in static score: how often each id occurs in the trace
        counts = np.bincount(np.concatenate(trace), minlength=num_nodes)
        return StaticPolicy(name, top_ids(counts, np.ones(num_nodes, dtype=bool), capacity))
    return make_policy(name, num_nodes=num_nodes, lookahead=lookahead or len(trace))


# --------------------------------------------------------------------------- policies on traces
@pytest.mark.parametrize("seed", range(25))
def test_belady_equals_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    num_nodes, capacity = 6, int(rng.integers(1, 4))
    trace = random_trace(rng, num_nodes, int(rng.integers(2, 7)), 3)
    initial = (
        rng.choice(num_nodes, int(rng.integers(0, capacity + 1)), replace=False) if seed % 2 else []
    )
    _, missed = simulate(
        BeladyPolicy(num_nodes, lookahead=len(trace)), num_nodes, capacity, trace, initial
    )
    assert missed == optimal_misses(trace, capacity, initial)


@pytest.mark.parametrize("seed", range(10))
def test_belady_at_least_every_policy(seed):
    rng = np.random.default_rng(100 + seed)
    num_nodes, capacity = 300, int(rng.integers(5, 60))
    trace = random_trace(rng, num_nodes, 40, 50)
    for name in ("degree", "fifo", "lru"):
        other = policy(name, num_nodes, trace, capacity)
        requested, missed = simulate(other, num_nodes, capacity, trace)
        # From the same starting content (a static policy's preloaded rows are free here).
        belady = simulate(
            BeladyPolicy(num_nodes, len(trace)), num_nodes, capacity, trace, other.initial_ids()
        )
        assert belady[0] == requested and belady[1] <= missed, name


def test_windowed_belady_beats_lru_and_fifo_on_skewed_traces():
    rng = np.random.default_rng(7)
    num_nodes, capacity = 500, 50
    trace = random_trace(rng, num_nodes, 60, 80)
    missed = {
        name: simulate(
            policy(name, num_nodes, trace, capacity, lookahead=8), num_nodes, capacity, trace
        )[1]
        for name in ("fifo", "lru", "belady")
    }
    assert missed["belady"] < missed["lru"] and missed["belady"] < missed["fifo"]


def test_fifo_and_lru_rules_on_a_hand_trace():
    trace = [np.array([1, 2]), np.array([3]), np.array([1]), np.array([4]), np.array([1, 2])]
    # FIFO (capacity 2): [1 2] -> 3 evicts 1 -> [2 3]; 1 misses, evicts 2 -> [3 1]; 4 evicts 3 -> [1
    # 4];
    # 1 hits, 2 misses.
    assert simulate(FIFOPolicy(), 5, 2, trace) == (7, 6)
    # LRU: [1 2]; 3 evicts 1 -> [2 3]; 1 evicts 2 -> [3 1]; 4 evicts 3 -> [1 4]; 1 hits, 2 misses.
    assert simulate(LRUPolicy(), 5, 2, trace) == (7, 6)
    trace = [np.array([1, 2]), np.array([1]), np.array([3]), np.array([1]), np.array([2])]
    # FIFO: 3 evicts the oldest (1) although 1 was just used; LRU evicts 2.
    assert simulate(FIFOPolicy(), 5, 2, trace)[1] == 5
    assert simulate(LRUPolicy(), 5, 2, trace)[1] == 4


@pytest.mark.parametrize("name", DYNAMIC)
def test_second_read_of_the_same_ids_adds_no_misses(name):
    rng = np.random.default_rng(3)
    ids = rng.choice(1000, 100, replace=False)
    trace = [ids, rng.permutation(ids)]
    requested, missed = simulate(make_policy(name, num_nodes=1000, lookahead=1), 1000, 100, trace)
    assert (requested, missed) == (200, 100)


def test_top_ids_selects_highest_scores_among_cacheable():
    scores = np.array([5, 9, 9, 1, 0, 7])
    cacheable = np.array([True, True, True, True, True, False])
    assert top_ids(scores, cacheable, 3).tolist() == [1, 2, 0]  # 7 is not cacheable; ties by id
    assert top_ids(scores, cacheable, 10).tolist() == [1, 2, 0, 3]  # never a zero score


# --------------------------------------------------------------------------- capacity parsing
@pytest.mark.parametrize(
    "size,rows",
    [
        ("20%", 200),
        ("0.05", 50),
        ("123", 123),
        ("4kB", 10),
        ("1MB", 1000),
        ("5000", 1000),
        ("100 rows", 100),
    ],
)
def test_capacity_forms(size, rows):
    assert resolve_capacity(size, 1000, 400) == rows


@pytest.mark.parametrize("size", ["-5%", "0%", "150%", "1.5", "abc", "12.5 rows", "0"])
def test_bad_capacity_is_a_clear_error(size):
    with pytest.raises(ConfigError, match=f"^--cache-size '{size}'"):
        resolve_capacity(size, 1000, 400)


def test_bad_policy_and_lookahead():
    with pytest.raises(ConfigError, match="^--cache-policy clock: choose one of none, degree"):
        CacheConfig(policy="clock")
    with pytest.raises(ConfigError, match="^--cache-lookahead 0: must be >= 1"):
        CacheConfig(policy="belady", lookahead=0)


# --------------------------------------------------------------------------- the cached store
class CountingStore(FeatureStore):
    """A local store that records every gather call (to check what reaches the fallback)."""

    def __init__(
        self, x, local_below: int | None = None, on_disk: bool = False, sparse: bool = False
    ):
        # sparse: rows held as CSR, gathered as sparse batches
        self.inner = csr_rows(x, "none", sparse_batches=True) if sparse else LocalFeatureStore(x)
        self.calls, self.local_below, self._on_disk = [], local_below, on_disk
        self.sparse_batches = sparse

    def local_pieces(self, ids, positions):
        assert (ids < (self.local_below or 0)).all()
        return self.inner.local_pieces(ids, positions)

    @property
    def shape(self):
        return self.inner.shape

    @property
    def dtype(self):
        return self.inner.dtype

    @property
    def on_disk(self):
        return self._on_disk

    @property
    def collective(self):  # behave like a distributed store: called even with no ids
        return True

    def local_mask(self, ids):
        if self.local_below is None:
            return np.zeros(ids.shape[0], dtype=bool)
        return ids < self.local_below

    def read_local_into(self, ids, out, positions):
        assert self.local_below is not None or ids.shape[0] == 0
        assert (ids < (self.local_below or 0)).all()
        out[torch.from_numpy(positions)] = self.inner.gather(torch.from_numpy(ids))

    def _gather(self, ids):
        self.calls.append(ids.clone())
        return self.inner.gather(ids)


def arange_features(n, dim=3):
    return torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, dim) + torch.arange(dim) / 10


def make_store(name, n, capacity, trace, lookahead=4, **kw):
    fallback = CountingStore(arange_features(n), **kw)
    scores = np.bincount(np.concatenate(trace), minlength=n)
    pol = make_policy(
        name,
        num_nodes=n,
        lookahead=lookahead,
        static_ids=top_ids(scores, ~fallback.local_mask(np.arange(n)) | fallback.on_disk, capacity),
    )
    return CachedFeatureStore(fallback, pol, capacity), fallback


def run_trace(store, trace):
    outs = []
    if store.lookahead:
        for start in range(0, len(trace), store.lookahead):
            window = [torch.from_numpy(t) for t in trace[start : start + store.lookahead]]
            store.plan(window)
            store.prefetch()
            outs += [store.gather(ids) for ids in window]
    else:
        outs = [store.gather(torch.from_numpy(t)) for t in trace]
    return outs


@pytest.mark.parametrize("name", ["degree", "fifo", "lru"])
def test_a_cache_restored_from_its_state_continues_as_the_original(name):
    """state_dict / load_state_dict: a fresh cache given the state of one that served half a
    trace serves the other half with the same slots, fetches, ages and counts (rows that change:
    max_age, what --embedding-staleness caches)."""
    n, capacity = 200, 30
    trace = random_trace(np.random.default_rng(5), n, 30, 50)
    first, _ = make_store(name, n, capacity, trace)
    first.max_age, first.served_ages = 2, np.zeros(3, dtype=np.int64)
    for ids in trace[:15]:
        first.gather(torch.from_numpy(ids))
        first.tick()
    state = first.state_dict()
    second, fallback = make_store(name, n, capacity, trace)
    second.max_age, second.served_ages = 2, np.zeros(3, dtype=np.int64)
    second.load_state_dict(state)
    first.reset_counters()
    served_before = first.served_ages.copy()
    for ids in trace[15:]:
        a, b = first.gather(torch.from_numpy(ids)), second.gather(torch.from_numpy(ids))
        assert torch.equal(a, b)
        first.tick(), second.tick()
    assert second.reset_counters() == first.reset_counters()
    assert np.array_equal(first.core.index.id_of, second.core.index.id_of)
    assert np.array_equal(first.fetched_at, second.fetched_at)
    assert np.array_equal(first.served_ages - served_before, second.served_ages)
    assert second.served_ages[1:].sum() > 0  # stale rows were served after the restore


def _journalled_run(store, trace, window, upto, ahead):
    """Serve ``trace[:upto]`` window by window (one batch each without a look-ahead), opening a
    journal entry per batch as the training fetch does, then fetch ``ahead`` batches more."""
    served = []
    for start in range(0, upto + ahead, window):
        batch = [torch.from_numpy(t) for t in trace[start : start + window]]
        store.journal((0, start))
        if store.lookahead:
            store.plan(batch)
            store.prefetch()
        for index, ids in enumerate(batch, start):
            if index == upto + ahead:
                return served
            store.journal((0, index))
            served.append(store.gather(ids))
    return served


@pytest.mark.parametrize("name", ["fifo", "lru", "belady"])
@pytest.mark.parametrize("ahead", [1, 3])
def test_a_rewound_cache_is_the_cache_before_the_fetches_it_took_back(name, ahead):
    """journal/rewind: fetches made past a checkpoint (a prefetch thread's, or a look-ahead
    window whose head was served) are taken back; the cache then equals one that never made
    them (slots, rows, policy state), and a fresh cache given its state serves the rest of the
    trace as the uninterrupted one does. The checkpoint falls inside the window (batch 13)."""
    n, capacity, window = 200, 30, 4
    trace = random_trace(np.random.default_rng(8), n, 30, 40)
    straight, _ = make_store(name, n, capacity, trace, lookahead=window)
    expected = run_trace(straight, trace)
    upto = 13  # batches trained before the checkpoint
    rewound, _ = make_store(name, n, capacity, trace, lookahead=window)
    step = window if rewound.lookahead else 1
    served = _journalled_run(rewound, trace, step, upto, ahead)
    assert all(torch.equal(a, b) for a, b in zip(served, expected))
    restart = upto - upto % step  # a look-ahead store restarts at its window's start
    rewound.rewind((0, restart))
    before, _ = make_store(name, n, capacity, trace, lookahead=window)
    _journalled_run(before, trace, step, restart, 0)
    assert np.array_equal(rewound.core.index.id_of, before.core.index.id_of)
    assert torch.equal(rewound.rows, before.rows)
    state, reference = rewound.state_dict(), before.state_dict()
    assert state.keys() == reference.keys()
    assert all(torch.equal(state[k], reference[k]) for k in state)
    resumed, _ = make_store(name, n, capacity, trace, lookahead=window)
    resumed.load_state_dict(state)
    assert all(
        torch.equal(a, b) for a, b in zip(run_trace(resumed, trace[restart:]), expected[restart:])
    )


def test_a_rewind_past_what_the_cache_journal_kept_is_refused():
    n, capacity = 200, 30
    trace = random_trace(np.random.default_rng(8), n, 30, 40)
    store, _ = make_store("lru", n, capacity, trace)
    _journalled_run(store, trace, 1, 10, 0)
    with pytest.raises(AssertionError, match="were not all kept"):
        store.rewind((0, 2))


@pytest.mark.parametrize("name", ["degree", "presample", "fifo", "lru", "belady"])
@pytest.mark.parametrize("local_below", [None, 40])
def test_cached_store_returns_exact_rows_and_counts_exactly(name, local_below):
    n, capacity = 200, 30
    rng = np.random.default_rng(11)
    trace = random_trace(rng, n, 25, 60)  # repeats within a batch included
    store, fallback = make_store(name, n, capacity, trace, local_below=local_below)
    expected = simulate(
        policy_like(store, name, n, trace, capacity, local_below),
        n,
        capacity,
        [t[t >= (local_below or 0)] for t in trace],
    )
    fallback.calls.clear()
    outs = run_trace(store, trace)
    x = arange_features(n)
    for ids, out in zip(trace, outs):
        assert torch.equal(out, x[torch.from_numpy(ids)])  # never a wrong row
    assert store.reset_counters() == expected
    assert store.core.index.size <= capacity and store.rows.shape[0] == capacity
    # Every fallback call carries only misses and RAM-local rows; belady needs one per window.
    assert len(fallback.calls) == (-(-len(trace) // 4) if name == "belady" else len(trace))
    fetched_cacheable = sum(int((c >= (local_below or 0)).sum()) for c in fallback.calls)
    assert fetched_cacheable <= expected[1]


def policy_like(store, name, n, trace, capacity, local_below):
    """A fresh policy equal to the store's (for the reference simulation)."""
    if name in ("degree", "presample"):
        return StaticPolicy(name, store.policy.ids)
    return make_policy(name, num_nodes=n, lookahead=4)


@pytest.mark.parametrize("name", DYNAMIC)
def test_cache_rows_match_their_ids_after_any_trace(name):
    n = 120
    rng = np.random.default_rng(5)
    trace = random_trace(rng, n, 30, 40)
    store, _ = make_store(name, n, 17, trace)
    run_trace(store, trace)
    index = store.core.index
    occupied = np.flatnonzero(index.id_of >= 0)
    assert torch.equal(
        store.rows[torch.from_numpy(occupied)],
        arange_features(n)[torch.from_numpy(index.id_of[occupied])],
    )
    assert (index.slot_of[index.id_of[occupied]] == occupied).all()
    assert (index.slot_of >= 0).sum() == occupied.shape[0]


def test_read_only_view_never_admits_and_counts_apart():
    n = 100
    trace = [np.arange(0, 30), np.arange(20, 50)]
    store, _ = make_store("lru", n, 40, trace)
    run_trace(store, trace)
    before = store.core.index.cached_ids().copy()
    view = store.read_only_view(CountingStore(arange_features(n)))
    out = view.gather(torch.arange(0, 100))
    assert torch.equal(out, arange_features(n))
    assert np.array_equal(store.core.index.cached_ids(), before)
    assert view.reset_counters() == (100, 60)
    assert store.reset_counters() == (60, 50)


class SlowStore(CountingStore):
    """A :class:`CountingStore` whose every read takes 20 ms more (a slow fallback)."""

    def _gather(self, ids):
        time.sleep(0.02)
        return super()._gather(ids)

    def read_local_into(self, ids, out, positions):
        time.sleep(0.02)
        super().read_local_into(ids, out, positions)

    def local_pieces(self, ids, positions):
        time.sleep(0.02)
        return super().local_pieces(ids, positions)


@pytest.mark.parametrize("sparse", [False, True])
def test_the_caches_own_work_leaves_the_fallbacks_reads_out(sparse, monkeypatch):
    """``own_s``: the seconds ``gather`` spends on the cache's own work (what the plan prices per
    batch and row read), not in the fallback's reads: behind a fallback whose reads take 20 ms
    each (one a batch: the misses with the RAM-held rows), the cache's own work is a small part
    of the batches' time; served dense or as CSR (sparse batches, whose assembly from the
    pieces, 20 ms more here, a fetch without the cache does too: not the cache's own)."""
    if sparse:
        assemble = cache_store.sparse_batch

        def slow_assembly(*args):
            time.sleep(0.02)
            return assemble(*args)

        monkeypatch.setattr(cache_store, "sparse_batch", slow_assembly)
    n = 400
    rng = np.random.default_rng(0)
    x = rng.random((n, 16), dtype=np.float32) * (rng.random((n, 16)) < (0.05 if sparse else 1))
    trace = random_trace(rng, n, 20, 50)
    fallback = SlowStore(x, local_below=100, sparse=sparse)
    cacheable = ~fallback.local_mask(np.arange(n))
    scores = np.bincount(np.concatenate(trace), minlength=n)
    policy = make_policy("degree", num_nodes=n, static_ids=top_ids(scores, cacheable, 20))
    store = CachedFeatureStore(fallback, policy, 20)
    assert store.layout == ("csr" if sparse else "dense") and store.own_s == 0
    begin = time.perf_counter()
    for ids in trace:
        got = store.gather(torch.from_numpy(ids))
        dense = got.to_dense() if sparse else got
        assert torch.equal(dense, torch.from_numpy(x[ids]))
    wall = time.perf_counter() - begin
    slow = (2 if sparse else 1) * 0.02 * len(trace)  # one read a batch (and one assembly)
    assert 0 < store.own_s < wall - slow
    assert wall > slow > wall / 2
    assert store.reset_counters()[1] > 0  # some reads were misses


def test_disk_backed_features_are_read_on_demand_and_cached(tmp_path):
    x = np.random.default_rng(0).random((500, 8), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    local = LocalFeatureStore(mapped, row_divisor=row_sums(mapped, chunk_rows=64))
    assert local.on_disk and local._tensor is None  # nothing copied into RAM
    ids = torch.tensor([3, 499, 3, 0])
    expected = x[[3, 499, 3, 0]] / x[[3, 499, 3, 0]].sum(axis=1, keepdims=True)
    assert torch.allclose(local.gather(ids), torch.from_numpy(expected))
    # A cache over a disk-backed local store caches local rows too.
    store = CachedFeatureStore(local, LRUPolicy(), 10)
    assert store.cacheable(np.arange(5)).all()
    store.gather(ids)
    store.gather(ids)
    assert store.reset_counters() == (6, 3)
    # Straight into an output buffer, from the map and from RAM alike.
    out = torch.full((6, 8), -1.0)
    LocalFeatureStore(mapped).gather_into(torch.tensor([7, 7, 2]), out, np.array([5, 0, 3]))
    LocalFeatureStore(torch.from_numpy(x)).gather_into(torch.tensor([1]), out, np.array([1]))
    assert torch.equal(out[[5, 0, 3, 1]], torch.from_numpy(x[[7, 7, 2, 1]]))
    assert (out[[2, 4]] == -1).all()
    # In RAM, the same local store has nothing to cache.
    assert (
        not CachedFeatureStore(LocalFeatureStore(x), LRUPolicy(), 10).cacheable(np.arange(5)).any()
    )


def _sparse_rows(rows: int, width: int, density: float, seed: int = 0) -> np.ndarray:
    """Non-negative rows with about ``density`` of their entries non-zero, some rows all zero."""
    rng = np.random.default_rng(seed)
    x = rng.random((rows, width), dtype=np.float32) * (rng.random((rows, width)) < density)
    x[::7] = 0
    return x


def test_a_static_cache_of_mostly_zero_rows_holds_and_serves_their_non_zeros():
    """A static cache in front of rows gathered as sparse batches holds its rows as CSR (their
    non-zeros and each slot's offset) and serves the exact rows, fetching only its misses (in
    one gather a batch); its state restores into a dense cache and back, whichever form each
    holds. Rows that are not mostly zero stay dense."""
    x = _sparse_rows(400, 300, 0.04)
    capacity, local_below = 80, 100
    rng = np.random.default_rng(2)
    cached_ids = rng.choice(np.arange(local_below, 400), 60, replace=False)
    trace = random_trace(rng, 400, 50, 12)

    def cache(rows, sparse):
        fallback = CountingStore(rows, local_below=local_below, sparse=sparse)
        return CachedFeatureStore(fallback, StaticPolicy("degree", cached_ids), capacity), fallback

    held, fallback = cache(x, sparse=True)
    assert held.layout == "csr" and held.rows is None
    nonzeros = int(np.count_nonzero(x[cached_ids]))
    assert held.nbytes == nonzeros * 8 + (capacity + 1) * 8 < capacity * 300 * 4 / 10
    fallback.calls.clear()
    for ids in trace:
        rows = held.gather(torch.from_numpy(ids))
        assert rows.is_sparse and rows.is_coalesced()
        assert torch.equal(rows.to_dense(), torch.from_numpy(x[ids]))
        # one read a batch: each miss once, then the RAM-held rows as the batch has them
        misses = np.unique(ids[(ids >= local_below) & ~np.isin(ids, cached_ids)])
        plain = ids[ids < local_below]
        read = fallback.calls.pop(0).numpy()
        assert np.array_equal(read[misses.shape[0] :], plain)
        assert np.array_equal(np.sort(read[: misses.shape[0]]), misses)
    # a miss repeated in one batch is read once and placed at each of its occurrences
    uncached = np.setdiff1d(np.arange(local_below, 400), cached_ids)
    miss = int(uncached[x[uncached].any(axis=1)][0])
    ids = np.array([miss, 5, miss, cached_ids[0], miss, 5])
    assert torch.equal(held.gather(torch.from_numpy(ids)).to_dense(), torch.from_numpy(x[ids]))
    assert np.array_equal(fallback.calls.pop(0).numpy(), [miss, 5, 5])
    assert not fallback.calls
    dense, _ = cache(x, sparse=False)
    assert dense.layout == "dense"
    state = held.state_dict()
    assert "rows" not in state and state["rows.values"].shape == (nonzeros,)
    restored, _ = cache(np.zeros_like(x), sparse=False)  # a cold cache of other rows
    restored.load_state_dict(state)
    assert torch.equal(restored.rows, dense.rows)
    again, _ = cache(np.zeros_like(x), sparse=True)
    again.load_state_dict(dense.state_dict())
    assert again.layout == "csr" and all(
        np.array_equal(getattr(again.csr_rows, k), getattr(held.csr_rows, k))
        for k in ("indptr", "indices", "values")
    )
    with pytest.raises(ValueError, match="do not fit"):
        cache(x[:, :200], sparse=True)[0].load_state_dict(state)
    thick = _sparse_rows(400, 300, 0.5)
    dense_rows, _ = cache(thick, sparse=True)
    assert dense_rows.layout == "dense"
    ids = torch.from_numpy(trace[0])
    assert torch.equal(dense_rows.gather(ids).to_dense(), torch.from_numpy(thick[trace[0]]))


@pytest.mark.parametrize("norm", ["none", "row"])
def test_mostly_zero_rows_are_held_as_csr_and_gathered_bit_for_bit(tmp_path, norm):
    x = _sparse_rows(1000, 300, 0.04)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    dense = LocalFeatureStore(normalize_features(x, norm))
    store = rows_in_memory(mapped, norm, chunk_rows=96)  # chunks cut across rows' boundaries
    assert isinstance(store, SparseRowStore) and store.shape == (1000, 300)
    nonzeros = int(np.count_nonzero(x))
    assert store.nbytes == held_bytes([1000], 300, [nonzeros])[0] == nonzeros * 8 + 1001 * 8
    ids = torch.tensor([0, 999, 7, 7, 3, 512])
    assert torch.equal(store.gather(ids), dense.gather(ids))  # same values, bit for bit
    assert store.gather(torch.tensor([], dtype=torch.int64)).shape == (0, 300)
    # Into an output buffer at given positions: every listed row overwritten whole (zeros too),
    # every other left as it was.
    out = torch.full((5, 300), -1.0)
    store.gather_into(torch.tensor([7, 14, 3]), out, np.array([4, 0, 2]))
    assert torch.equal(out[[4, 0, 2]], dense.gather(torch.tensor([7, 14, 3])))
    assert (out[[1, 3]] == -1).all()
    with pytest.raises(IndexError):
        store.gather(torch.tensor([1000]))


@pytest.mark.parametrize("norm", ["none", "row"])
def test_sparse_batches_are_the_dense_rows_as_a_coalesced_sparse_tensor(tmp_path, norm):
    x = _sparse_rows(1000, 300, 0.04)  # every 7th row all zero
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    dense = LocalFeatureStore(normalize_features(x, norm))
    store = csr_rows(mapped, norm, chunk_rows=96, sparse_batches=True)
    ids = torch.tensor([0, 999, 7, 7, 3, 512, 14])  # repeats and empty rows
    rows = store.gather(ids)
    assert rows.layout == torch.sparse_coo and rows.is_coalesced() and rows.shape == (7, 300)
    assert torch.equal(rows.to_dense(), dense.gather(ids))  # same values, bit for bit
    # the invariants is_coalesced=True promises: entries unique and in row-major order
    indices = rows._indices()
    keys = indices[0] * 300 + indices[1]
    assert bool((keys[1:] > keys[:-1]).all()) and rows._nnz() == int((dense.gather(ids) != 0).sum())
    torch.sparse_coo_tensor(indices, rows._values(), rows.shape, check_invariants=True)
    empty = store.gather(torch.tensor([], dtype=torch.int64))
    assert empty.shape == (0, 300) and empty._nnz() == 0
    # a cache or a distributed store writes rows into its own buffer: dense there
    out = torch.zeros(2, 300)
    store.gather_into(torch.tensor([999, 3]), out, np.array([1, 0]))
    assert torch.equal(out, dense.gather(torch.tensor([3, 999])))


def test_dense_rows_as_csr_keeps_every_non_zero_in_row_order():
    """Rows received dense (or a cache's) become CSR: each row's non-zeros, columns ascending,
    as ``np.nonzero`` finds them (a -0.0 is a zero, a NaN is kept); no rows, no entries."""
    from shardgnn.store.feature import dense_rows_as_csr

    x = _sparse_rows(50, 40, 0.1, seed=3)
    x[2, 5], x[3, 6] = -0.0, np.nan
    indptr, indices, values = dense_rows_as_csr(x)
    row, col = np.nonzero(x)
    np.testing.assert_array_equal(np.diff(indptr), np.bincount(row, minlength=50))
    np.testing.assert_array_equal(indices, col)
    np.testing.assert_array_equal(values, x[row, col])
    assert indptr.dtype == np.int64 and indices.dtype == np.int32 and values.dtype == np.float32
    empty = dense_rows_as_csr(np.zeros((0, 4), np.float32))
    assert [a.tolist() for a in empty] == [[0], [], []]


def test_a_window_of_sparse_batch_rows_serves_each_batch_its_rows():
    """`--bulk-batches k` on sparse batch rows: the window's union is gathered once, sparse, and
    each batch served its rows from it (`WindowedRows`), coalesced, the dense rows bit for bit."""
    from shardgnn.loader.pipeline import WindowedRows

    x = _sparse_rows(1000, 300, 0.04)  # every 7th row all zero
    dense = LocalFeatureStore(x)
    window = WindowedRows(csr_rows(x, "none", sparse_batches=True), 3)
    batches = [torch.tensor([5, 0, 999, 7]), torch.tensor([7, 14, 3, 3]), torch.tensor([512])]
    window.plan(batches)
    window.prefetch()
    for ids in batches:
        rows = window.gather(ids)
        assert rows.layout == torch.sparse_coo and rows.is_coalesced() and rows.shape[0] == len(ids)
        assert torch.equal(rows.to_dense(), dense.gather(ids))


def test_a_packed_reply_carries_the_rows_as_their_owner_holds_them():
    """An owner's reply names its form: a CSR owner's is each row's non-zero count, columns and
    values (4 + 4 bytes a row + 8 a non-zero), a dense owner's the rows; both unpack to the
    requested rows bit for bit (repeats, all-zero rows, no rows). The plan prices a reply
    (``reply_bytes``) at exactly the message's bytes but its form word."""
    from shardgnn.store.dist_feature import pack_reply, reply_bytes, unpack_reply

    x = _sparse_rows(400, 300, 0.04)
    ids = torch.tensor([7, 3, 399, 3, 0, 14])  # repeats; rows 0, 7 and 14 all zero
    for store in (csr_rows(x, "none"), LocalFeatureStore(x)):
        message = pack_reply(store, ids)
        assert message.dtype == torch.int32 and message.dim() == 1
        nonzeros = int(np.count_nonzero(x[ids.numpy()]))
        priced = reply_bytes(300, len(ids), nonzeros, isinstance(store, SparseRowStore))
        assert 4 * message.shape[0] == priced + 4
        rows = unpack_reply(message, len(ids), 300)
        dense = torch.zeros(len(ids), 300)
        if isinstance(store, SparseRowStore):
            assert message.shape[0] == 1 + len(ids) + 2 * int(np.count_nonzero(x[ids.numpy()]))
            assert isinstance(rows, SparseRowStore)
            rows.gather_into(torch.arange(len(ids)), dense, np.arange(len(ids)))
        else:
            assert message.shape[0] == 1 + len(ids) * 300
            dense = rows
        assert torch.equal(dense, torch.from_numpy(x[ids.numpy()]))
        empty = unpack_reply(pack_reply(store, ids[:0]), 0, 300)
        assert empty.shape == (0, 300)
    with pytest.raises(IndexError):
        pack_reply(csr_rows(x, "none"), torch.tensor([400]))


@pytest.mark.parametrize("bits", [8, 2])
def test_a_coded_reply_quantises_a_csr_owners_non_zeros_alone(bits):
    """With ``--fetch-bits``, a CSR owner's reply carries its rows' columns and their values
    quantised on each row's own range: the zeros stay exact zeros (none sent), each value within
    a step of its row's range, in the bytes the plan prices (but the form word and the padding
    to whole words); a dense owner's reply carries the codec's rows. The rounding follows the
    codec's stream: the same seed packs the same message."""
    from shardgnn.distributed.codec import make_codec
    from shardgnn.store.dist_feature import pack_reply, reply_bytes, unpack_reply

    x = _sparse_rows(400, 300, 0.04) * np.linspace(0.5, 3, 300, dtype=np.float32)
    ids = torch.tensor([7, 3, 399, 3, 0, 14])
    want = torch.from_numpy(x[ids.numpy()])
    nonzeros = int(np.count_nonzero(want))
    for store in (csr_rows(x, "none"), LocalFeatureStore(x)):
        sparse = isinstance(store, SparseRowStore)
        message = pack_reply(store, ids, make_codec(bits, seed=5))
        assert torch.equal(message, pack_reply(store, ids, make_codec(bits, seed=5)))
        priced = int(reply_bytes(300, len(ids), nonzeros, sparse, bits))
        assert 0 <= 4 * message.shape[0] - 4 - priced <= 3
        rows = unpack_reply(message, len(ids), 300, make_codec(bits))
        if sparse:
            assert priced < reply_bytes(300, len(ids), nonzeros, sparse) < 300 * len(ids)
            got = torch.zeros(len(ids), 300)
            rows.gather_into(torch.arange(len(ids)), got, np.arange(len(ids)))
            assert torch.equal(got != 0, want != 0)  # the zeros exact, none sent
            hi = want.where(want != 0, -np.inf).amax(1)
            lo = want.where(want != 0, np.inf).amin(1)
        else:
            got, hi, lo = rows, want.amax(1), want.amin(1)
        # one step of the range rounded outwards to bfloat16 (values non-negative)
        span = hi * (1 + 2**-7) - lo * (1 - 2**-7)
        step = span.nan_to_num(0, 0, 0) / (2**bits - 1) + 1e-6
        assert torch.all((got - want).abs() <= step[:, None]), bits
        empty = unpack_reply(pack_reply(store, ids[:0], make_codec(bits)), 0, 300, make_codec(bits))
        assert empty.shape == (0, 300)


def test_rows_beyond_the_sparse_bound_or_read_whole_stay_dense():
    x = _sparse_rows(200, 50, 0.3)
    assert np.count_nonzero(x) > 0.1 * x.size
    held = rows_in_memory(x, "row")
    assert isinstance(held, LocalFeatureStore) and not held.on_disk
    assert np.array_equal(held.rows, normalize_features(x, "row"))
    assert held.nbytes == held_bytes([200], 50, [np.count_nonzero(x)])[0] == x.nbytes
    sparse = _sparse_rows(200, 50, 0.02)
    assert isinstance(rows_in_memory(sparse, "none"), SparseRowStore)
    assert isinstance(rows_in_memory(sparse, "none", allow_sparse=False), LocalFeatureStore)


# --------------------------------------------------------------------------- distributed
from shardgnn.graph.synthetic import SyntheticConfig, generate  # noqa: E402
from test_distributed import make_partitions  # noqa: E402

from distributed_helpers import run_workers  # noqa: E402


@pytest.fixture(scope="module")
def id_graph():
    import dataclasses

    g = generate(SyntheticConfig(nodes=3000, degree=12, classes=4, features=8, seed=4))
    # x[i] = i in every column: a fetched row names its node (the partition writer moves rows with
    # nodes).
    return dataclasses.replace(
        g, x=np.repeat(np.arange(g.num_nodes, dtype=np.float32)[:, None], 4, axis=1)
    )


def _replied_rows(ctx, path):
    """Rows gathered from owners that hold them as CSR (rank 0) and dense (rank 1), their replies
    dense and then as the owner holds them (``sparse_replies``): dense, sparse and through
    ``gather_into``; whether each equals the rows, and the bytes the dense gathers received each
    way."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.partition.format import reassemble
    from shardgnn.store.dist_feature import DistFeatureStore
    from shardgnn.store.dist_graph import DistGraphStore
    from shardgnn.store.feature import SparseRowStore, dense_rows_as_csr

    comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
    graph = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm)
    local = np.array(graph.part.x)
    csr = SparseRowStore(*dense_rows_as_csr(local), local.shape[1])
    held = csr if ctx.rank == 0 else LocalFeatureStore(local)
    full_x = torch.from_numpy(np.asarray(reassemble(path).x))
    ids = torch.from_numpy(np.random.default_rng(ctx.rank).integers(0, graph.num_nodes, 700))
    ids[:3] = ids[3]  # repeats
    equal, received = [], {}
    for replies in (False, True):
        comm.reset()
        store = DistFeatureStore(held, graph.book, ctx.rank, comm, "fetch", sparse_replies=replies)
        equal.append(torch.equal(store.gather(ids), full_x[ids]))
        out = torch.full((len(ids) + 5, full_x.shape[1]), -1.0)
        store.gather_into(ids, out, np.arange(5, len(ids) + 5))
        equal.append(torch.equal(out[5:], full_x[ids]) and bool((out[:5] == -1).all()))
        received[replies] = comm.reset()["fetch"].bytes_recv
        # sparse batches from this rank's CSR (rank 1 replies as CSR too here)
        sparse = DistFeatureStore(
            csr, graph.book, ctx.rank, comm, "fetch", sparse_batches=True, sparse_replies=replies
        )
        rows = sparse.gather(ids)
        equal.append(rows.is_sparse and torch.equal(rows.to_dense(), full_x[ids]))
    return {"equal": equal, "received": received}


@pytest.mark.slow
@pytest.mark.multiprocess
def test_owners_reply_with_rows_as_they_hold_them_bit_for_bit(tmp_path, id_graph):
    """With ``sparse_replies`` an owner of CSR rows sends their non-zeros and an owner of dense
    rows sends them dense, in one exchange: every gather (dense, into a buffer, sparse) is the
    rows bit for bit; the rank fetching from the CSR owner receives a fraction of the bytes,
    the other the dense rows' (and a form word a reply, and its size first)."""
    import dataclasses

    x = _sparse_rows(id_graph.num_nodes, 300, 0.04)
    path = make_partitions(tmp_path / "parts", dataclasses.replace(id_graph, x=x), 2)
    runs = run_workers(_replied_rows, 2, path)
    for res in runs:
        assert all(res["equal"]), res["equal"]
    from_csr, from_dense = runs[1]["received"], runs[0]["received"]
    assert from_csr[True] < 0.3 * from_csr[False]
    # 2 replies, a form word each; and their sizes, which dense replies do not send (the
    # requester knows them)
    assert from_dense[True] - from_dense[False] == 2 * 4 + 2 * 8


def _cached_fetch(ctx, path, name, capacity, lookahead, sparse=False):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.loader.dist_batches import DistSeedBatcher
    from shardgnn.loader.pipeline import FeatureFetcher, NeighborSamplingStage, count_accesses
    from shardgnn.partition.format import read_partitions, reassemble
    from shardgnn.sampling.dist_neighbor import DistNeighborSampler
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.store.dist_feature import DistFeatureStore
    from shardgnn.store.dist_graph import DistGraphStore

    comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
    graph = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm)
    from shardgnn.store.feature import SparseRowStore, dense_rows_as_csr

    local = np.array(graph.part.x)
    if sparse:  # held as CSR, batches gathered sparse
        local = SparseRowStore(*dense_rows_as_csr(local), local.shape[1])
    fetch = DistFeatureStore(local, graph.book, ctx.rank, comm, "fetch", sparse_batches=sparse)
    n = graph.num_nodes
    cacheable = ~fetch.local_mask(np.arange(n))
    batches = DistSeedBatcher(
        read_partitions(path, verify=False).global_split("train"),
        graph.book,
        ctx.rank,
        ctx.world_size,
        64,
        shuffle=True,
        seed=1,
    )
    stage = NeighborSamplingStage(
        batches, DistNeighborSampler(graph, SamplerConfig(fanouts=(6, 4)), comm), seed=ctx.rank
    )
    static = {
        "degree": lambda: top_ids(graph.degree, cacheable, capacity),
        "presample": lambda: top_ids(count_accesses(stage, n), cacheable, capacity),
    }
    static_ids = static[name]() if name in static else None
    store = CachedFeatureStore(
        fetch, make_policy(name, num_nodes=n, lookahead=lookahead, static_ids=static_ids), capacity
    )
    comm.reset()
    full_x = torch.from_numpy(np.asarray(reassemble(path).x))
    trace, wrong, max_size = [], 0, 0
    epochs = 3
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for batch in FeatureFetcher(stage, store, None):
            ids = batch.sample.input_nodes
            assert batch.x_SF.is_sparse == sparse
            x_SF = batch.x_SF.to_dense() if sparse else batch.x_SF
            wrong += int((x_SF != full_x[ids]).any())
            trace.append(ids.numpy()[cacheable[ids.numpy()]])
            max_size = max(max_size, store.core.index.size)
    return {
        "wrong": wrong,
        "trace": trace,
        "counters": store.reset_counters(),
        "max_size": max_size,
        "initial": None if static_ids is None else static_ids,
        "remote_in_degree": graph.degree,
        "cacheable": cacheable,
        "fetch_calls": comm.reset()["fetch"].calls,
        "batches": len(batches),
        "epochs": epochs,
        "layout": store.layout,
        "cached_nonzeros": 0 if static_ids is None else int(np.count_nonzero(full_x[static_ids])),
        "width": int(full_x.shape[1]),
    }


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "name, sparse",
    [*((name, False) for name in ["degree", "presample", "fifo", "lru", "belady"]),
     *((name, True) for name in ["presample", "lru", "belady"])],
)  # fmt: skip
def test_distributed_cache_is_exact_and_counts_match_the_trace(tmp_path, id_graph, name, sparse):
    """A cache in front of peers' rows serves the exact rows and counts what the reference
    simulation of its policy counts; in front of rows held as CSR (``sparse``) it serves them
    into sparse batches, the same rows and counts."""
    path = make_partitions(tmp_path / "parts", id_graph, 2)
    capacity, lookahead = 300, 2  # 3 batches per epoch: windows of 2 + 1, restarting each epoch
    runs = run_workers(_cached_fetch, 2, path, name, capacity, lookahead, sparse)
    for rank, res in enumerate(runs):
        assert res["wrong"] == 0
        assert res["max_size"] <= capacity
        # a static cache in front of sparse batches holds its rows' non-zeros where mostly zero
        # (these features are not: dense)
        mostly_zero = res["cached_nonzeros"] <= 0.1 * capacity * res["width"]
        assert res["layout"] == (
            "csr" if sparse and name == "presample" and mostly_zero else "dense"
        )
        n = res["cacheable"].shape[0]
        assert res["batches"] == 3
        reference = policy_for(name, n, res["initial"], lookahead)
        epoch_sizes = [res["batches"]] * res["epochs"]
        assert res["counters"] == simulate(
            reference, n, capacity, res["trace"], epoch_sizes=epoch_sizes
        ), rank
        if name == "degree":  # exactly the top in-degree remote nodes
            deg = np.where(res["cacheable"], res["remote_in_degree"], -1)
            assert sorted(deg[res["initial"]])[0] >= np.sort(deg)[-capacity]
            assert not (~res["cacheable"][res["initial"]]).any()
        # One feature exchange (ids out, rows back) per batch; belady: per window.
        windows = -(-res["batches"] // lookahead)
        assert res["fetch_calls"] == 2 * res["epochs"] * (
            windows if name == "belady" else res["batches"]
        )


@pytest.mark.slow
@pytest.mark.multiprocess
def test_training_on_features_held_as_csr_equals_training_on_them_mapped(tmp_path):
    """Mostly-zero features: each worker holds its rows as CSR (1/10 of the dense bytes here) and
    gathers its batches' rows as sparse tensors, its own and same-host peers' from their CSR,
    remote owners' received as their non-zeros; training on them is training on the dense rows
    read from the part files, up to the rounding of the first layer's sparse product, with
    layer-wise evaluation too (its first layer multiplying the CSR rows' non-zeros). A cache (of any
    kind: static, holding CSR rows; admitting or looking ahead, holding dense rows) serves its
    rows into the sparse batches: training as without one, bit for bit."""
    g = generate(SyntheticConfig(nodes=3000, degree=10, classes=4, features=64, seed=2))
    g.x = _sparse_rows(g.num_nodes, 64, 0.05, seed=4)
    path = make_partitions(tmp_path / "parts", g, 2)
    variants = [
        ("memory", {}, "memory"),  # the peer's rows travel through the collective
        ("memory-host", {}, "memory", "auto"),  # the peer's rows read here, from their CSR
        ("memory-lru", {"policy": "lru", "size": "25%"}, "memory"),
        ("memory-presample", {"policy": "presample", "size": "25%"}, "memory"),
        ("memory-belady", {"policy": "belady", "size": "25%", "lookahead": 4}, "memory"),
        ("disk", {}, "disk"),
        # full-neighbourhood evaluation, layer-wise: it reads the dense rows, made for its pass
        ("memory-layerwise", {}, "memory", "off", (-1, -1)),
        ("memory-lru-layerwise", {"policy": "lru", "size": "25%"}, "memory", "off", (-1, -1)),
    ]
    results = run_workers(_train_variants, 2, path, variants)[0]
    mapped = results["disk"]
    losses = [e["loss"] for e in mapped["epochs"]]
    cached = ("memory-lru", "memory-presample", "memory-belady", "memory-lru-layerwise")
    for label in ("memory", "memory-host", "memory-layerwise", *cached):
        held = results[label]
        assert held["cache"]["sparse_batch_workers"] == 2, label
        assert [e["loss"] for e in held["epochs"]] == pytest.approx(losses, abs=1e-5), label
        assert held["test_acc"] == pytest.approx(mapped["test_acc"], abs=0.01), label
    assert mapped["cache"]["sparse_batch_workers"] == 0
    for label in cached:  # the batches without a cache, bit for bit
        uncached = results["memory-layerwise" if "layerwise" in label else "memory"]
        assert [e["loss"] for e in results[label]["epochs"]] == [
            e["loss"] for e in uncached["epochs"]
        ], label
        assert results[label]["test_acc"] == uncached["test_acc"], label
        assert 0.0 < results[label]["cache"]["hit_rate"] <= 1.0, label
        # the static cache holds its rows' non-zeros, the others dense rows
        layout = "csr" if label == "memory-presample" else "dense"
        assert results[label]["cache"]["cache_layout"] == layout, label
    held = results["memory"]
    assert (
        held["cache"]["feature_layout"] == "csr" and mapped["cache"]["feature_layout"] == "mapped"
    )
    x = np.asarray(g.x)
    nonzeros, own_rows = int(np.count_nonzero(x)), g.num_nodes
    # both workers' CSR bytes: every non-zero once, every row's offset (and one more per worker)
    assert held["cache"]["feature_mb_per_worker"] == pytest.approx(
        (nonzeros * 8 + (own_rows + 2) * 8) / 2 / 1e6
    )
    assert held["cache"]["feature_mb_per_worker"] < x.nbytes / 2 / 1e6 / 5


def policy_for(name, n, initial, lookahead):
    if initial is not None:
        return StaticPolicy(name, initial)
    return make_policy(name, num_nodes=n, lookahead=lookahead)


def _train_variants(ctx, path, variants):
    from shardgnn.nn.models import ModelConfig
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig
    from shardgnn.train.worker import train_with_context

    out = {}
    for label, cache, storage, *rest in variants:
        host_sharing = rest[0] if rest else "off"
        eval_fanouts = rest[1] if len(rest) > 1 else None
        config = TrainConfig(
            eval_fanouts=eval_fanouts,
            model=ModelConfig(model="sage", hidden=16, num_layers=2),
            sampler=SamplerConfig(fanouts=(5, 5)),
            optim=OptimConfig(epochs=3, lr=0.01),
            batch_size=256,
            progress=False,
            seed=3,
            feature_norm="row",
            feature_storage=storage,
            cache=CacheConfig(**cache),
            # Both workers share this host; the caches front rows that cross processes (host
            # sharing off unless a variant names it).
            run=RunConfig(partitions=path, overlap="off", host_sharing=host_sharing),
        )
        out[label] = train_with_context(config, ctx)
    return out


@pytest.mark.slow
@pytest.mark.multiprocess
def test_training_with_any_cache_or_disk_storage_equals_training_without(tmp_path):
    g = generate(SyntheticConfig(nodes=4000, degree=10, classes=4, features=16, seed=2))
    path = make_partitions(tmp_path / "parts", g, 2)
    variants = [
        ("none", {}, "memory"),
        ("disk", {}, "disk"),
        *[
            (p, {"policy": p, "size": "25%", "lookahead": 4}, "memory")
            for p in ("degree", "presample", "fifo", "lru", "belady")
        ],
        ("disk-lru", {"policy": "lru", "size": "500"}, "disk"),
    ]
    results = run_workers(_train_variants, 2, path, variants)[0]
    base = results["none"]
    losses = [e["loss"] for e in base["epochs"]]
    for label, res in results.items():
        assert [e["loss"] for e in res["epochs"]] == losses, label  # the same rows, bit for bit
        assert res["test_acc"] == base["test_acc"]
        cache = res["cache"]
        requested = [e["cache"]["requested_mb"] for e in res["epochs"]]
        # the same batches, the same requests
        same_tier = results["disk" if label.startswith("disk") else "none"]
        assert requested == [e["cache"]["requested_mb"] for e in same_tier["epochs"]], label
        if label in ("none", "disk"):
            assert cache["hit_rate"] == 0.0 and cache["policy"] == "none"
        else:
            assert 0.0 < cache["hit_rate"] <= 1.0, label
            assert (
                cache["remote_feature_mb_per_epoch"] < base["cache"]["remote_feature_mb_per_epoch"]
            ), label
    # Disk storage requests every row (own rows come from disk too); memory only remote ones.
    assert (
        results["disk"]["cache"]["requested_mb_per_epoch"] > base["cache"]["requested_mb_per_epoch"]
    )
    assert results["belady"]["cache"]["hit_rate"] >= max(
        results[p]["cache"]["hit_rate"] for p in ("fifo", "lru")
    )
    assert (
        results["belady"]["cache"]["max_staged_mb"] > 0
        and "lookahead" in results["belady"]["epochs"][1]["stages"]
    )


# --------------------------------------------------------------------------- configuration
@pytest.mark.parametrize(
    "argv,match",
    [
        (["train", "cora", "--cache-policy", "lru"], "--workers 1"),
        (["train", "cora", "--feature-storage", "disk"], "--workers 1"),
    ],
)
def test_single_process_refuses_cache_flags(argv, match, capsys):
    from shardgnn.cli import main

    assert main(argv) != 0
    assert match in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, said",
    [
        (
            ["--cache-policy", "degree"],
            "--cache-policy degree: each worker here would read every row",
        ),
        (["--fetch-bits", "8"], "--fetch-bits 8: each worker here would read every feature row"),
    ],
)
def test_what_one_machine_sharing_rows_skips_is_refused_before_partitioning(
    tmp_path, capsys, flags, said
):
    """`--workers N` runs every worker here, each reading its peers' rows in place: a cache would
    hold nothing and `--fetch-bits` would round nothing (a run named 8-bit that sends none),
    which is said before the graph is partitioned (not by each worker after)."""
    from shardgnn.cli import main

    spec = "synthetic:nodes=400,degree=5,classes=3,features=4"
    argv = ["train", spec, "--workers", "2", *flags, "--log-dir"]
    assert main([*argv, str(tmp_path / "logs")]) == 2
    captured = capsys.readouterr()
    assert not captured.out  # nothing was partitioned
    assert captured.err.startswith(f"shardgnn train: error: {said} without communication")
    assert "--host-sharing off" in captured.err and not (tmp_path / "logs").exists()


def test_epoch_windows_restart_in_the_reference_simulation():
    class Recording(BeladyPolicy):
        windows: list[int] = []

        def plan(self, index, window):
            self.windows.append(len(window))
            return super().plan(index, window)

    trace = [np.array([i, i + 1]) for i in range(5)]
    policy = Recording(10, lookahead=2)
    simulate(policy, 10, 3, trace, epoch_sizes=[3, 2])
    assert policy.windows == [2, 1, 2]  # like the loader: a window never crosses an epoch


def test_config_refuses_cache_in_full_mode_and_disk_with_layerwise_eval():
    from shardgnn.train.config import RunConfig, TrainConfig

    workers = RunConfig(workers=2)
    with pytest.raises(ConfigError, match="mini-batch"):
        TrainConfig(mode="full", cache=CacheConfig(policy="lru"), run=workers)
    with pytest.raises(ConfigError, match="eval-fanouts"):
        TrainConfig(feature_storage="disk", eval_fanouts=(-1, -1, -1), run=workers)
    with pytest.raises(ConfigError, match="^--feature-storage ssd: choose one of memory, disk$"):
        TrainConfig(feature_storage="ssd")


def test_plot_draws_hit_rate_per_policy(tmp_path):
    import json

    from shardgnn.cli.plot import plot_training_curves

    def results(policy, rates):
        epochs = [
            {
                "epoch": i + 1,
                "loss": 1.0,
                "train_acc": 0.5,
                "val_acc": 0.5,
                "time_s": 1.0,
                "stages": {},
                "cache": {
                    "hit_rate": r,
                    "requested_mb": 10.0,
                    "missed_mb": 10 * (1 - r),
                    "remote_feature_mb": 10 * (1 - r),
                },
            }
            for i, r in enumerate(rates)
        ]
        path = tmp_path / f"{policy}.json"
        path.write_text(
            json.dumps({"epochs": epochs, "config": {"cache": {"policy": policy, "size": "20%"}}})
        )
        return path

    files = [results("lru", [0.1, 0.5, 0.52]), results("belady", [0.2, 0.7, 0.71])]
    written = plot_training_curves(files, tmp_path / "plots")
    assert (tmp_path / "plots" / "cache_hit_rate.png") in written
    assert (tmp_path / "plots" / "cache_hit_rate.png").stat().st_size > 1000
    # A distributed run without a cache reports remote bytes per epoch too, but gets no cache plot.
    assert plot_training_curves([results("none", [0.0, 0.0])], tmp_path / "other") == [
        tmp_path / "other" / "training_curves.png"
    ]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_one_worker_in_memory_has_nothing_to_cache(tmp_path):
    from shardgnn.distributed.launch import WorkerFailedError

    g = generate(SyntheticConfig(nodes=500, degree=6, classes=3, features=4, seed=1))
    path = make_partitions(tmp_path / "p1", g, 1, method="random")
    with pytest.raises(WorkerFailedError, match="nothing to cache"):
        run_workers(_train_variants, 1, path, [("lru", {"policy": "lru", "size": "10%"}, "memory")])
    # With disk storage the same worker caches its own rows.
    res = run_workers(
        _train_variants, 1, path, [("disk-lru", {"policy": "lru", "size": "10%"}, "disk")]
    )[0]
    assert (
        res["disk-lru"]["cache"]["capacity_rows"] == 50 and res["disk-lru"]["cache"]["hit_rate"] > 0
    )


def _smaps_fields(path, key: str) -> list[list[str]]:
    """The ``key:`` fields (split) of this process's mappings of ``path`` (/proc/self/smaps)."""
    fields, current = [], None
    for line in open("/proc/self/smaps").read().splitlines():
        if line[:1].isdigit() or line[:1] in "abcdef":  # a mapping's header line
            current = line.split()[-1] if len(line.split()) >= 6 else None
        elif line.startswith(key + ":") and current == str(path):
            fields.append(line.split(":", 1)[1].split())
    return fields


def _vm_flags(path) -> list[list[str]]:
    """The VmFlags of this process's mappings of ``path``."""
    return _smaps_fields(path, "VmFlags")


def _resident_kb(path) -> int:
    """The resident KB of this process's mappings of ``path``."""
    return sum(int(fields[0]) for fields in _smaps_fields(path, "Rss"))


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux /proc only")
@pytest.mark.parametrize("density", [0.02, 0.5])  # held as CSR, held dense
def test_reading_a_part_file_into_ram_leaves_none_of_its_pages_resident(tmp_path, density):
    """Reading a mapped part file's rows into RAM touches every page of it; they are dropped
    from the process's memory after (on coauthor-physics 570 MB per worker stayed counted)."""
    x = _sparse_rows(4096, 1024, density)  # 16 MB
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert int(np.count_nonzero(mapped)) and _resident_kb(tmp_path / "x.npy") > 8000  # touched
    store = rows_in_memory(mapped, "none")
    assert _resident_kb(tmp_path / "x.npy") < 1000
    assert torch.equal(store.gather(torch.tensor([5, 4095])), torch.from_numpy(x[[5, 4095]]))


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux /proc only")
def test_a_disk_backed_store_tells_the_kernel_its_reads_are_random(tmp_path):
    """Without read-ahead a batch's scattered row reads pull in only their own pages (the
    mapping carries the kernel's random-read flag ``rr``); rows in RAM are left alone."""
    np.save(tmp_path / "x.npy", np.ones((4096, 256), np.float32))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert not any("rr" in f for f in _vm_flags(tmp_path / "x.npy"))
    store = LocalFeatureStore(mapped)
    assert [f for f in _vm_flags(tmp_path / "x.npy") if "rr" in f]
    assert torch.equal(store.gather(torch.tensor([7, 4000])), torch.ones(2, 256))
    assert not advise_random(np.ones((3, 2), np.float32))
