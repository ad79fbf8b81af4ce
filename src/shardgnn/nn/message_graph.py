"""The graph a GNN layer runs on: a bipartite ``src -> dst`` CSR, from a sampled block or the
full graph, with cached normalised sparse matrices and an SpMM whose backward uses a cached
transpose (torch's generic CSR backward is ~3x slower on CPU).

On CPU with float32 (or float64) features the SpMM runs the numba kernels of
:mod:`shardgnn.nn.kernels`: row-parallel, deterministic (each output row summed in edge order by
one thread, whatever the thread count), with an O(E) counting-sort transpose for the backward
pass. Elsewhere (CUDA, other dtypes) it multiplies torch sparse CSR tensors
(:func:`spmm_reference`, the path the kernels are tested and benchmarked against). Reduced-precision
rows (bf16 under ``--precision bf16`` autocast) are aggregated in fp32 and returned in their own
dtype (:func:`spmm`): the aggregation is memory-bound, so bf16 gains nothing there, and fp32
keeps the kernels and the fp32 normalised matrices.

Shape legend: ``S`` src nodes, ``D`` dst nodes (the first ``D`` src nodes are the dst nodes),
``E`` edges, ``F`` feature width.
"""

from __future__ import annotations

import warnings
from typing import Iterable, Iterator

import numpy as np
import torch

from shardgnn.nn import kernels
from shardgnn.sampling.tensor_ops import entry_rows
from shardgnn.sampling.types import Block

REDUCED_DTYPES = (torch.bfloat16, torch.float16)
"""Activation dtypes that autocast (:mod:`shardgnn.precision`) produces and that the sparse
aggregation takes in fp32."""

NORMS = ("mean", "sum", "gcn")

# Whether CPU float32/float64 SpMMs run the numba kernels (True) or torch sparse CSR (False).
# A module switch for tests and benchmarks that compare the two paths, not a user setting.
USE_KERNELS = True
_KERNEL_DTYPES = (torch.float32, torch.float64)


def _csr(
    indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, size: tuple[int, int]
) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        return torch.sparse_csr_tensor(indptr, indices, values, size=size, check_invariants=False)


def transpose_csr(adj: torch.Tensor) -> torch.Tensor:
    """The transpose of a CSR matrix, as CSR (what the backward pass of an SpMM multiplies by):
    ``to_sparse_csc``'s matrix, entries in the same order, in a handful of tensor ops that never
    wait for the device (the conversion took 0.9 ms of host time per call on a GPU, BENCHMARKS
    section 18)."""
    rows, cols = adj.shape
    indptr, indices, values = adj.crow_indices(), adj.col_indices(), adj.values()
    nnz = int(indices.shape[0])
    row_E = entry_rows(indptr, nnz).to(indices.dtype)
    order = torch.argsort(indices, stable=True)  # by column; a column's entries by row
    counts = torch.zeros(cols, dtype=indptr.dtype, device=indptr.device)
    counts.index_add_(0, indices, torch.ones_like(indices, dtype=indptr.dtype))
    indptr_t = torch.zeros(cols + 1, dtype=indptr.dtype, device=indptr.device)
    torch.cumsum(counts, 0, out=indptr_t[1:])
    return _csr(indptr_t, row_E[order], values[order], (cols, rows))


