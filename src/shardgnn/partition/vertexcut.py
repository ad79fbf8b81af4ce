"""Vertex-cut partitioners: every edge placed on a part, every node on each part holding one of
its edges (a *replica*), one replica its *master* (its owner: features, labels, in-edge list).

An edge-cut partition places nodes and computes every edge on one of its ends' parts
(:mod:`shardgnn.partition.cover` picks which); a vertex-cut places the edges themselves, on any
part, and a node is cut into as many replicas as parts hold its edges. Full-graph training
(``--spmm vertex-cut``) then sends, per layer, a source's row from its master to every other
part computing one of its out-edges (*pull*) and a destination's partial sum from every other
part computing one of its in-edges to its master (*push*): one row per replica that is not the
master. The *replication factor* (replicas per node) is what a vertex-cut partitioner minimises.

* ``hdrf`` (Petroni et al., CIKM'15, *High-Degree (are) Replicated First*): one pass over the
  edges in a seeded random order; edge ``u -> v`` goes to the part maximising
  ``C_rep + lambda * C_bal``, where ``C_rep`` counts, for each end already replicated there,
  ``1 + (1 - theta)`` with ``theta`` the end's share of the two ends' partial degrees (so the
  lower-degree end's replica weighs more: hubs are the ones cut), and ``C_bal =
  (max_load - load_p) / (eps + max_load - min_load)``. Masters are chosen afterwards: per node
  (seeded random order), the replica computing both in- and out-edges of it if one does (a pull
  and a push saved), else any replica, the least-loaded among equals, never a part already
  holding ``(1 + imbalance) * N / P`` masters while another replica holds fewer.
* ``2d-hash`` (the 2D/Cartesian vertex-cut; Boman et al. SC'13, GraphX's ``EdgePartition2D``):
  on an ``R x C`` grid of parts (the most square, ``R <= C``), every node hashed to a part
  ``b(v)`` (row ``b // C``, column ``b % C``), edge ``u -> v`` placed on part ``(row(v),
  col(u))`` and ``b(v)`` its master. A node's row goes to at most ``R - 1`` parts and receives
  partial sums from at most ``C - 1``: replicas ``<= R + C - 1`` whatever the graph.

Self-loops are placed on their node's master (they need no row from elsewhere), and every copy
of a repeated edge on the part of its first copy (the SpMM's normalisation adds copies up).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from shardgnn.graph.csr import Graph
from shardgnn.partition.cover import cut_rows


def most_square(n: int) -> int:
    """The largest divisor of ``n`` not above its square root (the rows of the most square grid
    of ``n`` cells, ``rows <= cols``)."""
    return max(r for r in range(1, int(n**0.5) + 1) if n % r == 0)


@dataclasses.dataclass(frozen=True)
class VertexCut:
    """A vertex-cut partition of a graph.

    Attributes:
        edge_part: int32 ``[E]`` the part computing every edge, in the graph's CSR order.
        master: int32 ``[N]`` every node's owner.
    """

    edge_part: np.ndarray
    master: np.ndarray

    def stats(self, graph: Graph, num_parts: int) -> dict[str, float | int]:
        """``replication_factor`` (mean parts holding a node: its master and every part
        computing one of its edges), ``balance_computed_edges`` (max over mean of the edges a
        part computes) and ``rows_per_layer`` (rows a vertex-cut SpMM sends per layer: pulled
        rows plus pushed partial sums)."""
        src, dst = _edges(graph)
        n = graph.num_nodes
        held = np.unique(
            np.concatenate(
                [
                    np.arange(n, dtype=np.int64) * num_parts + self.master,
                    src * num_parts + self.edge_part,
                    dst * num_parts + self.edge_part,
                ]
            )
        )
        load = np.bincount(self.edge_part, minlength=num_parts)
        _, pulls, pushes = cut_rows(src, dst, self.master, num_parts, self.edge_part)
        return {
            "replication_factor": float(held.shape[0] / max(n, 1)),
            "balance_computed_edges": float(load.max() / load.mean()) if load.sum() else 1.0,
            "rows_per_layer": int(pulls.shape[0] + pushes.shape[0]),
        }


def _edges(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``(src_E, dst_E)`` in CSR order."""
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    return np.asarray(graph.indices, dtype=np.int64), dst


def _finish(
    src: np.ndarray, dst: np.ndarray, edge_part: np.ndarray, master: np.ndarray
) -> VertexCut:
    """Self-loops onto their node's master; every copy of a repeated edge onto its first copy's
    part."""
    edge_part = np.asarray(edge_part, dtype=np.int32)
    loops = src == dst
    edge_part[loops] = master[src[loops]]
    keys = dst * (int(src.max(initial=0)) + 1) + src
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    edge_part = edge_part[first][inverse].astype(np.int32)
    return VertexCut(edge_part=edge_part, master=np.asarray(master, dtype=np.int32))


