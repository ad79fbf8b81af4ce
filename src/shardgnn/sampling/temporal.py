"""Temporal neighbour sampling (TGL's parallel sampler over the T-CSR).

For each seed ``(v, t)``: the events in ``v``'s T-CSR row strictly before ``t`` are a prefix of
the row (one binary search); ``recent`` takes the ``k`` latest of them, most recent first (TGN,
PyG's ``LastNeighborLoader``), ``uniform`` draws ``k`` of them without replacement (TGAT).
Never an event at or after ``t``: a model trained on these neighbourhoods sees no future.
Multi-hop sampling (TGAT) continues from each sampled ``(neighbour, event time)``: the
neighbour's own neighbourhood before the interaction that reached it.

Uniform draws are counter-based per ``(node, seed time, seed)``, so they do not depend on the
rest of the batch or the thread count: the property a distributed sampler needs to be
bit-identical to this one.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.partition.book import bucket_by_owner, unbucket_segments
from shardgnn.sampling.kernels import KERNEL_LOCK, floyd_positions, relabel, splitmix64
from shardgnn.seeding import mix_seed

TEMPORAL_MODES = ("recent", "uniform")


@numba.njit(inline="always")
def _before(times, lo, hi, t):  # pragma: no cover - compiled
    """The first position in ``[lo, hi)`` whose time is ``>= t`` (row sorted by time)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if times[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(parallel=True, nogil=True, cache=True)
def temporal_counts(indptr, times, nodes, seed_times, fanout):  # pragma: no cover - compiled
    """Per seed: ``min(fanout, events before its time)`` (all of them at ``fanout < 0``)."""
    counts = np.empty(nodes.shape[0] + 1, dtype=np.int64)
    counts[0] = 0
    for i in numba.prange(nodes.shape[0]):
        v = nodes[i]
        c = _before(times, indptr[v], indptr[v + 1], seed_times[i]) - indptr[v]
        counts[i + 1] = c if fanout < 0 else min(fanout, c)
    return counts


@numba.njit(parallel=True, nogil=True, cache=True)
def temporal_fill(
    indptr, indices, times, eids, nodes, seed_times, time_bits, fanout, uniform, seed, offsets,
    out_nbr, out_time, out_eid, id_offset,
):  # pragma: no cover - compiled  # fmt: skip
    """Write seed ``i``'s sampled events into ``out_*[offsets[i]:offsets[i + 1]]``: the latest
    first (``recent``, and every event when the fanout covers them), or a uniform draw.
    ``nodes`` are T-CSR rows; a seed's random key uses its global id ``row + id_offset`` (a
    partition's owner passes its first id), so an owner draws what one process would."""
    useed = np.uint64(seed)
    for i in numba.prange(nodes.shape[0]):
        v = nodes[i]
        start = indptr[v]
        end = _before(times, start, indptr[v + 1], seed_times[i])
        lo, k = offsets[i], offsets[i + 1] - offsets[i]
        c = end - start
        if k == 0:
            continue
        if not uniform or k == c:
            for j in range(k):  # most recent first
                e = end - 1 - j
                out_nbr[lo + j] = indices[e]
                out_time[lo + j] = times[e]
                out_eid[lo + j] = eids[e]
            continue
        # the seed's own stream: its node and the bits of its time
        key = splitmix64(useed ^ splitmix64(np.uint64(v + id_offset)) ^ splitmix64(time_bits[i]))
        floyd_positions(key, c, k, out_eid, lo)  # out_eid holds them until mapped
        for j in range(k):
            e = start + out_eid[lo + j]
            out_nbr[lo + j] = indices[e]
            out_time[lo + j] = times[e]
            out_eid[lo + j] = eids[e]


@numba.njit(nogil=True, cache=True)
def recent_subgraph_kernel(
    indptr, indices, times, eids, nodes, seed_times, k, node_map, cursor, use_cursor
):  # pragma: no cover - compiled  # fmt: skip
    """One thread (a TGN batch is small: thread start-up would cost more): the ``k`` latest
    events before each of the (unique) seeds' times, relabelled by :func:`relabel`. Returns
    ``(n_id, nbr, dst, eid)``: global ids of the subgraph's nodes (seeds first, then new
    neighbours in order of appearance), and per event its neighbour's and its seed's local id
    and its event id. ``node_map`` is ``-1`` everywhere on entry and on return.

    ``use_cursor`` (queries in time order, as a chronological stream makes them):
    ``cursor[v]`` is the first position of ``v``'s row at or after the last query time, and
    moves forward past the events before this one (TGL's pointers): over a stream every event
    is passed once, and a query reads a few cells instead of binary-searching its row."""
    n = nodes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        v = nodes[i]
        if use_cursor:
            end, stop = cursor[v], indptr[v + 1]
            while end < stop and times[end] < seed_times[i]:
                end += 1
            cursor[v] = end
        else:
            end = _before(times, indptr[v], indptr[v + 1], seed_times[i])
        ends[i] = end
        c = end - indptr[v]
        offsets[i + 1] = offsets[i] + (c if k < 0 else min(k, c))
    total = offsets[n]
    nbr = np.empty(total, dtype=np.int64)
    dst = np.empty(total, dtype=np.int64)
    out_eid = np.empty(total, dtype=np.int64)
    for i in range(n):
        lo = offsets[i]
        for j in range(offsets[i + 1] - lo):
            e = ends[i] - 1 - j  # latest first
            nbr[lo + j] = indices[e]
            dst[lo + j] = i
            out_eid[lo + j] = eids[e]
    n_id, local_nbr = relabel(nodes, nbr, node_map)
    return n_id, local_nbr, dst, out_eid


@dataclasses.dataclass(frozen=True)
class TemporalHop:
    """One hop of temporal sampling: seed ``i`` = ``(dst_nodes[i], dst_times[i])`` got the
    events ``offsets[i]:offsets[i + 1]`` of ``nbr`` (the other endpoint), ``nbr_times`` (the
    event's time, before ``dst_times[i]``) and ``eids`` (event ids: their features)."""

    dst_nodes: np.ndarray
    dst_times: np.ndarray
    offsets: np.ndarray
    nbr: np.ndarray
    nbr_times: np.ndarray
    eids: np.ndarray

    @property
    def num_events(self) -> int:
        return int(self.nbr.shape[0])


def sample_temporal_neighbors(
    graph: TemporalGraph,
    nodes: np.ndarray,
    seed_times: np.ndarray,
    fanout: int,
    mode: str = "recent",
    seed: int = 0,
) -> TemporalHop:
    """One hop for seeds ``(nodes[i], seed_times[i])``: up to ``fanout`` events strictly before
    each seed's time (``-1``: all of them)."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    seed_times = np.ascontiguousarray(seed_times, dtype=np.float64)
    offsets, nbr, when, eid = temporal_hop(
        graph.indptr, graph.indices, graph.times, graph.eids, nodes, seed_times, fanout, mode,
        seed,
    )  # fmt: skip
    return TemporalHop(nodes, seed_times, offsets, nbr, when, eid)


def temporal_hop(
    indptr, indices, times, eids, rows, seed_times, fanout, mode, seed, id_offset=0
) -> tuple[np.ndarray, ...]:
    """The kernel every temporal sampler shares, one process or per owner: ``(offsets, nbr,
    event times, event ids)`` of seeds at T-CSR ``rows`` (global id ``row + id_offset``)."""
    if mode not in TEMPORAL_MODES:
        raise ConfigError(f"temporal sampling mode {mode!r} is not one of {TEMPORAL_MODES}")
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    seed_times = np.ascontiguousarray(seed_times, dtype=np.float64)
    if rows.shape != seed_times.shape:
        raise ConfigError("every seed node needs one seed time")
    with KERNEL_LOCK:
        offsets = np.cumsum(temporal_counts(indptr, times, rows, seed_times, fanout))
        total = int(offsets[-1])
        nbr = np.empty(total, dtype=np.int64)
        when = np.empty(total, dtype=np.float64)
        eid = np.empty(total, dtype=np.int64)
        temporal_fill(
            indptr, indices, times, eids, rows, seed_times, seed_times.view(np.uint64),
            np.int64(fanout), mode == "uniform", np.uint64(seed), offsets, nbr, when, eid,
            np.int64(id_offset),
        )  # fmt: skip
    return offsets, nbr, when, eid


def dist_temporal_hop(
    store,
    comm,
    nodes: np.ndarray,
    seed_times: np.ndarray,
    fanout: int,
    mode: str = "recent",
    seed: int = 0,
    stage: str = "sample",
) -> TemporalHop:
    """:func:`sample_temporal_neighbors` over a temporal partition (``store``: its
    :class:`~shardgnn.store.dist_graph.DistGraphStore`): each seed's events are drawn by its
    node's owner over one all-to-all of requests and two of replies (a collective: every rank
    calls it, possibly with no seeds). The owner draws with the seed's own key (global id,
    time, ``seed``), so the hop equals one process's on the reassembled graph."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    seed_times = np.ascontiguousarray(seed_times, dtype=np.float64)
    world, part = comm.world_size, store.part
    order, counts = bucket_by_owner(nodes, store.owner(nodes), world)
    bounds = np.cumsum(counts)[:-1]
    # a request row: (node, time bits); replies: per-seed counts, then (nbr, time bits, eid)
    requests = [
        torch.from_numpy(np.stack([nodes[rows], seed_times[rows].view(np.int64)], axis=1))
        for rows in np.split(order, bounds)
    ]
    incoming = comm.all_to_all(requests, stage)
    reply_counts, reply_rows = [], []
    for request in incoming:
        pairs = request.numpy().reshape(-1, 2)
        offsets, nbr, when, eid = temporal_hop(
            store.indptr, part.indices, part.edge_arrays["times"], part.edge_arrays["eids"],
            pairs[:, 0] - part.start, pairs[:, 1].view(np.float64), fanout, mode, seed,
            id_offset=part.start,
        )  # fmt: skip
        reply_counts.append(torch.from_numpy(np.diff(offsets)))
        reply_rows.append(torch.from_numpy(np.stack([nbr, when.view(np.int64), eid], axis=1)))
    got_counts = comm.all_to_all(reply_counts, stage, recv_counts=counts.tolist())
    got_rows = comm.all_to_all(reply_rows, stage)
    per_seed = torch.cat(got_counts).numpy() if nodes.size else np.zeros(0, np.int64)
    rows = torch.cat(got_rows).numpy().reshape(-1, 3) if nodes.size else np.zeros((0, 3), np.int64)
    # replies arrive grouped by owner: put every seed's segment back at its position
    offsets, gather = unbucket_segments(order, per_seed)
    rows = rows[gather]
    return TemporalHop(
        nodes, seed_times, offsets, rows[:, 0].copy(), rows[:, 1].view(np.float64).copy(),
        rows[:, 2].copy(),
    )  # fmt: skip


