"""Uniform neighbour sampling as tensor code on the training device (the GPU path).

The draws are those of the numba kernels (:mod:`shardgnn.sampling.kernels`), bit for bit: the same
counter-based hash (splitmix64 in wrapping int64 arithmetic, logical shifts by masking), the same
Floyd's algorithm without replacement, one vectorised step per draw across every frontier node at
once. A draw depends only on ``(layer seed, node, position)``, never on thread or block order, so
the GPU sampler, the CPU sampler and distributed owners all return the same neighbourhoods, and
relabelling keeps the CPU order (dst nodes first, then new nodes in order of first appearance):
the blocks are equal, and so is every step trained on them.

The CSR sits in device memory when it fits (``budget_bytes``, default half the free memory), else
in pinned host memory that the kernels read in place over unified addressing
(:func:`shardgnn.devicemem.place`). On a CPU device the same code runs on CPU tensors (how it is
tested against the numba kernels without a GPU).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence

import numpy as np
import torch

from shardgnn.devicemem import place
from shardgnn.errors import ConfigError
from shardgnn.sampling.config import FUSED_MAX_FANOUT, SamplerConfig
from shardgnn.sampling.ladies import kept_edges, ladies_draw, ladies_seed
from shardgnn.sampling.tensor_ops import _below, _int64, entry_rows, splitmix64
from shardgnn.sampling.types import Block, SampledBlocks, SeedInput
from shardgnn.seeding import mix_seed


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def fused_by_default(device: torch.device) -> bool:
    """Whether hops on ``device`` are drawn by the Triton kernel unless told otherwise: on a CUDA
    device where Triton is installed (looked up once: this runs for every hop)."""
    return device.type == "cuda" and _triton_installed()


def sample_hop(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    frontier: torch.Tensor,
    fanout: int,
    replace: bool,
    seed: int | torch.Tensor,
    id_offset: int = 0,
    fused: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One hop for ``frontier`` (CSR rows on the tensors' device): ``(offsets, nbr, edge_ids)`` as
    :func:`~shardgnn.sampling.neighbor.sample_neighbors` returns them, computed where the tensors
    are. ``fused`` draws with the one-launch Triton kernel (:mod:`shardgnn.sampling.fused`; by
    default on a CUDA device where Triton is), else with tensor code; both give the same draws.
    ``seed``: the layer seed, or one per frontier row (int64 tensor: several batches' frontiers
    stacked, each drawn as with its own seed)."""
    device = frontier.device
    start = indptr[frontier]
    deg = indptr[frontier + 1] - start
    if fanout < 0:
        counts = deg
    elif replace:
        counts = torch.where(deg > 0, fanout, 0)
    else:
        counts = deg.clamp(max=fanout)
    offsets = torch.zeros(frontier.shape[0] + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=offsets[1:])
    total = int(offsets[-1])
    per_row = isinstance(seed, torch.Tensor)
    if fused is None:
        fused = fused_by_default(device)
    if fused and 0 <= fanout <= FUSED_MAX_FANOUT:
        from shardgnn.sampling.fused import fill_hop  # needs Triton

        nbr, eid = fill_hop(
            indptr, indices, frontier, offsets, total, fanout, replace,
            seed if per_row else _int64(seed), id_offset,
        )  # fmt: skip
        return offsets, nbr, eid
    row = entry_rows(offsets, total)
    position = torch.arange(total, device=device) - offsets[row]
    if fanout < 0:
        eid = start[row] + position
    else:
        key = splitmix64((seed if per_row else _int64(seed)) ^ splitmix64(frontier + id_offset))
        if replace:
            eid = start[row] + _below(splitmix64(key[row] + position), deg[row])
        else:
            eid = start[row] + position  # rows that keep every neighbour
            floyd = torch.nonzero(deg > fanout).squeeze(1)
            if floyd.numel():
                picks = _floyd(key[floyd], deg[floyd], fanout)
                slots = offsets[floyd].unsqueeze(1) + torch.arange(fanout, device=device)
                eid[slots.reshape(-1)] = (start[floyd].unsqueeze(1) + picks).reshape(-1)
    return offsets, indices[eid].to(torch.int64), eid


