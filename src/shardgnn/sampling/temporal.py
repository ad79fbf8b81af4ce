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
from shardgnn.graph.csr import first_outside
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.sampling.kernels import KERNEL_LOCK, floyd_positions, relabel, splitmix64
from shardgnn.sampling.types import Block, SampledBlocks, SeedInput
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
    # the kernels read rows unchecked: past the end they sampled another row's memory silently
    num_rows = len(indptr) - 1
    if (bad := first_outside(rows, num_rows)) is not None:
        raise ConfigError(
            f"seed node {bad + id_offset} is no node here ({num_rows} rows from {id_offset})"
        )
    if np.isnan(seed_times).any():  # no event is before NaN: an empty hop, silently
        raise ConfigError("a seed time is NaN; give every seed a time (e.g. unix seconds)")
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

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def sample(self, inputs: SeedInput, seed: int = 0) -> SampledBlocks:
        """The :class:`~shardgnn.sampling.types.Sampler` protocol: the blocks of seeds
        ``(inputs.nodes[i], inputs.times[i])`` (:func:`hops_to_blocks` of :meth:`sample_hops`,
        the same draws)."""
        if not isinstance(inputs, SeedInput) or inputs.times is None:
            raise ConfigError("temporal sampling needs a SeedInput with a time for every seed")
        if inputs.exclude is not None:
            raise ConfigError("temporal sampling does not exclude edges (events)")
        nodes, times = inputs.nodes_numpy(), inputs.times.cpu().numpy()
        return hops_to_blocks(self.sample_hops(nodes, times, seed), nodes, times)

    def sample_hops(
        self, nodes: np.ndarray, seed_times: np.ndarray, seed: int = 0
    ) -> list[TemporalHop]:
        """The hops of seeds ``(nodes[i], seed_times[i])``, first hop first (what the TGAT model
        reads, :meth:`~shardgnn.nn.temporal.TemporalLinkModel.embed_hops`)."""
        hops = []
        for layer, fanout in enumerate(self.fanouts):
            hop = sample_temporal_neighbors(
                self.graph, nodes, seed_times, fanout, self.mode, mix_seed(seed, layer)
            )
            hops.append(hop)
            nodes, seed_times = hop.nbr, hop.nbr_times
        return hops


def hops_to_blocks(hops: list[TemporalHop], nodes: np.ndarray, times: np.ndarray) -> SampledBlocks:
    """Temporal hops as blocks. A row is a node at a time (rows are not merged by node: one node
    at two times is two rows): depth 0 the seeds, depth ``d + 1`` hop ``d``'s events (their
    other endpoint at the event's time). The block of layer ``l`` (input layer first, of ``L``)
    holds hops ``0..L - 1 - l``: its dst rows are depths ``0..L - 1 - l``, its src rows one depth
    more, every event an edge from its row at depth ``d + 1`` to its seed at depth ``d`` (as
    TGAT computes: every layer updates each depth a later layer still reads). Edge ids are
    event ids; ``edge_time_E`` the events' times, ``src_time_S`` each row's time."""
    node_rows = [np.asarray(nodes, dtype=np.int64)] + [hop.nbr for hop in hops]
    time_rows = [np.asarray(times, dtype=np.float64)] + [hop.nbr_times for hop in hops]
    starts = np.cumsum([0] + [rows.shape[0] for rows in node_rows])
    blocks = []
    for k in range(len(hops), 0, -1):  # hops in the block: input layer (all of them) first
        offsets = [np.zeros(1, dtype=np.int64)]
        for hop in hops[:k]:
            offsets.append(hop.offsets[1:] + offsets[-1][-1])
        blocks.append(
            Block(
                src_nodes_S=torch.from_numpy(np.concatenate(node_rows[: k + 1])),
                num_dst=int(starts[k]),
                indptr_D1=torch.from_numpy(np.concatenate(offsets)),
                indices_E=torch.from_numpy(
                    np.concatenate([np.arange(starts[d + 1], starts[d + 2]) for d in range(k)])
                ),
                edge_ids_E=torch.from_numpy(np.concatenate([hop.eids for hop in hops[:k]])),
                edge_time_E=torch.from_numpy(np.concatenate([h.nbr_times for h in hops[:k]])),
                src_time_S=torch.from_numpy(np.concatenate(time_rows[: k + 1])),
            )
        )
    return SampledBlocks(seeds=torch.from_numpy(node_rows[0]), blocks=blocks)