class TemporalNeighborSampler:
    """Multi-hop temporal sampling: hop ``l`` samples ``fanouts[l]`` events before each seed of
    hop ``l - 1``'s ``(neighbour, event time)`` pairs (the first hop: the batch's seeds).

    Not thread-safe (:meth:`recent_subgraph` reuses an O(N) scratch map)."""

    def __init__(self, graph: TemporalGraph, fanouts: list[int], mode: str = "recent"):
        if not fanouts or any(f == 0 or f < -1 for f in fanouts):
            raise ConfigError(f"temporal fanouts {fanouts}: one count >= 1 (or -1) per hop")
        if mode not in TEMPORAL_MODES:
            raise ConfigError(f"temporal sampling mode {mode!r} is not one of {TEMPORAL_MODES}")
        self.graph, self.fanouts, self.mode = graph, list(fanouts), mode
        self._node_map: np.ndarray | None = None  # O(N) relabelling scratch, made on first use

    def restart_stream(self) -> None:
        """A new pass over the events from the start: :meth:`recent_subgraph`'s cursors go back
        to the rows' starts (else every query of the new pass, earlier than the last one, would
        binary-search)."""
        if self._node_map is not None:
            self._cursor = self.graph.indptr[:-1].copy()
            self._last_time = -np.inf

    def recent_subgraph(
        self, nodes: np.ndarray, seed_times: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """TGN's one-hop neighbourhood of a batch of unique seeds: the first hop's
        ``fanouts[0]`` latest events before each seed's time, relabelled in one call:
        ``(n_id, edge_index [2, E] (neighbour, seed) in local ids, event ids)``, the form of
        PyG's ``LastNeighborLoader``."""
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        seed_times = np.ascontiguousarray(seed_times, dtype=np.float64)
        g = self.graph
        if self._node_map is None:
            self._node_map = np.full(g.num_nodes, -1, dtype=np.int64)
            self._cursor = g.indptr[:-1].copy()
            self._last_time = -np.inf
        # A batch queried at one time, never earlier than the last (chronological training),
        # moves per-node cursors; any other is answered by binary search and leaves them.
        forward = bool(
            seed_times.size == 0
            or (seed_times.min() == seed_times.max() and seed_times[0] >= self._last_time)
        )
        with KERNEL_LOCK:
            n_id, nbr, dst, eid = recent_subgraph_kernel(
                g.indptr, g.indices, g.times, g.eids, nodes, seed_times,
                np.int64(self.fanouts[0]), self._node_map, self._cursor, forward,
            )  # fmt: skip
        if forward and seed_times.size:
            self._last_time = float(seed_times.max())
        return n_id, np.stack([nbr, dst]), eid

    def sample(self, nodes: np.ndarray, seed_times: np.ndarray, seed: int = 0) -> list[TemporalHop]:
        """The hops of seeds ``(nodes[i], seed_times[i])``, first hop first."""
        hops = []
        for layer, fanout in enumerate(self.fanouts):
            hop = sample_temporal_neighbors(
                self.graph, nodes, seed_times, fanout, self.mode, mix_seed(seed, layer)
            )
            hops.append(hop)
            nodes, seed_times = hop.nbr, hop.nbr_times
        return hops
