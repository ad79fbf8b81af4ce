"""Meta-path-guided random walks (metapath2vec, as in PGL) on typed graphs.

A meta-path is a cycle of relations, e.g. ``writes, rev_writes`` (author -> paper -> author);
walk step ``i`` moves from the current node ``v`` to a uniformly drawn ``u`` with an edge
``v -> u`` of relation ``path[i % len(path)]``. The graph stores in-edges, and ``v -r-> u`` is an
in-edge of ``v`` under the reverse relation, so the walker reads its own row under ``rev_r``
(:meth:`~shardgnn.graph.hetero.HeteroGraph.with_reverse_relations` adds every reverse;
``rev_rev_r`` is not needed: the reverse of ``rev_writes`` is ``writes``).

Randomness is counter-based per (walk id, step), so walks do not depend on the thread count or
on the other walks in the call, and a walk can be continued by whichever process holds its
current node.
"""

from __future__ import annotations

import numba
import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.graph.hetero import HeteroGraph
from shardgnn.sampling.kernels import KERNEL_LOCK, _below, splitmix64
from shardgnn.sampling.typed import _lower_bound


@numba.njit(parallel=True, nogil=True, cache=True)
def walk_kernel(indptr, indices, etype, starts, path_R, length, seed, walk_offset, out):
    """``out[w, 0] = starts[w]``; ``out[w, i + 1]`` is drawn among the in-neighbours of
    ``out[w, i]`` under relation ``path_R[i % len(path_R)]``; ``-1`` after a dead end."""
    useed = np.uint64(seed)
    for w in numba.prange(starts.shape[0]):
        key = splitmix64(useed ^ splitmix64(np.uint64(w + walk_offset)))
        v = starts[w]
        out[w, 0] = v
        for i in range(length):
            if v < 0:
                out[w, i + 1] = -1
                continue
            r = path_R[i % path_R.shape[0]]
            a = _lower_bound(etype, indptr[v], indptr[v + 1], r)
            b = _lower_bound(etype, a, indptr[v + 1], r + 1)
            if a == b:
                v = -1
            else:
                v = indices[a + _below(splitmix64(key + np.uint64(i)), b - a)]
            out[w, i + 1] = v


def metapath_relations(graph: HeteroGraph, metapath: list[str]) -> np.ndarray:
    """The relation ids a walker reads for each step of ``metapath`` (forward relation names, or
    ``src/rel/dst``): the reverse of each, which the graph must hold. Checks that the path
    chains (each relation starts where the last ended) and closes into a cycle."""
    listing = ", ".join("/".join(rel) for rel in graph.relations)
    forward = []
    for name in metapath:
        ids = graph.relation_ids(name)
        if len(ids) != 1:
            raise ConfigError(
                f"meta-path step {name!r} names "
                + ("several relations" if ids else "no relation of the graph")
                + f"; its relations: {listing}"
            )
        forward.append(graph.relations[ids[0]])
    if not forward:
        raise ConfigError("a meta-path needs at least one relation")
    for a, b in zip(forward, forward[1:] + forward[:1]):
        if a[2] != b[0]:
            raise ConfigError(
                f"meta-path {' -> '.join(r[1] for r in forward)} does not chain: {a[1]} ends at "
                f"{a[2]!r} but {b[1]} starts at {b[0]!r} (the path must return to its start type)"
            )
    read = []
    for src, name, dst in forward:
        reverse_name = name[4:] if name.startswith("rev_") else f"rev_{name}"
        reverse = (dst, reverse_name, src)
        if reverse not in graph.relations:
            raise ConfigError(
                f"walking {name} needs its reverse relation {reverse}; use "
                "graph.with_reverse_relations()"
            )
        read.append(graph.relations.index(reverse))
    return np.asarray(read, dtype=np.int64)


def metapath_walks(
    graph: HeteroGraph,
    metapath: list[str],
    starts: np.ndarray,
    length: int,
    seed: int,
    walk_offset: int = 0,
) -> np.ndarray:
    """int64 ``[len(starts), length + 1]`` walks from ``starts`` (global ids of the meta-path's
    first type) following ``metapath`` cyclically; ``-1`` pads a walk that reached a node with no
    neighbour under the next relation. Walk ``w``'s draws depend on ``(seed, w + walk_offset)``
    only."""
    path_R = metapath_relations(graph, metapath)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    first = graph.relations[path_R[0]][2]  # the walker reads (next type, rev, start type)
    start_type = graph.node_types.index(first)
    if starts.size and np.any(graph.node_type_of(starts) != start_type):
        raise ConfigError(f"meta-path walks start at {first!r} nodes; some starts are not")
    if length < 1:
        raise ConfigError(f"walk length {length} must be >= 1")
    out = np.empty((starts.shape[0], length + 1), dtype=np.int64)
    with KERNEL_LOCK:
        walk_kernel(
            np.ascontiguousarray(graph.indptr, dtype=np.int64), graph.indices, graph.etype,
            starts, path_R, length, np.uint64(seed), np.int64(walk_offset), out,
        )  # fmt: skip
    return out
