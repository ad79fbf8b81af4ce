"""The cached feature store: a cache in front of any :class:`FeatureStore`, behind the same
interface.

Rows that change (learnable rows, stepped by their owners) are cached with a bound on their age
(HET's bounded staleness, ``max_age = s``): every slot carries the step its row was fetched at,
the store's clock counts the training steps (:meth:`CachedFeatureStore.tick`, called after each
step's update), and a cached row older than ``s`` steps is fetched again (into its slot) before
it serves a read. An owner updates a row at most once per step, so a row served at age ``<= s``
has missed at most ``s`` of its owner's updates: the bound holds without any message from the
owner. ``s = 0`` serves only rows fetched in the current step: reads equal uncached reads.
"""

from __future__ import annotations

import copy
import time
import typing

import numpy as np
import torch

from shardgnn.graph.features import stored_sparse
from shardgnn.journal import Journal
from shardgnn.store.cache.core import CacheCore, distinct_in_order
from shardgnn.store.cache.policies import BeladyPolicy, CachePolicy, StaticPolicy
from shardgnn.store.feature import (
    FeatureStore,
    LocalFeatureStore,
    SparseRowStore,
    copy_rows,
    dense_rows_as_csr,
    pieces_also_at,
    sparse_batch,
)


class _Split(typing.NamedTuple):
    """One batch's ids split for the cache: positions of cacheable and plain (RAM-local) ids, and
    the cacheable ids' distinct values with ``distinct[inverse]`` = them and first occurrences."""

    where_c: np.ndarray
    where_plain: np.ndarray
    distinct: np.ndarray
    inverse: np.ndarray
    first: np.ndarray


class _Snapshot(typing.NamedTuple):
    """The cache as it stood at a journal entry: index, the slots' fetch steps, policy state.
    Not the step clock: it counts training steps, which a rewind does not take back."""

    id_of: np.ndarray
    fetched_at: np.ndarray
    policy: dict[str, np.ndarray]