class MessageGraph:
    """Edges ``src -> dst`` of one layer, in local ids, as a CSR over dst nodes."""

    def __init__(
        self,
        indptr_D1: torch.Tensor,
        indices_E: torch.Tensor,
        num_src: int,
        src_degree_S: torch.Tensor | None = None,
        node_keys_S: torch.Tensor | None = None,
        edge_weight_E: torch.Tensor | None = None,
        edge_attr_ED: torch.Tensor | None = None,
    ):
        self.indptr_D1 = indptr_D1.to(torch.int64)
        # Features of the edges, in this graph's edge order (None: the graph has none); layers
        # that read edge features (GINE, a user's model) take them from here.
        self.edge_attr_ED = edge_attr_ED
        # Importance weights of a LADIES block (sampling.ladies; None: every edge 1): every
        # norm's values are multiplied by them.
        self.edge_weight_E = None if edge_weight_E is None else edge_weight_E.to(torch.float32)
        # Original ids of the src nodes (None: the whole graph in original ids, 0..S-1); they key
        # hashed dropout (nn.dropout), so a node is dropped alike however the graph is partitioned.
        self.node_keys_S = node_keys_S
        # Graph-wide in-degrees of the src nodes when this is a sampled block (None: the graph is
        # complete and its own degrees are the graph degrees).
        self.src_degree_S = None if src_degree_S is None else src_degree_S.to(torch.int64)
        self.indices_E = indices_E.to(torch.int64)
        self.num_src = int(num_src)
        self.num_dst = int(indptr_D1.shape[0] - 1)
        assert self.num_dst <= self.num_src, "dst nodes must be the first src nodes"
        self._adj: dict[str, torch.Tensor] = {}
        self._adj_t: dict[str, torch.Tensor] = {}
        self._edge_index: torch.Tensor | None = None
        # numba path: numpy CSRs keyed by (norm, transposed, dtype), and the transposes keyed by
        # structure ("graph": mean and sum share the graph's own; "gcn" adds self-loops).
        self._kernel_csr: dict[tuple, tuple] = {}
        self._kernel_t: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @classmethod
    def from_block(
        cls,
        block: Block,
        device: torch.device | str | None = None,
        orig_ids: np.ndarray | None = None,
        edge_attr_ED: torch.Tensor | None = None,
    ) -> "MessageGraph":
        """A sampled block; ``orig_ids`` maps the block's global ids to original ids (None: they
        are original ids already, as in single-process training); ``edge_attr_ED``: the features
        of its edges (rows of ``block.edge_ids_E``), or None."""
        degree = None if block.src_degree_S is None else block.src_degree_S.to(device)
        keys = (
            block.src_nodes_S
            if orig_ids is None
            else torch.from_numpy(np.asarray(orig_ids[block.src_nodes_S.numpy()], dtype=np.int64))
        )
        return cls(
            block.indptr_D1.to(device),
            block.indices_E.to(device),
            block.num_src,
            degree,
            node_keys_S=keys,
            edge_weight_E=None if block.edge_weight_E is None else block.edge_weight_E.to(device),
            edge_attr_ED=None if edge_attr_ED is None else edge_attr_ED.to(device),
        )

    @classmethod
    def from_csr(
        cls, indptr: np.ndarray, indices: np.ndarray, device: torch.device | str | None = None
    ) -> "MessageGraph":
        """The full graph: every node is both a src and a dst node."""
        indptr_t = torch.from_numpy(np.asarray(indptr, dtype=np.int64)).to(device)
        indices_t = torch.from_numpy(np.asarray(indices).astype(np.int64, copy=False)).to(device)
        return cls(indptr_t, indices_t, int(indptr.shape[0] - 1))

    @property
    def num_edges(self) -> int:
        return int(self.indices_E.shape[0])

    def matrices_made(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The norms of the sparse matrices made so far: ``(adjacency's, adjacency_t's)``."""
        return tuple(self._adj), tuple(self._adj_t)

    def make_matrices(self, norms: Iterable[str], transposed_norms: Iterable[str]) -> None:
        """Make (and cache) :meth:`adjacency` of each of ``norms`` and :meth:`adjacency_t` of each
        of ``transposed_norms`` now, ahead of the products that will multiply by them."""
        for norm in norms:
            self.adjacency(norm)
        for norm in transposed_norms:
            self.adjacency_t(norm)

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor this graph holds, its cached sparse matrices' parts included (what a
        stream that uses the graph must mark as in use: ``record_stream``)."""
        held = (self.indptr_D1, self.indices_E, self.edge_attr_ED, self.edge_weight_E,
                self.node_keys_S, self.src_degree_S, self._edge_index)  # fmt: skip
        yield from (t for t in held if t is not None)
        for matrix in (*self._adj.values(), *self._adj_t.values()):
            yield from (matrix.crow_indices(), matrix.col_indices(), matrix.values())

    @property
    def device(self) -> torch.device:
        return self.indptr_D1.device

    def in_degree_D(self) -> torch.Tensor:
        return self.indptr_D1[1:] - self.indptr_D1[:-1]

    def dst_index_E(self) -> torch.Tensor:
        return entry_rows(self.indptr_D1, self.num_edges)  # no wait for the device

    def source_rows(self, h_SF: torch.Tensor) -> torch.Tensor:
        """The rows :meth:`edge_index`'s sources index: ``h_SF`` itself (a distributed
        full-graph layer appends its halo rows)."""
        return h_SF

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` local (src, dst) pairs, e.g. for PyG layers with ``size=(S, D)``."""
        if self._edge_index is None:
            self._edge_index = torch.stack([self.indices_E, self.dst_index_E()])
        return self._edge_index

    def edge_values(self, norm: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(indptr, indices, values)`` of the normalised matrix ``[D, S]``.

        * ``mean``: ``1 / in_degree(dst)`` (GraphSAGE-mean);
        * ``sum``: ones;
        * ``gcn``: ``D^-1/2 (A + I) D^-1/2`` (Kipf & Welling) with ``D`` the graph degrees plus
          one. On a sampled block the graph degrees come from ``src_degree_S`` and a row that kept
          ``k`` of its ``d`` neighbours is scaled by ``d / k``: an unbiased estimate of the full
          aggregation, exact when ``k = d`` (so a full-fanout block equals the full graph).
          Existing self-loop edges are ignored (the normalisation adds its own).

        A block with ``edge_weight_E`` (LADIES) multiplies every edge's value by its weight (the
        self-loops gcn adds keep theirs).
        """
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; expected one of {NORMS}")
        indptr, indices = self.indptr_D1, self.indices_E
        deg = self.in_degree_D()
        if norm == "mean":
            values = (1.0 / deg.clamp(min=1).to(torch.float32)).repeat_interleave(
                deg, output_size=self.num_edges
            )
            if self.edge_weight_E is not None:
                values = values * self.edge_weight_E
            return indptr, indices, values
        if norm == "sum":
            if self.edge_weight_E is not None:
                return indptr, indices, self.edge_weight_E
            return indptr, indices, torch.ones(self.num_edges, device=self.device)
        if self.device.type == "cpu" and USE_KERNELS and self.edge_weight_E is None:
            return self._gcn_values_cpu()
        return self._gcn_values_torch()

    def _gcn_values_torch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gcn ``edge_values`` in torch ops (any device)."""
        indices = self.indices_E
        # gcn: drop self-loop edges, append one self-loop per row, then sort rows back together.
        dst = self.dst_index_E()
        not_loop = indices != dst
        nbr_src, nbr_dst = indices[not_loop], dst[not_loop]
        kept_D = torch.bincount(nbr_dst, minlength=self.num_dst).to(torch.float32)
        inv_sqrt_S, scale_D = self._gcn_scales(kept_D)
        loops = torch.arange(self.num_dst, device=self.device)
        all_dst = torch.cat([nbr_dst, loops])
        all_src = torch.cat([nbr_src, loops])
        values = inv_sqrt_S[all_dst] * inv_sqrt_S[all_src]
        values[: nbr_dst.numel()] *= scale_D[nbr_dst]
        if self.edge_weight_E is not None:
            values[: nbr_dst.numel()] *= self.edge_weight_E[not_loop]
        order = torch.argsort(all_dst, stable=True)
        new_indptr = torch.zeros(self.num_dst + 1, dtype=torch.int64, device=self.device)
        new_indptr[1:] = torch.cumsum(kept_D.to(torch.int64) + 1, 0)
        return new_indptr, all_src[order], values[order]

    def _gcn_scales(self, kept_D: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inv_sqrt_S, scale_D)`` of the gcn norm, given the non-loop edges kept per row."""
        if self.src_degree_S is None:
            assert self.num_src == self.num_dst, "a graph without src_degree_S must be complete"
            degree_S = kept_D  # in-degrees, like the block path
            scale_D = torch.ones(self.num_dst, device=self.device)
        else:
            degree_S = self.src_degree_S.to(torch.float32)
            scale_D = degree_S[: self.num_dst] / kept_D.clamp(min=1)
        return (degree_S + 1).rsqrt(), scale_D

    def _gcn_values_cpu(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gcn ``edge_values`` in two O(E) row-parallel passes instead of a stable argsort
        over all edges (bit-identical: the same float32 products in the same order)."""
        indptr_D1, indices_E = _np(self.indptr_D1), _np(self.indices_E)
        with kernels.KERNEL_LOCK, kernels.numba_threads_like_torch():
            kept_D = kernels.count_non_loops(indptr_D1, indices_E)
        inv_sqrt_S, scale_D = self._gcn_scales(torch.from_numpy(kept_D).to(torch.float32))
        new_indptr_D1 = np.zeros(self.num_dst + 1, dtype=np.int64)
        np.cumsum(kept_D + 1, out=new_indptr_D1[1:])
        num_edges = int(new_indptr_D1[-1])
        new_indices_E = np.empty(num_edges, dtype=np.int64)
        values_E = np.empty(num_edges, dtype=np.float32)
        with kernels.KERNEL_LOCK, kernels.numba_threads_like_torch():
            kernels.gcn_fill(
                indptr_D1,
                indices_E,
                new_indptr_D1,
                _np(inv_sqrt_S),
                _np(scale_D),
                new_indices_E,
                values_E,
            )
        return (
            torch.from_numpy(new_indptr_D1),
            torch.from_numpy(new_indices_E),
            torch.from_numpy(values_E),
        )

    def adjacency(self, norm: str) -> torch.Tensor:
        """The normalised sparse matrix ``[D, S]`` (cached)."""
        if norm not in self._adj:
            indptr, indices, values = self.edge_values(norm)
            self._adj[norm] = _csr(indptr, indices, values, (self.num_dst, self.num_src))
        return self._adj[norm]

    def adjacency_t(self, norm: str) -> torch.Tensor:
        """The transpose ``[S, D]`` as CSR (cached), for the backward pass."""
        if norm not in self._adj_t:
            self._adj_t[norm] = transpose_csr(self.adjacency(norm))
        return self._adj_t[norm]

    def kernel_transpose(self, norm: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr_S1, dst_E, perm_E)`` of the transposed normalised matrix (numpy, cached;
        see :func:`shardgnn.nn.kernels.csr_transpose`). CPU only."""
        key = "gcn" if norm == "gcn" else "graph"
        if key not in self._kernel_t:
            indptr_D1, indices_E, _, _ = self.kernel_csr(norm, False, torch.float32)
            # A sequential kernel: no KERNEL_LOCK (that guards numba's parallel pool), so it runs
            # alongside a sampler's kernels in a prefetch thread (nogil).
            self._kernel_t[key] = kernels.csr_transpose(indptr_D1, indices_E, self.num_src)
        return self._kernel_t[key]

    def kernel_csr(
        self, norm: str, transposed: bool, dtype: torch.dtype
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
        """``(indptr, indices, values or None, mean)``: the arguments of
        :func:`shardgnn.nn.kernels.csr_spmm` for ``A_norm`` (``[D, S]``) or, ``transposed``, its
        transpose (``[S, D]``), with values of ``dtype`` (cached). CPU only.

        ``mean`` and ``sum`` need no values array in the forward direction (the kernel derives
        ``1 / deg``) unless the edges are weighted; the transposed mean carries ``1 / deg(dst)``
        per edge.
        """
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; expected one of {NORMS}")
        key = (norm, transposed, dtype)
        if key in self._kernel_csr:
            return self._kernel_csr[key]
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        weighted = norm == "gcn" or self.edge_weight_E is not None
        if not transposed:
            if weighted:
                indptr, indices, values = self.edge_values(norm)
                args = (_np(indptr), _np(indices), _np(values).astype(np_dtype, copy=False), False)
            else:
                args = (_np(self.indptr_D1), _np(self.indices_E), None, norm == "mean")
        else:
            indptr_S1, dst_E, perm_E = self.kernel_transpose(norm)
            if weighted:
                values_t = self.kernel_csr(norm, False, dtype)[2][perm_E]
            elif norm == "sum":
                values_t = None
            elif norm == "mean":
                # the forward kernel's 1 / deg(dst) in this dtype (in float32 exactly the values
                # of edge_values), so the backward is the exact transpose of the forward
                inv_deg_D = 1.0 / self.in_degree_D().clamp(min=1).to(dtype)
                values_t = _np(inv_deg_D)[dst_E]
            args = (indptr_S1, dst_E, values_t, False)
        self._kernel_csr[key] = args
        return args


def _np(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy view (a copy only if ``t`` is not contiguous) of a CPU tensor."""
    return np.ascontiguousarray(t.detach().numpy())


def uses_kernels(h_SF: torch.Tensor) -> bool:
    """Whether :func:`spmm` of ``h_SF`` runs the numba kernels (dense 2-D CPU float32/float64,
    and :data:`USE_KERNELS`) rather than torch sparse CSR."""
    return (
        USE_KERNELS
        and h_SF.device.type == "cpu"
        and h_SF.layout == torch.strided
        and h_SF.dim() == 2
        and h_SF.dtype in _KERNEL_DTYPES
    )


def kernel_spmm(
    graph: MessageGraph, x_RF: torch.Tensor, norm: str, transposed: bool = False
) -> torch.Tensor:
    """``A_norm @ x`` (``x_RF`` has ``S`` rows, the result ``D``) or, ``transposed``,
    ``A_norm^T @ x`` (``D`` rows in, ``S`` out) with the numba kernels; no autograd."""
    indptr, indices, values, mean = graph.kernel_csr(norm, transposed, x_RF.dtype)
    x_np = _np(x_RF)
    out_RF = torch.empty((indptr.shape[0] - 1, x_np.shape[1]), dtype=x_RF.dtype)
    args = (indptr, indices, values, mean, x_np, out_RF.numpy())
    if indices.shape[0] * x_np.shape[1] < kernels.SERIAL_WORK:
        kernels.csr_spmm_serial(*args)  # no pool: no KERNEL_LOCK, no thread setting
    else:
        with kernels.KERNEL_LOCK, kernels.numba_threads_like_torch():
            kernels.csr_spmm(*args)
    return out_RF


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, h_SF: torch.Tensor, graph: MessageGraph, norm: str, use_kernels: bool
    ) -> torch.Tensor:
        ctx.graph, ctx.norm, ctx.use_kernels = graph, norm, use_kernels
        if use_kernels:
            return kernel_spmm(graph, h_SF, norm)
        return graph.adjacency(norm) @ h_SF

    @staticmethod
    def backward(ctx, grad_DF: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        if ctx.use_kernels:
            grad_SF = kernel_spmm(ctx.graph, grad_DF, ctx.norm, transposed=True)
        else:
            grad_SF = ctx.graph.adjacency_t(ctx.norm) @ grad_DF.contiguous()
        return grad_SF, None, None, None


def _check_rows(graph, h_SF: torch.Tensor) -> None:
    if h_SF.shape[0] != graph.num_src:
        raise ValueError(
            f"features have {h_SF.shape[0]} rows but the graph has {graph.num_src} src nodes"
        )


def spmm_reference(graph: MessageGraph, h_SF: torch.Tensor, norm: str = "mean") -> torch.Tensor:
    """:func:`spmm` on torch sparse CSR tensors, whatever :data:`USE_KERNELS` says (any device;
    float32 features, like the cached matrices; differentiable): the baseline the numba kernels
    are tested and benchmarked against."""
    _check_rows(graph, h_SF)
    return _SpMM.apply(h_SF, graph, norm, False)


def spmm(graph, h_SF: torch.Tensor, norm: str = "mean") -> torch.Tensor:
    """``A_norm @ h``: aggregate src rows ``[S, F]`` into dst rows ``[D, F]``.

    ``graph`` is a :class:`MessageGraph` or any object with ``num_src``, ``num_dst`` and an
    ``aggregate(h_SF, norm)`` method (the distributed full-graph adjacency of
    :mod:`shardgnn.fullgraph` is one), so the layers of :mod:`shardgnn.nn.conv` run on both.

    Reduced-precision rows (bf16 or fp16, from layers under autocast) are aggregated in fp32,
    outside the autocast (which would run a torch sparse product in bf16), and the result cast
    back to their dtype; the gradient flows back through both casts, so it reaches ``h_SF`` in its
    dtype.
    """
    _check_rows(graph, h_SF)
    device_type = h_SF.device.type
    reduced = h_SF.dtype in REDUCED_DTYPES
    if reduced or torch.is_autocast_enabled(device_type):
        with torch.autocast(device_type, enabled=False):
            return _aggregate(graph, h_SF.float() if reduced else h_SF, norm).to(h_SF.dtype)
    return _aggregate(graph, h_SF, norm)


def _aggregate(graph, h_SF: torch.Tensor, norm: str) -> torch.Tensor:
    """:func:`spmm` of rows in the dtype they are to be aggregated in."""
    if not isinstance(graph, MessageGraph):
        return graph.aggregate(h_SF, norm)
    return _SpMM.apply(h_SF, graph, norm, uses_kernels(h_SF) and graph.device.type == "cpu")
