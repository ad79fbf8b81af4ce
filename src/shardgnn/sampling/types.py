"""Typed outputs of the sampling stage: indices only, no features (PyG's sampler/loader split).

Shape legend: ``D`` dst nodes of a block, ``S`` src nodes (``S >= D``, the first ``D`` are the dst
nodes themselves), ``E`` sampled edges.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Block:
    """One message-passing layer of a sampled subgraph: edges ``src -> dst`` in local ids.

    Attributes:
        src_nodes_S: global ids of the source nodes; ``src_nodes_S[:num_dst]`` are the dst nodes.
        num_dst: number of destination nodes ``D``.
        indptr_D1: int64 ``[D + 1]`` CSR row pointers over dst nodes.
        indices_E: int64 ``[E]`` local src id of every edge (an index into ``src_nodes_S``).
        edge_ids_E: int64 ``[E]`` position of every edge in the graph's CSR, or ``None``.
        src_degree_S: int64 ``[S]`` in-degree of every src node in the whole graph, or ``None``
            (GCN normalises with graph degrees so that a full-fanout block equals the full graph).
        history_S: bool ``[S]``, or ``None``: the src nodes whose input embedding comes from
            historical embeddings (:mod:`shardgnn.store.historical`) instead of the layer below;
            the block below computes only the others (never any of the first ``D``).
        edge_type_E: ``[E]`` relation of every edge (typed graphs), or ``None``.
    """

    src_nodes_S: torch.Tensor
    num_dst: int
    indptr_D1: torch.Tensor
    indices_E: torch.Tensor
    edge_ids_E: torch.Tensor | None = None
    src_degree_S: torch.Tensor | None = None
    history_S: torch.Tensor | None = None
    edge_type_E: torch.Tensor | None = None

    @property
    def num_src(self) -> int:
        return int(self.src_nodes_S.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.indices_E.shape[0])

    @property
    def dst_nodes_D(self) -> torch.Tensor:
        return self.src_nodes_S[: self.num_dst]

    def dst_index_E(self) -> torch.Tensor:
        """Local dst id of every edge (CSR rows expanded)."""
        deg = self.indptr_D1[1:] - self.indptr_D1[:-1]
        return torch.repeat_interleave(torch.arange(self.num_dst, dtype=torch.int64), deg)

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` local ``(src, dst)`` pairs, for PyG ``MessagePassing`` layers with
        ``size=(num_src, num_dst)``."""
        return torch.stack([self.indices_E, self.dst_index_E()])


@dataclasses.dataclass(frozen=True)
class SampledBlocks:
    """The sampled computation graph of one mini-batch.

    ``blocks`` go from the input layer to the output layer: ``blocks[0].src_nodes_S`` are the
    nodes whose features are needed, ``blocks[-1].dst_nodes_D`` are the seeds, and
    ``blocks[l + 1].src_nodes_S`` equals ``blocks[l].dst_nodes_D`` (with historical embeddings:
    ``blocks[l + 1].src_nodes_S[~blocks[l + 1].history_S]``).
    """

    seeds: torch.Tensor
    blocks: list[Block]
    num_dropped_edges: int = dataclasses.field(default=0, kw_only=True)
    """drawn edges left out by a bounded halo (``sample_blocks``' ``halo_hops``)"""

    @property
    def input_nodes(self) -> torch.Tensor:
        return self.blocks[0].src_nodes_S

    @property
    def num_sampled_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)
