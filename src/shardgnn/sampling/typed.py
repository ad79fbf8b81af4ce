"""Neighbour sampling on typed graphs: a fanout per relation and layer, meta-path restriction
(fanout 0 leaves a relation out of a layer), and an edge-attribute filter (Euler's conditional
sampling: a timestamp window, a weight threshold).

Works on :class:`~shardgnn.graph.typed.TypedGraph`'s one CSR, whose rows are sorted by
relation: the edges of relation ``r`` into ``v`` are one slice found by binary search, so a
relation's draw costs the same as a homogeneous draw over that slice. Blocks are the ordinary
:class:`~shardgnn.sampling.types.Block` (the layer loop, relabelling, exclusion and pruning are
:func:`~shardgnn.sampling.neighbor.sample_blocks`'); ``graph.etype[block.edge_ids_E]`` gives each
sampled edge's relation.

Randomness is counter-based as in :mod:`shardgnn.sampling.kernels`: the draws of ``(v, r)``
depend only on the layer seed, ``v``'s global id and ``r``, so any thread count, and an owner
sampling its own rows, give the same neighbours.
"""

from __future__ import annotations

import numba
import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.graph.typed import TypedGraph, relation_ids
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.kernels import KERNEL_LOCK, _below, floyd_positions, splitmix64
from shardgnn.sampling.neighbor import sample_blocks
from shardgnn.sampling.types import SampledBlocks, SeedInput

_RELATION_SALT = np.uint64(0xD1B54A32D192ED03)


@numba.njit(inline="always")
def _lower_bound(etype, lo, hi, r):
    """The first position in ``[lo, hi)`` whose relation is ``>= r`` (rows sorted by relation):
    binary search down to a few entries, then a scan (most rows of a power-law graph are short)."""
    while hi - lo > 8:
        mid = (lo + hi) >> 1
        if etype[mid] < r:
            lo = mid + 1
        else:
            hi = mid
    while lo < hi and etype[lo] < r:
        lo += 1
    return lo


@numba.njit(inline="always")
def _take(fanout, candidates, replace):
    if fanout < 0:
        return candidates
    if replace:
        return fanout if candidates > 0 else 0
    return min(fanout, candidates)


@numba.njit(parallel=True, nogil=True, cache=True)
def typed_sample_bounds(indptr, frontier, fanouts_R, replace):
    """An upper bound of every frontier row's draws, without looking at relations: the row's
    degree, or the sum of the fanouts when smaller (with replacement: that sum). The fill pass
    writes into these slots and reports the true counts; :func:`compact` copies them out. One
    relation scan per row instead of two (count, then fill)."""
    total_fanout = 0
    every = False
    for r in range(fanouts_R.shape[0]):
        if fanouts_R[r] < 0:
            every = True
        total_fanout += max(fanouts_R[r], 0)
    bounds = np.empty(frontier.shape[0] + 1, dtype=np.int64)
    bounds[0] = 0
    for i in numba.prange(frontier.shape[0]):
        v = frontier[i]
        deg = indptr[v + 1] - indptr[v]
        if replace:  # relations at -1 give all their edges, the others their fanout
            bounds[i + 1] = (deg if every else 0) + (total_fanout if deg > 0 else 0)
        else:
            bounds[i + 1] = deg if every else min(deg, total_fanout)
    return bounds


@numba.njit(parallel=True, nogil=True, cache=True)
def compact(bounds, counts, nbr, eid, rel):
    """``(offsets, nbr, eid, rel)`` without gaps: every row's ``counts[i]`` draws, written from
    slot ``bounds[i]`` on, copied to their final place in new arrays (in parallel: the fill's
    slots are scratch reused across calls)."""
    n = counts.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + counts[i]
    out_nbr = np.empty(offsets[n], dtype=np.int64)
    out_eid = np.empty(offsets[n], dtype=np.int64)
    out_rel = np.empty(offsets[n], dtype=np.int64)
    for i in numba.prange(n):
        src, dst = bounds[i], offsets[i]
        for j in range(counts[i]):
            out_nbr[dst + j] = nbr[src + j]
            out_eid[dst + j] = eid[src + j]
            out_rel[dst + j] = rel[src + j]
    return offsets, out_nbr, out_eid, out_rel