class CachedFeatureStore(FeatureStore):
    """A cache in front of ``fallback`` (same interface; ``gather`` is collective exactly when
    the fallback's is: one fallback ``gather`` per call, or per look-ahead window for belady).

    In front of a store of :attr:`~FeatureStore.sparse_batches` (mostly-zero rows held as CSR),
    ``gather`` returns a sparse batch too. A static cache (``degree``, ``presample``; rows that
    never change) then holds its rows as CSR (:attr:`csr_rows`: 2.6 MB for a quarter of
    coauthor-physics instead of 290 MB), loaded and served as their non-zeros, and its misses
    arrive with the rows held in RAM as the fallback's pieces of the batch, in one read
    (:meth:`~FeatureStore.gather_pieces`). A cache that admits rows holds them dense
    (:attr:`rows`, overwritten in place); its cacheable rows (hits and misses) are assembled
    dense in a block of their own and kept by their non-zeros. The local rows come from their
    CSR.

    Fetches made ahead of a checkpoint can be taken back (:meth:`journal`, :meth:`rewind`): the
    batches a prefetch thread fetched past the last trained one, and a look-ahead window whose
    head was trained (a resumed run fetches the window again from its start).

    Args:
        fallback: the store the rows come from (e.g. :class:`DistFeatureStore`).
        policy: the admission/eviction rule.
        capacity: rows held at most.
        fill_from: the store static content is loaded from (default ``fallback``; a distributed
            store under another communication stage keeps set-up bytes apart from fetch bytes).
        max_age: rows that change: a cached row serves reads for at most this many steps after
            it was fetched (:meth:`tick` counts steps); None: rows never change (features).
    """

    def __init__(
        self,
        fallback: FeatureStore,
        policy: CachePolicy,
        capacity: int,
        fill_from: FeatureStore | None = None,
        max_age: int | None = None,
    ):
        assert max_age is None or (max_age >= 0 and not isinstance(policy, BeladyPolicy)), (
            "a look-ahead window fetches rows steps before they are read"
        )
        self.fallback, self.policy = fallback, policy
        self.capacity = int(min(capacity, fallback.shape[0]))
        self.core = CacheCore(policy, fallback.shape[0], self.capacity)
        self._load_rows(fill_from or fallback, max_age)
        self._staged_ids = np.zeros(0, dtype=np.int64)
        self._staged_rows: torch.Tensor | None = None
        self._window: list[_Split] = []
        self.max_staged_rows = 0
        self.readonly = False
        self._marks = np.full(fallback.shape[0], -1, dtype=np.int64)  # scratch of distinct_in_order
        # Bounded staleness: the step each slot's row was fetched at, and the current step.
        self.max_age, self.clock = max_age, 0
        self.fetched_at = np.zeros(self.capacity, dtype=np.int64)
        self.refreshed = 0  # rows fetched again because they were too old
        self.served_ages = np.zeros(0 if max_age is None else max_age + 1, dtype=np.int64)
        # the cached rows each fetch overwrote, as (slots, rows before)
        self._journal: Journal[np.ndarray, torch.Tensor] = Journal()
        self.own_s = 0.0
        """seconds ``gather`` spent on the cache's own work: splitting and looking the ids up,
        copying hits and admitted rows (the plan prices it per batch and per row read:
        :func:`~shardgnn.fullgraph.rates.measure_dist_sampling`); not the fallback's reads, nor
        a sparse batch's assembly from its pieces, which a fetch without the cache does alike"""

    def _load_rows(self, fill: FeatureStore, max_age: int | None) -> None:
        """Allocate the rows held: dense (``rows``) or, static and mostly zero in front of sparse
        batches, as CSR (``csr_rows``); static content is loaded once, from ``fill`` (a collective
        gather when it is distributed), into the first slots."""
        self.rows: torch.Tensor | None = None
        self.csr_rows: SparseRowStore | None = None
        if not isinstance(self.policy, StaticPolicy):
            self.rows = torch.zeros((self.capacity, *self.shape[1:]), dtype=self.dtype)
            return
        initial = self.policy.initial_ids()[: self.capacity]
        slots = self.core.preload(initial)  # the first slots, in order
        if max_age is not None or not fill.sparse_batches:
            self.rows = torch.zeros((self.capacity, *self.shape[1:]), dtype=self.dtype)
            self.rows[slots] = fill.gather_dense(torch.from_numpy(initial))
            return
        # the rows' non-zeros, never dense; the slots past them empty
        fetched = SparseRowStore.of_batch(fill.gather(torch.from_numpy(initial)))
        empty = np.full(self.capacity - initial.shape[0], fetched.indptr[-1])
        indptr = np.concatenate([fetched.indptr, empty])
        held = SparseRowStore(indptr, fetched.indices, fetched.values, self.shape[1])
        if stored_sparse(held.indices.shape[0], self.capacity * self.shape[1]):
            self.csr_rows = held
        else:  # not mostly zero after all (e.g. rounded rows): dense, as a row takes less
            self.rows = torch.zeros((self.capacity, self.shape[1]), dtype=self.dtype)
            held.gather_into(torch.arange(self.capacity), self.rows, np.arange(self.capacity))

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
    def nbytes(self) -> int:
        """The bytes of the rows held (all ``capacity`` slots)."""
        if self.csr_rows is not None:
            return self.csr_rows.nbytes
        return self.rows.numel() * self.rows.element_size()

    @property
    def layout(self) -> str:
        """How the rows are held: ``csr`` or ``dense``."""
        return "dense" if self.csr_rows is None else "csr"

    @property
    def sparse_batches(self) -> bool:
        return self.fallback.sparse_batches

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
        view._journal = Journal()
        view._marks = np.full_like(self._marks, -1)
        return view

    def _split(self, ids_np: np.ndarray) -> "_Split":
        cacheable = self.cacheable(ids_np)
        where_c = np.flatnonzero(cacheable)
        return _Split(
            where_c, np.flatnonzero(~cacheable), *distinct_in_order(ids_np[where_c], self._marks)
        )

    def _not_own(self, work, *args):
        """``work(*args)``: one of the fallback's reads, or work a fetch without the cache does
        alike (a sparse batch's assembly); its seconds kept out of :attr:`own_s`."""
        begin = time.perf_counter()
        try:
            return work(*args)
        finally:
            self.own_s -= time.perf_counter() - begin

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        begin = time.perf_counter()
        try:
            return self._assemble(ids)
        finally:
            self.own_s += time.perf_counter() - begin

    def _assemble(self, ids: torch.Tensor) -> torch.Tensor:
        """``gather``'s rows: hits from the cached rows, misses from the fallback."""
        ids_np = ids.numpy()
        planned = bool(self._window)
        # A planned batch was split by the inspector already.
        where_c, where_plain, distinct, inverse, first = (
            self._window.pop(0) if planned else self._split(ids_np)
        )
        assert where_c.shape[0] + where_plain.shape[0] == ids_np.shape[0] and np.array_equal(
            ids_np[where_c[first]], distinct
        ), "gather called with ids other than the planned batch"
        # Where each cacheable occurrence goes: its output row (dense batches), or its row of a
        # block of the cacheable rows alone (sparse batches: the local rows stay CSR).
        sparse = self.sparse_batches
        dst_c = np.arange(where_c.shape[0]) if sparse else where_c
        slots, admit_pos, targets = self.core.access(distinct, admit=not self.readonly)
        if self.csr_rows is not None and sparse:
            return self._gather_csr(ids_np, where_c, where_plain, distinct, inverse, first, slots)
        refresh = self._too_old(slots)
        if refresh.shape[0]:
            # Too old to serve: fetched again with the misses, then written back to its slot.
            refresh_slots = slots[refresh].copy()
            slots = slots.copy()
            slots[refresh] = -1
        missing = np.flatnonzero(slots < 0)
        hit_occ = slots[inverse] >= 0  # per cacheable occurrence
        out_rows = where_c.shape[0] if sparse else ids_np.shape[0]
        out = torch.empty((out_rows, *self.shape[1:]), dtype=self.dtype)
        if self.csr_rows is not None:
            self.csr_rows.gather_into(
                torch.from_numpy(slots[inverse[hit_occ]]), out, dst_c[hit_occ]
            )
        else:
            copy_rows(out, dst_c[hit_occ], self.rows, slots[inverse[hit_occ]])
        # Every distinct id's first output position: misses are written there, repeats copied.
        first_occ = dst_c[first]
        miss_first = first_occ[missing]
        if planned:
            # Misses come from the window's staged rows; no collective per batch.
            at = np.searchsorted(self._staged_ids, distinct[missing])
            assert (self._staged_ids[at] == distinct[missing]).all(), (
                "a planned miss was not staged"
            )
            copy_rows(out, miss_first, self._staged_rows, at)
            if not self._window:
                self._staged_ids, self._staged_rows = np.zeros(0, dtype=np.int64), None
        elif sparse:
            # One fallback gather (collective when distributed), straight into the output.
            self._not_own(
                self.fallback.gather_into, torch.from_numpy(distinct[missing]), out, miss_first
            )
        else:
            # The same gather reads the rows this process holds in RAM (never cached) with the
            # misses: one pass over the ids bucketing them by owner, where two would read each.
            self._not_own(
                self.fallback.gather_into,
                torch.from_numpy(np.concatenate([distinct[missing], ids_np[where_plain]])),
                out,
                np.concatenate([miss_first, where_plain]),
            )
        repeats = ~hit_occ & (dst_c != first_occ[inverse])
        copy_rows(out, dst_c[repeats], out, first_occ[inverse[repeats]])
        if planned and not sparse:
            # Rows this process holds in RAM are copied directly, never cached.
            self._not_own(self.fallback.read_local_into, ids_np[where_plain], out, where_plain)
        if admit_pos.shape[0]:
            self._journal_write(targets)
            copy_rows(self.rows, targets, out, first_occ[admit_pos])
            self.fetched_at[targets] = self.clock
        if refresh.shape[0]:
            self._journal_write(refresh_slots)
            copy_rows(self.rows, refresh_slots, out, first_occ[refresh])
            self.fetched_at[refresh_slots] = self.clock
        if sparse:
            cached = (*dense_rows_as_csr(out.numpy()), dst_c, where_c)
            local = self._not_own(self.fallback.local_pieces, ids_np[where_plain], where_plain)
            return self._not_own(
                sparse_batch, ids_np.shape[0], int(self.shape[1]), [cached, *local]
            )
        return out

    def _gather_csr(
        self,
        ids_np: np.ndarray,
        where_c: np.ndarray,
        where_plain: np.ndarray,
        distinct: np.ndarray,
        inverse: np.ndarray,
        first: np.ndarray,
        slots: np.ndarray,
    ) -> torch.Tensor:
        """A sparse batch from a CSR cache: hits from its non-zeros, misses and the rows this
        process holds in RAM from one read of the fallback (collective when distributed) as
        their non-zeros, each placed once into the batch; no row is made dense. A static cache
        admits nothing and its rows never age."""
        slot_of_occ = slots[inverse]  # per cacheable occurrence
        hit_occ = slot_of_occ >= 0
        pieces = self.csr_rows.local_pieces(slot_of_occ[hit_occ], where_c[hit_occ])
        missing = np.flatnonzero(slots < 0)
        read = np.concatenate([distinct[missing], ids_np[where_plain]])
        if read.shape[0] or self.collective:
            # each distinct miss read once, for its first occurrence, then placed at its repeats
            first_at = where_c[first]
            at = np.concatenate([first_at[missing], where_plain])
            fetched = self._not_own(self.fallback.gather_pieces, read, at)
            repeats = ~hit_occ & (where_c != first_at[inverse])
            pieces += pieces_also_at(
                fetched, ids_np.shape[0], first_at[inverse[repeats]], where_c[repeats]
            )
        return self._not_own(sparse_batch, ids_np.shape[0], int(self.shape[1]), pieces)

    # -------------------------------------------------------------- bounded staleness
    def _too_old(self, slots: np.ndarray) -> np.ndarray:
        """Positions of cached rows older than ``max_age`` steps (none for rows that never
        change); records the age of every cached row served."""
        if self.max_age is None:
            return np.zeros(0, dtype=np.int64)
        hit = np.flatnonzero(slots >= 0)
        age = self.clock - self.fetched_at[slots[hit]]
        old = age > self.max_age
        self.served_ages += np.bincount(age[~old], minlength=self.max_age + 1)
        self.refreshed += int(old.sum())
        self.core.missed += int(old.sum())  # fetched like a miss
        return hit[old]

    def tick(self) -> None:
        """One training step's update happened: every cached row is one step older."""
        self.clock += 1

    # -------------------------------------------------------------- journal
    def journal(self, tag: typing.Any) -> None:
        """Keep the cache as it stands, and the rows the fetches from now on overwrite, under
        ``tag`` (comparable with ``<``, e.g. ``(epoch, batch)``) until the next entry. Inside a
        planned window, or under the tag of the latest entry, nothing: its batches belong to
        the entry it started under."""
        if self._window or self.readonly:
            return
        # policy.state_dict() is a copy already
        snapshot = _Snapshot(
            self.core.index.id_of.copy(), self.fetched_at.copy(), self.policy.state_dict()
        )
        self._journal.open(tag, snapshot)

    def _journal_write(self, slots: np.ndarray) -> None:
        if self._journal:
            self._journal.record(slots.copy(), self.rows[torch.from_numpy(slots)])

    def rewind(self, tag: typing.Any) -> None:
        """Put the cache back as it stood at the first entry tagged ``tag`` or later (nothing
        changes when there is none); a planned window is dropped. The journal is then empty."""

        def restore(slots: np.ndarray, before: torch.Tensor) -> None:
            self.rows[torch.from_numpy(slots)] = before

        snapshot = self._journal.rewind(tag, restore)
        if snapshot is not None:
            self.core.index.load(snapshot.id_of)
            self.fetched_at[:] = snapshot.fetched_at
            self.policy.load_state_dict(snapshot.policy)
        self._window = []
        self._staged_ids, self._staged_rows = np.zeros(0, dtype=np.int64), None

    # -------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, torch.Tensor]:
        """What a resumed run needs to read what this one would have read: the ids in each slot,
        their rows and fetch steps, the step clock and the policy's state (rows that change,
        ``max_age``, are served stale from here, so a cold cache would change the run)."""
        assert not self._window, "a look-ahead window is in flight"
        policy = {
            f"policy.{k}": torch.from_numpy(np.asarray(v))
            for k, v in self.policy.state_dict().items()
        }
        if self.csr_rows is None:
            rows = {"rows": self.rows.clone()}
        else:  # as held: the rows' non-zeros
            held = self.csr_rows
            rows = {
                f"rows.{name}": torch.from_numpy(getattr(held, name).copy())
                for name in ("indptr", "indices", "values")
            }
        return {
            "ids": torch.from_numpy(self.core.index.id_of.copy()),
            **rows,
            "fetched_at": torch.from_numpy(self.fetched_at.copy()),
            "clock": torch.tensor(self.clock),
            **policy,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict` (a cache of the same capacity and row shape; rows saved
        dense or as CSR, whichever this cache holds)."""
        if "rows" in state:
            saved = LocalFeatureStore(state["rows"])
        else:
            indptr, indices, values = (state[f"rows.{k}"] for k in ("indptr", "indices", "values"))
            # a CSR row is as wide as its last column says (at least this cache's width)
            width = max(self.shape[1], int(indices.max()) + 1 if indices.numel() else 0)
            saved = SparseRowStore(indptr.numpy(), indices.numpy(), values.numpy(), width)
        expected = (self.capacity, *self.shape[1:])
        if tuple(saved.shape) != expected:
            raise ValueError(f"cached rows {tuple(saved.shape)} do not fit this cache's {expected}")
        self.core.index.load(state["ids"].numpy().astype(np.int64))
        if self.rows is not None:
            saved.gather_into(torch.arange(self.capacity), self.rows, np.arange(self.capacity))
        elif isinstance(saved, SparseRowStore):
            self.csr_rows = saved
        else:
            self.csr_rows = SparseRowStore(*dense_rows_as_csr(saved.rows), self.shape[1])
        self.fetched_at[:] = state["fetched_at"].numpy()
        self.clock = int(state["clock"])
        prefix = "policy."
        self.policy.load_state_dict(
            {k[len(prefix) :]: v.numpy() for k, v in state.items() if k.startswith(prefix)}
        )

    # -------------------------------------------------------------- look-ahead (belady)
    def plan(self, window: list[torch.Tensor]) -> None:
        """The inspector: announce the next batches' ids (gathered next, in this order). Pure
        computation; :meth:`prefetch` then brings their misses in one exchange."""
        assert isinstance(self.policy, BeladyPolicy) and not self._window
        for ids in window:
            self.check_ids(ids)
        self._window = [self._split(ids.numpy()) for ids in window]
        misses = self.policy.plan(self.core.index, [split.distinct for split in self._window])
        self._to_fetch = (
            np.unique(np.concatenate(misses)) if misses else np.zeros(0, dtype=np.int64)
        )

    def prefetch(self) -> None:
        """Fetch every row the planned window misses (collective when the fallback's gather is)."""
        self._staged_ids = self._to_fetch
        self._staged_rows = self.fallback.gather_dense(torch.from_numpy(self._to_fetch))
        self.max_staged_rows = max(self.max_staged_rows, int(self._to_fetch.shape[0]))

    # -------------------------------------------------------------- counters
    def reset_counters(self) -> tuple[int, int]:
        """``(requested_rows, missed_rows)`` since the last reset."""
        out = (self.core.requested, self.core.missed)
        self.core.requested = self.core.missed = 0
        return out
