"""Numba CSR kernels of the sparse aggregation ``out = A @ h`` of the GNN layers on CPU.

* :func:`csr_spmm` computes every output row in one thread, summing its edges in CSR order:
  the result is deterministic and independent of the thread count (no atomics, no reduction
  across threads). :func:`csr_spmm_serial` is the same on one thread, for small problems.
* :func:`csr_transpose` is an O(E + S) counting sort by src, stable, so within a src row the
  edges keep ascending dst order (what ``to_sparse_csc`` gives, without its sort). The backward
  pass ``grad_h = A^T @ grad_out`` is then :func:`csr_spmm` on the transpose: parallel over src
  rows, again without atomics.
* :func:`gcn_fill` builds the GCN-normalised CSR of :meth:`MessageGraph.edge_values` in one pass
  (self-loop edges dropped, one self-loop appended per row) in place of a stable argsort.

The kernels are generic in the float type (float32 and float64 are used); ``values`` must have
the dtype of ``h``.

Shape legend: ``S`` src nodes, ``D`` dst nodes, ``E`` edges, ``F`` feature width.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

# Imported for its side effect too: it selects numba's workqueue threading layer (torch shares
# libgomp otherwise) before any parallel kernel runs. Every parallel launch holds KERNEL_LOCK.
from shardgnn.sampling.kernels import KERNEL_LOCK  # noqa: F401  (re-exported)


class numba_threads_like_torch:
    """Run numba's parallel kernels on as many threads as torch uses (``torch.set_num_threads``
    is the project's per-process setting: workers sharing a machine's cores each take their
    share); the previous count is restored, so a sampler that relies on numba's default is not
    affected. numba's count is per calling thread."""

    def __enter__(self):
        want = min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)
        self.prev = numba.get_num_threads()
        if want != self.prev:
            numba.set_num_threads(want)

    def __exit__(self, *exc):
        if numba.get_num_threads() != self.prev:
            numba.set_num_threads(self.prev)


# Below this much work (edges x width) :func:`csr_spmm_serial` is faster than a parallel launch:
# waking numba's workqueue pool costs ~70 us here (measured; a 60k-edge block at F = 1 took
# 56 us serially and over 100 us on two threads).
SERIAL_WORK = 1 << 19


@numba.njit(inline="always")
def _edge_weight(values_E, e, w):
    """``values_E[e]``, or the row's constant weight ``w`` when there are no values."""
    if values_E is None:
        return w
    return values_E[e]


@numba.njit(inline="always")
def _spmm_row(indptr_D1, indices_E, values_E, mean, h_SF, out_DF, d):
    """Row ``d`` of :func:`csr_spmm`: ``out[d, :] = 0``, then ``+= w_e * h[s_e, :]`` edge after
    edge, four edges per sweep of the row (four independent row loads in flight), added left to
    right so the order of the additions is still the edge order."""
    width = h_SF.shape[1]
    e, hi = indptr_D1[d], indptr_D1[d + 1]
    one = h_SF.dtype.type(1.0)
    # w = 1 for sum (exact); mean multiplies every edge by 1/deg, rounded as the values path is
    w = one / h_SF.dtype.type(hi - e) if mean and hi > e else one
    for f in range(width):
        out_DF[d, f] = 0
    while e + 4 <= hi:
        w0 = _edge_weight(values_E, e, w)
        w1 = _edge_weight(values_E, e + 1, w)
        w2 = _edge_weight(values_E, e + 2, w)
        w3 = _edge_weight(values_E, e + 3, w)
        s0, s1, s2, s3 = indices_E[e], indices_E[e + 1], indices_E[e + 2], indices_E[e + 3]
        for f in range(width):
            out_DF[d, f] = (
                out_DF[d, f]
                + w0 * h_SF[s0, f]
                + w1 * h_SF[s1, f]
                + w2 * h_SF[s2, f]
                + w3 * h_SF[s3, f]
            )
        e += 4
    while e < hi:
        w0 = _edge_weight(values_E, e, w)
        s0 = indices_E[e]
        for f in range(width):
            out_DF[d, f] += w0 * h_SF[s0, f]
        e += 1