class _Slots:
    """The fill's slot arrays, kept across calls (grown when a hop needs more): only used under
    ``KERNEL_LOCK``, and never returned (:func:`compact` copies the draws out), so reusing them
    saves a hop the page faults of fresh arrays larger than its draws."""

    arrays = (np.empty(0, dtype=np.int64),) * 3

    @classmethod
    def get(cls, size: int) -> tuple[np.ndarray, ...]:
        if cls.arrays[0].shape[0] < size:
            cls.arrays = tuple(np.empty(size + size // 4, dtype=np.int64) for _ in range(3))
        return cls.arrays


@numba.njit(parallel=True, nogil=True, cache=True)
def typed_sample_fill(
    indptr, indices, etype, frontier, fanouts_R, replace, attr, lo, hi, filtered, seed, offsets,
    out_nbr, out_eid, out_rel, id_offset, out_counts,
):  # fmt: skip
    """Per frontier row, relation by relation: all passing edges when the fanout covers them,
    else ``fanout`` of them uniformly (Floyd's algorithm without replacement). Unfiltered, the
    candidates are the relation's slice itself (no scratch); filtered, the passing positions are
    listed first."""
    useed = np.uint64(seed)
    no_scratch = np.empty(0, dtype=np.int64)
    for i in numba.prange(frontier.shape[0]):
        v = frontier[i]
        start, end = indptr[v], indptr[v + 1]
        out_counts[i] = 0
        if offsets[i + 1] == offsets[i]:
            continue
        key, keyed = np.uint64(0), False
        pos = offsets[i]
        scratch = np.empty(end - start, dtype=np.int64) if filtered else no_scratch
        # Walk the row's runs of equal relation: only the relations the row has cost anything.
        b = start
        while b < end:
            a = b
            r = np.int64(etype[a])
            b = _lower_bound(etype, a, end, r + 1)
            fanout = fanouts_R[r]
            if fanout == 0:
                continue
            if filtered:
                c = 0
                for e in range(a, b):
                    if lo <= attr[e] < hi:
                        scratch[c] = e
                        c += 1
            else:
                c = b - a
            k = _take(fanout, c, replace)
            if k == 0:
                continue
            # out_nbr holds the candidate positions until they are mapped to edges
            if k == c and (fanout < 0 or not replace):
                for j in range(k):
                    out_nbr[pos + j] = j
            else:
                # the row's key is made at its first draw (taking every edge needs none)
                if not keyed:
                    key, keyed = splitmix64(useed ^ splitmix64(np.uint64(v + id_offset))), True
                rkey = splitmix64(key ^ splitmix64(np.uint64(r) + _RELATION_SALT))
                if replace:
                    for j in range(k):
                        out_nbr[pos + j] = _below(splitmix64(rkey + np.uint64(j)), c)
                else:
                    floyd_positions(rkey, c, k, out_nbr, pos)
            for j in range(k):
                t = out_nbr[pos + j]
                e = scratch[t] if filtered else a + t
                out_eid[pos + j] = e
                out_nbr[pos + j] = indices[e]
                out_rel[pos + j] = r
            pos += k
        out_counts[i] = pos - offsets[i]


def sample_typed_neighbors(
    indptr: np.ndarray,
    indices: np.ndarray,
    etype: np.ndarray,
    frontier: np.ndarray,
    fanouts_R: np.ndarray,
    replace: bool,
    seed: int,
    id_offset: int = 0,
    attr: np.ndarray | None = None,
    window: tuple[float, float] = (0.0, 0.0),
) -> tuple[np.ndarray, ...]:
    """One typed hop for ``frontier`` (CSR rows; global id = row + ``id_offset``):
    ``(offsets, nbr, edge_ids, relations)`` as :func:`~shardgnn.sampling.neighbor.sample_neighbors`
    plus each drawn edge's relation, with ``fanouts_R[r]`` draws among relation ``r``'s edges
    (whose ``attr`` lies in ``window`` when ``attr`` is given). The kernel every typed sampler
    shares, single-process or per owner."""
    filtered = attr is not None
    attr = np.zeros(1, np.float64) if attr is None else attr
    lo, hi = float(window[0]), float(window[1])
    fanouts_R = np.ascontiguousarray(fanouts_R, dtype=np.int64)
    with KERNEL_LOCK:
        bounds = np.cumsum(typed_sample_bounds(indptr, frontier, fanouts_R, replace))
        nbr, eid, rel = _Slots.get(int(bounds[-1]))
        counts = np.empty(frontier.shape[0], dtype=np.int64)
        typed_sample_fill(
            indptr, indices, etype, frontier, fanouts_R, replace, attr, lo, hi, filtered,
            np.uint64(seed), bounds, nbr, eid, rel, np.int64(id_offset), counts,
        )  # fmt: skip
        return compact(bounds, counts, nbr, eid, rel)


def relation_fanouts(relations, layers: list) -> np.ndarray:
    """Per-layer, per-relation fanouts ``[L, R]`` (int64; -1 = every neighbour, 0 = relation left
    out of that layer), output layer first, from one entry per layer: an int (every relation),
    a list of ``R`` ints, or a dict from relation name (or ``src/rel/dst``) to fanout (relations
    not named get 0: a meta-path). ``relations``: the graph's ``(src, rel, dst)`` triples
    (``TypedGraph.relations``, or a typed partition's)."""
    listing = ", ".join("/".join(rel) for rel in relations)
    out = np.zeros((len(layers), len(relations)), dtype=np.int64)
    for layer, entry in enumerate(layers):
        if isinstance(entry, (int, np.integer)):
            out[layer] = int(entry)
        elif isinstance(entry, dict):
            for name, fanout in entry.items():
                ids = relation_ids(relations, name)
                if len(ids) != 1:
                    raise ConfigError(
                        f"fanouts of layer {layer} name relation {name!r}, which "
                        + ("is ambiguous" if ids else "the graph does not have")
                        + f"; its relations: {listing}"
                    )
                out[layer, ids[0]] = int(fanout)
        else:
            values = list(entry)
            if len(values) != len(relations):
                raise ConfigError(
                    f"fanouts of layer {layer} list {len(values)} values but the graph has "
                    f"{len(relations)} relations ({listing}); give one per relation, or "
                    "name them (relation=fanout)"
                )
            out[layer] = values
    if np.any(out < -1):
        raise ConfigError("a fanout must be >= -1 (-1: every neighbour, 0: leave the relation out)")
    empty = np.flatnonzero(~out.any(axis=1))
    if empty.size:
        raise ConfigError(f"fanouts of layer {empty[0]} leave out every relation; name one")
    return out


class TypedNeighborSampler:
    """Samples the L-hop computation graph of a batch of seeds on a typed graph.

    Args:
        graph: the typed graph (its CSR, relation ids and, for filtering, ``edge_attr``).
        fanouts_LR: :func:`relation_fanouts` (output layer first).
        replace: draw with replacement.
        edge_attr: float ``[E]`` aligned with the CSR (timestamps, weights), or None.
        attr_window: keep only edges with ``lo <= edge_attr < hi`` (requires ``edge_attr``).

    Not thread-safe (an O(N) scratch map is reused across batches).
    """

    def __init__(
        self,
        graph: TypedGraph,
        fanouts_LR: np.ndarray,
        replace: bool = False,
        edge_attr: np.ndarray | None = None,
        attr_window: tuple[float, float] | None = None,
    ):
        fanouts_LR = np.ascontiguousarray(fanouts_LR, dtype=np.int64)
        assert fanouts_LR.ndim == 2 and fanouts_LR.shape[1] == graph.num_relations
        if attr_window is not None and edge_attr is None:
            raise ConfigError("an attribute window needs an edge attribute to filter on")
        if edge_attr is not None and np.shape(edge_attr) != (graph.num_edges,):
            raise ConfigError(
                f"the edge attribute has shape {np.shape(edge_attr)}; it needs one value per "
                f"edge ({graph.num_edges}), in the graph's CSR order"
            )
        self.graph = graph
        self.indptr = np.ascontiguousarray(graph.indptr, dtype=np.int64)
        self.fanouts_LR = fanouts_LR
        self.replace = replace
        # the attribute is read only when filtering
        self.edge_attr = (
            None if attr_window is None else np.ascontiguousarray(edge_attr, dtype=np.float64)
        )
        self.window = attr_window if attr_window is not None else (0.0, 0.0)
        self._node_map = np.full(graph.num_nodes, -1, dtype=np.int64)

    def one_hop(
        self, frontier: np.ndarray, fanouts_R: np.ndarray, seed: int
    ) -> tuple[np.ndarray, ...]:
        """One hop for ``frontier`` (global ids): ``(offsets, nbr, edge_ids, relations)``."""
        return sample_typed_neighbors(
            self.indptr, self.graph.indices, self.graph.etype, frontier, fanouts_R,
            self.replace, seed, attr=self.edge_attr, window=self.window,
        )  # fmt: skip

    @property
    def num_layers(self) -> int:
        return len(self.fanouts_LR)

    def sample(self, inputs: SeedInput, seed: int) -> SampledBlocks:
        """Sample blocks for ``inputs.nodes`` (unique global ids); layer ``l`` uses
        ``mix_seed(seed, l)``, as the homogeneous sampler (the
        :class:`~shardgnn.sampling.types.Sampler` protocol; ``inputs.exclude`` as there)."""
        inputs = SeedInput.of(inputs).untimed(self)
        layers = iter(self.fanouts_LR)
        # sample_blocks calls one_hop once per layer, output layer first: the per-relation
        # fanouts of each call are the next row (the config's scalar fanouts only count layers).
        return sample_blocks(
            inputs.nodes,
            SamplerConfig(fanouts=(-1,) * len(self.fanouts_LR), replace=self.replace),
            seed,
            exclude=inputs.exclude,
            one_hop=lambda frontier, _fanout, layer_seed: self.one_hop(
                frontier, next(layers), layer_seed
            ),
            degree_of=lambda nodes: self.indptr[nodes + 1] - self.indptr[nodes],
            node_map=self._node_map,
        )
