"""Random walks: meta-path-guided on typed graphs (metapath2vec, as in PGL), and uniform walks
per node on a plain graph (:func:`node_walks`, SUREL's walk sets).

A meta-path is a cycle of relations, e.g. ``writes, rev_writes`` (author -> paper -> author);
walk step ``i`` moves from the current node ``v`` to a uniformly drawn ``u`` with an edge
``v -> u`` of relation ``path[i % len(path)]``. The graph stores in-edges, and ``v -r-> u`` is an
in-edge of ``v`` under the reverse relation, so the walker reads its own row under ``rev_r``
(:meth:`~shardgnn.graph.typed.TypedGraph.with_reverse_relations` adds every reverse;
``rev_rev_r`` is not needed: the reverse of ``rev_writes`` is ``writes``).

Randomness is counter-based per (walk id, step), so walks do not depend on the thread count or
on the other walks in the call, and a walk can be continued by whichever process holds its
current node: :func:`~shardgnn.sampling.dist_walks.dist_metapath_walks` has each step drawn by
the current node's owner.
"""

from __future__ import annotations

import numba
import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import first_outside
from shardgnn.graph.typed import TypedGraph, relation_ids
from shardgnn.sampling.kernels import KERNEL_LOCK, _below, splitmix64
from shardgnn.sampling.typed import _lower_bound


@numba.njit(nogil=True, cache=True, inline="always")
def _walk_key(seed, walk):  # pragma: no cover - compiled
    """The random stream of walk ``walk`` (draw ``i`` is ``splitmix64(key + i)``)."""
    return splitmix64(seed ^ splitmix64(np.uint64(walk)))


@numba.njit(nogil=True, cache=True, inline="always")
def _walk_next(indptr, indices, etype, row, r, key, i):  # pragma: no cover - compiled
    """Step ``i`` of a walk at (local) ``row``: a uniform in-neighbour under relation ``r``,
    ``-1`` when it has none."""
    a = _lower_bound(etype, indptr[row], indptr[row + 1], r)
    b = _lower_bound(etype, a, indptr[row + 1], r + 1)
    if a == b:
        return -1
    return indices[a + _below(splitmix64(key + np.uint64(i)), b - a)]


@numba.njit(parallel=True, nogil=True, cache=True)
def walk_kernel(indptr, indices, etype, starts, path_R, length, seed, walk_offset, out):
    """``out[w, 0] = starts[w]``; ``out[w, i + 1]`` is drawn among the in-neighbours of
    ``out[w, i]`` under relation ``path_R[i % len(path_R)]``; ``-1`` after a dead end."""
    useed = np.uint64(seed)
    for w in numba.prange(starts.shape[0]):
        key = _walk_key(useed, w + walk_offset)
        v = starts[w]
        out[w, 0] = v
        for i in range(length):
            if v >= 0:
                v = _walk_next(indptr, indices, etype, v, path_R[i % path_R.shape[0]], key, i)
            out[w, i + 1] = v


@numba.njit(parallel=True, nogil=True, cache=True)
def walk_step_kernel(indptr, indices, etype, id_offset, nodes, walks, r, seed, i, out):
    """Step ``i`` (relation ``r``) of walks ``walks`` at global ``nodes`` held here (rows
    ``nodes - id_offset``): what :func:`walk_kernel` draws at that step."""
    useed = np.uint64(seed)
    for j in numba.prange(nodes.shape[0]):
        key = _walk_key(useed, walks[j])
        out[j] = _walk_next(indptr, indices, etype, nodes[j] - id_offset, r, key, i)


def metapath_relations(relations, metapath: list[str]) -> np.ndarray:
    """The relation ids a walker reads for each step of ``metapath`` (forward relation names, or
    ``src/rel/dst``): the reverse of each, which ``relations`` (a graph's) must hold. Checks that
    the path chains (each relation starts where the last ended) and closes into a cycle."""
    relations = tuple(tuple(r) for r in relations)
    listing = ", ".join("/".join(rel) for rel in relations)
    forward = []
    for name in metapath:
        ids = relation_ids(relations, name)
        if len(ids) != 1:
            raise ConfigError(
                f"meta-path step {name!r} names "
                + ("several relations" if ids else "no relation of the graph")
                + f"; its relations: {listing}"
            )
        forward.append(relations[ids[0]])
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
        if reverse not in relations:
            raise ConfigError(
                f"walking {name} needs its reverse relation {reverse}; use "
                "graph.with_reverse_relations()"
            )
        read.append(relations.index(reverse))
    return np.asarray(read, dtype=np.int64)