def _floyd(key: torch.Tensor, count: torch.Tensor, k: int) -> torch.Tensor:
    """Floyd's algorithm for every row at once: ``[R, k]`` distinct positions of ``[0, count)``,
    draw ``top`` being ``splitmix64(key + top)`` (the kernels' ``floyd_positions``).

    Every draw is hashed in one pass over ``[R, k]`` (a draw does not depend on earlier picks, only
    its replacement does); the loop over ``q`` then only resolves repeats, a few small kernels per
    step instead of a whole hash chain each (the GPU cost is kernel launches, not arithmetic)."""
    top = count.unsqueeze(1) - k + torch.arange(k, device=key.device)
    draws = _below(splitmix64(key.unsqueeze(1) + top), top + 1)
    out = torch.empty_like(draws)
    out[:, 0] = draws[:, 0]
    for q in range(1, k):
        pick = draws[:, q]
        out[:, q] = torch.where((out[:, :q] == pick.unsqueeze(1)).any(1), top[:, q], pick)
    return out


_UNSEEN = torch.iinfo(torch.int64).max


def relabel(
    frontier: torch.Tensor, nbr: torch.Tensor, node_map: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' ``relabel`` in tensor code: frontier nodes ``0..D-1``, then each new neighbour
    in order of first appearance. Returns ``(src_nodes, local_nbr)``.

    ``node_map`` (int64, one entry per graph node, all ``_UNSEEN``; restored before returning) is
    where each node's first position is found, as the kernels' node map: a scatter-min, no sort,
    so the cost is a handful of launches over the batch, not over the graph. Without one, a
    temporary map as large as the largest id is made."""
    both = torch.cat([frontier, nbr])
    if node_map is None:
        size = int(both.max()) + 1 if both.numel() else 0
        node_map = torch.full((size,), _UNSEEN, dtype=torch.int64, device=both.device)
    position = torch.arange(both.shape[0], device=both.device)
    node_map.scatter_reduce_(0, both, position, "amin")
    first = node_map[both]
    node_map.index_fill_(0, both, _UNSEEN)
    is_first = first == position  # first appearances, already in the order they appear
    local_of_position = torch.cumsum(is_first, 0) - 1
    return both[is_first], local_of_position[first[frontier.shape[0] :]]


def relabel_stacked(
    frontier: torch.Tensor,
    frontier_bounds: torch.Tensor,
    batch_F: torch.Tensor,
    nbr: torch.Tensor,
    edge_bounds: torch.Tensor,
    num_nodes: int,
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int]]:
    """:func:`relabel` for ``k`` batches' stacked hops at once: batch ``b``'s frontier is
    ``frontier[frontier_bounds[b]:frontier_bounds[b + 1]]`` and its draws ``nbr[edge_bounds[b]:
    edge_bounds[b + 1]]`` (both bounds int64 ``[k + 1]`` on the device; ``batch_F``: each
    frontier row's batch, as the hop's draw had it). Returns ``(src_nodes,
    local, src_bounds, edge_bounds)``: batch ``b``'s source nodes ``src_nodes[src_bounds[b]:
    src_bounds[b + 1]]`` and local ids ``local[edge_bounds[b]:edge_bounds[b + 1]]`` are what
    ``relabel`` gives for that batch alone; both bounds come back as host lists.

    One sort of ``(batch, node)`` keys for all ``k`` batches and one read of the bounds, where
    relabelling batch by batch costs ``k`` passes and ``k`` waits for the device (on a GPU the
    waits and launches, not the arithmetic, are what a batch costs)."""
    device = frontier.device
    n_f, n_e = int(frontier.shape[0]), int(nbr.shape[0])
    k = int(frontier_bounds.shape[0]) - 1
    batch_E = entry_rows(edge_bounds, n_e)
    # Each entry's place in its own batch's sequence (frontier, then draws), batches in order:
    # sorting first places by it sorts by batch, then by first appearance within the batch.
    place = torch.cat(
        [
            torch.arange(n_f, device=device) + edge_bounds[batch_F],
            torch.arange(n_e, device=device) + frontier_bounds[batch_E + 1],
        ]
    )
    key = torch.cat([batch_F, batch_E]) * num_nodes + torch.cat([frontier, nbr]).to(torch.int64)
    unique, inverse = torch.unique(key, return_inverse=True)
    first = torch.full(unique.shape, _UNSEEN, dtype=torch.int64, device=device)
    first.scatter_reduce_(0, inverse, place, "amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.shape[0], device=device)
    ordered = unique[order]
    src_batch = torch.div(ordered, num_nodes, rounding_mode="floor")  # ascending
    # (searchsorted, not bincount: a CUDA bincount waits for the device to size its output)
    src_bounds = torch.searchsorted(src_batch, torch.arange(k + 1, device=device))
    local = rank[inverse[n_f:]] - src_bounds[batch_E]
    both = torch.cat([src_bounds, edge_bounds]).cpu().tolist()  # the one read
    return ordered - src_batch * num_nodes, local, both[: k + 1], both[k + 1 :]


def tensor_block(
    indptr: torch.Tensor,
    frontier: torch.Tensor,
    src_nodes: torch.Tensor,
    offsets: torch.Tensor,
    local: torch.Tensor,
    eid: torch.Tensor,
    weight: torch.Tensor | None = None,
    src_degree: torch.Tensor | None = None,
) -> Block:
    """The block of one relabelled hop drawn with tensor code (src degrees read off ``indptr``
    unless given; ``weight``: LADIES' edge weights)."""
    if src_degree is None:
        src_degree = indptr[src_nodes + 1] - indptr[src_nodes]
    return Block(
        src_nodes_S=src_nodes,
        num_dst=int(frontier.shape[0]),
        indptr_D1=offsets,
        indices_E=local,
        edge_ids_E=eid,
        src_degree_S=src_degree,
        edge_weight_E=weight,
    )


class DeviceNeighborSampler:
    """:class:`~shardgnn.sampling.neighbor.NeighborSampler` on ``device``: the same blocks, its
    tensors on ``device`` (the CSR there, or pinned and read in place when it does not fit
    ``budget_bytes``). Excluded edges (link prediction) are filtered after the draw, as there."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        config: SamplerConfig,
        device: torch.device,
        budget_bytes: int | None = None,
    ):
        self.config = config
        self.device = device
        indptr_t = torch.from_numpy(np.ascontiguousarray(indptr, dtype=np.int64))
        indices_t = torch.from_numpy(np.ascontiguousarray(indices))
        self.num_nodes = int(indptr_t.shape[0] - 1)
        # The row pointers are small and read twice per node: always on the device.
        self.indptr = indptr_t.to(device)
        self.indices, self.resident = place(indices_t, device, budget_bytes)
        # Relabelling's first-position map (8 bytes a node; restored after every hop).
        self.node_map = torch.full((self.num_nodes,), _UNSEEN, dtype=torch.int64, device=device)
        self.fused: bool | None = None  # None: the Triton kernel where it applies (CUDA)
        # Bulk sampling relabels the k batches in one sort (fewer launches and waits: a GPU's
        # cost) rather than batch by batch through the node map (less arithmetic: a CPU's).
        self.relabel_together = device.type == "cuda"

    @property
    def kernel(self) -> str:
        """What draws the hops: ``"triton"`` (one fused launch per hop) or ``"tensor"``."""
        fused = fused_by_default(self.device) if self.fused is None else self.fused
        return "triton" if fused else "tensor"

    @property
    def num_layers(self) -> int:
        return len(self.config.fanouts)

    def with_config(self, config: SamplerConfig) -> DeviceNeighborSampler:
        """A sampler with other settings over the same CSR (no second copy on the device)."""
        other = object.__new__(DeviceNeighborSampler)
        other.__dict__.update(self.__dict__)
        other.config = config
        return other

    def sample(self, inputs: SeedInput, seed: int) -> SampledBlocks:
        """Blocks for ``inputs`` as :meth:`NeighborSampler.sample` draws them, on the device."""
        inputs = SeedInput.of(inputs).untimed(self)
        frontier = inputs.nodes.to(self.device)
        seeds_dev = frontier
        keys = None
        exclude = inputs.exclude
        if exclude is not None and exclude.shape[0]:
            keys = torch.from_numpy(np.ascontiguousarray(exclude, dtype=np.int64)).to(self.device)
        blocks: list[Block] = []
        for layer, fanout in enumerate(self.config.fanouts):
            offsets, nbr, eid = sample_hop(
                self.indptr,
                self.indices,
                frontier,
                fanout,
                self.config.replace,
                mix_seed(seed, layer),
                fused=self.fused,
            )
            if keys is not None:
                offsets, nbr, eid = _drop_excluded(
                    frontier, offsets, nbr, eid, keys, self.num_nodes
                )
            weight = None
            if self.config.ladies is not None:
                offsets, nbr, eid, weight = self._ladies(frontier, offsets, nbr, eid, [seed], layer)
            src_nodes, local = relabel(frontier, nbr, self.node_map)
            blocks.append(
                tensor_block(self.indptr, frontier, src_nodes, offsets, local, eid, weight)
            )
            frontier = src_nodes
        blocks.reverse()
        return SampledBlocks(seeds=seeds_dev, blocks=blocks)

    def sample_many(self, inputs: Sequence[SeedInput], seeds: Sequence[int]) -> list[SampledBlocks]:
        """Bulk sampling (the CAGNET sampling paper's k mini-batches at once): every hop draws the
        stacked frontiers of all batches in one pass, each row with its batch's layer seed (the
        rows of ``A`` the stacked one-hot selector ``Q`` picks, ``fanout`` nonzeros drawn per row),
        and relabels them in one pass too (:func:`relabel_stacked`; batch by batch where
        ``relabel_together`` is off, the CPU default). ``out[b]`` equals ``sample(inputs[b],
        seeds[b])`` bit for bit; a hop's launches and waits for the device are shared by the ``k``
        batches instead of paid by each."""
        items = [SeedInput.of(i).untimed(self) for i in inputs]
        if any(i.exclude is not None and i.exclude.shape[0] for i in items):
            raise ConfigError(
                "bulk sampling draws node batches; excluded edges (link prediction) need "
                "--bulk-batches 1"
            )
        first = torch.cat([i.nodes for i in items]).to(self.device)
        frontier, bounds = first, np.cumsum([0] + [int(i.nodes.shape[0]) for i in items]).tolist()
        seed_bounds = bounds
        blocks: list[list[Block]] = [[] for _ in items]
        for layer, fanout in enumerate(self.config.fanouts):
            bounds_t = torch.tensor(bounds, device=self.device)
            # each stacked row's batch: it picks the row's seed, LADIES' batch and relabelling's
            batch_F = entry_rows(bounds_t, int(frontier.shape[0]))
            layer_seeds = torch.tensor(
                [_int64(mix_seed(s, layer)) for s in seeds], device=self.device
            )
            offsets, nbr, eid = sample_hop(
                self.indptr, self.indices, frontier, fanout, self.config.replace,
                layer_seeds[batch_F], fused=self.fused,
            )  # fmt: skip
            weight = None
            if self.config.ladies is not None:  # each batch draws its own layer nodes
                offsets, nbr, eid, weight = self._ladies(
                    frontier, offsets, nbr, eid, seeds, layer, batch_F
                )
            if self.relabel_together:
                src, local, src_bounds, edge_bounds = relabel_stacked(
                    frontier, bounds_t, batch_F, nbr, offsets[bounds_t], self.num_nodes
                )
            else:
                edge_bounds = offsets[bounds_t].cpu().tolist()  # one read per hop
                parts = [
                    relabel(
                        frontier[bounds[b] : bounds[b + 1]],
                        nbr[edge_bounds[b] : edge_bounds[b + 1]],
                        self.node_map,
                    )
                    for b in range(len(items))
                ]
                src_bounds = np.cumsum([0] + [p[0].shape[0] for p in parts]).tolist()
                src, local = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            src_degree = self.indptr[src + 1] - self.indptr[src]
            for b in range(len(items)):
                lo, hi = edge_bounds[b], edge_bounds[b + 1]
                here = slice(src_bounds[b], src_bounds[b + 1])
                blocks[b].append(
                    tensor_block(
                        self.indptr, frontier[bounds[b] : bounds[b + 1]], src[here],
                        offsets[bounds[b] : bounds[b + 1] + 1] - lo, local[lo:hi], eid[lo:hi],
                        None if weight is None else weight[lo:hi], src_degree[here],
                    )
                )  # fmt: skip
            frontier, bounds = src, src_bounds
        return [
            SampledBlocks(seeds=first[seed_bounds[b] : seed_bounds[b + 1]], blocks=batch[::-1])
            for b, batch in enumerate(blocks)
        ]

    def _ladies(
        self,
        frontier: torch.Tensor,
        offsets: torch.Tensor,
        nbr: torch.Tensor,
        eid: torch.Tensor,
        seeds: Sequence[int],
        layer: int,
        batch_R: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """LADIES' draw over a full-neighbourhood hop of ``frontier`` (``batch_R``: the batch of
        every stacked row, one seed per batch): ``(offsets, nbr, eid, weight)`` of the kept
        edges."""
        seed_B = torch.tensor([ladies_seed(s, layer) for s in seeds], device=self.device)
        draw = ladies_draw(
            offsets,
            nbr,
            self.indptr[frontier + 1] - self.indptr[frontier],
            self.indptr[nbr + 1] - self.indptr[nbr],
            self.config.ladies[layer],
            seed_B,
            batch_R,
        )
        keep, weight = kept_edges(draw, frontier.shape[0])
        offsets, nbr, eid = keep_hop(offsets, keep, nbr, eid)
        return offsets, nbr, eid, weight


def _drop_excluded(
    frontier: torch.Tensor,
    offsets: torch.Tensor,
    nbr: torch.Tensor,
    eid: torch.Tensor,
    exclude: torch.Tensor,
    num_nodes: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`~shardgnn.sampling.neighbor.excluded` and ``keep_edges`` on tensors: drop the drawn
    edges whose pair key ``dst * N + src`` is in ``exclude`` (sorted)."""
    row = entry_rows(offsets, nbr.shape[0])
    keys = frontier[row] * num_nodes + nbr
    pos = torch.searchsorted(exclude, keys).clamp(max=exclude.shape[0] - 1)
    return keep_hop(offsets, exclude[pos] != keys, nbr, eid)


def keep_hop(
    offsets: torch.Tensor, keep: torch.Tensor, *edges: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """One hop's draws ``(offsets, *edges)`` with only the edges where ``keep`` holds (the tensor
    form of :func:`~shardgnn.sampling.neighbor.keep_edges`)."""
    rows = offsets.shape[0] - 1
    kept = torch.bincount(entry_rows(offsets, keep.shape[0])[keep], minlength=rows)
    new_offsets = torch.zeros_like(offsets)
    torch.cumsum(kept, 0, out=new_offsets[1:])
    return (new_offsets, *(values[keep] for values in edges))
