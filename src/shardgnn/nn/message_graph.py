"""The graph a GNN layer runs on: a bipartite ``src -> dst`` CSR, from a sampled block or the
full graph, with cached normalised sparse matrices and an SpMM whose backward uses a cached
transpose (torch's generic CSR backward is ~3x slower on CPU).

Shape legend: ``S`` src nodes, ``D`` dst nodes (the first ``D`` src nodes are the dst nodes),
``E`` edges, ``F`` feature width.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from shardgnn.sampling.types import Block

NORMS = ("mean", "sum", "gcn")


def _csr(
    indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, size: tuple[int, int]
) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        return torch.sparse_csr_tensor(indptr, indices, values, size=size, check_invariants=False)


def transpose_csr(adj: torch.Tensor) -> torch.Tensor:
    """The transpose of a CSR matrix, as CSR (what the backward pass of an SpMM multiplies by)."""
    csc = adj.to_sparse_csc()
    rows, cols = adj.shape
    return _csr(csc.ccol_indices(), csc.row_indices(), csc.values(), (cols, rows))


class MessageGraph:
    """Edges ``src -> dst`` of one layer, in local ids, as a CSR over dst nodes."""

    def __init__(
        self,
        indptr_D1: torch.Tensor,
        indices_E: torch.Tensor,
        num_src: int,
        src_degree_S: torch.Tensor | None = None,
        node_keys_S: torch.Tensor | None = None,
    ):
        self.indptr_D1 = indptr_D1.to(torch.int64)
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

    @classmethod
    def from_block(
        cls,
        block: Block,
        device: torch.device | str | None = None,
        orig_ids: np.ndarray | None = None,
    ) -> "MessageGraph":
        """A sampled block; ``orig_ids`` maps the block's global ids to original ids (None: they
        are original ids already, as in single-process training)."""
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

    @property
    def device(self) -> torch.device:
        return self.indptr_D1.device

    def in_degree_D(self) -> torch.Tensor:
        return self.indptr_D1[1:] - self.indptr_D1[:-1]

    def dst_index_E(self) -> torch.Tensor:
        return torch.repeat_interleave(
            torch.arange(self.num_dst, device=self.device), self.in_degree_D()
        )

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
        """
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; expected one of {NORMS}")
        indptr, indices = self.indptr_D1, self.indices_E
        deg = self.in_degree_D()
        if norm == "mean":
            values = (1.0 / deg.clamp(min=1).to(torch.float32)).repeat_interleave(deg)
            return indptr, indices, values
        if norm == "sum":
            return indptr, indices, torch.ones(self.num_edges, device=self.device)
        # gcn: drop self-loop edges, append one self-loop per row, then sort rows back together.
        dst = self.dst_index_E()
        not_loop = indices != dst
        nbr_src, nbr_dst = indices[not_loop], dst[not_loop]
        kept_D = torch.bincount(nbr_dst, minlength=self.num_dst).to(torch.float32)
        if self.src_degree_S is None:
            assert self.num_src == self.num_dst, "a graph without src_degree_S must be complete"
            degree_S = kept_D  # in-degrees, like the block path
            scale_D = torch.ones(self.num_dst, device=self.device)
        else:
            degree_S = self.src_degree_S.to(torch.float32)
            scale_D = degree_S[: self.num_dst] / kept_D.clamp(min=1)
        inv_sqrt_S = (degree_S + 1).rsqrt()
        loops = torch.arange(self.num_dst, device=self.device)
        all_dst = torch.cat([nbr_dst, loops])
        all_src = torch.cat([nbr_src, loops])
        values = inv_sqrt_S[all_dst] * inv_sqrt_S[all_src]
        values[: nbr_dst.numel()] *= scale_D[nbr_dst]
        order = torch.argsort(all_dst, stable=True)
        new_indptr = torch.zeros(self.num_dst + 1, dtype=torch.int64, device=self.device)
        new_indptr[1:] = torch.cumsum(kept_D.to(torch.int64) + 1, 0)
        return new_indptr, all_src[order], values[order]

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


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_SF: torch.Tensor, graph: MessageGraph, norm: str) -> torch.Tensor:
        ctx.graph, ctx.norm = graph, norm
        return graph.adjacency(norm) @ h_SF

    @staticmethod
    def backward(ctx, grad_DF: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        return ctx.graph.adjacency_t(ctx.norm) @ grad_DF.contiguous(), None, None


def spmm(graph, h_SF: torch.Tensor, norm: str = "mean") -> torch.Tensor:
    """``A_norm @ h``: aggregate src rows ``[S, F]`` into dst rows ``[D, F]``.

    ``graph`` is a :class:`MessageGraph` or any object with ``num_src``, ``num_dst`` and an
    ``aggregate(h_SF, norm)`` method (the distributed full-graph adjacency of
    :mod:`shardgnn.fullgraph` is one), so the layers of :mod:`shardgnn.nn.conv` run on both.
    """
    if h_SF.shape[0] != graph.num_src:
        raise ValueError(
            f"features have {h_SF.shape[0]} rows but the graph has {graph.num_src} src nodes"
        )
    if not isinstance(graph, MessageGraph):
        return graph.aggregate(h_SF, norm)
    return _SpMM.apply(h_SF, graph, norm)