@numba.njit(parallel=True, nogil=True, cache=True)
def csr_spmm(indptr_D1, indices_E, values_E, mean, h_SF, out_DF):
    """``out_DF[d] = sum_e w_e * h_SF[indices_E[e]]`` over the edges ``e`` of CSR row ``d``.

    ``w_e = values_E[e]``; with ``values_E is None``, ``w_e = 1 / deg(d)`` if ``mean`` else 1, so
    the mean and sum norms need no values array. Rows without edges are zero. ``out_DF`` must be a
    C-contiguous ``[D, F]`` array of ``h_SF``'s dtype (it is overwritten, not accumulated into).

    Parallel over rows; every output element is summed by one thread from zero, one edge after
    the other in CSR order, hence deterministic and the same for any thread count (and equal to
    :func:`csr_spmm_serial`). No fastmath: reassociation would break that order.
    """
    for d in numba.prange(indptr_D1.shape[0] - 1):
        _spmm_row(indptr_D1, indices_E, values_E, mean, h_SF, out_DF, d)


@numba.njit(nogil=True, cache=True)
def csr_spmm_serial(indptr_D1, indices_E, values_E, mean, h_SF, out_DF):
    """:func:`csr_spmm` on the calling thread (bit-identical), for problems smaller than
    :data:`SERIAL_WORK`, where launching the parallel pool costs more than it saves."""
    for d in range(indptr_D1.shape[0] - 1):
        _spmm_row(indptr_D1, indices_E, values_E, mean, h_SF, out_DF, d)


@numba.njit(nogil=True, cache=True)
def csr_transpose(indptr_D1, indices_E, num_src):
    """The transpose of the ``[D, num_src]`` CSR ``(indptr_D1, indices_E)``.

    Returns ``(indptr_S1, dst_E, perm_E)``: the edges of src row ``s`` are the positions
    ``indptr_S1[s]:indptr_S1[s + 1]``, holding dst ``dst_E[p]`` and original edge ``perm_E[p]``
    (so transposed values are ``values_E[perm_E]``). A counting sort, stable: within a src row the
    edges appear in CSR order, i.e. ascending dst. Sequential (the scatter is random access and the
    result is cached per graph); deterministic.
    """
    num_rows = indptr_D1.shape[0] - 1
    num_edges = indices_E.shape[0]
    indptr_S1 = np.zeros(num_src + 1, dtype=np.int64)
    for e in range(num_edges):
        indptr_S1[indices_E[e] + 1] += 1
    for s in range(num_src):
        indptr_S1[s + 1] += indptr_S1[s]
    fill_S = indptr_S1[:-1].copy()
    dst_E = np.empty(num_edges, dtype=np.int64)
    perm_E = np.empty(num_edges, dtype=np.int64)
    for d in range(num_rows):
        for e in range(indptr_D1[d], indptr_D1[d + 1]):
            s = indices_E[e]
            p = fill_S[s]
            fill_S[s] = p + 1
            dst_E[p] = d
            perm_E[p] = e
    return indptr_S1, dst_E, perm_E


@numba.njit(parallel=True, nogil=True, cache=True)
def count_non_loops(indptr_D1, indices_E):
    """Number of edges of each row ``d`` whose src is not ``d`` (int64 ``[D]``)."""
    num_rows = indptr_D1.shape[0] - 1
    kept_D = np.empty(num_rows, dtype=np.int64)
    for d in numba.prange(num_rows):
        k = 0
        for e in range(indptr_D1[d], indptr_D1[d + 1]):
            if indices_E[e] != d:
                k += 1
        kept_D[d] = k
    return kept_D


@numba.njit(parallel=True, nogil=True, cache=True)
def gcn_fill(indptr_D1, indices_E, new_indptr_D1, inv_sqrt_S, scale_D, out_indices, out_values):
    """The GCN CSR: row ``d`` keeps its non-loop edges in order, each valued
    ``(inv_sqrt[d] * inv_sqrt[s]) * scale[d]``, then one self-loop valued
    ``inv_sqrt[d] * inv_sqrt[d]``, at ``new_indptr_D1[d]:new_indptr_D1[d + 1]``.
    (The products are rounded in the order :meth:`MessageGraph.edge_values` rounds them.)"""
    num_rows = indptr_D1.shape[0] - 1
    for d in numba.prange(num_rows):
        p = new_indptr_D1[d]
        a = inv_sqrt_S[d]
        for e in range(indptr_D1[d], indptr_D1[d + 1]):
            s = indices_E[e]
            if s != d:
                out_indices[p] = s
                out_values[p] = (a * inv_sqrt_S[s]) * scale_D[d]
                p += 1
        out_indices[p] = d
        out_values[p] = a * a