@numba.njit(cache=True, nogil=True, inline="always")
def _has(bits, v, p):  # pragma: no cover - compiled
    return (bits[v, p >> 6] >> np.uint64(p & 63)) & np.uint64(1) != np.uint64(0)


@numba.njit(cache=True, nogil=True, inline="always")
def _set(bits, v, p):  # pragma: no cover - compiled
    bits[v, p >> 6] |= np.uint64(1) << np.uint64(p & 63)


@numba.njit(cache=True, nogil=True)
def _hdrf_kernel(src, dst, order, num_nodes, num_parts, lam, eps):  # pragma: no cover - compiled
    # the replica table as bits: N x ceil(P / 64) words, 8 bytes per node up to 64 parts
    replica = np.zeros((num_nodes, (num_parts + 63) // 64), dtype=np.uint64)
    partial = np.zeros(num_nodes, dtype=np.int64)
    load = np.zeros(num_parts, dtype=np.int64)
    edge_part = np.full(src.shape[0], -1, dtype=np.int32)
    max_load, min_load = 0, 0
    for k in range(order.shape[0]):
        e = order[k]
        u, v = src[e], dst[e]
        partial[u] += 1
        partial[v] += 1
        theta_u = partial[u] / (partial[u] + partial[v])
        theta_v = 1.0 - theta_u
        best, best_score = 0, -1.0
        for p in range(num_parts):
            score = lam * (max_load - load[p]) / (eps + max_load - min_load)
            if _has(replica, u, p):
                score += 2.0 - theta_u
            if _has(replica, v, p):
                score += 2.0 - theta_v
            if score > best_score:
                best, best_score = p, score
        edge_part[e] = best
        _set(replica, u, best)
        _set(replica, v, best)
        load[best] += 1
        if load[best] > max_load:
            max_load = load[best]
        if load[best] - 1 == min_load:  # the least-loaded part may have left the minimum
            min_load = load.min()
    return edge_part


@numba.njit(cache=True, nogil=True)
def _masters_kernel(src, dst, edge_part, order, num_nodes, num_parts, cap):  # pragma: no cover
    words = (num_parts + 63) // 64
    has_in = np.zeros((num_nodes, words), dtype=np.uint64)
    has_out = np.zeros((num_nodes, words), dtype=np.uint64)
    for e in range(src.shape[0]):
        if src[e] != dst[e]:
            _set(has_in, dst[e], edge_part[e])
            _set(has_out, src[e], edge_part[e])
    masters = np.zeros(num_parts, dtype=np.int64)
    master = np.empty(num_nodes, dtype=np.int32)
    for k in range(order.shape[0]):
        v = order[k]
        # the best replica under the cap: both kinds of edges first, then the fewest masters;
        # where every replica is full (or the node has none), the part with the fewest masters
        best, best_score = -1, -1
        fewest = 0
        for p in range(num_parts):
            if masters[p] < masters[fewest]:
                fewest = p
            score = np.int64(_has(has_in, v, p)) + np.int64(_has(has_out, v, p))
            if score == 0 or masters[p] >= cap:
                continue
            if score > best_score or (score == best_score and masters[p] < masters[best]):
                best, best_score = p, score
        if best < 0:
            best = fewest
        master[v] = best
        masters[best] += 1
    return master


def hdrf_partition(
    graph: Graph,
    num_parts: int,
    *,
    seed: int = 0,
    balance_weight: float = 1.0,
    imbalance: float = 0.03,
) -> VertexCut:
    """HDRF (see the module): every edge of ``graph`` streamed once in a seeded random order;
    ``balance_weight``: the paper's ``lambda`` (1: its default); ``imbalance``: masters per part
    at most ``(1 + imbalance) * N / P`` where a replica allows it."""
    src, dst = _edges(graph)
    n = graph.num_nodes
    rng = np.random.default_rng(seed)
    order = rng.permutation(src.shape[0]).astype(np.int64)
    order = order[src[order] != dst[order]]  # self-loops follow their masters
    edge_part = _hdrf_kernel(src, dst, order, n, num_parts, float(balance_weight), 1.0)
    cap = max(int(np.ceil(n / num_parts)), int((1.0 + imbalance) * n / num_parts))
    node_order = rng.permutation(n).astype(np.int64)
    master = _masters_kernel(src, dst, np.maximum(edge_part, 0), node_order, n, num_parts, cap)
    return _finish(src, dst, edge_part, master)


def grid_partition(graph: Graph, num_parts: int, block: np.ndarray) -> VertexCut:
    """The 2D-hash vertex-cut (see the module) on the most square grid of ``num_parts``;
    ``block``: every node's hashed part (its master)."""
    src, dst = _edges(graph)
    cols = num_parts // most_square(num_parts)
    block = np.asarray(block, dtype=np.int64)
    edge_part = (block[dst] // cols) * cols + block[src] % cols
    return _finish(src, dst, edge_part, block)
