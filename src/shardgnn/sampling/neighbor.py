"""Uniform multi-layer neighbour sampling over an in-edge CSR (returns indices only)."""

from __future__ import annotations

from typing import Callable

import numba
import numpy as np
import torch

from shardgnn.graph.linksplit import pair_keys
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.kernels import KERNEL_LOCK, relabel, sample_counts, sample_fill
from shardgnn.sampling.ladies import ladies_numpy, ladies_seed
from shardgnn.sampling.types import Block, SampledBlocks, SeedInput
from shardgnn.seeding import mix_seed


def sample_neighbors(
    indptr: np.ndarray,
    indices: np.ndarray,
    frontier: np.ndarray,
    fanout: int,
    replace: bool,
    seed: int,
    id_offset: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One hop of sampling for ``frontier`` (CSR row numbers; global id = row + ``id_offset``).

    Returns ``(offsets, nbr, edge_ids)``: the neighbours of ``frontier[i]`` are
    ``nbr[offsets[i]:offsets[i + 1]]`` (global ids) at CSR positions ``edge_ids[...]``. This is
    the kernel every sampler shares, single-process or per-owner in distributed sampling.
    """
    with KERNEL_LOCK:
        counts = sample_counts(indptr, frontier, fanout, replace)
        offsets = np.cumsum(counts)
        total = int(offsets[-1])
        nbr = np.empty(total, dtype=np.int64)
        eid = np.empty(total, dtype=np.int64)
        sample_fill(
            indptr,
            indices,
            frontier,
            fanout,
            replace,
            np.uint64(seed),
            offsets,
            nbr,
            eid,
            np.int64(id_offset),
        )
    return offsets, nbr, eid


class NeighborSampler:
    """Samples the L-hop computation graph of a batch of seed nodes.

    Not thread-safe: one instance keeps an O(N) scratch map reused across batches. Use one
    sampler per thread.
    """

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        config: SamplerConfig,
        prune: Prune | None = None,
    ):
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = indices
        self.config = config
        self.prune = prune  # historical embeddings: nodes not to expand (sample_blocks)
        self._node_map = np.full(self.indptr.shape[0] - 1, -1, dtype=np.int64)

    @property
    def num_layers(self) -> int:
        return len(self.config.fanouts)

    def sample(self, inputs: SeedInput, seed: int) -> SampledBlocks:
        """Sample blocks for ``inputs.nodes`` (unique global ids); ``seed`` fixes every random
        draw (the :class:`~shardgnn.sampling.types.Sampler` protocol).

        Layer ``l`` (0 = the output layer, whose fanout is ``fanouts[0]``) uses the layer seed
        ``mix_seed(seed, l)``. ``inputs.exclude``: sorted pair keys of edges no block may hold
        (:func:`excluded`).
        """
        inputs = SeedInput.of(inputs).untimed(self)
        return sample_blocks(
            inputs.nodes,
            self.config,
            seed,
            exclude=inputs.exclude,
            one_hop=lambda frontier, fanout, layer_seed: sample_neighbors(
                self.indptr, self.indices, frontier, fanout, self.config.replace, layer_seed
            ),
            degree_of=lambda nodes: self.indptr[nodes + 1] - self.indptr[nodes],
            node_map=self._node_map,
            prune=self.prune,
        )


# one_hop(frontier, fanout, layer seed) -> (offsets, nbr, edge ids[, relation of each edge])
OneHop = Callable[[np.ndarray, int, int], tuple[np.ndarray, ...]]
# prune(block layer, src nodes, num dst) -> bool mask of src nodes not to expand, or None
Prune = Callable[[int, np.ndarray, int], "np.ndarray | None"]


# one_hop_many(frontiers, fanout, layer seeds) -> one (offsets, nbr, edge ids[, ...]) per batch
OneHopMany = Callable[[list[np.ndarray], int, list[int]], list[tuple[np.ndarray, ...]]]


class BlockBuilder:
    """One batch's blocks, built a hop at a time: the layer loop every sampler shares
    (:func:`sample_blocks` drives one, :func:`sample_blocks_many` drives ``k`` in lockstep, their
    hops drawn together). Arguments as :func:`sample_blocks`'s."""

    def __init__(
        self,
        seeds: torch.Tensor | np.ndarray,
        config: SamplerConfig,
        seed: int,
        *,
        degree_of: Callable[[np.ndarray], np.ndarray],
        node_map: np.ndarray,
        exclude: np.ndarray | None = None,
        prune: Prune | None = None,
        halo_hops: int | None = None,
    ):
        self.seeds = np.ascontiguousarray(
            seeds.numpy() if isinstance(seeds, torch.Tensor) else seeds, dtype=np.int64
        )
        self.config, self.seed, self.degree_of, self.node_map = config, seed, degree_of, node_map
        self.exclude, self.prune, self.halo_hops = exclude, prune, halo_hops
        self.frontier = self.seeds
        """the nodes the next hop is drawn for"""
        self.layer = 0
        self.blocks: list[Block] = []
        self.dropped = 0

    @property
    def layer_seed(self) -> int:
        """The next hop's seed: ``mix_seed(seed, layer)``."""
        return mix_seed(self.seed, self.layer)

    def add_hop(self, offsets: np.ndarray, *edges: np.ndarray) -> None:
        """Build the next block from its hop's draws (``edges``: neighbour, edge id and, from
        typed samplers, relation of every drawn edge)."""
        config, frontier, layer, node_map = self.config, self.frontier, self.layer, self.node_map
        if self.exclude is not None and self.exclude.shape[0]:
            keep = excluded(frontier, offsets, edges[0], self.exclude, node_map.shape[0])
            offsets, *edges = keep_edges(offsets, keep, *edges)
        if self.halo_hops is not None and layer >= self.halo_hops:
            drawn = edges[0].shape[0]
            offsets, *edges = keep_edges(offsets, np.isin(edges[0], frontier), *edges)
            self.dropped += drawn - edges[0].shape[0]
        weight = None
        if config.ladies is not None:
            # LADIES: the hop read every neighbour; keep the edges to the layer's drawn nodes
            keep, weight = ladies_numpy(
                frontier, offsets, edges[0], self.degree_of, config.ladies[layer],
                ladies_seed(self.seed, layer),
            )  # fmt: skip
            offsets, *edges = keep_edges(offsets, keep, *edges)
        nbr, eid = edges[0], edges[1]
        relation = None if len(edges) < 3 else torch.from_numpy(edges[2])
        src_nodes, local = relabel(frontier, nbr, node_map)
        block_layer = len(config.fanouts) - 1 - layer
        history = None
        if self.prune is not None and block_layer > 0:
            history = self.prune(block_layer, src_nodes, int(frontier.shape[0]))
        degree = np.asarray(self.degree_of(src_nodes), dtype=np.int64)
        self.blocks.append(
            Block(
                src_nodes_S=torch.from_numpy(src_nodes),
                num_dst=int(frontier.shape[0]),
                indptr_D1=torch.from_numpy(offsets),
                indices_E=torch.from_numpy(local),
                edge_ids_E=torch.from_numpy(eid),
                src_degree_S=torch.from_numpy(degree),
                history_S=None if history is None else torch.from_numpy(history),
                edge_type_E=relation,
                edge_weight_E=None if weight is None else torch.from_numpy(weight),
            )
        )
        self.frontier = src_nodes if history is None else src_nodes[~history]
        self.layer += 1

    def result(self) -> SampledBlocks:
        """The blocks, input layer first."""
        return SampledBlocks(
            seeds=torch.from_numpy(self.seeds),
            blocks=self.blocks[::-1],
            num_dropped_edges=self.dropped,
        )


def sample_blocks(
    seeds: torch.Tensor | np.ndarray,
    config: SamplerConfig,
    seed: int,
    *,
    one_hop: OneHop,
    degree_of: Callable[[np.ndarray], np.ndarray],
    node_map: np.ndarray,
    exclude: np.ndarray | None = None,
    prune: Prune | None = None,
    halo_hops: int | None = None,
) -> SampledBlocks:
    """The layer loop every sampler shares: for each fanout (output layer first) draw one hop with
    ``one_hop(frontier, fanout, layer_seed)`` (local kernel or all-to-all; typed samplers also
    return each drawn edge's relation, the blocks' ``edge_type_E``), relabel, build the
    block; ``degree_of(global ids)`` gives graph in-degrees. Layer ``l`` uses ``mix_seed(seed, l)``.
    ``exclude`` (sorted pair keys) drops those edges from every hop (:func:`excluded`).
    ``prune(block layer, src nodes, num dst)`` marks src nodes whose input embedding comes from
    elsewhere (historical embeddings): they become the block's ``history_S`` and are not
    expanded further out. ``halo_hops = h``: from hop ``h`` on (0 = the seeds' own hop) only
    edges between nodes already reached are kept, so the batch's nodes are its seeds and their
    ``h``-hop neighbourhood (Cluster-GCN: ``h = 0``); the draws are those of the plain sampler,
    edges to other nodes are dropped after it and counted in ``num_dropped_edges``.
    ``config.ladies``: every hop reads all neighbours (fanouts -1) and keeps the edges to the
    nodes LADIES draws for the layer (:mod:`shardgnn.sampling.ladies`), weighted
    (``edge_weight_E``); after exclusions and the halo, so those apply to the candidates.
    """
    if config.num_threads is not None:
        numba.set_num_threads(config.num_threads)
    builder = BlockBuilder(
        seeds, config, seed, degree_of=degree_of, node_map=node_map, exclude=exclude,
        prune=prune, halo_hops=halo_hops,
    )  # fmt: skip
    for fanout in config.fanouts:
        builder.add_hop(*one_hop(builder.frontier, fanout, builder.layer_seed))
    return builder.result()


def sample_blocks_many(
    builders: list[BlockBuilder], one_hop_many: OneHopMany
) -> list[SampledBlocks]:
    """:func:`sample_blocks` for ``k`` batches at once: every hop draws the ``k`` frontiers
    together (``one_hop_many``: one request exchange for all of them, each batch with its own
    layer seed), then each batch builds its block as alone; ``out[b]`` equals what
    :func:`sample_blocks` returns for ``builders[b]``'s batch."""
    if not builders:
        return []
    config = builders[0].config
    if config.num_threads is not None:
        numba.set_num_threads(config.num_threads)
    for fanout in config.fanouts:
        hops = one_hop_many(
            [b.frontier for b in builders], fanout, [b.layer_seed for b in builders]
        )
        for builder, hop in zip(builders, hops, strict=True):
            builder.add_hop(*hop)
    return [b.result() for b in builders]


def keep_edges(offsets: np.ndarray, keep: np.ndarray, *edges: np.ndarray) -> tuple[np.ndarray, ...]:
    """One hop's draws ``(offsets, *edges)`` (per-edge arrays: neighbours, edge ids...) with
    only the edges where ``keep`` holds."""
    if keep.all():
        return (offsets, *edges)
    counts = np.diff(offsets)
    row = np.repeat(np.arange(counts.shape[0]), counts)
    kept = np.bincount(row[keep], minlength=counts.shape[0])
    new_offsets = np.zeros_like(offsets)
    np.cumsum(kept, out=new_offsets[1:])
    return (new_offsets, *(values[keep] for values in edges))


def excluded(
    frontier: np.ndarray,
    offsets: np.ndarray,
    nbr: np.ndarray,
    exclude: np.ndarray,
    num_nodes: int,
) -> np.ndarray:
    """Which of one hop's draws to keep: not the edges ``exclude`` names (sorted keys
    ``dst * N + src``, :func:`~shardgnn.graph.linksplit.pair_keys`): a link-prediction batch must
    not pass messages along its own target edges.

    The edges are dropped after the draw, so a node that drew an excluded edge has one neighbour
    fewer than its fanout. The draws themselves stay those of the plain sampler, which keeps
    distributed sampling (owners draw, the requester filters) equal to single-process sampling.
    """
    counts = np.diff(offsets)
    dst = np.repeat(frontier, counts)
    keys = pair_keys(nbr, dst, num_nodes)
    pos = np.minimum(np.searchsorted(exclude, keys), exclude.shape[0] - 1)
    return exclude[pos] != keys
