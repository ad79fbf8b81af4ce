"""The sampling stage's protocol: what every block sampler is asked (:class:`SeedInput`) and
what it returns (:class:`SampledBlocks`): indices only, no features (PyG's sampler/loader split,
its ``BaseSampler``). Homogeneous, typed, temporal, device and distributed samplers all implement
:class:`Sampler`, so one loader (:class:`~shardgnn.loader.pipeline.NeighborSamplingStage`) drives
any of them.

Shape legend: ``B`` seeds, ``D`` dst nodes of a block, ``S`` src nodes (``S >= D``, the first
``D`` are the dst nodes themselves), ``E`` sampled edges.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.sampling.tensor_ops import entry_rows


@dataclasses.dataclass(frozen=True, eq=False)
class SeedInput:
    """What a sampler is asked for one batch.

    Attributes:
        nodes: int64 ``[B]`` global ids of the seeds (a tensor, on any device); unique for
            block samplers, any ``(node, time)`` pairs for temporal ones.
        times: float64 ``[B]`` the time of every seed (temporal graphs: only events strictly
            before it are sampled), or ``None``.
        exclude: sorted int64 pair keys ``dst * N + src`` of edges no block may hold (link
            prediction: a batch's own target edges, :func:`~shardgnn.sampling.neighbor.excluded`),
            or ``None``.
    """

    nodes: torch.Tensor
    times: torch.Tensor | None = None
    exclude: np.ndarray | None = None

    def __post_init__(self) -> None:
        # int64 arrays and tensors are taken as they are (no copy)
        nodes = self.nodes
        if not isinstance(nodes, torch.Tensor):
            nodes = torch.from_numpy(np.ascontiguousarray(nodes, dtype=np.int64))
        object.__setattr__(self, "nodes", nodes.to(torch.int64))
        if self.times is not None:
            times = self.times
            if not isinstance(times, torch.Tensor):
                times = torch.from_numpy(np.ascontiguousarray(times, dtype=np.float64))
            if times.shape != self.nodes.shape:
                raise ConfigError("every seed node needs one seed time")
            object.__setattr__(self, "times", times.to(torch.float64))

    @classmethod
    def of(cls, inputs: SeedInput | torch.Tensor | np.ndarray) -> SeedInput:
        """``inputs`` as a :class:`SeedInput` (bare seed ids: no times, nothing excluded)."""
        return inputs if isinstance(inputs, SeedInput) else cls(inputs)

    def nodes_numpy(self) -> np.ndarray:
        """The seeds as a contiguous int64 array (no copy for a CPU tensor)."""
        return np.ascontiguousarray(self.nodes.cpu().numpy(), dtype=np.int64)

    def untimed(self, sampler: object) -> SeedInput:
        """This input, checked to carry no times (``sampler``'s graph has none)."""
        if self.times is not None:
            raise ConfigError(
                f"{type(sampler).__name__} samples a graph without event times; seed times are "
                "for temporal samplers"
            )
        return self


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
        edge_time_E: float64 ``[E]`` event time of every edge (temporal graphs), or ``None``.
        src_time_S: float64 ``[S]`` the time each src node is at (temporal graphs: a seed's time,
            or the time of the event that reached it; its edges are events before it), or
            ``None``.
        edge_weight_E: float32 ``[E]`` importance weight of every edge (LADIES,
            :mod:`shardgnn.sampling.ladies`: a row's weights sum to its edges; the aggregation
            multiplies its values by them), or ``None`` (every edge 1).
    """

    src_nodes_S: torch.Tensor
    num_dst: int
    indptr_D1: torch.Tensor
    indices_E: torch.Tensor
    edge_ids_E: torch.Tensor | None = None
    src_degree_S: torch.Tensor | None = None
    history_S: torch.Tensor | None = None
    edge_type_E: torch.Tensor | None = None
    edge_time_E: torch.Tensor | None = None
    src_time_S: torch.Tensor | None = None
    edge_weight_E: torch.Tensor | None = None

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
        return entry_rows(self.indptr_D1, self.num_edges)

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


@runtime_checkable
class Sampler(Protocol):
    """What every block sampler implements (PyG's ``BaseSampler``): ``sample(inputs, seed)``
    draws the ``num_layers`` blocks of a batch; ``seed`` fixes every random draw (layer ``l``
    uses ``mix_seed(seed, l)``), so the same inputs and seed give the same blocks, locally or
    distributed (distributed samplers are collectives: every rank calls ``sample`` in step).

    The blocks hold ``edge_type_E`` when the graph is typed, ``edge_time_E`` and ``src_time_S``
    when it is temporal. ``inputs`` may also be bare seed ids (:meth:`SeedInput.of`)."""

    @property
    def num_layers(self) -> int: ...

    def sample(self, inputs: SeedInput, seed: int) -> SampledBlocks: ...