def metapath_walks(
    graph: TypedGraph,
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
    path_R = metapath_relations(graph.relations, metapath)
    starts = check_walks(
        graph.relations, graph.node_types, graph.node_type_of, path_R, starts, length
    )
    out = np.empty((starts.shape[0], length + 1), dtype=np.int64)
    with KERNEL_LOCK:
        walk_kernel(
            np.ascontiguousarray(graph.indptr, dtype=np.int64), graph.indices, graph.etype,
            starts, path_R, length, np.uint64(seed), np.int64(walk_offset), out,
        )  # fmt: skip
    return out


def check_walks(relations, node_types, node_type_of, path_R, starts, length) -> np.ndarray:
    """``starts`` as int64, after checking they are of the meta-path's first type."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    first = relations[path_R[0]][2]  # the walker reads (next type, rev, start type)
    start_type = list(node_types).index(first)
    if starts.size and np.any(node_type_of(starts) != start_type):
        raise ConfigError(f"meta-path walks start at {first!r} nodes; some starts are not")
    if length < 1:
        raise ConfigError(f"walk length {length} must be >= 1")
    return starts


@numba.njit(parallel=True, nogil=True, cache=True)
def node_walk_kernel(indptr, indices, starts, num_walks, length, seed, out):
    """``out[s, j]``: walk ``j`` of node ``starts[s]``, ``length`` steps each to a uniform
    in-neighbour, ``-1`` after a dead end; the walk's stream is keyed by ``(seed, node, j)``."""
    useed = np.uint64(seed)
    for s in numba.prange(starts.shape[0]):
        for j in range(num_walks):
            key = _walk_key(useed, starts[s] * num_walks + j)
            v = starts[s]
            out[s, j, 0] = v
            for i in range(length):
                if v >= 0:
                    a, b = indptr[v], indptr[v + 1]
                    v = -1 if a == b else indices[a + _below(splitmix64(key + np.uint64(i)), b - a)]
                out[s, j, i + 1] = v


@numba.njit(parallel=True, nogil=True, cache=True)
def node_walk_step_kernel(indptr, indices, id_offset, nodes, walks, seed, i, out):
    """Step ``i`` of walks ``walks`` (ids ``start * num_walks + j``) at global ``nodes`` held here
    (rows ``nodes - id_offset``; ``indices`` in any id space): what :func:`node_walk_kernel`
    draws at that step over the same rows."""
    useed = np.uint64(seed)
    for k in numba.prange(nodes.shape[0]):
        row = nodes[k] - id_offset
        a, b = indptr[row], indptr[row + 1]
        key = _walk_key(useed, walks[k])
        out[k] = -1 if a == b else indices[a + _below(splitmix64(key + np.uint64(i)), b - a)]


def node_walks(
    indptr: np.ndarray,
    indices: np.ndarray,
    starts: np.ndarray,
    num_walks: int,
    length: int,
    seed: int,
) -> np.ndarray:
    """int64 ``[len(starts), num_walks, length + 1]``: ``num_walks`` uniform walks of ``length``
    steps from each of ``starts`` over the in-edge CSR (a symmetric graph's neighbours); ``-1``
    pads a walk that reached a node without neighbours. A node's walks depend on ``(seed, node)``
    only, not on the other starts: the walks of a node are the same in every batch that draws
    them with the same seed, and any process can draw them.

    Raises:
        ConfigError: a start is no node of the CSR (the kernel reads rows unchecked: past the end
            it crashed the process; -1 walked nowhere, silently).
    """
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    num_nodes = len(indptr) - 1
    if (bad := first_outside(starts, num_nodes)) is not None:
        raise ConfigError(f"walk start {bad} is no node of a graph of {num_nodes} nodes")
    out = np.empty((starts.shape[0], num_walks, length + 1), dtype=np.int64)
    with KERNEL_LOCK:
        node_walk_kernel(
            np.ascontiguousarray(indptr, dtype=np.int64), indices, starts, np.int64(num_walks),
            np.int64(length), np.uint64(seed), out,
        )  # fmt: skip
    return out
