"""Numba kernels of uniform neighbour sampling.

Randomness is counter-based: the ``j``-th draw for node ``v`` under layer seed ``s`` is
``splitmix64(splitmix64(s ^ splitmix64(v)) + j)``. A draw therefore depends only on
``(s, v, j)``, not on the thread that makes it or on which other nodes share the frontier, so

* results are identical for any number of threads, and
* a distributed owner that samples ``v`` with the same ``s`` returns exactly what the
  single-process sampler returns (issue: distributed sampling keeps single-process semantics).
"""

from __future__ import annotations

import os
import threading

import numba
import numpy as np

# numba's default OpenMP layer shares libgomp with torch: torch's spin-waiting OpenMP threads
# then steal the cores from the sampling kernels (measured: 2 threads at half the speed of 1).
# The workqueue layer has its own pool; it must not be entered by two threads at once, hence
# KERNEL_LOCK around every parallel launch. A user's NUMBA_THREADING_LAYER wins.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"
KERNEL_LOCK = threading.Lock()

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK32 = np.uint64(0xFFFFFFFF)


@numba.njit(inline="always")
def splitmix64(x: np.uint64) -> np.uint64:
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always")
def _below(h: np.uint64, n: np.int64) -> np.int64:
    """Map a 64-bit hash to ``[0, n)`` by multiply-shift on its top 32 bits (n < 2**32)."""
    return np.int64(((h >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@numba.njit(inline="always")
def floyd_positions(key, c, k, out, lo):  # pragma: no cover - compiled
    """Floyd's algorithm: ``k`` distinct positions of ``[0, c)``, uniformly, into
    ``out[lo:lo + k]``; draw ``top`` is ``splitmix64(key + top)``. ``O(k**2)`` time, no
    scratch: every sampler without replacement draws through it, so a row's draw depends only on
    its key."""
    for q, top in enumerate(range(c - k, c)):
        pick = _below(splitmix64(key + np.uint64(top)), top + 1)
        for p in range(q):
            if out[lo + p] == pick:
                pick = top
                break
        out[lo + q] = pick


@numba.njit(parallel=True, nogil=True, cache=True)
def sample_counts(indptr, frontier, fanout, replace):
    """Number of neighbours each frontier node will get: ``min(fanout, deg)`` (``deg`` if
    ``fanout < 0``); with replacement ``fanout`` for every node that has a neighbour."""
    counts = np.empty(frontier.shape[0] + 1, dtype=np.int64)
    counts[0] = 0
    for i in numba.prange(frontier.shape[0]):
        v = frontier[i]
        deg = indptr[v + 1] - indptr[v]
        if fanout < 0:
            k = deg
        elif replace:
            k = fanout if deg > 0 else 0
        else:
            k = min(fanout, deg)
        counts[i + 1] = k
    return counts


@numba.njit(parallel=True, nogil=True, cache=True)
def sample_fill(
    indptr, indices, frontier, fanout, replace, seed, offsets, out_nbr, out_eid, id_offset
):
    """Write the sampled neighbours (global ids) and their edge ids (CSR positions) of frontier
    row ``i`` into ``out_*[offsets[i]:offsets[i + 1]]``.

    ``frontier`` holds CSR row numbers; the random key of a row is its global node id
    ``row + id_offset`` (a partition owner passes its range start), so an owner draws exactly
    what a single process holding the whole graph draws.

    Without replacement and ``fanout < deg`` this is Floyd's algorithm: ``fanout`` distinct
    positions, uniformly, in ``O(fanout**2)`` time and no scratch memory.
    """
    useed = np.uint64(seed)
    for i in numba.prange(frontier.shape[0]):
        v = frontier[i]
        start = indptr[v]
        deg = indptr[v + 1] - start
        lo = offsets[i]
        k = offsets[i + 1] - lo
        if k == 0:
            continue
        if k == deg and (fanout < 0 or not replace):
            for j in range(deg):
                out_eid[lo + j] = start + j
        else:
            key = splitmix64(useed ^ splitmix64(np.uint64(v + id_offset)))
            if replace:
                for j in range(k):
                    out_eid[lo + j] = start + _below(splitmix64(key + np.uint64(j)), deg)
            else:
                floyd_positions(key, deg, k, out_eid, lo)
                for j in range(k):
                    out_eid[lo + j] += start
        for j in range(k):
            out_nbr[lo + j] = indices[out_eid[lo + j]]


@numba.njit(nogil=True, cache=True)
def relabel(frontier, nbr, node_map):
    """Give every node a local id: frontier nodes ``0..len(frontier)-1`` (dst first), then each new
    neighbour in order of first appearance. ``node_map`` is an all ``-1`` array of the graph's size;
    it is restored to all ``-1`` before returning, so the cost is O(batch), not O(graph).

    Returns ``(src_nodes, local_nbr)``.
    """
    n_dst = frontier.shape[0]
    src_nodes = np.empty(n_dst + nbr.shape[0], dtype=np.int64)
    local = np.empty(nbr.shape[0], dtype=np.int64)
    for i in range(n_dst):
        node_map[frontier[i]] = i
        src_nodes[i] = frontier[i]
    count = n_dst
    for e in range(nbr.shape[0]):
        u = nbr[e]
        lid = node_map[u]
        if lid < 0:
            lid = count
            node_map[u] = lid
            src_nodes[count] = u
            count += 1
        local[e] = lid
    for i in range(count):
        node_map[src_nodes[i]] = -1
    return src_nodes[:count].copy(), local
